"""One subflow per phase: parse what the phase needs from the certification's evidence set, then judge it."""

# No `from __future__ import annotations`: Prefect validates a flow's parameters against its annotations, and a flow
# run a deployment serves gets the flow's function by value (cloudpickle), without this module's globals to resolve
# a name in.

import functools
from typing import Any

from prefect import flow, task
from prefect.utilities.annotations import opaque

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import Phase, RunKind
from clustercert.evidence.guards import reading_told, told_reading
from clustercert.heap import keep, paused
from clustercert.parsers import TrainingLog
from clustercert.phases import PhaseResult
from clustercert.phases.efficiency import EfficiencyResult, judge_efficiency
from clustercert.phases.health import judge_health_phase, phase_asked
from clustercert.phases.resilience import judge_resilience
from clustercert.phases.scaling import judge_scaling
from clustercert.runs.evidence import EvidenceSet
from clustercert.runs.folder import Inputs
from clustercert.runs.references import HEALTH_RULES, MLPERF_BENCHMARKS, judged_with
from flows.caching import CACHED, UNCACHED, persisted
from flows.progress import current_stage, report
from flows.runners import Parcel, bulky, handed_back, on_threads, received
from flows.tasks import parse_training_task

__all__ = ["efficiency_flow", "health_asked", "health_flow", "resilience_flow", "scaling_flow"]


@task(name="parse-runs", retries=2, retry_delay_seconds=1, **CACHED)
def parse_runs_task(evidence: EvidenceSet, run_ids: list[str]) -> Parcel:
    """The runs' parsed evidence by id (one task for a phase's many small files: each task run costs Prefect its
    API calls, events, cache lookup and persisted result), in a Parcel that Prefect does not walk (`received`
    takes it out)."""
    wanted = set(run_ids)
    runs = [r for r in evidence.bundle.spec.runs if r.id in wanted]
    out: dict[str, object] = {}
    stage = current_stage(runs[0].phase.value) if runs else ""
    with paused():  # what is parsed is kept, and acyclic: no collection traverses it again file after file
        for number, r in enumerate(runs, start=1):
            said = f"parse {r.id} ({r.files[0]}), {number:,} of {len(runs):,}"
            report(stage, said)
            # a long read (a cluster's telemetry: minutes) says how far it is every few seconds
            with told_reading(reading_told(report, stage, said)):
                out[r.id] = evidence.for_phase(r)
        keep()  # kept to the run's end (released after validation): no collection need traverse it
    return Parcel(out)


@task(name="judge-efficiency", **CACHED)
def judge_efficiency_task(inputs: Inputs, logs: dict[str, TrainingLog | EvidenceError],
                          mlperf: dict[str, object], configs: dict[str, Any] | None = None) -> EfficiencyResult:
    report(current_stage("efficiency"), "judge each workload's step times against its reference")
    # the MLPerf benchmarks' FLOPs loaded with the bundle: references/mlperf-benchmarks.yaml, or a re-run's copy
    benchmarks = judged_with(inputs.references, MLPERF_BENCHMARKS) if mlperf else None
    with paused():  # builds what it keeps: no collection traverses the parsed evidence again
        result = judge_efficiency(inputs.bundle.spec, inputs.catalog, logs, mlperf, configs, benchmarks)
        keep()  # the phase's result is kept to the report
    return result


@flow(name="efficiency")
def efficiency_flow(bundle_path: str, evidence: EvidenceSet) -> opaque:
    """Each workload's step times against its reference, and MLPerf's time to train, from the training logs.

    `bundle_path` names the bundle among the flow run's recorded parameters (the API and the UI find a bundle's
    phase runs by it); `evidence` is the certification's evidence set, by reference."""
    runs = [r.id for r in evidence.bundle.spec.runs if r.phase is Phase.EFFICIENCY and r.kind is RunKind.TRAINING]
    mlperf_runs = [r.id for r in evidence.bundle.spec.runs if r.kind is RunKind.MLPERF]
    if on_threads():
        logs, mlperf = _parsed_on_threads(evidence, runs, mlperf_runs)
    else:
        # A task per log, submitted, so that the Dask cluster (`certify --dask`) parses them in parallel.
        futures = {run_id: persisted(parse_training_task, evidence.inputs, [run_id]).submit(bulky(evidence), run_id)
                   for run_id in runs}
        logs = {run_id: future.result() for run_id, future in futures.items()}
        mlperf = _parsed(evidence, mlperf_runs) if mlperf_runs else {}
    configs = evidence.job_configs()  # llmb-run's record of each job, where the bundle names one (small files)
    result = judge_efficiency_task(bulky(evidence.inputs), bulky(logs), bulky(mlperf), bulky(configs))
    return handed_back({"checks": result.checks, "workloads": [w.to_json() for w in result.workloads],
                        "section": result.section()})


