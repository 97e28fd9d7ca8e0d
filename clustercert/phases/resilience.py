"""Resilience phase: long-run goodput, stragglers, stalls, automatic restarts, lost work, administrator actions."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import pyarrow.compute as pc

from clustercert.catalog import LoadedCatalog, Rules
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, Phase, RunKind, RunSpec
from clustercert.evidence.provenance import Span
from clustercert.metrics.goodput import (
    BadputKind,
    CheckpointSave,
    GoodputResult,
    Interruption,
    ReadinessGoodput,
    StepCompletion,
    Timeline,
    compute_ml_goodput,
    compute_readiness_goodput,
)
from clustercert.metrics.resilience import (
    Actor,
    Event,
    EventType,
    FaultRecovery,
    ResilienceReport,
    ResilienceRules,
    analyze_resilience,
)
from clustercert.metrics.stragglers import (
    Detection,
    RankPlace,
    RankScore,
    RankTimings,
    StragglerReport,
    StragglerRules,
    score_stragglers,
)
from clustercert.parsers.dcgm import Telemetry
from clustercert.parsers.events import EventLog
from clustercert.parsers.events import EventType as LogType
from clustercert.parsers.nemo_resilience import LogEventKind
from clustercert.parsers.rank_timings import RankTimings as RankTable
from clustercert.parsers.sacct import SacctResult
from clustercert.parsers.training import TrainingStep
from clustercert.phases import PhaseResult
from clustercert.phases.evidence import ResilienceRunLog
from clustercert.verdicts import Check, DeclaredCheck, Severity, Status, lacking

__all__ = ["JobTimeline", "build_job_timeline", "judge_resilience"]

PHASE = Phase.RESILIENCE.value
_RESTARTS = f"{PHASE}.restarts_automatic_on_healthy_nodes"
_ADMINS = frozenset({"operator", "admin", "administrator", "sysadmin", "human"})
_WINDOW_SAMPLES = 3  # straggler windows: this many sampled steps per GPU (a median that outvotes one outlier)


@dataclass(frozen=True)
class JobTimeline:
    """One job across its restarts, on a clock whose zero is the first job start (seconds)."""

    origin_epoch_s: float
    timeline: Timeline
    interruptions: tuple[Interruption, ...]
    events: tuple[Event, ...]
    segments: tuple[tuple[int, int], ...]  # [first, last) indices into timeline.steps per job start
    resumed_from: tuple[int | None, ...]  # per restart: the checkpoint step training resumed from
    note: str
    step_lines: tuple[int, ...] = ()  # per timeline.steps: the log line the step was read from


def _by(value: str | None) -> Actor:
    if value is None:
        return Actor.UNKNOWN
    return Actor.ADMINISTRATOR if value.lower() in _ADMINS else Actor.AUTOMATION


def _events_from_log(logs: Sequence[EventLog]) -> list[tuple[float, Event, LogType]]:
    """Job events of the cluster's own event log(s), as (epoch seconds, metric event, original type)."""
    mapping = {
        LogType.FAULT_INJECTED: EventType.FAULT, LogType.FAULT_DETECTED: EventType.DETECTED,
        LogType.STALL_DETECTED: EventType.DETECTED, LogType.STRAGGLER_DETECTED: EventType.DETECTED,
        LogType.JOB_STARTED: EventType.JOB_STARTED, LogType.JOB_FINISHED: EventType.JOB_STOPPED,
        LogType.RESTART_STARTED: EventType.JOB_STOPPED, LogType.NODE_EXCLUDED: EventType.NODE_EXCLUDED,
        LogType.NODE_ADDED: EventType.NODE_REPLACED, LogType.CHECKPOINT_SAVED: EventType.CHECKPOINT_SAVED,
        LogType.ADMIN_ACTION: EventType.ADMIN_ACTION,
    }
    out: list[tuple[float, Event, LogType]] = []
    for log in logs:
        for e in log.events:
            kind = mapping.get(e.type)
            if kind is None:
                continue
            nodes = e.extra.get("nodes") if e.extra else None
            by = Actor.ADMINISTRATOR if e.type is LogType.ADMIN_ACTION else _by(e.by)
            detail = e.detail or e.type.value
            out.append((e.ts.timestamp(), Event(
                time_s=0.0, type=kind, node=e.node, detail=detail, by=by,
                nodes=tuple(str(n) for n in nodes) if isinstance(nodes, list) else (), step=e.step,
                evidence=(Span(log.file, e.line, e.line, 1),),
            ), e.type))
    return out


def _segments(run: ResilienceRunLog) -> list[list[int]]:
    """Indices of the log's steps per job start: a new segment where a worker group starts or the step goes back."""
    steps = run.training.steps
    cuts = sorted({line for line, _ in run.clock.worker_starts}
                  | {e.line for e in run.resilience.events if e.kind is LogEventKind.RESTART})
    segments: list[list[int]] = []
    current: list[int] = []
    seen_cut = 0
    for i, s in enumerate(steps):
        passed = bisect.bisect_right(cuts, s.line)
        if passed != seen_cut and current:
            segments.append(current)
            current = []
        seen_cut = passed
        current.append(i)
    if current:
        segments.append(current)
    return segments


def build_job_timeline(
    run: ResilienceRunLog, event_logs: Sequence[EventLog], scheduler: Sequence[SacctResult]
) -> JobTimeline | str:
    """The job's starts, steps placed in time, checkpoints, interruptions and events; a reason when impossible.

    Step lines print no time. Within a job segment the steps are laid end to end by their printed step
    times, as late as the log's own timestamps allow: a step ended no later than the first timestamped line
    printed after it (or a checkpoint the event log records for it). Job starts come from the event log's
    `job_started`, else the launcher's `Starting worker group` lines, else sacct's job and step starts.
    """
    steps = run.training.steps
    if not steps:
        return f"{run.training.file}: expected step lines, got none"
    logged = _events_from_log(event_logs)
    starts, source = _job_starts(run, logged, scheduler)
    if not starts:
        return (f"{run.training.file}: expected a job start (event log job_started, a launcher 'Starting worker "
                "group' line or sacct Start), got none")
    saved_at: list[tuple[float, int]] = sorted(
        (t, e.step) for t, e, _ in logged if e.type is EventType.CHECKPOINT_SAVED and e.step is not None)
    placed = _place_steps(run, starts, saved_at)
    origin = starts[0]
    stamps = run.clock.stamps
    finished = [t for t, e, lt in logged if lt is LogType.JOB_FINISHED]
    end = max(finished) if finished else max(stamps[-1][1] if stamps else origin, placed.steps[-1][1])
    end = max(end, placed.steps[-1][1])
    job_starts = starts[: len(placed.bounds)]
    faults = sorted(t for t, e, _ in logged if e.type is EventType.FAULT)
    stamp_at = dict(stamps)
    log_failures = sorted(stamp_at[e.line] for e in run.resilience.events
                          if e.kind in (LogEventKind.WORKER_GROUP_FAILED, LogEventKind.WORKER_FAILED)
                          and e.line in stamp_at)
    found = _interruptions(run, placed, job_starts, faults + log_failures, end, source)
    if isinstance(found, str):
        return found
    interruptions, resumed_from = found
    saves = [CheckpointSave(t - origin - float(e_extra), t - origin, step)
             for t, step, e_extra in _blocking_saves(event_logs)]
    timeline = Timeline(
        job_starts=tuple(s - origin for s in job_starts), end_s=end - origin,
        steps=tuple(StepCompletion(no, t - origin) for no, t, _ in placed.steps),
        checkpoints=tuple(sorted(saves, key=lambda c: c.end_s)),
        interruptions=tuple(interruptions),
        evidence=(Span(run.training.file, steps[0].line, steps[-1].line, len(steps)),),
    )
    events: list[Event] = [
        Event(t - origin, e.type, e.node, e.detail, e.by, e.nodes, e.step, e.evidence) for t, e, _ in logged
    ]
    if not logged:
        events = _events_from_training_log(run, origin, job_starts)
    note = (f"job starts from the {source}; step lines print no time, so steps are laid end to end by their "
            "printed step times as late as the log's timestamps allow (1 s resolution)")
    return JobTimeline(origin, timeline, tuple(interruptions), tuple(sorted(events, key=lambda e: e.time_s)),
                       tuple(placed.bounds), tuple(resumed_from), note,
                       tuple(run.training.steps[i].line for _, _, i in placed.steps))


