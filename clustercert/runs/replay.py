"""Re-running a recorded certification: evidence still as recorded, recorded metadata, comparison of run folders."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from clustercert.attest.manifest import EVIDENCE_PREFIX, MANIFEST
from clustercert.attest.pdfbytes import unsigned_bytes
from clustercert.errors import EvidenceError, UsageError
from clustercert.evidence.hashing import sha256_file

__all__ = ["REDACTED", "check_recorded_evidence", "compare_run_folders", "compared_copies", "key_difference",
           "read_predicate", "shown_differences", "software_differences"]


def read_predicate(run_dir: Path) -> dict[str, Any]:
    """The manifest's predicate (outcome, catalog, software, run metadata)."""
    path = run_dir / MANIFEST
    try:
        predicate = json.loads(path.read_text(encoding="utf-8"))["predicate"]
        predicate["run"]["run_id"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: expected a run folder's manifest with run metadata, got {exc.__class__.__name__}"
                         f" ({exc}). Give a run folder written by `clustercert certify`.") from None
    return dict(predicate)


def check_recorded_evidence(run_dir: Path, bundle: Path) -> list[str]:
    """The evidence paths (relative to the bundle) after checking each against the manifest's sha256; the first
    missing or changed one raises EvidenceError naming it."""
    statement = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
    rels: list[str] = []
    for subject in statement.get("subject", []):
        name = str(subject["name"])
        if not name.startswith(EVIDENCE_PREFIX):
            continue
        rel = name[len(EVIDENCE_PREFIX):]
        path = bundle / rel
        if not path.is_file():
            raise EvidenceError(str(path), "missing; the run's manifest lists it. Restore it or give --bundle DIR")
        if sha256_file(path) != subject["digest"]["sha256"]:
            raise EvidenceError(str(path), "changed since the run (sha256 differs from the run's manifest.json); "
                                "a re-run needs the evidence as it was")
        rels.append(rel)
    return rels


