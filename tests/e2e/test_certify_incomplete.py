"""Bad evidence found while certifying: a gap in the measurement window, a nan grad norm. Each is one whole
certification of a copy of the sample with one log edited (a file of its own so that the two run beside the others
on the second pytest-xdist worker)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from clustercert.evidence.bundle import load_bundle, seal_bundle
from tests.conftest import ROOT, run_cli

SAMPLE = ROOT / "evidence" / "gb200-seed"
pytestmark = pytest.mark.slow


def _broken_bundle(tmp_path: Path, edit: Any) -> tuple[Path, Path]:
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    log = bundle / "training" / "llama3-70b" / "fp8" / "512" / "r1.log"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(edit(lines)))
    seal_bundle(load_bundle(bundle))
    return bundle, log


def test_missing_window_iteration_is_incomplete_with_file_and_line(tmp_path: Path) -> None:
    def drop_40(lines: list[str]) -> list[str]:
        return [ln for ln in lines if "iteration 40/49" not in ln]

    bundle, log = _broken_bundle(tmp_path, drop_40)
    line = next(i for i, ln in enumerate(log.read_text().splitlines(), 1) if "iteration 41/49" in ln)
    proc = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "reports"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert errors[0] == f"error: {log} line {line} field 'iteration': iteration(s) 40 of the window 35-44 are missing"
    # The validation suite names the same gap (the checks using that log are gated by it).
    named = (f"error: {log}: required expectation 'window_complete' failed: missing [40] (the baseline's "
             "measurement window (DOMAIN.md section 1) must be logged completely)")
    assert any(e.startswith(named) for e in errors[1:]), errors
    assert "Outcome: INCOMPLETE" in proc.stdout


def test_nan_grad_norm_is_incomplete_with_file_and_line(tmp_path: Path) -> None:
    def nan_at_20(lines: list[str]) -> list[str]:
        return [ln.replace(" | train_step_timing", " | grad_norm: nan | train_step_timing")
                if "iteration 20/49" in ln else ln for ln in lines]

    bundle, log = _broken_bundle(tmp_path, nan_at_20)
    line = next(i for i, ln in enumerate(log.read_text().splitlines(), 1) if "iteration 20/49" in ln)
    proc = run_cli("certify", str(bundle), "--json", "--reports-dir", str(tmp_path / "reports"))
    assert proc.returncode == 3
    assert "progress [" not in proc.stderr  # --json: no progress lines
    out = json.loads(proc.stdout)
    assert out["outcome"] == "INCOMPLETE"
    bad = [c for c in out["checks"] if c["status"] == "ERROR"]
    assert bad[0]["message"].startswith(f"{log} line {line} field 'grad_norm': the log prints a nan/inf grad_norm")
    assert bad[0]["evidence"][0]["line"] == line
