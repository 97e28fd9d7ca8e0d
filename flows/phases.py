"""One subflow per phase: parse what the phase needs, then judge it."""

from __future__ import annotations

from typing import Any

from prefect import flow, task

from clustercert.bundle import Phase, RunKind
from clustercert.errors import EvidenceError
from clustercert.parsers import TrainingLog
from clustercert.phases.efficiency import EfficiencyResult, judge_efficiency
from clustercert.runfolder import Inputs
from flows.caching import CACHED
from flows.tasks import load_task, parse_training_task

__all__ = ["efficiency_flow"]


@task(name="judge-efficiency", **CACHED)
def judge_efficiency_task(inputs: Inputs, logs: dict[str, TrainingLog | EvidenceError]) -> EfficiencyResult:
    return judge_efficiency(inputs.bundle.spec, inputs.catalog, logs)


@flow(name="efficiency")
def efficiency_flow(bundle_path: str, references_dir: str, catalog: str | None, limit: int) -> dict[str, Any]:
    inputs = load_task(bundle_path, references_dir, catalog)
    runs = [r.id for r in inputs.bundle.spec.runs if r.phase is Phase.EFFICIENCY and r.kind is RunKind.TRAINING]
    # Submitted, so that the flow's task runner (threads, or Dask with `certify --dask`) runs them in parallel.
    futures = {run_id: parse_training_task.submit(inputs, run_id, limit) for run_id in runs}
    logs = {run_id: future.result() for run_id, future in futures.items()}
    result = judge_efficiency_task(inputs, logs)
    return {"checks": result.checks, "workloads": [w.to_json() for w in result.workloads],
            "section": result.section()}
