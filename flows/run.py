"""The `run` flow: run a certification plan's jobs on Slurm (each job a task), write bundle.yaml, seal it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from prefect import flow, task

from clustercert.evidence.bundle import load_bundle, seal_bundle
from clustercert.runner.execute import Runner, expand_jobs, write_bundle
from clustercert.runner.plan import load_plan
from clustercert.runner.slurm import Slurm
from flows.caching import UNCACHED

__all__ = ["run_flow"]


def _runner(plan_path: str, bundle_dir: str, log: bool = True) -> Runner:
    plan = load_plan(Path(plan_path))
    slurm = Slurm(dt.datetime.now().astimezone().tzinfo or dt.UTC)
    return Runner(plan, Path(bundle_dir), slurm, lambda: dt.datetime.now(dt.UTC),
                  (lambda m: print(f"run: {m}", flush=True)) if log else (lambda m: None))


@task(name="cluster-nodes", retries=2, retry_delay_seconds=2, **UNCACHED)
def nodes_task(plan_path: str, bundle_dir: str) -> list[str]:
    return _runner(plan_path, bundle_dir).slurm.nodes()


@task(name="slurm-job", **UNCACHED)
def job_task(plan_path: str, bundle_dir: str, job_id: str, nodelist: list[str] | None, run_id: str) -> dict[str, Any]:
    runner = _runner(plan_path, bundle_dir)
    job = next(j for j in runner.plan.jobs if j.id == job_id)
    return runner.run_job(job, nodelist, run_id).to_json()


@task(name="write-bundle", **UNCACHED)
def bundle_task(plan_path: str, bundle_dir: str, records: list[dict[str, Any]], nodes: list[str]) -> str:
    runner = _runner(plan_path, bundle_dir)
    by_id = {j.id: j for j in runner.plan.jobs}
    state = runner.load()
    pairs = [(by_id[r["plan_job"]], state[r["id"]]) for r in records]
    path = write_bundle(runner.plan, pairs, Path(bundle_dir), nodes)
    seal_bundle(load_bundle(path.parent))
    return str(path)


def _cancel_jobs(flow: Any, flow_run: Any, state: Any) -> None:
    """On cancellation or crash: nothing this run submitted stays queued."""
    params = flow_run.parameters
    runner = _runner(params["plan_path"], params["bundle_dir"])
    for job in runner.submitted_ids():
        runner.slurm.cancel(job)


@flow(name="run", on_cancellation=[_cancel_jobs], on_crashed=[_cancel_jobs])
def run_flow(plan_path: str, bundle_dir: str) -> dict[str, Any]:
    """Run every job of the plan at `plan_path` into the bundle folder `bundle_dir`, then write and seal it."""
    plan = load_plan(Path(plan_path))
    Path(bundle_dir).mkdir(parents=True, exist_ok=True)
    nodes = nodes_task(plan_path, bundle_dir)
    records = []
    for job, nodelist, run_id in expand_jobs(plan, nodes):
        record = job_task.with_options(name=f"slurm-job-{run_id}")(plan_path, bundle_dir, job.id, nodelist, run_id)
        records.append({**record, "plan_job": job.id})
    bundle = bundle_task(plan_path, bundle_dir, records, nodes)
    return {"bundle": bundle, "jobs": records}
