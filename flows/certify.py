"""The `certify` flow: load, parse, judge each phase, report, sign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task

from clustercert.bundle import Phase, RunKind
from clustercert.errors import EvidenceError
from clustercert.parsers import TrainingLog
from clustercert.phases.efficiency import judge_efficiency
from clustercert.results import RunMeta, build_results
from clustercert.runfolder import check_seal, load_inputs, parse_training_run, write_run_folder
from clustercert.settings import load_settings
from clustercert.signing import load_signing_key

__all__ = ["certify_flow", "efficiency_flow"]


@task(name="load-inputs", retries=2, retry_delay_seconds=1)
def load_task(bundle_path: str, references_dir: str, catalog: str | None) -> Any:
    inputs = load_inputs(Path(bundle_path), Path(references_dir), catalog)
    check_seal(inputs.bundle)
    return inputs


@task(name="parse-training-log", retries=2, retry_delay_seconds=1)
def parse_task(inputs: Any, run_id: str, limit: int) -> TrainingLog | EvidenceError:
    run = next(r for r in inputs.bundle.spec.runs if r.id == run_id)
    return parse_training_run(inputs.bundle, run, limit)


@task(name="judge-efficiency")
def judge_efficiency_task(inputs: Any, logs: dict[str, TrainingLog | EvidenceError]) -> Any:
    return judge_efficiency(inputs.bundle.spec, inputs.catalog, logs)


@flow(name="efficiency")
def efficiency_flow(bundle_path: str, references_dir: str, catalog: str | None, limit: int) -> dict[str, Any]:
    inputs = load_task(bundle_path, references_dir, catalog)
    runs = [r.id for r in inputs.bundle.spec.runs if r.phase is Phase.EFFICIENCY and r.kind is RunKind.TRAINING]
    logs = {run_id: parse_task(inputs, run_id, limit) for run_id in runs}
    result = judge_efficiency_task(inputs, logs)
    return {"checks": result.checks, "workloads": [w.to_json() for w in result.workloads]}


@task(name="judge")
def judge_task(meta: RunMeta, inputs: Any, checks: list[Any], workloads: list[dict[str, Any]]) -> dict[str, Any]:
    return build_results(meta, inputs.bundle, inputs.catalog, checks, workloads)


@task(name="render-and-sign")
def write_task(run_dir: str, inputs: Any, results: dict[str, Any], meta: RunMeta, key_dir: str,
               templates_dir: str) -> dict[str, str]:
    # The passphrase is read here, never passed as a parameter (Prefect records parameters).
    key = load_signing_key(Path(key_dir), load_settings().key_passphrase)
    paths = write_run_folder(Path(run_dir), inputs, results, meta, key, Path(templates_dir))
    return {k: str(v) for k, v in paths.items()}


@flow(name="certify")
def certify_flow(
    bundle_path: str,
    run_dir: str,
    run_meta: dict[str, Any],
    key_dir: str,
    references_dir: str,
    templates_dir: str,
    catalog: str | None = None,
    limit: int = 2 * 1024**3,
) -> dict[str, Any]:
    """Certify the bundle at `bundle_path` into `run_dir`; returns the outcome and the report paths."""
    meta = RunMeta.from_json(run_meta)
    inputs = load_task(bundle_path, references_dir, catalog)
    efficiency = efficiency_flow(bundle_path, references_dir, catalog, limit)
    results = judge_task(meta, inputs, efficiency["checks"], efficiency["workloads"])
    paths = write_task(run_dir, inputs, results, meta, key_dir, templates_dir)
    return {"outcome": results["outcome"], "results": results, "paths": paths}