def _job_starts(run: ResilienceRunLog, logged: Sequence[tuple[float, Event, LogType]],
                scheduler: Sequence[SacctResult]) -> tuple[list[float], str]:
    """The job's starts (epoch seconds) and where they come from: the event log, else the launcher's lines, else
    sacct; none where none of them has any."""
    starts = sorted(t for t, e, _ in logged if e.type is EventType.JOB_STARTED)
    if starts:
        return starts, "event log"
    starts = sorted(t for _, t in run.clock.worker_starts)
    if starts:
        return starts, "launcher lines"
    return _sacct_starts(scheduler), "sacct"


@dataclass(frozen=True)
class _Placed:
    """The log's steps placed in time, in log order, and each job start's [first, last) indices among them."""

    steps: list[tuple[int, float, int]]  # (step number, epoch end, index into the log's steps)
    bounds: list[tuple[int, int]]


def _place_steps(run: ResilienceRunLog, starts: Sequence[float], saved_at: Sequence[tuple[float, int]]) -> _Placed:
    """Each job segment's steps laid end to end by their step times, as late as the log's timestamps (and the
    checkpoints saved in the segment) allow, never before the segment's start or the last segment's end."""
    steps = run.training.steps
    stamps = run.clock.stamps
    stamp_lines = [line for line, _ in stamps]
    placed: list[tuple[int, float, int]] = []
    bounds: list[tuple[int, int]] = []
    segments = _segments(run)
    for k, seg in enumerate(segments):
        start = starts[min(k, len(starts) - 1)]
        following = starts[k + 1] if k + 1 < len(starts) else float("inf")
        saved_here = {step: t for t, step in saved_at if start <= t < following}
        cum: list[float] = []
        total = 0.0
        for i in seg:
            total += float(steps[i].step_time_s or 0.0)
            cum.append(total)
        offsets: list[float] = []
        for j, i in enumerate(seg):
            pos = bisect.bisect_right(stamp_lines, steps[i].line)
            nxt_line = steps[seg[j + 1]].line if j + 1 < len(seg) else None
            if pos < len(stamps) and (nxt_line is None or stamps[pos][0] < nxt_line):
                offsets.append(stamps[pos][1] - cum[j])
            if _step_no(steps[i]) in saved_here:
                offsets.append(saved_here[_step_no(steps[i])] - cum[j])
        previous_end = placed[-1][1] if placed else start
        offset = max(min(offsets) if offsets else start, start, previous_end)
        first = len(placed)
        for j, i in enumerate(seg):
            placed.append((_step_no(steps[i]), offset + cum[j], i))
        bounds.append((first, len(placed)))
    return _Placed(placed, bounds)


def _interruptions(run: ResilienceRunLog, placed: _Placed, job_starts: Sequence[float], failures: Sequence[float],
                   end: float, source: str) -> tuple[list[Interruption], list[int | None]] | str:
    """Between segment k's last step and job start k + 1: when the job was interrupted (the first fault or
    failure the logs record), scheduled again and resumed, and the checkpoint step it resumed from; a reason
    where the starts do not fit the log's segments."""
    steps = run.training.steps
    bounds = placed.bounds
    origin = job_starts[0]
    interruptions: list[Interruption] = []
    resumed_from: list[int | None] = []
    previous_resume = origin
    for k in range(1, len(job_starts)):
        last_end = placed.steps[bounds[k - 1][1] - 1][1] if bounds[k - 1][1] > bounds[k - 1][0] else origin
        scheduled = job_starts[k]
        candidates = [t for t in failures if last_end - 1e-9 <= t <= scheduled] or [
            t for t in failures if job_starts[k - 1] <= t <= scheduled]
        interrupted = min(candidates) if candidates else last_end
        lo, hi = bounds[k] if k < len(bounds) else (len(placed.steps), len(placed.steps))
        resumed = scheduled
        ckpt: float | None = None
        from_step: int | None = None
        if hi > lo:
            first_step, first_end, idx = placed.steps[lo]
            resumed = max(scheduled, first_end - float(steps[idx].step_time_s or 0.0))
            from_step = first_step - 1
            earlier = [end_s for no, end_s, _ in placed.steps[: bounds[k - 1][1]] if no == from_step]
            ckpt = earlier[-1] if earlier else None
        interrupted = max(min(interrupted, scheduled), previous_resume)
        resumed = min(resumed, end)
        if not previous_resume <= interrupted <= scheduled <= resumed:  # starts that do not fit the log's segments
            return (f"{run.training.file}: expected job starts ({source}) that fit the log's {len(bounds)} "
                    f"segments, got start {k + 1} at {scheduled - origin:.0f} s, before the job could resume "
                    f"(previous resume at {previous_resume - origin:.0f} s)")
        previous_resume = resumed
        if ckpt is not None and ckpt > interrupted:
            ckpt = None
        interruptions.append(Interruption(interrupted - origin, scheduled - origin, resumed - origin,
                                          None if ckpt is None else ckpt - origin))
        resumed_from.append(from_step)
    return interruptions, resumed_from


def _sacct_starts(scheduler: Sequence[SacctResult]) -> list[float]:
    """The job's (re)starts as sacct shows them, each once: a job's numbered steps (its sruns: a restart inside
    the allocation is a further step) or, without any, the job itself. The batch and extern steps start with
    their job; counted as well, three starts at one moment were three restarts, and the timeline built on them
    crashed the certification (interruption scheduled before it happened)."""
    starts: set[float] = set()
    for res in scheduler:
        for job in res.jobs:
            sruns = [s.start for s in job.steps if s.step_id.rpartition(".")[2].isdigit() and s.start is not None]
            starts.update(datetime_s(x) for x in (sruns or ([job.start] if job.start is not None else [])))
    return sorted(starts)


def _unjudged(check: Check, unread: Sequence[str]) -> Check:
    """`check` as an ERROR when it failed while files that might have shown otherwise could not be read
    (`unread`: their errors): a detection, a restart or a checkpoint the event log records looks missing then."""
    if check.status is not Status.FAIL:
        return check
    return replace(check, status=Status.ERROR,
                   message=f"{check.message}; but {'; '.join(unread)}: what it would show cannot be told. Mend or "
                           "re-export it",
                   summary=f"cannot be judged while {unread[0]}")


