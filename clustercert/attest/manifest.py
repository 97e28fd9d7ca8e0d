"""The run manifest: an in-toto Statement over every run file and evidence file, in a DSSE envelope; verification."""

from __future__ import annotations

import datetime as dt
import io
import json
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cryptography import x509

from clustercert.attest.atomic import write_atomic
from clustercert.attest.signing import (
    KeyPair,
    cert_sha256,
    load_trust,
    pdf_signer_cert,
    sign_envelope,
    verify_envelope,
    verify_pdf_signature,
)
from clustercert.errors import ClusterCertError, EvidenceError, SigningError
from clustercert.evidence.guards import file_kind
from clustercert.evidence.hashing import sha256_file

__all__ = ["ENVELOPE", "MANIFEST", "Verification", "evidence_subjects", "sign_manifest", "verify_run", "write_manifest"]

MANIFEST = "manifest.json"
ENVELOPE = "manifest.dsse.json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:clustercert:certification:v1"
RUN_PREFIX = "run/"
EVIDENCE_PREFIX = "evidence/"
SIGNED_PDFS = ("report.pdf", "report.redacted.pdf")
_NOT_SUBJECTS = {MANIFEST, ENVELOPE}


def evidence_subjects(bundle_root: Path, evidence: list[str], digests: dict[str, str] | None,
                      hash_file: Callable[[Path], str] = sha256_file) -> list[dict[str, Any]]:
    """The evidence subjects of the manifest. Given `digests` (each file's sha256 as the run read it), those are
    signed, after every file is hashed again (by `hash_file`, which may check more in the same pass and refuse): a
    file missing from them, missing on disk or changed since it was read is a refusal naming the file (what is
    signed must be what was judged)."""
    subjects = []
    for rel in evidence:
        path = bundle_root / rel
        if not path.is_file():
            raise EvidenceError(str(path), "was read by this run but is gone now. Restore it and certify again")
        now = hash_file(path)
        if digests is not None:
            read = digests.get(rel)
            if read is None:
                raise EvidenceError(str(path), "expected a file this run read, got one it never hashed. "
                                    "Certify again")
            if now != read:
                raise EvidenceError(str(path), f"changed during the run (sha256 {read[:12]}... when read, "
                                    f"{now[:12]}... now). Leave the bundle untouched while certifying and certify "
                                    "again")
        subjects.append({"name": EVIDENCE_PREFIX + rel, "digest": {"sha256": now}})
    return subjects


def write_manifest(run_dir: Path, bundle_root: Path, evidence: list[str], predicate: dict[str, Any], key: KeyPair,
                   run_files: list[str] | None = None, digests: dict[str, str] | None = None) -> Path:
    """`sign_manifest` over the evidence files `evidence` (hashed now: see `evidence_subjects`, with `digests`)."""
    return sign_manifest(run_dir, predicate, key, evidence_subjects(bundle_root, evidence, digests),
                         run_files=run_files)


def sign_manifest(run_dir: Path, predicate: dict[str, Any], key: KeyPair, evidence: list[dict[str, Any]], *,
                  run_files: list[str] | None = None) -> Path:
    """Hash the run-folder files this run wrote (`run_files`; default every regular file there), add the evidence
    subjects the caller took (`evidence_subjects`), write manifest.json, then its DSSE envelope last, each by an
    atomic rename: a folder without the envelope is unfinished and never verifies."""
    names = sorted(run_files) if run_files is not None else sorted(
        p.name for p in run_dir.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith("."))
    subjects = [
        {"name": RUN_PREFIX + name, "digest": {"sha256": sha256_file(run_dir / name)}}
        for name in names if name not in _NOT_SUBJECTS
    ]
    subjects += evidence
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
    envelope = (json.dumps(sign_envelope(key, data), indent=2) + "\n").encode()
    write_atomic(run_dir / MANIFEST, data)
    write_atomic(run_dir / ENVELOPE, envelope)
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
    signer = predicate.get("pdf_signer")
    pinned = str(signer.get("cert_sha256", "")) if isinstance(signer, dict) else ""
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


def _regular_problem(path: Path, *, links: bool) -> str | None:
    """Why `path` cannot be a verified file (None when it can): a run folder holds regular files only, never a
    link; evidence may be a link inside its bundle (checked when the bundle was loaded)."""
    try:
        st = path.stat() if links else path.lstat()
    except OSError:
        return f"{path}: missing (listed in the manifest)"
    if stat.S_ISLNK(st.st_mode):
        return f"{path}: a symbolic link; a run folder holds regular files only"
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: expected a regular file, got {file_kind(st.st_mode)}"
    return None


