"""The `certify` flow: load the evidence, judge each phase, validate, judge the run, write the report, publish."""

# No `from __future__ import annotations`: Prefect validates a flow's parameters against its annotations, and a flow
# run a deployment serves gets the flow's function by value (cloudpickle), without this module's globals to resolve
# a name in.

from typing import Any

from prefect import Flow, flow
from prefect.client.schemas.objects import State
from prefect.utilities.annotations import opaque

from clustercert.runs.evidence import EvidenceSet
from clustercert.runs.results import RunMeta
from flows.artifacts import publish_artifacts_task
from flows.outcome import outcome_state
from flows.phases import efficiency_flow, health_flow, resilience_flow, scaling_flow
from flows.progress import report
from flows.request import CertifyRequest
from flows.runners import bulky, handed_back, on_runner, received
from flows.tactics import Tactics
from flows.tasks import gate_task, judge_task, load_task, validate_task, write_task

__all__ = ["PHASES", "certify_flow"]

# Each phase's subflow, in order, and what its progress line says it reads.
PHASES: tuple[tuple[Flow[..., opaque], str], ...] = (
    (efficiency_flow, "training logs"),
    (scaling_flow, "training runs and collectives"),
    (resilience_flow, "the long run"),
    (health_flow, "each node's health outputs"),
)


@flow(name="certify", flow_run_name="{request.run_meta[run_id]}")
def certify_flow(request: CertifyRequest) -> State[opaque]:
    """Certify the bundle `request` names into its run folder, the run named by its run id; returns the outcome,
    results and report paths (through `flows.runners.handed_back`: take them out with `flows.runners.received`) in a
    final state named by the outcome (`flows.outcome`).

    Large task arguments go through `flows.runners.bulky` (Prefect does not walk them); what the run does only to
    finish sooner is `flows.tactics`."""
    report("load", request.bundle_path)
    # each file parsed once for the phases and the validation; the tactics end (no thread left reading the bundle)
    # before the evidence set forgets what was read
    with load_task(request) as evidence, Tactics() as tactics:
        phases = _judge_phases(request, evidence, tactics)
        tactics.evidence_read(evidence.inputs)
        report("validate", "expectation suites over every table")
        validation = validate_task(bulky(evidence))
        evidence.release()  # every reader of the parsed files is done; what was read stays recorded
        checks = gate_task(bulky([c for p in phases.values() for c in p["checks"]]), bulky(validation))
        tactics.stage_done()
        report("judge", f"{len(checks)} checks")
        sections = {name: p["section"] for name, p in phases.items()}
        results = judge_task(RunMeta.from_json(request.run_meta), bulky(evidence.inputs), bulky(checks),
                             bulky(phases["efficiency"]["workloads"]), bulky(sections))
        tactics.stage_done()
        report("report", f"render and sign into {request.run_dir}")
        charts, manifest_pass = tactics.before_report()
        paths = write_task(request, bulky(evidence.inputs), bulky(results), bulky(validation), bulky(charts),
                           bulky(manifest_pass))
        report("publish", "Prefect artifacts")
        publish_artifacts_task(bulky(results), paths)
    return outcome_state(results, handed_back({"outcome": results["outcome"], "results": results, "paths": paths}))


def _judge_phases(request: CertifyRequest, evidence: EvidenceSet, tactics: Tactics) -> dict[str, dict[str, Any]]:
    """Each phase judged in its subflow, in order (its tasks on the Dask scheduler `request.dask_address` when
    one is given), from the evidence set: by phase name, its checks, section and (efficiency) workloads."""
    judged: dict[str, dict[str, Any]] = {}
    for phase, reads in PHASES:
        report(phase.name, reads)
        judged[phase.name] = received(on_runner(phase, request.dask_address)(request.bundle_path, evidence))
        tactics.phase_judged(phase.name, judged[phase.name]["section"], evidence.catalog)
    return judged
