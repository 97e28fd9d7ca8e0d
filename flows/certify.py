"""The `certify` flow: load, judge each phase in its subflow, collect the results, report, sign."""

from __future__ import annotations

from typing import Any

from prefect import flow

from clustercert.results import RunMeta
from flows.phases import efficiency_flow, resilience_flow, scaling_flow
from flows.tasks import judge_task, load_task, write_task

__all__ = ["certify_flow"]


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
    """Certify the bundle at `bundle_path` into `run_dir`; returns the outcome, results and report paths."""
    meta = RunMeta.from_json(run_meta)
    inputs = load_task(bundle_path, references_dir, catalog)
    efficiency = efficiency_flow(bundle_path, references_dir, catalog, limit)
    scaling = scaling_flow(bundle_path, references_dir, catalog, limit)
    resilience = resilience_flow(bundle_path, references_dir, catalog, limit)
    checks = [*efficiency["checks"], *scaling["checks"], *resilience["checks"]]
    results = judge_task(meta, inputs, checks, efficiency["workloads"], {
        "efficiency": efficiency["section"], "scaling": scaling["section"], "resilience": resilience["section"]})
    paths = write_task(run_dir, inputs, results, meta, key_dir, templates_dir)
    return {"outcome": results["outcome"], "results": results, "paths": paths}
