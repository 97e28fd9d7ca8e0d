"""Distributed execution: certify on a local Dask cluster of two workers gives the default runner's results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_cli
from tests.flows.conftest import PrefectServer

SAMPLE = ROOT / "evidence" / "gb200-seed"
pytestmark = pytest.mark.slow
# Differ by construction: each run reads the clock once (run id, start time and what follows from it).
RUN_OWN = ("run_id", "started_at", "valid_until")


def _certify(bundle: Path, reports: Path, server: PrefectServer, *extra: str) -> tuple[dict[str, Any], str]:
    # Every task recomputes: a cached result would hide which runner did the work.
    env = {**server.env(), "PREFECT_TASKS_REFRESH_CACHE": "true"}
    proc = run_cli("certify", str(bundle), "--json", "--reports-dir", str(reports), *extra, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = Path(json.loads(proc.stdout)["run_dir"])
    return json.loads((run_dir / "results.json").read_text()), proc.stderr


def test_dask_runner_gives_the_default_runners_results(prefect_server: PrefectServer, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    default, _ = _certify(bundle, tmp_path / "default", prefect_server)
    dask, stderr = _certify(bundle, tmp_path / "dask", prefect_server, "--dask")
    assert "note: the phase tasks run on the local Dask cluster at tcp://127.0.0.1:" in stderr
    assert "(2 workers)" in stderr
    assert default["outcome"] == "CERTIFIED" and default["workloads"]
    for key in RUN_OWN:
        default.pop(key), dask.pop(key)
    assert dask == default
