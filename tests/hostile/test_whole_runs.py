"""Hostile corpus, whole runs (issue 14 items 3, 9; crash and signal safety): a run stopped by SIGTERM while its
flow writes the run folder, then two certifications of one bundle into one folder at the same moment; a run killed
outright (SIGKILL) while it renders its PDFs.

One test, so that "certifying again afterwards completes" is shown on the folder the stopped run left; the
bundle is the smallest that runs every step (one 128-GPU training run of `clustercert simulate`).
Each case, what it attacks and the expected outcome: tests/hostile/README.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clustercert.attest.manifest import verify_run
from clustercert.attest.signing import init_keys
from tests.conftest import ROOT, command_line, descendants, mini_bundle, run_cli, wait_ended

Count = Callable[[int], None]


def _certify(bundle: Path, reports: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "clustercert", "certify", str(bundle), "--reports-dir",
                             str(reports)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.slow
def test_stopped_run_leaves_nothing_then_two_concurrent_runs_both_verify(tmp_path: Path, hostile: Count) -> None:
    bundle = mini_bundle(tmp_path)
    keys = tmp_path / "keys"
    init_keys(keys, passphrase=None, common_name="t", dev=True, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "CLUSTERCERT_KEY_DIR": str(keys)}
    reports = tmp_path / "reports"

    # 1. SIGTERM while the flow writes the run folder (Prefect's own SIGTERM handler is installed then).
    stopped = _certify(bundle, reports, env)
    hostile(1)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and stopped.poll() is None:
        if reports.is_dir() and any(p.is_dir() for p in reports.iterdir()):
            break
        time.sleep(0.05)
    assert stopped.poll() is None, "the run ended before it could be stopped"
    sent = time.monotonic()
    stopped.send_signal(signal.SIGTERM)
    out, err = stopped.communicate(timeout=30)
    took = time.monotonic() - sent
    assert stopped.returncode == 143, out + err
    assert "Traceback" not in out + err
    assert err.strip().splitlines()[-1].startswith("stopped by SIGTERM"), err
    assert took < 15, f"stopping took {took:.1f} s"
    assert [p.name for p in reports.iterdir()] == [], "the stopped run left a folder"

    # 2. Two certifications of the same bundle into the same folder at the same moment, each with its temporary
    # Prefect server on the same database (one Prefect home), every request answered "retry" (503) logged.
    home = tmp_path / "prefect"
    env = {**env, "PREFECT_HOME": str(home), "PREFECT_API_LOG_RETRYABLE_ERRORS": "true"}
    pair = [_certify(bundle, reports, env), _certify(bundle, reports, env)]
    hostile(2)
    results = [p.communicate(timeout=400) for p in pair]
    codes = [p.returncode for p in pair]
    assert codes[0] == codes[1] and codes[0] in (0, 1, 3), results
    assert not any("Traceback" in o + e for o, e in results)
    folders = sorted(p for p in reports.iterdir() if p.is_dir())
    assert len(folders) == 2 and folders[0].name != folders[1].name
    for folder in folders:
        check = verify_run(folder, key_dir=keys, trust=None, bundle=None)
        assert check.ok, check.problems
        assert "error.log" not in " ".join(p.name for p in folder.iterdir())
    listed = run_cli("runs", "--json", "--reports-dir", str(reports), env={"CLUSTERCERT_KEY_DIR": str(keys)})
    assert sorted(r["run_dir"] for r in json.loads(listed.stdout)) == [str(f) for f in folders]
    # No request had to wait for the client's 2 s back-off: the servers' transactions wait their turn for SQLite's
    # write lock (flows/prefect_db.py `immediate_sqlite_writes`); with Prefect's own mode, a phase's start met
    # "database is locked" in each certification measured, with one server on the database.
    server_log = (home / "clustercert-temporary-server.log").read_text()
    assert "retryable exception" not in server_log, server_log[-3000:]


@pytest.mark.slow
def test_a_run_killed_outright_leaves_no_process_and_runs_names_the_folder_it_left(tmp_path: Path,
                                                                                 hostile: Count) -> None:
    """SIGKILL (a scheduler's hard kill, the out-of-memory killer) gives a run no chance to stop what it started:
    the temporary Prefect server, the redacted copy's PDF process and multiprocessing's resource tracker ran on,
    orphaned, for good. Each now ends with the run; the folder the run left is not history, and `runs` says so."""
    bundle = mini_bundle(tmp_path)
    keys = tmp_path / "keys"
    init_keys(keys, passphrase=None, common_name="t", dev=True, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "CLUSTERCERT_KEY_DIR": str(keys)}
    reports = tmp_path / "reports"
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        run = subprocess.Popen([sys.executable, "-m", "clustercert", "certify", str(bundle), "--reports-dir",
                                str(reports), "--redact"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    hostile(1)
    # killed in its report stage, once its run folder holds the results (the processes that draw charts and render
    # the redacted copy's PDF each have a test of their own, in tests/unit/test_lifeline.py)
    deadline = time.monotonic() + 300
    while not list(reports.glob("*/results.json")):
        assert run.poll() is None and time.monotonic() < deadline, stderr.read_text()
        time.sleep(0.05)
    helpers = {pid: command_line(pid) for pid in descendants(run.pid)}
    assert any("flows.server_boot" in command for command in helpers.values()), helpers
    run.kill()
    run.wait(timeout=30)
    # each looks for its parent twice a second; the server shuts down first
    left = wait_ended(list(helpers), within_s=60)
    assert not left, f"still running after the run was killed: {[helpers[pid] for pid in left]}"

    [folder] = [p for p in reports.iterdir() if p.is_dir()]
    listed = run_cli("runs", "--reports-dir", str(reports), env={"CLUSTERCERT_KEY_DIR": str(keys)})
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "no runs", "not listed: 1 folder that does not verify (`clustercert verify FOLDER` says why)",
        f"  {folder.name}: manifest.dsse.json: missing (the signed manifest)"]
    as_json = run_cli("runs", "--json", "--reports-dir", str(reports), env={"CLUSTERCERT_KEY_DIR": str(keys)})
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == []
    assert as_json.stderr.splitlines() == [f"runs: not listed: {folder}: manifest.dsse.json: missing (the signed "
                                           "manifest)"]
