"""Parse one bundle run with the parser its kind and format name; an unusable file is kept as a finding."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, RunKind, RunSpec
from clustercert.evidence.parse import Reader, read_evidence
from clustercert.parsers import FORMATS, TRAINING_FORMATS, parse_resilience_log, parse_training_log
from clustercert.parsers.health import HEALTH_FORMATS
from clustercert.parsers.log_clock import LogClock, parse_log_clock
from clustercert.parsers.mlperf import listed_files, parse_mlperf_files
from clustercert.parsers.nemo_resilience import ResilienceLog
from clustercert.parsers.training import TrainingLog

__all__ = ["ResilienceRunLog", "parse_run"]

# Which formats each kind of run may use (bundle.yaml `format`).
_KIND_FORMATS: dict[RunKind, frozenset[str]] = {
    RunKind.TRAINING: frozenset(TRAINING_FORMATS),
    RunKind.RESILIENCE: frozenset({"nemo"}),
    RunKind.COLLECTIVE: frozenset({"nccl-tests"}),
    RunKind.SCHEDULER: frozenset({"sacct"}),
    RunKind.EVENTS: frozenset({"events"}),
    RunKind.RANK_TIMINGS: frozenset({"rank-timings"}),
    RunKind.TELEMETRY: frozenset({"dcgm"}),
    RunKind.MLPERF: frozenset({"mlperf"}),
    RunKind.HEALTH: frozenset(HEALTH_FORMATS),
}


@dataclass(frozen=True)
class ResilienceRunLog:
    """A training log across restarts: its steps, its resilience lines and its printed times."""

    training: TrainingLog
    resilience: ResilienceLog
    clock: LogClock


def parse_run(bundle: LoadedBundle, run: RunSpec, limit: int, read: Reader = read_evidence) -> object | EvidenceError:
    """The parsed first file of `run` (an MLPerf run: all its files) through `read`, or the error that stops it."""
    rel = run.files[0]
    display = bundle.shown(rel)
    allowed = _KIND_FORMATS[run.kind]
    if run.format not in allowed:
        return EvidenceError(
            f"{bundle.shown('bundle.yaml')} run '{run.id}'",
            f"expected a format for kind {run.kind.value} ({', '.join(sorted(allowed))}), got '{run.format}'. "
            "Fix bundle.yaml",
            field="format",
        )
    try:
        path = bundle.resolve(rel, entry=f"run '{run.id}' files")
        if run.kind is RunKind.TRAINING:
            return read(parse_training_log, path, display, run.format, limit=limit)
        if run.kind is RunKind.RESILIENCE:
            return ResilienceRunLog(
                training=read(parse_training_log, path, display, run.format, limit=limit),
                resilience=read(parse_resilience_log, path, display, limit=limit),
                clock=read(parse_log_clock, path, display, timezone=bundle.spec.timezone, limit=limit),
            )
        parser = FORMATS[run.format]
        parsed: object
        # The same options as the validation's parse (clustercert/evidence/parse.py): one parse serves both.
        if run.kind is RunKind.SCHEDULER:
            parsed = read(parser, path, display, limit=limit, timezone=bundle.spec.timezone, fields=run.fields)
        elif run.kind is RunKind.MLPERF and len(run.files) > 1:
            listed = listed_files([(bundle.resolve(f, entry=f"run '{run.id}' files"), bundle.shown(f))
                                   for f in run.files])
            parsed = parse_mlperf_files(listed, _common_folder(bundle, run), ruleset=run.ruleset, limit=limit)
        elif run.kind is RunKind.MLPERF:
            options: dict[str, object] = {"limit": limit}
            if run.ruleset is not None:
                options["ruleset"] = run.ruleset
            parsed = read(parser, path, display, **options)
        else:
            parsed = read(parser, path, display, limit=limit)
        return parsed
    except EvidenceError as exc:
        return exc


def _common_folder(bundle: LoadedBundle, run: RunSpec) -> str:
    """The folder that holds every file of a run listed file by file (how an MLPerf result is named)."""
    if (bundle.root / run.files[0]).is_dir():  # a result folder, with its system JSON from MLCommons' systems/
        return bundle.shown(run.files[0])
    parents = {str(PurePosixPath(f).parent) for f in run.files}
    return bundle.shown(parents.pop()) if len(parents) == 1 else f"run '{run.id}' files"
