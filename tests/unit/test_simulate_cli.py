"""The `simulate` command: usage errors exit 2 with a message; --fault replaces a scenario's faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.cli.app import main
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "nope"], "scenarios: seed, degraded, h100"),
        (["--scenario", "h100", "--system", "gb200-nvl72"], "the h100 scenario is h100-sxm"),
        (["--fault", "slow-gpu:node=gb-r1-n01"], "missing keys ['gpu', 'pct']"),
        (["--fault", "node-fail:node=gb-r9-n01,at=1h"], "node gb-r9-n01 is not in the simulated cluster"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                             message: str) -> None:
    assert main(["simulate", "--out", str(tmp_path / "b"), *args]) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")


def test_existing_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--out", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_fault_none_gives_a_clean_run_and_other_seeds_other_bytes(tmp_path: Path) -> None:
    assert main(["simulate", "--out", str(tmp_path / "clean"), "--fault", "none"]) == 0
    events = (tmp_path / "clean" / "resilience" / "events.jsonl").read_text()
    assert "straggler_detected" not in events and "fault_injected" not in events
    assert events.count('"job_started"') == 1
    assert main(["simulate", "--out", str(tmp_path / "seed8"), "--fault", "none", "--seed", "8"]) == 0
    log = "training/grok1-314b/bf16/512/r1.log"
    assert (tmp_path / "clean" / log).read_bytes() != (tmp_path / "seed8" / log).read_bytes()


# `clustercert simulate` as a user runs it, SIGTERM arriving after its third file is written
_STOPPED = """
import os, pathlib, signal, sys
from clustercert.cli.app import main

written = []
write_text = pathlib.Path.write_text


def counted(self, *args, **kwargs):
    done = write_text(self, *args, **kwargs)
    written.append(self)
    if len(written) == 3:
        os.kill(os.getpid(), signal.SIGTERM)
    return done


pathlib.Path.write_text = counted
raise SystemExit(main(["simulate", "--out", sys.argv[1], "--repeats", "1"]))
"""


def test_a_stopped_simulate_leaves_no_partial_bundle(tmp_path: Path) -> None:
    """SIGTERM while `simulate` writes its bundle: the folder it made goes with what it holds (it left half a
    bundle, unsealed, where the next `simulate --out` is refused), and the one line says so."""
    import os
    import subprocess
    import sys

    out = tmp_path / "sub" / "bundle"
    run = subprocess.run([sys.executable, "-c", _STOPPED, str(out)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 143, run.stdout + run.stderr
    assert run.stderr == (f"stopped by SIGTERM; the unfinished {out} was removed. Run the command again to start "
                          "anew.\n")
    assert list((tmp_path / "sub").iterdir()) == []