def verify_run(
    run_dir: Path, *, key_dir: Path, trust: list[Path] | None, bundle: Path | None, today: dt.date | None = None,
    evidence: bool = True, pdf: bool = True,
) -> Verification:
    """Check the envelope, the PDF signatures, every subject's hash, and that the run folder holds nothing else
    (regular files only: no link, no folder, no leftover temporary file).

    Every problem is collected; the first one is the one to report. `today` (passed in) turns on the expiry warning.
    `evidence=False, pdf=False` checks the run folder alone (what history needs: the bundle may have moved).
    """
    out = Verification()
    subjects = _signed_subjects(run_dir, trust, key_dir, out)
    if subjects is None:
        return out
    root = bundle if bundle is not None else Path(str(out.predicate.get("bundle_path", "")))
    if evidence and not (root / "bundle.yaml").exists():  # no bundle there: one problem, not one per file
        evidence = not _bundle_missing(root, bundle, subjects, out)
    listed: set[str] = set()
    for subject in subjects:
        found = _subject_file(subject, run_dir, root, evidence, out)
        if found is None:
            continue
        path, links, digest = found
        if not links:
            listed.add(path.name)
        out.checked += 1
        problem = _regular_problem(path, links=links)
        if problem is not None:
            out.problems.append(problem)
            continue
        try:
            if sha256_file(path) != digest:
                out.problems.append(f"{path}: changed (sha256 differs from the manifest)")
                continue  # a PDF that is not the one signed is never parsed: a crafted one attacks the parser
        except ClusterCertError as exc:
            out.problems.append(str(exc))
            continue
        if pdf and not links and path.name in SIGNED_PDFS:
            _check_pdf(path, trust, key_dir, out.predicate, out)
    for path in sorted(run_dir.iterdir()):
        if path.name not in listed and path.name not in _NOT_SUBJECTS:
            out.problems.append(f"{path}: not listed in the manifest")
    _warn(run_dir, today, out)
    return out


def _signed_subjects(run_dir: Path, trust: list[Path] | None, key_dir: Path, out: Verification) -> list[Any] | None:
    """The subjects of the statement the envelope signs (its predicate into `out`), or None when there is none to
    check: the envelope or the manifest a link, the envelope missing or not verified, the statement unreadable."""
    for name in (ENVELOPE, MANIFEST):
        if (run_dir / name).is_symlink():
            out.problems.append(f"{run_dir / name}: a symbolic link; a run folder holds regular files only")
            return None
    payload = _open_envelope(run_dir, trust, key_dir, out)
    if payload is None:
        return None
    try:
        statement = json.loads(payload)
        subjects = statement.get("subject", [])
        out.predicate = statement.get("predicate", {})
        if not isinstance(subjects, list) or not isinstance(out.predicate, dict):
            raise ValueError("subject or predicate of the wrong type")
    except (ValueError, UnicodeDecodeError, AttributeError):
        out.problems.append(f"{run_dir / MANIFEST}: not a manifest (expected an in-toto Statement in JSON)")
        return None
    return subjects


def _bundle_missing(root: Path, bundle: Path | None, subjects: list[Any], out: Verification) -> bool:
    """No bundle.yaml at `root`: one problem when the manifest lists evidence files (True: they are not checked
    one by one), none when it lists none (False)."""
    count = sum(1 for s in subjects if isinstance(s, dict) and str(s.get("name", "")).startswith(EVIDENCE_PREFIX))
    if not count:
        return False
    recorded = str(out.predicate.get("bundle_path", ""))
    said = ("the folder --bundle gave" if bundle is not None else "where the run recorded its bundle"
            if Path(recorded).is_absolute() else  # a run before 2026-12-06 recorded the path as typed
            f"the run recorded its bundle as '{recorded}', a path from the folder certify ran in")
    out.problems.append(f"{root / 'bundle.yaml'}: missing ({said}), so the {count} evidence file(s) the "
                        "manifest lists cannot be checked. Give --bundle DIR where the bundle is now")
    return True


def _subject_file(subject: Any, run_dir: Path, root: Path, evidence: bool,
                  out: Verification) -> tuple[Path, bool, str] | None:
    """A subject's file, whether it is evidence (which may be a link inside its bundle) and its signed sha256; None
    for a subject that is not checked (an evidence file when the evidence is not) or cannot be (a problem said)."""
    try:
        name, digest = str(subject["name"]), str(subject["digest"]["sha256"])
    except (KeyError, TypeError):
        out.problems.append(f"{run_dir / MANIFEST}: a subject without name and sha256 digest")
        return None
    if name.startswith(RUN_PREFIX):
        rel = name[len(RUN_PREFIX):]
        if not rel or "/" in rel or rel in (".", ".."):
            out.problems.append(f"{run_dir / MANIFEST}: subject {name!r} is not a file of the run folder")
            return None
        return run_dir / rel, False, digest
    if name.startswith(EVIDENCE_PREFIX):
        rel = name[len(EVIDENCE_PREFIX):]
        pure = PurePosixPath(rel)
        if not rel or pure.is_absolute() or ".." in pure.parts or "\\" in rel:
            out.problems.append(f"{run_dir / MANIFEST}: subject {name[:200]!r} is not a file inside the bundle")
            return None
        return (root / rel, True, digest) if evidence else None
    out.problems.append(f"{run_dir / MANIFEST}: subject {name!r} is neither run/ nor evidence/")
    return None


def _warn(run_dir: Path, today: dt.date | None, out: Verification) -> None:
    """The warnings of a run folder that may verify: a development key; a certification expired by `today`."""
    run = out.predicate.get("run")
    if isinstance(run, dict) and run.get("dev_key"):
        out.warnings.append(
            f"signed with a development key ({run.get('signer', 'unknown fingerprint')}), which certify created "
            "on its own: it proves the files are unchanged, not who certified them. Sign with a real key "
            "(`clustercert keys init`) for a report others can trust")
    until = out.predicate.get("valid_until")
    if today is not None and until:
        try:
            expired = dt.date.fromisoformat(str(until)) < today
        except ValueError:
            out.problems.append(f"{run_dir / MANIFEST}: valid_until {str(until)[:40]!r} is not a date")
            return
        if expired:
            out.warnings.append(f"the certification expired on {until}; the signatures are still checked as above")
