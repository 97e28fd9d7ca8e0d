"""The `certify` flow: load, judge each phase in its subflow, collect the results, report, sign (large task
arguments through `flows.runners.bulky`)."""

from __future__ import annotations

import gc
import logging
import sys
from typing import Any

from prefect import flow
from prefect.utilities.annotations import opaque

from clustercert.evidence.parse import holding_parsed, release_parsed
from clustercert.heap import paused, settle, settling
from clustercert.report.ahead import ChartsAhead, usable_cores
from clustercert.runs.folder import Inputs, ManifestPass
from clustercert.runs.results import RunMeta
from flows.artifacts import publish_artifacts_task
from flows.phases import efficiency_flow, resilience_flow, scaling_flow
from flows.progress import report
from flows.runners import bulky, handed_back, on_runner, received
from flows.tasks import gate_task, judge_task, load_task, validate_task, write_task

__all__ = ["certify_flow"]

log = logging.getLogger(__name__)


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
    dask_address: str | None = None,
    redact: bool = False,
) -> opaque:
    """Certify the bundle at `bundle_path` into `run_dir`; returns the outcome, results and report paths (through
    `flows.runners.handed_back`: take them out with `flows.runners.received`).

    With `dask_address` (a running Dask scheduler) each phase subflow runs its tasks on that cluster."""
    # each file is parsed once for the phases and the validation, nothing is kept after; each stage's objects settle
    with holding_parsed(), settling():
        return _certify(bundle_path, run_dir, run_meta, key_dir, references_dir, templates_dir, catalog, limit,
                        dask_address, redact)


def _certify(bundle_path: str, run_dir: str, run_meta: dict[str, Any], key_dir: str, references_dir: str,
             templates_dir: str, catalog: str | None, limit: int, dask_address: str | None,
             redact: bool) -> opaque:
    # the charts are drawn from the phases' sections and the rules alone: on the other core while the run validates
    ahead = _charts_ahead()
    try:
        return _stages(bundle_path, run_dir, run_meta, key_dir, references_dir, templates_dir, catalog, limit,
                       dask_address, redact, ahead)
    finally:
        if ahead is not None:
            ahead.close()


def _stages(bundle_path: str, run_dir: str, run_meta: dict[str, Any], key_dir: str, references_dir: str,
            templates_dir: str, catalog: str | None, limit: int, dask_address: str | None, redact: bool,
            ahead: ChartsAhead | None) -> opaque:
    meta = RunMeta.from_json(run_meta)
    report("load", bundle_path)
    inputs = load_task(bundle_path, references_dir, catalog)
    rules = inputs.catalog.spec.rules.model_dump(mode="json")
    report("efficiency", "training logs")
    efficiency = received(on_runner(efficiency_flow, dask_address)(bundle_path, references_dir, catalog, limit))
    _draw_ahead(ahead, "efficiency", efficiency["section"], rules)
    report("scaling", "training runs and collectives")
    scaling = received(on_runner(scaling_flow, dask_address)(bundle_path, references_dir, catalog, limit))
    _draw_ahead(ahead, "scaling", scaling["section"], rules)
    settle()
    report("resilience", "the long run")
    resilience = received(on_runner(resilience_flow, dask_address)(bundle_path, references_dir, catalog, limit))
    _draw_ahead(ahead, "resilience", resilience["section"], rules)
    settle()
    sections = {"efficiency": efficiency["section"], "scaling": scaling["section"],
                "resilience": resilience["section"]}
    # The manifest's pass over the evidence starts once the phases have read it: a cluster's telemetry is hashed
    # again on its thread while the run validates, judges and renders, not after them (about 40 s of a 4,096-GPU
    # run). Ended by the report's writing, or here when the run fails before it.
    manifest_pass = ManifestPass(inputs)
    try:
        return _report(meta, inputs, run_dir, key_dir, templates_dir, limit, redact, ahead, manifest_pass,
                       efficiency, scaling, resilience, sections)
    except BaseException:
        manifest_pass.stop()
        raise


