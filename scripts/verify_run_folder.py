#!/usr/bin/env python3
"""Verify a clustercert run folder without clustercert: the DSSE envelope (Ed25519) and every listed sha256.

Needs only Python 3.11 and the `cryptography` package. Usage:

    python3 scripts/verify_run_folder.py RUN_DIR --key manifest_ed25519.pub [--bundle BUNDLE_DIR]

1. Reads RUN_DIR/manifest.dsse.json, a DSSE envelope (https://github.com/secure-systems-lab/dsse):
   {"payloadType", "payload" (base64), "signatures": [{"keyid", "sig" (base64)}]}.
2. Checks the Ed25519 signature over the pre-authentication encoding
   PAE = b"DSSEv1" SP len(type) SP type SP len(payload) SP payload   (lengths in ASCII decimal)
   with the public key you trust (the signer publishes manifest_ed25519.pub).
3. Checks that manifest.json is byte for byte the signed payload, then every subject of the in-toto
   Statement: "run/NAME" against RUN_DIR/NAME, "evidence/PATH" against BUNDLE_DIR/PATH (default: the
   predicate's bundle_path), and that RUN_DIR holds no file the Statement does not list.

Exit 0 when everything matches, 1 naming the first problem. The PDF signature is checked separately with
a PDF validator (see the README: `pyhanko sign validate`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(run_dir: Path, key_path: Path, bundle: Path | None) -> str | None:
    """None when the run folder is intact, else the first problem."""
    key = load_pem_public_key(key_path.read_bytes())
    if not isinstance(key, Ed25519PublicKey):
        return f"{key_path}: not an Ed25519 public key"
    envelope = json.loads((run_dir / "manifest.dsse.json").read_text(encoding="utf-8"))
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        return f"manifest.dsse.json: payloadType is {envelope.get('payloadType')!r}, expected {PAYLOAD_TYPE}"
    payload = base64.b64decode(envelope["payload"], validate=True)
    good = False
    for entry in envelope.get("signatures", []):
        try:
            key.verify(base64.b64decode(entry["sig"]), pae(PAYLOAD_TYPE, payload))
            good = True
            break
        except (InvalidSignature, ValueError, KeyError):
            continue
    if not good:
        return "manifest.dsse.json: no signature by the trusted key"
    if (run_dir / "manifest.json").read_bytes() != payload:
        return "manifest.json: differs from the signed payload"
    statement = json.loads(payload)
    root = bundle or Path(statement["predicate"]["bundle_path"])
    listed = {"manifest.json", "manifest.dsse.json"}
    for subject in statement["subject"]:
        name, digest = subject["name"], subject["digest"]["sha256"]
        if name.startswith("run/"):
            path = run_dir / name[len("run/"):]
            listed.add(path.name)
        else:
            path = root / name[len("evidence/"):]
        if not path.is_file():
            return f"{path}: missing"
        if name.startswith("run/") and path.is_symlink():
            return f"{path}: a symbolic link; a run folder holds regular files only"
        if sha256(path) != digest:
            return f"{path}: sha256 differs from the manifest"
    extra = sorted(p.name for p in run_dir.iterdir() if p.name not in listed)
    return f"{run_dir / extra[0]}: not listed in the manifest" if extra else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--key", type=Path, required=True, help="the trusted Ed25519 public key (PEM)")
    parser.add_argument("--bundle", type=Path, help="the evidence bundle, if it moved")
    args = parser.parse_args()
    problem = verify(args.run_dir, args.key, args.bundle)
    if problem:
        print(f"invalid: {problem}", file=sys.stderr)
        return 1
    print("valid: the envelope is signed by the trusted key and every listed file matches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
