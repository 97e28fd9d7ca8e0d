"""Cross-run caching: a run interrupted by a crash resumes from persisted task results; a refresh recomputes."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.flows.conftest import PrefectServer

pytestmark = pytest.mark.slow


async def _latest_efficiency_tasks(server: PrefectServer, bundle: Path) -> dict[str, list[str]]:
    """State names by task of the newest `efficiency` subflow run of `bundle` (the server is the whole test run's:
    another worker's certifications run on it meanwhile)."""
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    async with PrefectClient(api=server.api_url) as client:
        runs = await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["efficiency"])),
                                           sort=FlowRunSort.START_TIME_DESC, limit=200)
        newest = next(r for r in runs if r.parameters.get("bundle_path") == str(bundle.resolve()))
        tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[newest.id])))
    out: dict[str, list[str]] = {}
    for t in tasks:
        out.setdefault(t.name.rsplit("-", 1)[0], []).append(str(t.state_name))
    return out


def test_an_interrupted_run_resumes_from_cached_results(prefect_server: PrefectServer, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"  # evidence no earlier test has seen: nothing of it is cached yet
    assert run_cli("simulate", "--out", str(bundle), "--seed", "11", "--repeats", "1").returncode == 0
    empty = tmp_path / "no-templates"
    empty.mkdir()
    env = prefect_server.env()
    crashed = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "r1"),
                      env={**env, "CLUSTERCERT_TEMPLATES_DIR": str(empty)})
    assert crashed.returncode == 4 and "cannot render the report" in crashed.stderr, crashed.stderr
    first = asyncio.run(_latest_efficiency_tasks(prefect_server, bundle))
    assert first["parse-runs"] == ["Completed"]  # the training logs, in one task on threads (flows/phases.py)

    resumed = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "r2"), env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    second = asyncio.run(_latest_efficiency_tasks(prefect_server, bundle))
    assert second["parse-runs"] == ["Cached"]
    assert second["judge-efficiency"] == ["Cached"]

    # The refresh is seen in the phases' tasks, before the report: this run stops at the render as the first did
    refreshed = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "r3"),
                        env={**env, "PREFECT_TASKS_REFRESH_CACHE": "true", "CLUSTERCERT_TEMPLATES_DIR": str(empty)})
    assert refreshed.returncode == 4 and "cannot render the report" in refreshed.stderr, refreshed.stderr
    third = asyncio.run(_latest_efficiency_tasks(prefect_server, bundle))
    assert third["parse-runs"] == ["Completed"] and third["judge-efficiency"] == ["Completed"]
    # `clustercert server` (the session's): no request of these runs, nor of any before them, was answered "retry"
    # (503, then the client's 2 s back-off); Prefect's own `prefect server start` answered one in each run measured
    assert "retryable exception" not in prefect_server.log_text(), prefect_server.log_text()[-3000:]


def test_parsed_evidence_of_large_files_is_not_persisted() -> None:
    """Parse tasks keep their cache for files up to PERSIST_MAX_BYTES; beyond it (a cluster's telemetry) their
    result is neither persisted nor looked up: pickling it took a 512-GPU certification past 6 GiB."""
    from prefect.cache_policies import NO_CACHE

    from clustercert.runs.folder import load_inputs
    from flows.caching import PERSIST_MAX_BYTES, persisted
    from flows.phases import parse_runs_task

    root = Path(__file__).resolve().parents[2]
    inputs = load_inputs(root / "evidence" / "gb200-seed", root / "references", None)
    runs = [r.id for r in inputs.bundle.spec.runs if r.phase.value == "resilience"]
    size = sum((inputs.bundle.root / rel).stat().st_size
               for r in inputs.bundle.spec.runs if r.id in runs for rel in inputs.bundle.run_files(r))
    assert 0 < size <= PERSIST_MAX_BYTES
    assert persisted(parse_runs_task, inputs, runs) is parse_runs_task
    assert persisted(parse_runs_task, inputs, runs, max_bytes=size) is parse_runs_task
    large = persisted(parse_runs_task, inputs, runs, max_bytes=size - 1)
    assert large.cache_policy is NO_CACHE and large.persist_result is False
    assert large.name == parse_runs_task.name and large.retries == parse_runs_task.retries
    assert persisted(parse_runs_task, inputs, []) is parse_runs_task


def test_every_task_is_cached_by_our_key_or_not_at_all() -> None:
    """No task keeps Prefect's default policy, which hashes every input for a key under which nothing is stored
    (the 512-GPU resilience judge serialised 1.6 GB of telemetry for it): a task is cached by the evidence key,
    its result persisted, or declares no cache."""
    import importlib

    from prefect.cache_policies import NO_CACHE, CacheKeyFnPolicy
    from prefect.tasks import Task

    tasks = {}
    for module in ("flows.artifacts", "flows.phases", "flows.run", "flows.schedule", "flows.tasks"):
        for value in vars(importlib.import_module(module)).values():
            if isinstance(value, Task):
                tasks[value.name] = value
    assert len(tasks) == 19, sorted(tasks)  # judge-health (issue 59) is the nineteenth
    for name, value in tasks.items():
        cached = isinstance(value.cache_policy, CacheKeyFnPolicy) and value.persist_result is True
        assert cached or value.cache_policy is NO_CACHE, name
    # "judge" takes the run's metadata (its id and start time are new each run): a key of it is never found again
    assert {n for n, t in tasks.items() if t.cache_policy is not NO_CACHE} == {
        "parse-runs", "parse-training-log", "judge-efficiency"}