def _step_no(step: TrainingStep) -> int:
    return step.global_step if step.global_step is not None else step.iteration


def datetime_s(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _blocking_saves(logs: Sequence[EventLog]) -> list[tuple[float, int, float]]:
    """Checkpoint saves the event log marks as blocking (`blocking_s` seconds ending at `ts`)."""
    out: list[tuple[float, int, float]] = []
    for log in logs:
        for e in log.events:
            blocking = e.extra.get("blocking_s") if e.extra else None
            if e.type is LogType.CHECKPOINT_SAVED and isinstance(blocking, int | float) and blocking > 0:
                out.append((e.ts.timestamp(), e.step or 0, float(blocking)))
    return out


def _events_from_training_log(run: ResilienceRunLog, origin: float, starts: Sequence[float]) -> list[Event]:
    """Without an event log: the launcher's worker-group starts, failures, checkpoints and straggler lines."""
    file = run.training.file
    out = [Event(t - origin, EventType.JOB_STARTED, detail="worker group started", by=Actor.AUTOMATION,
                 evidence=(Span(file, line, line, 1),)) for line, t in run.clock.worker_starts if t in starts]
    stamp_at = dict(run.clock.stamps)
    for e in run.resilience.events:
        when = stamp_at[e.line] - origin if e.line in stamp_at else None
        span = (Span(file, e.line, e.line, 1),)
        if when is None:
            continue
        if e.kind is LogEventKind.WORKER_GROUP_FAILED:
            out.append(Event(when, EventType.FAULT, detail=e.detail or "worker group failed", evidence=span))
        elif e.kind is LogEventKind.CHECKPOINT_SAVED:
            out.append(Event(when, EventType.CHECKPOINT_SAVED, step=e.step, detail="checkpoint saved", evidence=span))
        elif e.kind is LogEventKind.STRAGGLER_WARNING:
            for node in e.nodes:
                out.append(Event(when, EventType.DETECTED, node=node, detail=f"straggler ranks {e.ranks}",
                                 evidence=span))
        elif e.kind is LogEventKind.STRAGGLER_TERMINATION:
            out.append(Event(when, EventType.JOB_STOPPED, detail="terminated by straggler detection", evidence=span))
    return out


def _declared(check_id: str, title: str, severity: Severity) -> DeclaredCheck:
    return DeclaredCheck(check_id, title, PHASE, severity)


def _spans(events: Sequence[Event]) -> list[Span]:
    return [s for e in events for s in e.evidence]


@dataclass(frozen=True)
class _Gpus:
    """Per-rank timings keyed by physical GPU (node, GPU index), so a replaced node's GPU is scored on its own."""

    timings: RankTimings
    places: dict[int, tuple[str, int, int]]  # key -> (node, gpu, the rank it ran first)
    rank_place: dict[int, tuple[str, int]]  # rank -> (node, gpu) at the rank's first row


def _gpu_columns(table: RankTable, origin: float) -> _Gpus:
    """Columns for scoring, reduced column-wise (times relative to `origin`), keyed by (node, GPU); the file's
    columns are read one at a time into arrays, each let go once used (a cluster's day is tens of millions of
    rows)."""
    encoded = pc.dictionary_encode(table.column("node")).combine_chunks()
    key = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)  # the node's code, for now
    names = encoded.dictionary.to_pylist()
    del encoded
    gpu = table.array("gpu", np.int64)
    width = int(gpu.max()) + 1
    uniq, first = _first_rows(key * width + gpu)
    rank = table.array("rank", np.int64)
    places = {int(k): (str(names[int(key[i])]), int(gpu[i]), int(rank[i]))
              for k, i in zip(uniq.tolist(), first.tolist(), strict=True)}
    ranks, rank_first = _first_rows(rank)
    rank_place = {int(r): (str(names[int(key[i])]), int(gpu[i]))
                  for r, i in zip(ranks.tolist(), rank_first.tolist(), strict=True)}
    del rank
    key *= width  # in place: node code * width + gpu, the scoring key
    key += gpu
    del gpu
    seconds = table.array("timestamp", np.float64)  # microseconds
    seconds /= 1e6  # in place: the same values as `/ 1e6 - origin`, one column in memory
    seconds -= origin
    timings = RankTimings.from_columns(
        key, table.array("step", np.int64), table.array("compute_s", np.float64), seconds,
        evidence=(Span(table.file, 1, table.rows, table.rows),),
    )
    return _Gpus(timings, places, rank_place)


