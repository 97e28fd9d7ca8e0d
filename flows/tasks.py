"""Prefect tasks: each a few lines around one clustercert domain function."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from prefect import task

from clustercert.attest.signing import load_signing_key
from clustercert.errors import EvidenceError
from clustercert.parsers import TrainingLog
from clustercert.phases.evidence import parse_run
from clustercert.runs.folder import Charts, Inputs, ManifestPass, check_seal, load_inputs, write_run_folder
from clustercert.runs.results import RunMeta, build_results
from clustercert.settings import load_settings
from clustercert.validation.suites import ValidationReport, apply_gating, validate_bundle
from clustercert.verdicts import Check
from flows.caching import CACHED, UNCACHED
from flows.progress import current_stage, report

__all__ = ["gate_task", "judge_task", "load_task", "parse_training_task", "validate_task", "write_task"]


@task(name="load-inputs", retries=2, retry_delay_seconds=1, **UNCACHED)
def load_task(bundle_path: str, references_dir: str, catalog: str | None) -> Inputs:
    # once per process (see load_inputs): certify's CLI has loaded and hashed it already; a rerun's is hashed here
    inputs = load_inputs(Path(bundle_path), Path(references_dir), catalog, progress=report)
    check_seal(inputs.bundle, inputs.digests)
    return inputs


@task(name="parse-training-log", retries=2, retry_delay_seconds=1, **CACHED)
def parse_training_task(inputs: Inputs, run_id: str, limit: int) -> TrainingLog | EvidenceError:
    """One training log (the efficiency phase's task per log on a Dask cluster), read as `parse_runs_task` reads
    it on threads: the same function, so either runner gives the same results."""
    run = next(r for r in inputs.bundle.spec.runs if r.id == run_id)
    report(current_stage(run.phase.value), f"parse {run.id} ({run.files[0]})")
    return parse_run(inputs.bundle, run, limit)  # type: ignore[return-value]  # a training run: its log


@task(name="validate", **UNCACHED)
def validate_task(inputs: Inputs, limit: int) -> ValidationReport:
    from clustercert.evidence.parse import parse_bundle

    parsed = parse_bundle(inputs.bundle, limit)
    return validate_bundle(inputs.bundle, inputs.facts, parsed, checks_dir=load_settings().checks_dir,
                           told=functools.partial(report, "validate"))


@task(name="gate", **UNCACHED)
def gate_task(checks: list[Check], report: ValidationReport) -> list[Check]:
    return apply_gating(checks, report)


# Not cached: its key would hold the run's metadata (a new run id and start time each run), so no run could ever find
# a result stored under it, while the key (every check, workload and phase section walked and serialised) and the
# stored result (the whole results.json, pickled) cost a 512-GPU certification about 2 s each run.
@task(name="judge", **UNCACHED)
def judge_task(
    meta: RunMeta, inputs: Inputs, checks: list[Check], workloads: list[dict[str, Any]],
    sections: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    return build_results(meta, inputs.bundle, inputs.catalog, checks, workloads, sections)


@task(name="render-and-sign", **UNCACHED)
def write_task(run_dir: str, inputs: Inputs, results: dict[str, Any], meta: RunMeta, key_dir: str,
               templates_dir: str, validation: ValidationReport | None = None, redact: bool = False,
               charts: Charts = None, manifest_pass: ManifestPass | None = None) -> dict[str, str]:
    # The passphrase is read here, never passed as a parameter (Prefect records parameters). A manifest pass the
    # flow started is ended by write_run_folder, or by the flow when this fails before it.
    key = load_signing_key(Path(key_dir), load_settings().key_passphrase)
    paths = write_run_folder(Path(run_dir), inputs, results, meta, key, Path(templates_dir),
                             validation=None if validation is None else validation.to_json(), redact=redact,
                             charts=charts, progress=functools.partial(report, "report"),
                             manifest_pass=manifest_pass)
    return {k: str(v) for k, v in paths.items()}
