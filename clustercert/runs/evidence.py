"""One certification's evidence set: the loaded bundle and catalog with their files parsed once, shared by the
phases and the validation."""

from __future__ import annotations

import threading
from types import TracebackType

from clustercert.catalog import LoadedCatalog
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, RunSpec
from clustercert.evidence.guards import forget_reads
from clustercert.evidence.parse import ParsedBundle, ParsedOnce, parse_bundle
from clustercert.parsers.llmb_config import LlmbConfig, read_llmb_config
from clustercert.phases.evidence import parse_run
from clustercert.runs.folder import Inputs

__all__ = ["EvidenceSet"]

# Certifications of this process inside their evidence set's block: the records of what was read (a registry of
# the whole process) are forgotten when the last one ends, so a certification beside another keeps its own.
_OPEN = [0]
_OPEN_LOCK = threading.Lock()


class EvidenceSet:
    """What a certification judges: the load (`inputs`: bundle, catalog, the digests of the load) and its files,
    each parsed once on first use (by a phase or the validation: `for_phase`, `for_validation`) and the same object
    handed to every later reader. `release()` drops the parses once the validation is done (a cluster's telemetry
    columns are not kept through the rendering); the records of what was read stay to the end of the `with` block,
    which the run folder's last check compares with the files, then go.

    Handed to the phases by reference. Sent to another process (a Dask worker: `certify --dask`) it arrives as the
    same load with nothing parsed yet: the worker's tasks parse the files they read there."""

    __slots__ = ("_parsed", "inputs", "limit")  # no __dict__: nothing walks or copies the parses by accident

    def __init__(self, inputs: Inputs, limit: int) -> None:
        self.inputs = inputs
        self.limit = limit
        self._parsed = ParsedOnce()

    @property
    def bundle(self) -> LoadedBundle:
        return self.inputs.bundle

    @property
    def catalog(self) -> LoadedCatalog:
        return self.inputs.catalog

    def for_phase(self, run: RunSpec) -> object | EvidenceError:
        """The run as the phases read it (`clustercert.phases.evidence.parse_run`)."""
        return parse_run(self.bundle, run, self.limit, self._parsed)

    def job_configs(self) -> dict[str, LlmbConfig | EvidenceError]:
        """llmb-run's record of each run's job (bundle.yaml runs[].config), by run id; an unusable one as its
        error."""
        out: dict[str, LlmbConfig | EvidenceError] = {}
        for run in self.bundle.spec.runs:
            if run.config is None:
                continue
            try:
                out[run.id] = self._parsed(read_llmb_config, self.bundle.resolve(run.config, entry="config"),
                                           self.bundle.shown(run.config))
            except EvidenceError as exc:
                out[run.id] = exc
        return out

    def for_validation(self) -> ParsedBundle:
        """Every run's files as the validation reads them (`clustercert.evidence.parse.parse_bundle`)."""
        return parse_bundle(self.bundle, self.limit, self._parsed)

    def parsed_files(self) -> int:
        """How many parses the set holds now."""
        return len(self._parsed)

    def release(self) -> None:
        """Drop every parse; what was read stays recorded (see the class)."""
        self._parsed.clear()

    def __enter__(self) -> EvidenceSet:
        with _OPEN_LOCK:
            _OPEN[0] += 1
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()
        with _OPEN_LOCK:
            _OPEN[0] -= 1
            last = not _OPEN[0]
        if last:
            forget_reads()  # a long-lived process keeps no evidence; the next certification compares its own reads

    def __reduce__(self) -> tuple[type[EvidenceSet], tuple[Inputs, int]]:
        return EvidenceSet, (self.inputs, self.limit)