def _first_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_index=True): the distinct values, sorted, and the row each first appears at;
    for non-negative values a table timed step after step holds all of them early, so a growing prefix is
    searched (their number counted first) rather than the whole column sorted."""
    if not len(values) or int(values.min()) < 0 or int(values.max()) >= 4 * len(values) + 1024:
        return np.unique(values, return_index=True)
    wanted = int(np.count_nonzero(np.bincount(values)))
    size = min(len(values), max(1024, 4 * wanted))
    while True:
        found, at = np.unique(values[:size], return_index=True)
        if len(found) == wanted or size == len(values):
            return found, at
        size = min(len(values), 4 * size)


def _stride(steps: np.ndarray) -> int:
    dense = len(steps) and int(steps.min()) >= 0 and int(steps.max()) < 4 * len(steps) + 1024
    uniq = np.flatnonzero(np.bincount(steps)) if dense else np.unique(steps)  # the distinct steps, sorted
    if uniq.size < 2:
        return 1
    return max(1, int(np.median(np.diff(uniq))))


@dataclass(frozen=True)
class _Reported:
    """A straggler the cluster's own monitoring reported (event log or the training log's detector lines)."""

    time_s: float | None
    rank: int | None
    node: str | None
    gpu: int | None
    span: Span


def _reported(event_logs: Sequence[EventLog], logs: Sequence[ResilienceRunLog], origin: float) -> list[_Reported]:
    out = [_Reported(e.ts.timestamp() - origin, e.rank, e.node, e.gpu, Span(log.file, e.line, e.line, 1))
           for log in event_logs for e in log.events if e.type is LogType.STRAGGLER_DETECTED]
    for run in logs:
        stamp_at = dict(run.clock.stamps)
        for e in run.resilience.events:
            if e.kind is not LogEventKind.STRAGGLER_WARNING:
                continue
            when = stamp_at[e.line] - origin if e.line in stamp_at else None
            node = e.nodes[0] if len(e.nodes) == 1 else None
            out += [_Reported(when, rank, node, None, Span(run.training.file, e.line, e.line, 1)) for rank in e.ranks]
    return out


def _who(rank: int | None, place: RankPlace | None) -> str:
    if place is None:
        return f"rank {rank}"
    return f"rank {rank} (node {place.node}, GPU {place.gpu}, NVLink domain {place.domain})"


@dataclass(frozen=True)
class _StragglerEvidence:
    """What the straggler check reads: the per-rank timings (or why they could not be read), what the cluster's
    monitoring reported, the job's events, and the errors of the files where a detection or a node's exclusion
    would be (`unread`)."""

    tables: Sequence[RankTable]
    table_error: str | None
    events: Sequence[Event]
    reported: Sequence[_Reported]
    logs: Sequence[ResilienceRunLog]
    origin: float
    unread: Sequence[str]
    watched: Sequence[str] = ()  # the files where the cluster's own straggler detection would show (or showed)


def _watched(event_logs: Sequence[EventLog], logs: Sequence[ResilienceRunLog]) -> list[str]:
    """The files that show the cluster's own straggler detection at work: its monitoring's event logs, and the
    training logs whose straggler-detection callback printed a report or a warning."""
    return [log.file for log in event_logs] + [
        run.training.file for run in logs if run.resilience.straggler_reports or any(
            e.kind in (LogEventKind.STRAGGLER_WARNING, LogEventKind.STRAGGLER_TERMINATION)
            for e in run.resilience.events)]


@dataclass(frozen=True)
class _Scored:
    """Every rank scored from the per-rank timings, and the nodes the job excluded or replaced."""

    report: StragglerReport
    gpus: _Gpus
    handled_nodes: set[str | None]

    def rank(self, r: RankScore) -> int:
        """The rank the scored GPU ran first (ranks are scored by physical GPU)."""
        return self.gpus.places[r.rank][2]

    def unhandled(self, r: RankScore) -> bool:
        return (r.detection_s is None or not r.detected_in_time or r.place is None
                or r.place.node not in self.handled_nodes)

    def rows(self) -> list[dict[str, object]]:
        return [{
            "rank": self.rank(r), "node": r.place.node if r.place else None, "gpu": r.place.gpu if r.place else None,
            "domain": r.place.domain if r.place else None, "relative_score": r.relative_score,
            "individual_score": r.individual_score, "lowest_window_score": r.lowest_window_score,
            "flagged": r.flagged, "first_visible_s": r.first_visible_s,
            "detected_s": r.detection_s, "source": "rank-timings",
        } for r in self.report.ranks]

    def failures(self, detect_max_s: float) -> list[str]:
        """Each straggler not reported in time or whose node was neither excluded nor replaced, and why."""
        out: list[str] = []
        for r in self.report.stragglers:
            why: list[str] = []
            if r.detection_s is None:
                why.append("never reported by the cluster's monitoring")
            elif not r.detected_in_time:
                why.append(f"reported {r.detection_delay_s or 0.0:.0f} s after first visible (max {detect_max_s:g} s)")
            if r.place is None or r.place.node not in self.handled_nodes:
                why.append("its node was neither excluded nor replaced")
            if why:
                out.append(f"{_who(self.rank(r), r.place)}, relative score {r.relative_score:.3f} (lowest window "
                           f"{r.lowest_window_score:.3f}), first visible at "
                           f"{(r.first_visible_s or 0.0):.0f} s: {'; '.join(why)}")
        return out


def _straggler_check(bundle: LoadedBundle, catalog: LoadedCatalog, evidence: _StragglerEvidence,
                     severity: Severity, say: Callable[[str], None]) -> tuple[Check, list[dict[str, object]]]:
    """Score every rank from the per-rank timings; each straggler must be reported in time and its node handled.
    A straggler that looks unhandled while a file that would show its detection or its node's exclusion could
    not be read cannot be judged (ERROR), not a failure. `say` is told how many ranks are scored as they are."""
    rules = catalog.spec.rules
    declared = _declared(f"{PHASE}.stragglers_detected_and_handled",
                         f"Every straggler (relative score < {rules.straggler_score_min:.2f}) was detected within "
                         f"{rules.straggler_detect_max_s:g} s and its node excluded or replaced", severity)
    domain_of = {node: d.name for d in bundle.spec.system.nvlink_domains for node in d.nodes}
    reported = evidence.reported
    ranks_seen = sorted({r.rank for r in reported if r.rank is not None})
    nodes_seen = sorted({r.node for r in reported if r.node is not None})
    watched = list(dict.fromkeys(evidence.watched))
    # "reported no straggler" only where the bundle shows a detection that could have reported one
    cluster_said = (f"the cluster's own detection reported ranks {ranks_seen} on node(s) {nodes_seen}"
                    if reported else f"the cluster's own detection ({', '.join(watched[:3])}"
                    f"{' and more' if len(watched) > 3 else ''}) reported no straggler" if watched else
                    "the bundle holds no evidence of the cluster's own straggler detection (no event log, no "
                    "straggler-detection report in a training log)")
    report_spans = [r.span for r in reported]
    if not evidence.tables:
        table_error = evidence.table_error
        status = Status.ERROR if table_error else Status.FAIL if severity is Severity.REQUIRED else Status.SKIPPED
        judged = declared.judged(
            status,
            (f"{table_error}: the per-rank timings cannot be read; {cluster_said}. Mend or re-export them"
             if table_error else
             "the bundle has no per-rank step timings (kind rank-timings): clustercert cannot find "
             f"stragglers itself, the cluster did not show them; {cluster_said}. Add the resilience run's "
             "per-rank timings"), target=rules.straggler_score_min, unit="score",
            evidence=report_spans)
        return (judged if table_error else lacking(judged)), _cluster_rows(evidence.logs, reported, domain_of,
                                                                            ranks_seen)
    gpus = _gpu_columns(evidence.tables[0], evidence.origin)
    placement = {k: RankPlace(node, gpu, domain_of.get(node, "unknown")) for k, (node, gpu, _) in gpus.places.items()}
    report = score_stragglers(
        gpus.timings, placement, _detections(reported, gpus),
        StragglerRules(threshold=rules.straggler_score_min, window_steps=_WINDOW_SAMPLES * _stride(gpus.timings.step),
                       detect_max_s=rules.straggler_detect_max_s, flag_windows=True),
        told=lambda done, ranks: say(f"judge stragglers: {done:,} of {ranks:,} ranks scored"),
    )
    handling = [e for e in evidence.events if e.type in (EventType.NODE_EXCLUDED, EventType.NODE_REPLACED)]
    scored = _Scored(report, gpus, {e.node for e in handling})
    status, message, summary = _straggler_verdict(scored, rules, evidence.unread, cluster_said)
    flagged = report.stragglers
    handled = len(flagged) - sum(map(scored.unhandled, flagged))
    # each straggler's own rows first (the one the message names first leads), then the whole table they were
    # scored against
    named = sorted(flagged, key=lambda r: not scored.unhandled(r))
    rows = [_rows_of(gpus.timings, r.rank, report.evidence[0].file) for r in named] if report.evidence else []
    return declared.judged(status, message, measured=float(handled), target=float(len(flagged)),
                           unit="stragglers handled",
                           evidence=[*rows, *report.evidence, *report_spans, *_spans(handling)],
                           summary=summary), scored.rows()


def _rows_of(timings: RankTimings, key: int, file: str) -> Span:
    """The rows (from 1, in file order) of the per-rank timings that hold the GPU scored under `key`: the rows its
    scores were computed from."""
    at = np.flatnonzero(timings.rank == key)
    return Span(file, int(at[0]) + 1, int(at[-1]) + 1, int(at.size))


def _cluster_rows(logs: Sequence[ResilienceRunLog], reported: Sequence[_Reported], domain_of: Mapping[str, str],
                  ranks_seen: Sequence[int]) -> list[dict[str, object]]:
    """Without per-rank timings: the scores the cluster's own straggler reports printed, as rows."""
    rows: list[dict[str, object]] = []
    for run in logs:
        for block in run.resilience.straggler_reports:
            for sc in block.scores:
                rows.append({"rank": sc.rank, "node": sc.node, "gpu": None, "domain": domain_of.get(sc.node),
                             "relative_score" if block.kind == "relative" else "individual_score": sc.score,
                             "flagged": sc.rank in ranks_seen, "first_visible_s": None,
                             "detected_s": next((r.time_s for r in reported if r.rank == sc.rank), None),
                             "source": f"cluster report ({run.training.file} line {block.line})"})
    return rows