def _report(meta: RunMeta, inputs: Inputs, run_dir: str, key_dir: str, templates_dir: str, limit: int,
            redact: bool, ahead: ChartsAhead | None, manifest_pass: ManifestPass, efficiency: dict[str, Any],
            scaling: dict[str, Any], resilience: dict[str, Any], sections: dict[str, Any]) -> opaque:
    report("validate", "expectation suites over every table")
    validation = validate_task(bulky(inputs), limit)
    release_parsed()  # every reader of the parsed evidence is done; what was read stays recorded for the last check
    checks = gate_task(bulky([*efficiency["checks"], *scaling["checks"], *resilience["checks"]]), bulky(validation))
    settle()
    report("judge", f"{len(checks)} checks")
    results = judge_task(meta, bulky(inputs), bulky(checks), bulky(efficiency["workloads"]), bulky(sections))
    settle()
    report("report", f"render and sign into {run_dir}")
    if ahead is not None and "weasyprint" not in sys.modules:
        # the server answered before the report's import step was taken: imported while the charts are drawn,
        # before the report waits for them, not after (1.3 s of a run that met it in the report's software record)
        _import_report()
    # the charts are waited for where the report first needs them, after the key, the run folder's first files and
    # the redacted copy's second process (`ahead.drawn`, called there)
    paths = write_task(run_dir, bulky(inputs), bulky(results), meta, key_dir, templates_dir, bulky(validation),
                       redact=redact, charts=bulky(ahead.drawn if ahead is not None else None),
                       manifest_pass=bulky(manifest_pass))
    report("publish", "Prefect artifacts")
    publish_artifacts_task(bulky(results), paths)
    return handed_back({"outcome": results["outcome"], "results": results, "paths": paths})


def _draw_ahead(ahead: ChartsAhead | None, phase: str, section: dict[str, Any], rules: dict[str, Any]) -> None:
    """A phase's charts drawn on the other core as soon as the phase is done, while the next one runs."""
    if ahead is not None:
        ahead.send({"phases": {phase: section}, "rules": rules})


def _charts_ahead() -> ChartsAhead | None:
    """The chart drawing process, on a machine with a core for it; None where it cannot start (no process or pipe
    left to this user): the report draws the charts, as on one core."""
    if usable_cores() < 2:
        return None
    try:
        return ChartsAhead()
    except OSError as exc:
        log.warning("charts drawn ahead: no child process (%s); the report draws them", exc)
        return None


def _import_flow_run() -> None:
    with paused():
        # Prefect's first flow run records its parameters with FastAPI's encoder, imported there (0.2-0.3 s here):
        # the first step, since the certify flow starts as soon as the server answers
        import fastapi.encoders  # noqa: F401

        _freeze_imports()


def _import_great_expectations() -> None:
    from clustercert.validation.suites import import_great_expectations

    with paused():  # an import keeps what it builds: collections during it find nothing to free
        import_great_expectations()
        _freeze_imports()


def _import_report() -> None:
    with paused():
        import matplotlib.font_manager  # noqa: F401
        import weasyprint  # noqa: F401

        _freeze_imports()


def _freeze_imports() -> None:
    """What the imports built frozen, with no collection first, before the collector resumes: the libraries' objects
    (340,000) are kept to the end. A full collection here found 525 objects to free, no memory given back, in 0.29 s
    of the run's start (measured after both imports); the garbage it would free is freed when `settling()` unfreezes
    all. Frozen at the end of each import, not after both: the first collection after the pause traversed all that
    the import before had built (0.15 s, found 1,193 objects to free, between the two imports of the sample's
    certification: gc.callbacks, 16:31 UTC)."""
    gc.freeze()


# What a certification imports when it gets there (FastAPI's encoder for the first flow run, Great Expectations for
# validation, WeasyPrint and matplotlib's font manager for the report), in that order, each step freezing what it
# built: the libraries' objects (hundreds of thousands) are frozen, so the run's later collections do not traverse
# them again (the sample's first one in the flow took 0.37 s, on the run's path). `prefect_runtime` takes these
# steps while the temporary Prefect server starts, so these seconds are spent in a wait instead of on the run's path;
# the flow's `settling()` gives the frozen objects back to the collector at its end. Only a certification (certify,
# rerun) takes them: `--help`, `verify` and `evidence parse` import none of them.
IMPORT_STEPS = (_import_flow_run, _import_great_expectations, _import_report)
