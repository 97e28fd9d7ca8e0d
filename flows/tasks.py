"""Prefect tasks: each a few lines around one clustercert domain function."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from prefect import task

from clustercert.attest.signing import load_signing_key
from clustercert.errors import EvidenceError
from clustercert.evidence.window import check_stamps
from clustercert.parsers import TrainingLog
from clustercert.runs.evidence import EvidenceSet
from clustercert.runs.folder import (
    Charts,
    GivenFiles,
    Inputs,
    ManifestPass,
    Rendering,
    RunRecord,
    check_seal,
    load_inputs,
    write_run_folder,
)
from clustercert.runs.results import RunMeta, build_results
from clustercert.settings import load_settings
from clustercert.validation.suites import ValidationReport, apply_gating, validate_bundle
from clustercert.verdicts import Check
from flows.caching import CACHED, UNCACHED
from flows.progress import current_stage, report
from flows.request import CertifyRequest

__all__ = ["gate_task", "judge_task", "load_task", "parse_training_task", "validate_task", "write_task"]


@task(name="load-inputs", retries=2, retry_delay_seconds=1, **UNCACHED)
def load_task(request: CertifyRequest) -> EvidenceSet:
    """The certification's evidence set: the bundle and catalog loaded (once per process, see `load_inputs`:
    certify's command line has loaded and hashed them already; a rerun's are hashed here), nothing parsed yet."""
    inputs = load_inputs(Path(request.bundle_path), Path(request.references_dir), request.catalog, progress=report,
                         given=GivenFiles(request.baselines, request.references))
    check_seal(inputs.bundle, inputs.digests)
    check_stamps(inputs.bundle, RunMeta.from_json(request.run_meta).started())
    return EvidenceSet(inputs, request.limit)


@task(name="parse-training-log", retries=2, retry_delay_seconds=1, **CACHED)
def parse_training_task(evidence: EvidenceSet, run_id: str) -> TrainingLog | EvidenceError:
    """One training log (the efficiency phase's task per log on a Dask cluster), read as `parse_runs_task` reads
    it on threads: the same function, so either runner gives the same results."""
    run = next(r for r in evidence.bundle.spec.runs if r.id == run_id)
    report(current_stage(run.phase.value), f"parse {run.id} ({run.files[0]})")
    return evidence.for_phase(run)  # type: ignore[return-value]  # a training run: its log


@task(name="validate", **UNCACHED)
def validate_task(evidence: EvidenceSet) -> ValidationReport:
    return validate_bundle(evidence.bundle, evidence.inputs.facts, evidence.for_validation(),
                           checks_dir=load_settings().checks_dir, told=functools.partial(report, "validate"))


@task(name="gate", **UNCACHED)
def gate_task(checks: list[Check], report: ValidationReport) -> list[Check]:
    return apply_gating(checks, report)


# Not cached: its key would hold the run's metadata (a new run id and start time each run), so no run could ever find
# a result stored under it, while the key (every check, workload and phase section walked and serialised) and the
# stored result (the whole results.json, pickled) cost a cluster's certification seconds each run.
@task(name="judge", **UNCACHED)
def judge_task(
    meta: RunMeta, inputs: Inputs, checks: list[Check], workloads: list[dict[str, Any]],
    sections: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    return build_results(meta, inputs.bundle, inputs.catalog, checks, workloads, sections)


@task(name="render-and-sign", **UNCACHED)
def write_task(request: CertifyRequest, inputs: Inputs, results: dict[str, Any], validation: ValidationReport | None,
               charts: Charts = None, manifest_pass: ManifestPass | None = None) -> dict[str, str]:
    # The passphrase is read here, never passed as a parameter (Prefect records parameters). A manifest pass the
    # flow started is ended by write_run_folder, or by the flow when this fails before it.
    key = load_signing_key(Path(request.key_dir), load_settings().key_passphrase)
    record = RunRecord(results, RunMeta.from_json(request.run_meta),
                       None if validation is None else validation.to_json())
    rendering = Rendering(Path(request.templates_dir), redact=request.redact, charts=charts,
                          progress=functools.partial(report, "report"))
    paths = write_run_folder(Path(request.run_dir), inputs, record, key, rendering, manifest_pass)
    return {k: str(v) for k, v in paths.items()}