def test_the_evidence_digest_is_computed_once_per_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cached task's key holds the evidence digest; a cluster's bundle lists thousands of files, so it is
    listed and hashed once per load (8 s of a 512-GPU certification), and another load gets its own digest."""
    import hashlib
    import shutil

    from clustercert.evidence.bundle import LoadedBundle
    from clustercert.runs.folder import Inputs, load_inputs
    from flows.caching import evidence_digest

    root = Path(__file__).resolve().parents[2]
    seed = load_inputs(root / "evidence" / "gb200-seed", root / "references", None)
    want = hashlib.sha256()  # bundle.yaml, then each evidence file in bundle order, by the sha256 of its bytes
    for rel in ["bundle.yaml", *seed.bundle.evidence_files()]:
        want.update(f"{rel}\0{hashlib.sha256((seed.bundle.root / rel).read_bytes()).hexdigest()}\n".encode())
    listed: list[Path] = []
    real = LoadedBundle.evidence_files
    monkeypatch.setattr(LoadedBundle, "evidence_files", lambda self: listed.append(self.root) or real(self))

    def digest(inputs: Inputs) -> tuple[str, int]:  # the digest, and how many times the bundle was listed for it
        before = len(listed)
        return evidence_digest(inputs), len(listed) - before

    assert digest(seed) == (want.hexdigest(), 1)
    assert digest(seed) == (want.hexdigest(), 0)

    copy = tmp_path / "bundle"
    shutil.copytree(seed.bundle.root, copy)
    log = next(rel for rel in seed.bundle.evidence_files() if rel.endswith(".log"))
    (copy / log).write_text((copy / log).read_text() + "one more line\n")
    (copy / "MANIFEST.sha256").unlink(missing_ok=True)
    other = load_inputs(copy, root / "references", None)
    changed, times = digest(other)
    assert changed != want.hexdigest() and times == 1
    assert digest(seed) == (want.hexdigest(), 1)  # the last load's digest is the one kept


def test_tasks_asking_for_the_digest_at_once_list_the_bundle_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The efficiency flow submits a task per training log at once: their keys' digest is listed by one thread while
    the others wait for it (twelve listings side by side took 3 s of a 512-GPU certification)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from clustercert.evidence.bundle import LoadedBundle
    from clustercert.runs.folder import load_inputs
    from flows import caching

    root = Path(__file__).resolve().parents[2]
    seed = load_inputs(root / "evidence" / "gb200-seed", root / "references", None)
    monkeypatch.setattr(caching, "_last_digest", None)
    listed: list[int] = []
    real = LoadedBundle.evidence_files
    start = threading.Barrier(8)

    def slow_listing(self: LoadedBundle) -> list[str]:
        listed.append(threading.get_ident())
        time.sleep(0.2)  # long enough for every other thread to ask meanwhile
        return real(self)

    monkeypatch.setattr(LoadedBundle, "evidence_files", slow_listing)

    def ask(_: int) -> str:
        start.wait()
        return caching.evidence_digest(seed)

    with ThreadPoolExecutor(8) as pool:
        digests = list(pool.map(ask, range(8)))
    assert len(set(digests)) == 1 and len(listed) == 1


def test_the_cache_key_holds_the_reference_files_the_run_judges_with(tmp_path: Path) -> None:
    """A result judged with another MLPerf benchmarks file is another (its sha256 is in the key, as the health
    rules' is); a bundle without an MLPerf run loads none (its key, and its run folder, are as they were)."""
    from types import SimpleNamespace

    from clustercert.runs.folder import GivenFiles, Inputs, load_inputs
    from clustercert.runs.references import MLPERF_BENCHMARKS
    from flows.caching import certify_cache_key

    root = Path(__file__).resolve().parents[2]
    shipped = root / "references" / "mlperf-benchmarks.yaml"
    edited = tmp_path / "mlperf-benchmarks.yaml"
    edited.write_text(shipped.read_text().replace("{name: Llama 2 70B, layers: 80,", "{name: Llama 2 70B, layers: 40,"))
    assert edited.read_text() != shipped.read_text()

    def loaded(copy: Path | None) -> Inputs:
        given = GivenFiles(references={MLPERF_BENCHMARKS.key: str(copy)} if copy is not None else {})
        return load_inputs(root / "evidence" / "gb200-seed", root / "references", None, given=given)

    seed, with_shipped, with_edited = loaded(None), loaded(shipped), loaded(edited)
    assert MLPERF_BENCHMARKS.key not in {r.reference.key for r in seed.references}
    assert [r.sha256 for r in with_edited.references if r.reference is MLPERF_BENCHMARKS] == [
        hashlib.sha256(edited.read_bytes()).hexdigest()]
    context = SimpleNamespace(task=SimpleNamespace(name="judge-efficiency"))
    keys = [certify_cache_key(context, {"inputs": i})  # type: ignore[arg-type]
            for i in (seed, with_shipped, with_edited)]
    assert len(set(keys)) == 3
