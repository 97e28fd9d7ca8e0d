"""What a certification does only to finish sooner, in one place: without any of it the results and reports are the
same."""

from __future__ import annotations

import gc
import logging
import sys
from contextlib import ExitStack
from types import TracebackType
from typing import Any

from clustercert.catalog import LoadedCatalog
from clustercert.heap import paused, settle, settling
from clustercert.report.ahead import ChartsAhead, usable_cores
from clustercert.runs.folder import Charts, Inputs, ManifestPass

__all__ = ["IMPORT_STEPS", "Tactics"]

log = logging.getLogger(__name__)

# The phases after which the heap settles: those that parse the bulk of a cluster's evidence (every collective,
# then the telemetry); the judging steps settle too (`Tactics.stage_done`).
_SETTLED_AFTER = frozenset({"scaling", "resilience"})


class Tactics:
    """The run-time tactics of one certification, entered around its flow:

    - the heap settles after each large stage (`clustercert.heap`): later collections do not traverse what the run
      keeps; everything frozen is given back to the collector when the run ends;
    - the report's charts are drawn in a process of their own on the other core (`ChartsAhead`), each phase's as
      soon as that phase is judged, while the run goes on;
    - the manifest's second pass over the evidence starts once the phases have read it (`ManifestPass`), so that a
      cluster's telemetry is hashed again while the run validates, judges and renders, not after; it is ended by
      the report's writing, or here when the run fails before it;
    - the report's libraries are imported while the charts are drawn, when the Prefect server answered before the
      import steps (`IMPORT_STEPS`) got to them."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._ahead: ChartsAhead | None = None
        self._pass: ManifestPass | None = None
        self._rules: dict[str, Any] | None = None

    def __enter__(self) -> Tactics:
        self._stack.enter_context(settling())
        self._ahead = _charts_ahead()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        try:
            if self._pass is not None:
                self._pass.stop()  # no thread is left reading the bundle (the report's writing has ended it)
            if self._ahead is not None:
                self._ahead.close()
        finally:
            self._stack.close()

    def phase_judged(self, phase: str, section: dict[str, Any], catalog: LoadedCatalog) -> None:
        """`phase`'s charts drawn from its section and the catalog's rules while the next phase runs."""
        if self._ahead is not None:
            if self._rules is None:
                self._rules = catalog.spec.rules.model_dump(mode="json")
            self._ahead.send({"phases": {phase: section}, "rules": self._rules})
        if phase in _SETTLED_AFTER:
            settle()

    def evidence_read(self, inputs: Inputs) -> None:
        """The phases have read the evidence: the manifest's pass over it starts."""
        self._pass = ManifestPass(inputs)

    def stage_done(self) -> None:
        """What the stage built and keeps is settled (`clustercert.heap.settle`)."""
        settle()

    def before_report(self) -> tuple[Charts, ManifestPass | None]:
        """What the report takes from the tactics: the charts drawn ahead (a call, made where the report first needs
        them: after the key, the run folder's first files and the redacted copy's second process) and the manifest's
        pass."""
        if self._ahead is not None and "weasyprint" not in sys.modules:
            _import_report()  # while the charts are drawn, before the report waits for them
        return (self._ahead.drawn if self._ahead is not None else None), self._pass


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
        # Prefect's first flow run records its parameters with FastAPI's encoder, imported there: the first step,
        # since the certify flow starts as soon as the server answers
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
    """What an import built frozen, with no collection first, before the collector resumes: the libraries' objects
    are kept to the end, and a full collection here would traverse them all to find next to nothing to free (what
    it would free is freed when `settling()` unfreezes all). Frozen at the end of each import, not after all of
    them: the first collection after a pause would traverse what the import before had built."""
    gc.freeze()


# What a certification imports when it gets there (FastAPI's encoder for the first flow run, Great Expectations for
# validation, WeasyPrint and matplotlib's font manager for the report), in that order, each step freezing what it
# built, so that the run's later collections do not traverse the libraries' objects again. `prefect_runtime` takes
# these steps while the temporary Prefect server starts, in a wait rather than on the run's path; the flow's
# `settling()` gives the frozen objects back to the collector at its end. Only a certification (certify, rerun)
# takes them: `--help`, `verify` and `evidence parse` import none of them.
IMPORT_STEPS = (_import_flow_run, _import_great_expectations, _import_report)
