"""The run manifest: an in-toto Statement over every run file and evidence file, in a DSSE envelope; verification."""

from __future__ import annotations

import datetime as dt
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509

from clustercert.attest.signing import (
    KeyPair,
    cert_sha256,
    load_trust,
    pdf_signer_cert,
    sign_envelope,
    verify_envelope,
    verify_pdf_signature,
)
from clustercert.errors import SigningError
from clustercert.evidence.hashing import sha256_file

__all__ = ["ENVELOPE", "MANIFEST", "Verification", "verify_run", "write_manifest"]

MANIFEST = "manifest.json"
ENVELOPE = "manifest.dsse.json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:clustercert:certification:v1"
RUN_PREFIX = "run/"
EVIDENCE_PREFIX = "evidence/"
SIGNED_PDFS = ("report.pdf", "report.redacted.pdf")
_NOT_SUBJECTS = {MANIFEST, ENVELOPE}


def write_manifest(
    run_dir: Path, bundle_root: Path, evidence: list[str], predicate: dict[str, Any], key: KeyPair
) -> Path:
    """Hash every run-folder file and evidence file, write manifest.json, then its DSSE envelope."""
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
        "predicate": {
            "schema_version": 1,
            **predicate,
            "pdf_signer": {"cert_sha256": cert_sha256(pdf_signer_cert(key.key_dir))},
        },
    }
    data = (json.dumps(statement, indent=2, ensure_ascii=False) + "\n").encode()
    (run_dir / MANIFEST).write_bytes(data)
    (run_dir / ENVELOPE).write_text(json.dumps(sign_envelope(key, data), indent=2) + "\n", encoding="utf-8")
    return run_dir / MANIFEST


@dataclass
class Verification:
    signer: str | None = None
    pdf_signer: str | None = None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    checked: int = 0
    predicate: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def _open_envelope(run_dir: Path, trust: list[Path] | None, key_dir: Path, out: Verification) -> bytes | None:
    envelope_path, manifest_path = run_dir / ENVELOPE, run_dir / MANIFEST
    if not envelope_path.is_file():
        out.problems.append(f"{envelope_path}: missing (the signed manifest)")
        return None
    try:
        envelope = json.loads(envelope_path.read_text(encoding="utf-8"))
        if not isinstance(envelope, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError):
        out.problems.append(f"{envelope_path}: not a DSSE envelope (expected a JSON object)")
        return None
    try:
        out.signer, payload = verify_envelope(envelope, load_trust(key_dir, trust).keys)
    except SigningError as exc:
        out.problems.append(f"{envelope_path}: {exc}")
        return None
    if not manifest_path.is_file():
        out.problems.append(f"{manifest_path}: missing (the envelope's payload in clear)")
    elif manifest_path.read_bytes() != payload:
        out.problems.append(f"{manifest_path}: changed (differs from the payload signed in {ENVELOPE})")
    return payload


def _check_pdf(path: Path, trust: list[Path] | None, key_dir: Path, predicate: dict[str, Any],
               out: Verification) -> None:
    """The PDF signature: intact, covering the whole file, by the certificate the signed manifest names."""
    pinned = str(predicate.get("pdf_signer", {}).get("cert_sha256", ""))
    certs = list(load_trust(key_dir, trust).certs)
    # The signed manifest names the PDF signer's certificate: trusting the manifest key extends to it.
    embedded = _embedded_signer_cert(path.read_bytes())
    if embedded is not None and pinned and cert_sha256(embedded) == pinned:
        certs.append(embedded)
    result = verify_pdf_signature(path.read_bytes(), certs)
    if not result.ok:
        out.problems.append(f"{path}: {result.problem}")
    elif path.name == "report.pdf":
        out.pdf_signer = result.signer


def _embedded_signer_cert(pdf: bytes) -> x509.Certificate | None:
    from pyhanko.pdf_utils.reader import PdfFileReader

    try:
        signatures = PdfFileReader(io.BytesIO(pdf), strict=False).embedded_signatures
        cert = signatures[0].signer_cert if signatures else None
    except Exception:  # a broken PDF is reported by verify_pdf_signature
        return None
    return None if cert is None else x509.load_der_x509_certificate(cert.dump())


def verify_run(
    run_dir: Path, *, key_dir: Path, trust: list[Path] | None, bundle: Path | None, today: dt.date | None = None
) -> Verification:
    """Check the envelope, the PDF signatures, every subject's hash, and that no unlisted file is in the run folder.

    Every problem is collected; the first one is the one to report. `today` (passed in) turns on the expiry warning.
    """
    out = Verification()
    payload = _open_envelope(run_dir, trust, key_dir, out)
    if payload is None:
        return out
    try:
        statement = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        out.problems.append(f"{run_dir / MANIFEST}: not valid JSON")
        return out
    out.predicate = statement.get("predicate", {})
    root = bundle if bundle is not None else Path(str(out.predicate.get("bundle_path", "")))
    listed: set[str] = set()
    for subject in statement.get("subject", []):
        name, digest = str(subject["name"]), str(subject["digest"]["sha256"])
        if name.startswith(RUN_PREFIX):
            path = run_dir / name[len(RUN_PREFIX):]
            listed.add(path.name)
            if path.name in SIGNED_PDFS and path.is_file():
                _check_pdf(path, trust, key_dir, out.predicate, out)
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
    run = out.predicate.get("run")
    if isinstance(run, dict) and run.get("dev_key"):
        out.warnings.append(
            f"signed with a development key ({run.get('signer', 'unknown fingerprint')}), which certify created "
            "on its own: it proves the files are unchanged, not who certified them. Sign with a real key "
            "(`clustercert keys init`) for a report others can trust")
    until = out.predicate.get("valid_until")
    if today is not None and until and dt.date.fromisoformat(str(until)) < today:
        out.warnings.append(f"the certification expired on {until}; the signatures are still checked as above")
    return out