def _detections(reported: Sequence[_Reported], gpus: _Gpus) -> list[Detection]:
    """The cluster's reports that have a time, each naming a node (a report naming a rank alone: the rank's)."""
    detections: list[Detection] = []
    for rep in reported:
        if rep.time_s is None:
            continue
        if rep.node is None and rep.rank is not None and rep.rank in gpus.rank_place:
            node, gpu = gpus.rank_place[rep.rank]
            detections.append(Detection(rep.time_s, node, gpu))
        elif rep.node is not None:
            detections.append(Detection(rep.time_s, rep.node, rep.gpu))
    return detections


def _straggler_verdict(scored: _Scored, rules: Rules, unread: Sequence[str],
                       cluster_said: str) -> tuple[Status, str, str]:
    """The straggler check's status, message and summary."""
    report = scored.report
    flagged = report.stragglers
    failures = scored.failures(rules.straggler_detect_max_s)
    in_time = [r for r in flagged if r.detection_s is not None and r.detected_in_time]
    delays = [r.detection_delay_s for r in flagged if r.detection_delay_s is not None]
    found = (f"{len(flagged)} straggler(s) found (judged score, the lower of the relative score over the run and "
             f"over its worst window, < {rules.straggler_score_min:.2f}), "
             f"{len(in_time)} detected by the cluster within {rules.straggler_detect_max_s:g} s"
             + (f" (slowest detection {max(delays):.0f} s after first visible)" if delays else ""))
    if failures:
        first = next(r for r in flagged if scored.unhandled(r))
        where = (f"{first.place.node} GPU {first.place.gpu}" if first.place else f"rank {scored.rank(first)}")
        if unread:
            return (Status.ERROR,
                    f"{found}; {len(failures)} not shown handled: " + " | ".join(failures) + f"; {cluster_said}; "
                    f"but {'; '.join(unread)}: what it would show of their detection and handling cannot be told. "
                    "Mend or re-export it",
                    f"whether the straggler on {where} was handled cannot be told: {unread[0]}")
        kind = "unreported" if first.detection_s is None else "late-detected" if not first.detected_in_time \
            else "unhandled"
        return (Status.FAIL,
                f"{found}; {len(failures)} not handled: " + " | ".join(failures)
                + f"; {cluster_said}. Make the cluster's straggler detection report and drain slow GPUs",
                f"{kind} straggler on {where} (relative score {first.relative_score:.3f}); "
                f"{len(in_time)} of {len(flagged)} straggler(s) detected within {rules.straggler_detect_max_s:g} s")
    if flagged:
        return Status.PASS, f"{found}; every one handled: " + "; ".join(
            f"{_who(scored.rank(r), r.place)} relative score {r.relative_score:.3f} (lowest window "
            f"{r.lowest_window_score:.3f}), reported "
            f"{(r.detection_delay_s or 0.0):.0f} s after first visible, node excluded or replaced"
            for r in flagged), found
    lowest = min((r.relative_score for r in report.ranks), default=None)
    message = (f"no straggler found: every one of {len(report.ranks)} ranks has a relative score of at least "
               f"{rules.straggler_score_min:.2f} (lowest {lowest:.3f}); {cluster_said}")
    return Status.PASS, message, message


def _intervals_ml(t: Timeline) -> list[dict[str, object]]:
    """The timeline cut into startup, productive, wasted, recovery and other stretches (merged when adjacent)."""
    out: list[dict[str, object]] = []

    def add(a: float, b: float, kind: str) -> None:
        if b <= a:
            return
        if out and out[-1]["kind"] == kind and out[-1]["end_s"] == a:
            out[-1]["end_s"] = b
        else:
            out.append({"start_s": a, "end_s": b, "kind": kind})

    last_index: dict[int, int] = {}
    for i, s in enumerate(t.steps):
        last_index[s.step] = i
    ends = [s.end_s for s in t.steps]
    bounds = [*t.job_starts[1:], t.end_s]
    for k, start in enumerate(t.job_starts):
        lo = bisect.bisect_left(ends, start)
        hi = bisect.bisect_left(ends, bounds[k]) if k + 1 < len(t.job_starts) else len(ends)
        if lo == hi:
            add(start, bounds[k], BadputKind.INFRASTRUCTURE_RECOVERY.value if k + 1 < len(t.job_starts)
                else BadputKind.STARTUP.value)
            continue
        add(start, ends[lo], BadputKind.STARTUP.value)
        for i in range(lo + 1, hi):
            add(ends[i - 1], ends[i], "productive" if last_index[t.steps[i].step] == i
                else BadputKind.WASTED_PROGRESS.value)
        tail = BadputKind.INFRASTRUCTURE_RECOVERY.value if k + 1 < len(t.job_starts) else BadputKind.OTHER.value
        add(ends[hi - 1], bounds[k], tail)
    return out


def _goodput_sections(job: JobTimeline, ml: GoodputResult, ready: ReadinessGoodput) -> tuple[dict[str, object],
                                                                                               dict[str, object]]:
    intervals: list[dict[str, object]] = []
    for it, cost in zip(sorted(job.interruptions, key=lambda x: x.interrupted_s), ready.interruptions, strict=True):
        intervals += [
            {"start_s": cost.last_checkpoint_s, "end_s": it.interrupted_s, "kind": "lost_work"},
            {"start_s": it.interrupted_s, "end_s": it.scheduled_s, "kind": "reschedule"},
            {"start_s": it.scheduled_s, "end_s": it.resumed_s, "kind": "resume"},
        ]
    intervals += [{"start_s": c.start_s, "end_s": c.end_s, "kind": "checkpoint_save"} for c in job.timeline.checkpoints]
    readiness: dict[str, object] = {
        "definition": ready.definition.value, "goodput": ready.goodput, "wall_s": ready.wall_s,
        "badput": {"lost_work": ready.lost_work_s, "reschedule": ready.reschedule_s, "resume": ready.resume_s,
                   "checkpoint_save": ready.save_s},
        "intervals": sorted(intervals, key=lambda x: float(x["start_s"])),  # type: ignore[arg-type]
        "interruptions": len(ready.interruptions), "note": job.note,
    }
    ml_section: dict[str, object] = {
        "definition": ml.definition.value, "goodput": ml.goodput, "wall_s": ml.wall_s,
        "productive_s": ml.productive_s, "badput": {k.value: v for k, v in ml.badput_s.items()},
        "intervals": _intervals_ml(job.timeline), "disruptions": ml.disruptions, "wasted_steps": list(ml.wasted_steps),
    }
    return readiness, ml_section


def _last_saved_before(events: Sequence[Event], t: float) -> int | None:
    saved = [e.step for e in events if e.type is EventType.CHECKPOINT_SAVED and e.step is not None and e.time_s <= t]
    return max(saved) if saved else None