def _parsed_on_threads(evidence: EvidenceSet, runs: list[str],
                       mlperf_runs: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The training logs and MLPerf runs in one task, as the other phases parse theirs: threads parse one log at a
    time anyway (the parsers hold the GIL), and each task run costs Prefect its API calls, events, cache lookup and
    persisted result (a task per log also left the threads racing to the first cache key's code hash)."""
    wanted = [*runs, *mlperf_runs]
    parsed = _parsed(evidence, wanted) if wanted else {}
    return {run_id: parsed[run_id] for run_id in runs}, {run_id: parsed[run_id] for run_id in mlperf_runs}


def _parsed(evidence: EvidenceSet, run_ids: list[str]) -> dict[str, Any]:
    """The runs' evidence parsed by `parse_runs_task` (its result persisted for a resumed run where small enough)."""
    return received(persisted(parse_runs_task, evidence.inputs, run_ids)(bulky(evidence), run_ids))


@task(name="judge-scaling", **UNCACHED)
def judge_scaling_task(inputs: Inputs, parsed: dict[str, object]) -> PhaseResult:
    report(current_stage("scaling"), "judge weak scaling, collective bandwidth and pairs")
    with paused():  # builds what it keeps: no collection traverses the parsed evidence again
        result = judge_scaling(inputs.bundle, inputs.catalog, parsed)
        keep()  # the phase's result is kept to the report
    return result


@task(name="judge-resilience", **UNCACHED)
def judge_resilience_task(inputs: Inputs, parsed: dict[str, object]) -> PhaseResult:
    with paused():  # builds what it keeps: no collection traverses the parsed evidence again
        result = judge_resilience(inputs.bundle, inputs.catalog, parsed,
                                  functools.partial(report, current_stage("resilience")))
        keep()  # the phase's result is kept to the report
    return result


@flow(name="scaling")
def scaling_flow(bundle_path: str, evidence: EvidenceSet) -> opaque:
    """Weak scaling from the training runs at every GPU count, collective bandwidth per scope, degraded pairs
    (parameters as `efficiency_flow`'s)."""
    runs = [r.id for r in evidence.bundle.spec.runs
            if (r.kind is RunKind.TRAINING and r.phase in (Phase.SCALING, Phase.EFFICIENCY))
            or (r.kind is RunKind.COLLECTIVE)]
    result = judge_scaling_task(bulky(evidence.inputs), bulky(_parsed(evidence, runs)))
    return handed_back({"checks": result.checks, "section": result.section})


@flow(name="resilience")
def resilience_flow(bundle_path: str, evidence: EvidenceSet) -> opaque:
    """Goodput, stragglers, stalls and restarts of the long run from its log, events, sacct, timings, telemetry
    (parameters as `efficiency_flow`'s)."""
    runs = [r.id for r in evidence.bundle.spec.runs if r.phase is Phase.RESILIENCE]
    result = judge_resilience_task(bulky(evidence.inputs), bulky(_parsed(evidence, runs)))
    return handed_back({"checks": result.checks, "section": result.section})


def health_asked(evidence: EvidenceSet) -> bool:
    """Whether the health phase has anything to judge (`clustercert.phases.health.phase_asked`)."""
    return phase_asked(evidence.bundle, evidence.catalog)


@task(name="judge-health", **UNCACHED)
def judge_health_task(inputs: Inputs, parsed: dict[str, object]) -> PhaseResult:
    report(current_stage("health"), "judge each node's GPUs, NVLinks and ports by the health rules")
    # the rules loaded with the bundle: references/health-rules.yaml, or a re-run's copy in its run folder
    rules = judged_with(inputs.references, HEALTH_RULES)
    with paused():  # builds what it keeps: no collection traverses the parsed evidence again
        result = judge_health_phase(inputs.bundle, inputs.catalog, parsed, rules)
        keep()  # the phase's result is kept to the report
    return result


@flow(name="health")
def health_flow(bundle_path: str, evidence: EvidenceSet) -> opaque:
    """Each node's health from its nvidia-smi, DCGM, InfiniBand, NVLink, fabric-manager and kernel-log outputs or
    the Exemplar prescreen (parameters as `efficiency_flow`'s); no section where the bundle has no health run and
    the catalog asks for none."""
    runs = [r.id for r in evidence.bundle.spec.runs if r.phase is Phase.HEALTH]
    result = judge_health_task(bulky(evidence.inputs), bulky(_parsed(evidence, runs) if runs else {}))
    return handed_back({"checks": result.checks, "section": result.section or None})
