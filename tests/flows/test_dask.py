"""Distributed execution: the phase tasks on Dask (a cluster certify starts, or a running one) give the default
runner's results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.flows.conftest import PrefectServer

pytestmark = pytest.mark.slow
# Differ by construction: each run reads the clock once (run id, start time and what follows from it).
RUN_OWN = ("run_id", "started_at", "valid_until")


def _certify(bundle: Path, reports: Path, server: PrefectServer, *extra: str,
             env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    # Every task recomputes: a cached result would hide which runner did the work.
    full_env = {**server.env(), "PREFECT_TASKS_REFRESH_CACHE": "true", **(env or {})}
    proc = run_cli("certify", str(bundle), "--json", "--reports-dir", str(reports), *extra, env=full_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((Path(json.loads(proc.stdout)["run_dir"]) / "results.json").read_text())
    for key in RUN_OWN:
        results.pop(key)
    return results, proc.stderr


@pytest.fixture(scope="module")
def default_run(seed_certified: dict[str, Any],
                tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    """The default runner's results: the session's seed certification (same bundle folder, so the same file names
    in the results), not a certification of its own."""
    work = tmp_path_factory.mktemp("dask")
    assert seed_certified["rc"] == 0, seed_certified["stderr"]
    results = {k: v for k, v in seed_certified["results"].items() if k not in RUN_OWN}
    assert results["outcome"] == "CERTIFIED" and results["workloads"]
    return work, seed_certified["bundle"], results


def test_tasks_on_a_running_two_worker_cluster_give_the_default_results(
        prefect_server: PrefectServer, default_run: tuple[Path, Path, Any]) -> None:
    import dask
    from distributed import Client, LocalCluster

    work, seed_bundle, default = default_run
    # Dask's scratch space in the test's folder, not its default /tmp/dask-scratch-space
    with dask.config.set({"temporary-directory": str(work / "dask-tmp")}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                         scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"}) as cluster, \
            Client(cluster) as client:
        before = client.run(lambda dask_worker: dask_worker.state.executed_count)
        results, stderr = _certify(seed_bundle, work / "running", prefect_server,
                                   env={"CLUSTERCERT_DASK_ADDRESS": cluster.scheduler_address})
        after = client.run(lambda dask_worker: dask_worker.state.executed_count)
    assert f"note: the phase tasks run on the Dask cluster at {cluster.scheduler_address}" in stderr
    # One Dask task per training-log parse (the tasks a phase subflow submits); the judgement runs in the flow.
    repeats = sum(len(w["repeats"]) for w in default["workloads"])
    assert sum(after.values()) - sum(before.values()) == repeats and len(after) == 2
    assert results == default


def test_certify_dask_starts_a_local_cluster_and_gives_the_default_results(
        prefect_server: PrefectServer, default_run: tuple[Path, Path, Any]) -> None:
    work, seed_bundle, default = default_run
    results, stderr = _certify(seed_bundle, work / "local", prefect_server, "--dask",
                               env={"DASK_TEMPORARY_DIRECTORY": str(work / "dask-tmp")})
    assert "note: the phase tasks run on the local Dask cluster at tcp://127.0.0.1:" in stderr
    assert "(2 workers)" in stderr
    assert results == default