@dataclass(frozen=True)
class _FaultRow:
    time_s: float
    node: str | None
    detail: str
    detected_s: float | None
    restarted_s: float | None
    time_to_restart_s: float | None
    restart_nodes: tuple[str, ...]
    excludes_faulty_node: bool | None
    automatic: bool
    last_step_before: int | None
    resumed_from_step: int | None
    last_checkpoint_step: int | None
    lost_steps: int | None
    lost_work_s: float | None
    within_checkpoint_interval: bool | None
    restarted_in_time: bool | None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = dict(self.__dict__)
        out["restart_nodes"] = list(self.restart_nodes)
        return out

    @property
    def where(self) -> str:
        return f"fault at {self.time_s:.0f} s on {self.node or 'an unnamed node'}"


def _fault_rows(report: ResilienceReport, events: Sequence[Event], job: JobTimeline) -> list[_FaultRow]:
    rows: list[_FaultRow] = []
    for f in report.faults:
        excluded = f.excludes_faulty_node
        if excluded is None and f.fault.node is not None:
            until = f.restarted_s if f.restarted_s is not None else job.timeline.end_s
            if any(e.type in (EventType.NODE_EXCLUDED, EventType.NODE_REPLACED) and e.node == f.fault.node
                   and f.fault.time_s <= e.time_s <= until for e in events):
                excluded = True
        rows.append(_FaultRow(
            time_s=f.fault.time_s, node=f.fault.node, detail=f.fault.detail, detected_s=f.detected_s,
            restarted_s=f.restarted_s, time_to_restart_s=f.time_to_restart_s, restart_nodes=f.restart_nodes,
            excludes_faulty_node=excluded, automatic=f.automatic, last_step_before=f.last_step_before,
            resumed_from_step=f.resumed_from_step, last_checkpoint_step=_last_saved_before(events, f.fault.time_s),
            lost_steps=f.lost_steps, lost_work_s=f.lost_work_s,
            within_checkpoint_interval=f.within_checkpoint_interval, restarted_in_time=f.restarted_in_time,
        ))
    return rows


def _restart_check(rows: list[_FaultRow], rules_max: float, severity: Severity, spans: list[Span]) -> Check:
    declared = _declared(_RESTARTS, _restarts_title(rules_max), severity)
    if not rows:
        return declared.judged(Status.SKIPPED, "no fatal fault in the run: automatic restart was not exercised",
                               target=rules_max, unit="s", evidence=spans)
    problems: list[str] = []
    for r in rows:
        if r.restarted_s is None or r.time_to_restart_s is None:
            problems.append(f"{r.where}: the job never restarted")
            continue
        if not r.automatic:
            problems.append(f"{r.where}: an administrator acted before the restart")
        if not r.restarted_in_time:
            problems.append(f"{r.where}: restart after {r.time_to_restart_s:.0f} s (max {rules_max:g} s)")
        if r.excludes_faulty_node is False:
            problems.append(f"{r.where}: the restart ran on the faulty node again")
        if r.last_checkpoint_step is not None and r.resumed_from_step != r.last_checkpoint_step:
            problems.append(f"{r.where}: resumed from step {r.resumed_from_step}, not from the last checkpoint "
                            f"(step {r.last_checkpoint_step})")
    times = [r.time_to_restart_s for r in rows if r.time_to_restart_s is not None]
    worst = max(times) if times else None
    if problems:
        return declared.judged(Status.FAIL, " | ".join(problems) + ". Fix the cluster's automatic requeue (exclude "
                               "failed nodes, resume from the last checkpoint)",
                               measured=worst, target=rules_max, unit="s", evidence=spans)
    summary = "; ".join(
        f"{r.where} restarted after {r.time_to_restart_s or 0.0:.0f} s"
        + ("" if r.excludes_faulty_node is None else " without the faulty node")
        + f", resumed from step {r.resumed_from_step}" for r in rows)
    return declared.judged(Status.PASS, summary, measured=worst, target=rules_max, unit="s", evidence=spans)


def _restarts_title(rules_max: float) -> str:
    return (f"Every fatal fault is followed by an automatic restart within {rules_max:g} s on nodes that exclude "
            "the faulty one, from the last checkpoint")


def _lost_check(rows: list[_FaultRow], interval: int | None, severity: Severity, absent: Status,
                spans: list[Span]) -> Check:
    declared = _declared(f"{PHASE}.lost_work_within_checkpoint_interval",
                         "Work lost to each fault stays within one checkpoint interval", severity)
    if not rows:
        return declared.judged(Status.SKIPPED, "no fatal fault in the run: no work lost", evidence=spans)
    if interval is None:
        return declared.judged(absent, "fewer than two checkpoint saves in the evidence: the checkpoint interval "
                               "cannot be shown. Record checkpoint saves in the event log", evidence=spans)
    lost = [r.lost_steps for r in rows if r.lost_steps is not None]
    worst = float(max(lost)) if lost else None
    over = [f"{r.where} lost {r.lost_steps} steps" for r in rows
            if r.lost_steps is not None and r.lost_steps > interval]
    over += [f"{r.where}: the job never resumed" for r in rows if r.lost_steps is None]
    if over:
        return declared.judged(Status.FAIL, f"{'; '.join(over)} (checkpoint interval {interval} steps). Checkpoint "
                               "more often", measured=worst, target=float(interval), unit="steps", evidence=spans)
    return declared.judged(Status.PASS, f"at most {int(worst or 0)} step(s) lost per fault, checkpoint interval "
                           f"{interval} steps", measured=worst, target=float(interval), unit="steps", evidence=spans)


@dataclass(frozen=True)
class _Found:
    """The resilience phase's usable evidence by kind, and by kind the errors of the files that could not be read:
    what an unreadable long-run log, event log or sacct dump would have shown (a detection, a restart, a node
    excluded, an administrator's action) cannot be told, which is not the cluster failing to show it."""

    logs: list[ResilienceRunLog]
    event_logs: list[EventLog]
    sacct: list[SacctResult]
    tables: list[RankTable]
    telemetry: list[Telemetry]
    unreadable: dict[RunKind, list[str]]

    @property
    def unread_log(self) -> list[str]:
        return self.unreadable.get(RunKind.RESILIENCE, [])

    @property
    def unread_events(self) -> list[str]:
        return self.unreadable.get(RunKind.EVENTS, [])

    @property
    def unread(self) -> list[str]:
        """The errors of the files where the job's timeline, a detection or a node's exclusion would be."""
        return [*self.unread_log, *self.unread_events, *self.unreadable.get(RunKind.SCHEDULER, [])]