def software_differences(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """One line per package whose version differs from the recorded one."""
    return [f"{name}: recorded {recorded.get(name, 'absent')}, now {current.get(name, 'absent')}"
            for name in sorted(set(recorded) | set(current)) if recorded.get(name) != current.get(name)]


def _json_differences(old: Any, new: Any, where: str, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in new:
                out.append(f"{where}.{key}: removed (was {json.dumps(old[key])[:80]})")
            elif key not in old:
                out.append(f"{where}.{key}: added ({json.dumps(new[key])[:80]})")
            else:
                _json_differences(old[key], new[key], f"{where}.{key}", out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _json_differences(a, b, f"{where}[{i}]", out)
    elif old != new or type(old) is not type(new):
        out.append(f"{where}: {json.dumps(old)[:80]} -> {json.dumps(new)[:80]}")


_IN_LIST = re.compile(r"^(.*)\[\d+\]")


def shown_differences(diffs: list[str], per_list: int = 2) -> list[str]:
    """`diffs` as a person reads them: of the differences in the items of one list (`results.json.checks[81]
    .evidence[0].file`, `...evidence[1].file`, ...), the first `per_list` and a line counting the rest; a list
    with one more than that is shown whole. Every difference is counted, none is dropped unsaid."""
    def list_of(line: str) -> str:
        path = line.split(": ", 1)[0]
        found = _IN_LIST.match(path)
        return found.group(1) if found else path

    out: list[str] = []
    run: list[str] = []
    for line in [*diffs, None]:
        if run and (line is None or list_of(line) != list_of(run[0])):
            if len(run) <= per_list + 1:
                out += run
            else:
                out += run[:per_list]
                out.append(f"... and {len(run) - per_list} more differences in {list_of(run[0])}")
            run = []
        if line is not None:
            run.append(line)
    return out


def _first_difference(old: bytes, new: bytes) -> int:
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return i
    return min(len(old), len(new))


REDACTED = "report.redacted"


def compared_copies(original: Path) -> list[str]:
    """The report copies a re-run of `original` renders and compares: "report", and "report.redacted" when the run
    wrote one (`certify --redact`)."""
    return ["report", *([REDACTED] if (original / f"{REDACTED}.pdf").is_file() else [])]


def key_difference(recorded: str, current: str, copies: list[str]) -> str | None:
    """Why the redacted copy cannot reproduce, when the run wrote one (`copies`) and was signed by the key of
    fingerprint `recorded` while the re-run signs with `current`: its pseudonyms are keyed by the signing key.
    None when the keys are the same, the run has no redacted copy, or its manifest names no signer."""
    if REDACTED not in copies or not recorded or recorded == current:
        return None
    return (f"the run was signed by key {recorded}; this re-run signs with {current}. The redacted copy's "
            "pseudonyms are keyed by the signing key, so report.redacted.html and report.redacted.pdf will differ: "
            "set CLUSTERCERT_KEY_DIR to the keys that signed the run to reproduce them")


def compare_run_folders(original: Path, replay: Path) -> list[str]:
    """Differences in results.json and validation.json (by JSON path), each report copy's HTML (first differing
    lines) and unsigned PDF bytes (first differing offset): the auditor's report, and the redacted copy where the
    original has one (`compared_copies`); empty when the replay reproduced the original."""
    diffs: list[str] = []
    old_results = json.loads((original / "results.json").read_text(encoding="utf-8"))
    new_results = json.loads((replay / "results.json").read_text(encoding="utf-8"))
    found: list[str] = []
    _json_differences(old_results, new_results, "results.json", found)
    if not found and (original / "results.json").read_bytes() != (replay / "results.json").read_bytes():
        found.append("results.json: same values, different bytes")
    diffs += found
    old_v, new_v = original / "validation.json", replay / "validation.json"
    if old_v.exists() != new_v.exists():
        diffs.append(f"validation.json: {'missing from' if old_v.exists() else 'added by'} the re-run")
    elif old_v.exists() and old_v.read_bytes() != new_v.read_bytes():
        found_v: list[str] = []
        _json_differences(json.loads(old_v.read_text(encoding="utf-8")), json.loads(new_v.read_text(encoding="utf-8")),
                          "validation.json", found_v)
        diffs += found_v or ["validation.json: same values, different bytes"]
    for stem in compared_copies(original):
        diffs += _copy_differences(original, replay, stem)
    return diffs


def _copy_differences(original: Path, replay: Path, stem: str) -> list[str]:
    """How the re-run's `stem`.html and `stem`.pdf (unsigned bytes) differ from the original's."""
    for folder, which in ((original, "the run folder"), (replay, "the re-run")):
        missing = [name for name in (f"{stem}.html", f"{stem}.pdf") if not (folder / name).is_file()]
        if missing:
            return [f"{name}: missing from {which}" for name in missing]
    diffs: list[str] = []
    old_html, new_html = (original / f"{stem}.html").read_bytes(), (replay / f"{stem}.html").read_bytes()
    if old_html != new_html:
        lines = difflib.unified_diff(old_html.decode(errors="replace").splitlines(),
                                     new_html.decode(errors="replace").splitlines(), "original", "re-run", n=0,
                                     lineterm="")
        shown = [ln for ln in lines if ln[:1] in "+-" and not ln.startswith(("---", "+++"))][:6]
        diffs.append(f"{stem}.html: bytes differ: " + " | ".join(s[:100] for s in shown))
    old_pdf = unsigned_bytes((original / f"{stem}.pdf").read_bytes())
    new_pdf = unsigned_bytes((replay / f"{stem}.pdf").read_bytes())
    if old_pdf != new_pdf:
        at = _first_difference(old_pdf, new_pdf)
        diffs.append(f"{stem}.pdf: unsigned bytes differ from offset {at} ({len(old_pdf)} vs {len(new_pdf)} bytes): "
                     f"{old_pdf[at:at + 40]!r} -> {new_pdf[at:at + 40]!r}")
    return diffs
