"""The run manifest: an in-toto Statement over every run file and evidence file, signed; and its verification."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustercert.errors import SigningError
from clustercert.hashing import sha256_file
from clustercert.signing import KeyPair, load_trusted_keys, sign_bytes, verify_signature

__all__ = ["MANIFEST", "SIGNATURE", "Verification", "verify_run", "write_manifest"]

MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:clustercert:certification:v1"
RUN_PREFIX = "run/"
EVIDENCE_PREFIX = "evidence/"
_NOT_SUBJECTS = {MANIFEST, SIGNATURE}


def write_manifest(
    run_dir: Path, bundle_root: Path, evidence: list[str], predicate: dict[str, Any], key: KeyPair
) -> Path:
    """Hash every run-folder file and evidence file, write manifest.json, then sign it into manifest.sig."""
    subjects = [
        {"name": RUN_PREFIX + p.name, "digest": {"sha256": sha256_file(p)}}
        for p in sorted(run_dir.iterdir()) if p.is_file() and p.name not in _NOT_SUBJECTS
    ]
    subjects += [
        {"name": EVIDENCE_PREFIX + rel, "digest": {"sha256": sha256_file(bundle_root / rel)}} for rel in evidence
    ]
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {"schema_version": 1, **predicate},
    }
    data = (json.dumps(statement, indent=2, ensure_ascii=False) + "\n").encode()
    (run_dir / MANIFEST).write_bytes(data)
    (run_dir / SIGNATURE).write_text(json.dumps(sign_bytes(key, data), indent=2) + "\n", encoding="utf-8")
    return run_dir / MANIFEST


@dataclass
class Verification:
    signer: str | None = None
    problems: list[str] = field(default_factory=list)
    checked: int = 0
    predicate: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_run(run_dir: Path, *, key_dir: Path, trust: Path | None, bundle: Path | None) -> Verification:
    """Check the signature, every subject's hash and that no unlisted file sits in the run folder."""
    out = Verification()
    manifest_path, sig_path = run_dir / MANIFEST, run_dir / SIGNATURE
    for path in (manifest_path, sig_path):
        if not path.is_file():
            out.problems.append(f"{path}: missing")
            return out
    data = manifest_path.read_bytes()
    try:
        signature = json.loads(sig_path.read_text(encoding="utf-8"))
        statement = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        out.problems.append(f"{manifest_path if not sig_path.exists() else sig_path}: not valid JSON")
        return out
    try:
        out.signer = verify_signature(signature, data, load_trusted_keys(key_dir, trust))
    except SigningError as exc:
        out.problems.append(f"{sig_path}: {exc}")
        return out
    out.predicate = statement.get("predicate", {})
    root = bundle if bundle is not None else Path(str(out.predicate.get("bundle_path", "")))
    listed: set[str] = set()
    for subject in statement.get("subject", []):
        name, digest = str(subject["name"]), str(subject["digest"]["sha256"])
        if name.startswith(RUN_PREFIX):
            path = run_dir / name[len(RUN_PREFIX):]
            listed.add(path.name)
        else:
            path = root / name[len(EVIDENCE_PREFIX):]
        if not path.is_file():
            out.problems.append(f"{path}: missing (listed in the manifest)")
        elif sha256_file(path) != digest:
            out.problems.append(f"{path}: changed (sha256 differs from the manifest)")
        out.checked += 1
    for path in sorted(run_dir.iterdir()):
        if path.name not in listed and path.name not in _NOT_SUBJECTS:
            out.problems.append(f"{path}: not listed in the manifest")
    return out