def _collect(bundle: LoadedBundle, parsed: Mapping[str, object | EvidenceError], severity: Severity) -> tuple[
    _Found, list[Check]
]:
    """Resilience runs' parsed evidence by kind; an unusable file is an ERROR check naming it."""
    out: list[tuple[RunSpec, object]] = []
    errors: list[Check] = []
    unreadable: dict[RunKind, list[str]] = {}
    for run in bundle.spec.runs:
        if run.phase is not Phase.RESILIENCE:
            continue
        value = parsed.get(run.id)
        if isinstance(value, EvidenceError):
            errors.append(_declared(f"{PHASE}.{run.id}_valid", f"Resilience evidence {run.id} is usable",
                                    severity).judged(
                Status.ERROR, str(value), evidence=(Span(value.file, value.line or 0, value.line or 0, 1),)))
            unreadable.setdefault(run.kind, []).append(str(value))
        elif value is not None:
            out.append((run, value))
    found = _Found(
        logs=[v for r, v in out if r.kind is RunKind.RESILIENCE and isinstance(v, ResilienceRunLog)],
        event_logs=[v for r, v in out if r.kind is RunKind.EVENTS and isinstance(v, EventLog)],
        sacct=[v for r, v in out if r.kind is RunKind.SCHEDULER and isinstance(v, SacctResult)],
        tables=[v for r, v in out if r.kind is RunKind.RANK_TIMINGS and isinstance(v, RankTable)],
        telemetry=[v for r, v in out if r.kind is RunKind.TELEMETRY and isinstance(v, Telemetry)],
        unreadable=unreadable,
    )
    return found, errors


def _unheard(what: str) -> None:
    """Nobody listens."""


def judge_resilience(
    bundle: LoadedBundle, catalog: LoadedCatalog, parsed: Mapping[str, object | EvidenceError],
    told: Callable[[str], None] | None = None,
) -> PhaseResult:
    """Judge the resilience phase from the long run's log, event log, sacct, per-rank timings and telemetry.
    `told` is told each step that takes seconds at cluster scale (a large cluster's stragglers: tens of millions
    of rows)."""
    say = told or _unheard
    rules = catalog.spec.rules
    required = catalog.spec.judges(Phase.RESILIENCE)
    severity = Severity.REQUIRED if required else Severity.ADVISORY
    absent = Status.FAIL if required else Status.SKIPPED
    found, checks = _collect(bundle, parsed, severity)
    if required:
        has_any = any(r.phase is Phase.RESILIENCE for r in bundle.spec.runs)
        present = _declared(f"{PHASE}.evidence_present", "The bundle holds resilience-phase evidence",
                            Severity.REQUIRED).judged(
            Status.PASS if has_any else Status.FAIL,
            "resilience runs present" if has_any else "the bundle has no run of phase resilience: the cluster did "
            "not show it. Add the long run's training log, event log, sacct dump, per-rank timings and telemetry")
        checks.insert(0, present if has_any else lacking(present))
    section: dict[str, object] = {"goodput": None, "goodput_ml": None, "stragglers": [], "events": [], "stalls": [],
                                  "faults": []}
    timeline_checks, job = _timeline_checks(found, rules, severity, section, say)
    checks += timeline_checks
    origin = job.origin_epoch_s if job is not None else 0.0
    events = list(job.events) if job is not None else []
    checks.append(_admin_check(found, events, severity, absent))
    if found.tables:
        say(f"judge stragglers from {sum(t.rows for t in found.tables):,} per-rank timings")
    straggler, rows = _straggler_check(bundle, catalog, _StragglerEvidence(
        found.tables, next(iter(found.unreadable.get(RunKind.RANK_TIMINGS, [])), None), events,
        _reported(found.event_logs, found.logs, origin), found.logs, origin, found.unread,
        _watched(found.event_logs, found.logs)), severity, say)
    checks.append(straggler)
    if found.unread:  # a failure on the job's timeline may be what an unreadable event log or sacct dump would answer
        timeline_ids = {c.id for c in timeline_checks}
        checks = [_unjudged(c, found.unread) if c.id in timeline_ids else c for c in checks]
    section["stragglers"] = rows
    # each event with its first line of evidence: the suspect list cites it (clustercert.metrics.suspects)
    section["events"] = [{"time_s": e.time_s, "type": e.type.value, "node": e.node, "detail": e.detail,
                          "by": e.by.value, "file": e.evidence[0].file if e.evidence else None,
                          "line": e.evidence[0].first if e.evidence else None} for e in events]
    if found.telemetry:
        say(f"count the GPUs and metrics of {sum(len(t) for t in found.telemetry):,} telemetry samples")
    section["telemetry"] = [{"file": t.file, "samples": len(t), "gpus": t.gpu_count(),
                             "metrics": t.metric_names()} for t in found.telemetry]
    return PhaseResult(checks=checks, section=section)


def _timeline_ids(rules: Rules) -> dict[str, tuple[str, str]]:
    """The id and title of each check judged on the job's timeline."""
    return {
        "goodput": (f"{PHASE}.goodput_meets_min",
                    f"Long-run goodput (Readiness Engine definition) is at least {rules.goodput_min:.2f}"),
        "stalls": (f"{PHASE}.stalls_detected", "Every stall (no step for stall_factor x the mean step time) is "
                   "detected and acted on"),
        "lost": (f"{PHASE}.lost_work_within_checkpoint_interval", "Work lost to each fault stays within one "
                 "checkpoint interval"),
        "restarts": (_RESTARTS, _restarts_title(rules.restart_max_s)),
    }


def _timeline_checks(found: _Found, rules: Rules, severity: Severity, section: dict[str, object],
                     say: Callable[[str], None]) -> tuple[list[Check], JobTimeline | None]:
    """The goodput, stall, restart and lost-work checks on the long run's timeline (their sections filled in
    `section`), and the timeline; None where there is none, the four checks then saying why."""
    absent = Status.FAIL if severity is Severity.REQUIRED else Status.SKIPPED
    job: JobTimeline | str = ("the bundle has no resilience training log (kind resilience, format nemo): the "
                              "cluster did not show a long run")
    if found.logs:
        say("judge goodput, stalls and restarts on the long run's timeline")
        job = build_job_timeline(found.logs[0], found.event_logs, found.sacct)
    elif found.unread_log:  # a long run whose log is unreadable: not judged, which is not the cluster not showing it
        job = f"{found.unread_log[0]}: the long run's log cannot be read. Mend it or collect it again"
    ids = _timeline_ids(rules)
    if isinstance(job, str):
        status = absent if not found.logs and not found.unread_log else Status.ERROR
        unjudged = [_declared(*ids[key], severity).judged(status, job)
                    for key in ("goodput", "stalls", "lost", "restarts")]
        return [lacking(c) for c in unjudged] if status is absent else unjudged, None
    events = list(job.events)
    ready = compute_readiness_goodput(job.timeline)
    ml = compute_ml_goodput(job.timeline)
    section["goodput"], section["goodput_ml"] = _goodput_sections(job, ml, ready)
    log_span = list(job.timeline.evidence)
    breakdown = ", ".join(f"{k.value} {v:.0f} s" for k, v in ml.badput_s.items() if v > 0)
    checks = [_declared(*ids["goodput"], severity).judged(
        Status.PASS if ready.goodput >= rules.goodput_min else Status.FAIL,
        f"goodput {ready.goodput:.4f} over {ready.wall_s:.0f} s ({len(ready.interruptions)} interruption(s): "
        f"lost work {ready.lost_work_s:.0f} s, reschedule {ready.reschedule_s:.0f} s, resume {ready.resume_s:.0f} "
        f"s, blocking saves {ready.save_s:.0f} s); ml-goodput definition {ml.goodput:.4f} (badput: {breakdown}; "
        f"re-done steps {list(ml.wasted_steps)})",
        measured=ready.goodput, target=rules.goodput_min, unit="ratio",
        evidence=[*log_span, *_spans(events)[:20]])]
    log = found.logs[0]
    steps = list(job.timeline.steps)
    final = log.training.steps[-1]
    completed = final.max_iteration is not None and _step_no(final) >= final.max_iteration
    # a job that logged its final iteration finished: the wind-down after it is no stall
    horizon = steps[-1].end_s if completed and steps else job.timeline.end_s
    report = analyze_resilience(steps, events, horizon, ResilienceRules(
        stall_factor=rules.stall_factor, restart_max_s=rules.restart_max_s, time_resolution_s=log.clock.resolution_s))
    section["stalls"] = [{"start_s": s.start_s, "end_s": s.end_s, "duration_s": s.duration_s,
                          "detected_s": s.detected_s, "acted_s": s.acted_s, "handled": s.handled}
                         for s in report.stalls]
    checks.append(_stall_check(_declared(*ids["stalls"], severity), report, rules.stall_factor,
                               _stall_spans(report, job, log.training.file) + log_span, _spans(events)))
    faults = _fault_rows(report, events, job)
    section["faults"] = [f.to_json() for f in faults]
    fault_spans = _spans([e for e in events if e.type in (EventType.FAULT, EventType.JOB_STARTED,
                                                          EventType.NODE_EXCLUDED, EventType.NODE_REPLACED)])
    restart_first = _judged_fault_spans(report.faults, events, lambda f: f.time_to_restart_s)
    lost_first = _lost_spans(report.faults, events, job, log.training.file)
    checks.append(_restart_check(faults, rules.restart_max_s, severity,
                                 _first_spans(restart_first, fault_spans or log_span)))
    checks.append(_lost_check(faults, report.checkpoint_interval_steps, severity, absent,
                              _first_spans(lost_first, fault_spans or log_span)))
    return checks, job


