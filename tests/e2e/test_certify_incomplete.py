"""Bad evidence found while certifying: a gap in the measurement window, a nan grad norm. One whole certification of
a copy of the sample with two logs edited, one defect in each (distinct files of one workload: each finding is named
with its own file and line, and the two share a certification, as the validation cases do in test_validation.py).
A file of its own so that it runs beside the others on the second pytest-xdist worker."""

from __future__ import annotations

import json
import re
import shutil
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from clustercert.evidence.bundle import load_bundle, seal_bundle
from tests.conftest import ROOT, run_cli

SAMPLE = ROOT / "evidence" / "gb200-seed"
LOGS = Path("training") / "llama3-70b" / "fp8" / "512"
pytestmark = pytest.mark.slow


def _edit(log: Path, edit: Any) -> None:
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(edit(lines)))


def _line(log: Path, text: str) -> int:
    return next(i for i, ln in enumerate(log.read_text().splitlines(), 1) if text in ln)


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sample with iteration 40 dropped from r1.log (inside the window 35-44) and a nan grad norm printed at
    iteration 20 of r2.log, certified once as a person runs it (the text summary), with its results.json."""
    tmp = tmp_path_factory.mktemp("incomplete")
    bundle = tmp / "bundle"
    shutil.copytree(SAMPLE, bundle)
    gap, nan = bundle / LOGS / "r1.log", bundle / LOGS / "r2.log"
    _edit(gap, lambda lines: [ln for ln in lines if "iteration 40/49" not in ln])
    _edit(nan, lambda lines: [ln.replace(" | train_step_timing", " | grad_norm: nan | train_step_timing")
                              if "iteration 20/49" in ln else ln for ln in lines])
    seal_bundle(load_bundle(bundle))
    proc = run_cli("certify", str(bundle), "--reports-dir", str(tmp / "reports"))
    folders = [p for p in (tmp / "reports").iterdir() if p.is_dir()] if (tmp / "reports").is_dir() else []
    results = json.loads((folders[0] / "results.json").read_text()) if len(folders) == 1 else {}
    return {"proc": proc, "gap": gap, "nan": nan, "results": results,
            "run_dir": folders[0] if len(folders) == 1 else None}


def test_missing_window_iteration_is_incomplete_with_file_and_line(broken: dict[str, Any]) -> None:
    proc, log = broken["proc"], broken["gap"]
    line = _line(log, "iteration 41/49")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert f"error: {log} line {line} field 'iteration': iteration(s) 40 of the window 35-44 are missing" in errors
    # The validation suite names the same gap (the checks using that log are gated by it).
    named = (f"error: {log}: required expectation 'window_complete' failed: missing [40] (the baseline's "
             "measurement window (DOMAIN.md section 1) must be logged completely)")
    assert any(e.startswith(named) for e in errors), errors
    assert "Outcome: INCOMPLETE" in proc.stdout


def test_nan_grad_norm_is_incomplete_with_file_and_line(broken: dict[str, Any]) -> None:
    proc, log, results = broken["proc"], broken["nan"], broken["results"]
    line = _line(log, "iteration 20/49")
    assert proc.returncode == 3 and results["outcome"] == "INCOMPLETE"
    rel = (LOGS / "r2.log").as_posix()  # results name it by its path in the bundle, the error line by its whole path
    named = [c for c in results["checks"] if c["status"] == "ERROR" and rel in c["message"]
             and "grad_norm" in c["message"]]
    assert named, [c["message"] for c in results["checks"] if c["status"] == "ERROR"]
    assert named[0]["message"].startswith(f"{rel} line {line} field 'grad_norm': the log prints a nan/inf grad_norm")
    assert named[0]["evidence"][0]["line"] == line
    assert any(e.startswith(f"error: {log} line {line} field 'grad_norm': ") for e in proc.stderr.splitlines())


def test_the_report_shows_the_validation_checks_its_reasons_link_to(broken: dict[str, Any]) -> None:
    """The validation's own ERROR check (the window gap, as a required expectation) is a reason for INCOMPLETE: the
    report lists it among the reasons with a link to the check, and shows the check's row there (the link led
    nowhere: validation checks had no row in any table, and WeasyPrint logged "No anchor #check-validation...")."""
    run_dir = broken["run_dir"]
    assert run_dir is not None, broken["proc"].stderr
    html = (run_dir / "report.html").read_text()
    ids = set(re.findall(r'\sid="([^"]+)"', html))
    targets = set(re.findall(r'href="#([^"]+)"', html))
    check = "check-validation.llama3-70b-fp8-512-r1_window_complete"
    assert check in targets and targets - ids == set()
    row = html[html.index(f'<tr id="{check}">'):]
    row = unescape(row[:row.index("</tr>")].replace("<wbr>", ""))
    assert "ERROR" in row and "window_complete" in row and "missing [40]" in row
    # stderr holds progress, notes and the error lines only: WeasyPrint's "No anchor #check-validation..." is gone
    own = ("progress [", "note: ", "error: ")
    assert [ln for ln in broken["proc"].stderr.splitlines() if not ln.startswith(own)] == []
    # the expectation's sample names the missing iteration, which no line holds (it read "r1.log line None: [40]")
    assert "line None" not in html and "r1.log</code>: <code>[40]</code>" in html.replace("<wbr>", "")
    # results and report name the log by its path in the bundle; the error lines above by its whole path
    assert "training/llama3-70b/fp8/512/r1.log: required expectation 'window_complete'" in row
    assert str(broken["gap"].parent) not in html.replace("<wbr>", "")