def _judged_fault_spans(faults: Sequence[FaultRecovery], events: Sequence[Event],
                        value: Callable[[FaultRecovery], float | None]) -> list[Span]:
    """The lines the judged figure was read from: the fault whose `value` is worst (one never followed by a restart
    first, it has none), its own line, the lines that excluded or replaced its node before the restart, and the
    line of the job start that ended it."""
    if not faults:
        return []
    worst = max(faults, key=lambda f: (value(f) is None, value(f) or 0.0))
    t, until = worst.fault.time_s, worst.restarted_s
    excluded = [e for e in events if e.type in (EventType.NODE_EXCLUDED, EventType.NODE_REPLACED)
                and worst.fault.node is not None and e.node == worst.fault.node
                and t <= e.time_s <= (until if until is not None else t)]
    started = [e for e in events if e.type is EventType.JOB_STARTED and e.time_s == until]
    return [*worst.fault.evidence, *_spans(excluded), *_spans(started[:1])]


def _lost_spans(faults: Sequence[FaultRecovery], events: Sequence[Event], job: JobTimeline, file: str) -> list[Span]:
    """The lines the most steps lost were counted from: the fault's, the last step printed before it and the
    first printed after the restart (the step resumed from is the one before it)."""
    first = _judged_fault_spans(faults, events, lambda f: f.lost_steps)
    if not faults or len(job.step_lines) != len(job.timeline.steps):
        return first
    worst = max(faults, key=lambda f: (f.lost_steps is None, f.lost_steps or 0))
    ends = [s.end_s for s in job.timeline.steps]
    t, restart = worst.fault.time_s, worst.restarted_s
    before = [i for i, e in enumerate(ends) if e <= t]
    after = [i for i, e in enumerate(ends) if restart is not None and e > restart]
    lines = [job.step_lines[i] for i in (before[-1:] + after[:1])]
    return [*first, *(Span(file, line, line, 1) for line in lines)]


def _first_spans(first: Sequence[Span], rest: Sequence[Span]) -> list[Span]:
    """`first`, then the rest of the spans without repeating them."""
    return [*first, *(s for s in rest if s not in first)]


def _stall_spans(report: ResilienceReport, job: JobTimeline, file: str) -> list[Span]:
    """Per stall not handled, the lines of the step printed before the gap and of the one after it (none after a
    gap to the job's stop): the gap is read from them."""
    if len(job.step_lines) != len(job.timeline.steps):
        return []
    ends = [s.end_s for s in job.timeline.steps]
    out: list[Span] = []
    for stall in (s for s in report.stalls if not s.handled):
        at = [i for i, e in enumerate(ends) if e == stall.start_s][:1]
        at += [i + 1 for i in at if i + 1 < len(ends) and ends[i + 1] == stall.end_s]
        out += [Span(file, job.step_lines[i], job.step_lines[i], 1) for i in at]
    return out


def _stall_check(declared: DeclaredCheck, report: ResilienceReport, stall_factor: float, log_span: list[Span],
                 event_spans: list[Span]) -> Check:
    """Every stall detected and acted on."""
    unhandled = [s for s in report.stalls if not s.handled]
    threshold = report.stall_threshold_s
    if unhandled:
        msg = " | ".join(f"no step from {s.start_s:.0f} s to {s.end_s:.0f} s ({s.duration_s:.0f} s): "
                         + ("never detected" if s.detected_s is None else "detected but never acted on")
                         for s in unhandled) + ". Enable hang detection that stops and restarts the job"
        return declared.judged(Status.FAIL, msg, measured=float(len(unhandled)), target=0.0, unit="stalls",
                               evidence=log_span + event_spans)
    msg = (f"{len(report.stalls)} stall(s) above {threshold:.0f} s, each detected and acted on"
           if report.stalls else f"no gap between steps above {(threshold or 0.0):.0f} s "
           f"({stall_factor:g} x mean step {(report.mean_step_s or 0.0):.1f} s)")
    return declared.judged(Status.PASS, msg, measured=float(len(report.stalls)), unit="stalls", evidence=log_span)


def _admin_check(found: _Found, events: Sequence[Event], severity: Severity, absent: Status) -> Check:
    """No administrator acted during the run: that needs the cluster's own event log."""
    declared = _declared(f"{PHASE}.no_admin_action", "No administrator acted during the run", severity)
    if not found.event_logs and found.unread_events:
        return declared.judged(Status.ERROR, f"{found.unread_events[0]}: the job event log cannot be read, so "
                               "whether an administrator acted cannot be told. Mend or re-export it")
    if not found.event_logs:
        return lacking(declared.judged(absent, "the bundle has no job event log (kind events): the cluster did not "
                                       "show that no administrator acted. Add the job's event log"))
    admin = [e for e in events if e.by is Actor.ADMINISTRATOR or e.type is EventType.ADMIN_ACTION]
    if admin:
        return declared.judged(Status.FAIL, "administrator action(s): " + "; ".join(
            f"{e.time_s:.0f} s {e.detail} on {e.node or '-'}" for e in admin), measured=float(len(admin)),
            target=0.0, unit="actions", evidence=_spans(admin))
    spans = [Span(log.file, 1, log.events[-1].line, len(log.events)) for log in found.event_logs]
    return declared.judged(Status.PASS, f"{sum(len(x.events) for x in found.event_logs)} events, none by an "
                           "administrator", measured=0.0, target=0.0, unit="actions", evidence=spans)
