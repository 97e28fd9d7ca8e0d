"""Resilience of a job from its steps and event log: stalls, faults, restarts, lost work, admin actions."""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from clustercert.evidence.provenance import Span
from clustercert.metrics.goodput import StepCompletion

__all__ = [
    "Actor",
    "Event",
    "EventType",
    "FaultRecovery",
    "ResilienceReport",
    "ResilienceRules",
    "Stall",
    "analyze_resilience",
]


class EventType(StrEnum):
    FAULT = "fault"  # a fatal fault (injected, or found in the logs)
    DETECTED = "detected"  # the cluster's monitoring reported a fault, hang or straggler
    JOB_STOPPED = "job-stopped"
    JOB_STARTED = "job-started"  # the first start and every restart; `nodes` is the allocation
    NODE_EXCLUDED = "node-excluded"
    NODE_REPLACED = "node-replaced"
    CHECKPOINT_SAVED = "checkpoint-saved"  # `step` is the step saved
    ADMIN_ACTION = "admin-action"


class Actor(StrEnum):
    AUTOMATION = "automation"
    ADMINISTRATOR = "administrator"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Event:
    time_s: float
    type: EventType
    node: str | None = None
    detail: str = ""
    by: Actor = Actor.AUTOMATION
    nodes: tuple[str, ...] = ()
    step: int | None = None
    evidence: tuple[Span, ...] = ()


@dataclass(frozen=True)
class Stall:
    """No new step for longer than `stall_factor` x the mean step time."""

    start_s: float  # the last step's end
    end_s: float  # the next step, or the job's stop
    duration_s: float
    detected_s: float | None
    acted_s: float | None  # first stop or restart after the stall began

    @property
    def handled(self) -> bool:
        return self.detected_s is not None and self.acted_s is not None


@dataclass(frozen=True)
class FaultRecovery:
    fault: Event
    detected_s: float | None
    time_to_detect_s: float | None
    restarted_s: float | None
    time_to_restart_s: float | None
    restart_nodes: tuple[str, ...]
    excludes_faulty_node: bool | None  # None when the fault names no node or the restart no allocation
    automatic: bool  # no administrator acted between the fault and the restart
    last_step_before: int | None
    resumed_from_step: int | None  # the first step after the restart, less one
    lost_steps: int | None
    lost_work_s: float | None  # fault time less the end of the step resumed from
    within_checkpoint_interval: bool | None
    restarted_in_time: bool | None


@dataclass(frozen=True)
class ResilienceReport:
    mean_step_s: float | None
    stall_threshold_s: float | None
    checkpoint_interval_steps: int | None
    restarts: int
    stalls: tuple[Stall, ...]
    faults: tuple[FaultRecovery, ...]
    admin_actions: tuple[Event, ...]
    evidence: tuple[Span, ...] = field(default=())


def _first(
    events: Sequence[Event], types: set[EventType], after: float, before: float | None = None
) -> Event | None:
    for e in events:
        if e.type in types and e.time_s >= after and (before is None or e.time_s <= before):
            return e
    return None


def _checkpoint_interval(events: Sequence[Event]) -> int | None:
    saved = sorted({e.step for e in events if e.type is EventType.CHECKPOINT_SAVED and e.step is not None})
    gaps = [b - a for a, b in itertools.pairwise(saved)]
    return int(statistics.median(gaps)) if gaps else None


@dataclass(frozen=True)
class ResilienceRules:
    """How a job's steps and events are judged: a gap between steps longer than `stall_factor` x the mean step
    time plus `time_resolution_s` is a stall (the first `warmup_steps` of each job start count neither way); a
    restart within `restart_max_s` of its fault is in time; `checkpoint_interval_steps` None is the median gap
    between saved steps."""

    stall_factor: float = 3.0
    warmup_steps: int = 2
    restart_max_s: float = 900.0
    checkpoint_interval_steps: int | None = None
    time_resolution_s: float = 0.0


def analyze_resilience(
    steps: Sequence[StepCompletion],
    events: Sequence[Event],
    end_s: float,
    rules: ResilienceRules | None = None,
) -> ResilienceReport:
    """Stalls, fault recoveries and administrator actions of one job.

    Job starts (JOB_STARTED events) split the steps into segments; the first `rules.warmup_steps` steps of
    each segment count neither toward the mean step time nor as stalls. A stall is a gap between steps
    of one segment, or from a segment's last step to its stop, longer than stall_factor x mean plus
    `time_resolution_s`: step times placed from timestamps printed to the second may sit up to that much early,
    so a shorter gap is not shown to be a stall.
    The checkpoint interval is the median gap between saved steps unless given.
    """
    rules = rules or ResilienceRules()
    if rules.stall_factor <= 1:
        raise ValueError(f"stall_factor must exceed 1, got {rules.stall_factor}")
    evs = sorted(events, key=lambda e: e.time_s)
    ordered = sorted(steps, key=lambda s: s.end_s)
    ends = [s.end_s for s in ordered]
    starts = [e.time_s for e in evs if e.type is EventType.JOB_STARTED] or [min(ends, default=0.0)]
    bounds = [*starts[1:], end_s]

    segments: list[list[StepCompletion]] = []  # the steps of each job start, its warm-up steps left out
    for k, start in enumerate(starts):
        lo, hi = bisect.bisect_left(ends, start), bisect.bisect_left(ends, bounds[k])
        if k == len(starts) - 1:
            hi = len(ends)
        segments.append(ordered[lo:hi][rules.warmup_steps:])
    intervals = [(a.end_s, b.end_s) for seg in segments for a, b in itertools.pairwise(seg)]
    mean = statistics.fmean(b - a for a, b in intervals) if intervals else None
    threshold = rules.stall_factor * mean if mean is not None else None
    stalls = _stalls(segments, bounds, evs, threshold + rules.time_resolution_s) if threshold is not None else []
    interval = (
        rules.checkpoint_interval_steps if rules.checkpoint_interval_steps is not None else _checkpoint_interval(evs)
    )
    faults = tuple(
        _recovery(f, evs, ordered, interval, rules.restart_max_s) for f in evs if f.type is EventType.FAULT
    )
    admin = tuple(e for e in evs if e.by is Actor.ADMINISTRATOR or e.type is EventType.ADMIN_ACTION)
    restarts = max(0, sum(1 for e in evs if e.type is EventType.JOB_STARTED) - 1)
    return ResilienceReport(
        mean_step_s=mean,
        stall_threshold_s=threshold,
        checkpoint_interval_steps=interval,
        restarts=restarts,
        stalls=tuple(stalls),
        faults=faults,
        admin_actions=admin,
        evidence=tuple(span for e in evs for span in e.evidence),
    )


def _stalls(segments: Sequence[Sequence[StepCompletion]], bounds: Sequence[float], evs: Sequence[Event],
            longest: float) -> list[Stall]:
    """The gaps longer than `longest` between the steps of each segment, or from its last step to its stop (or
    the next job start), each with when it was detected and acted on."""
    stalls: list[Stall] = []
    stop_types = {EventType.JOB_STOPPED}  # a fault does not end a hang; stopping the job does
    for k, kept in enumerate(segments):
        gaps = [(a.end_s, b.end_s) for a, b in itertools.pairwise(kept)]
        if kept:
            stop = _first(evs, stop_types, kept[-1].end_s, bounds[k])
            gaps.append((kept[-1].end_s, stop.time_s if stop else bounds[k]))
        for a, b in gaps:
            if b - a > longest:
                det = _first(evs, {EventType.DETECTED}, a)
                act = _first(evs, {EventType.JOB_STOPPED, EventType.JOB_STARTED}, a)
                stalls.append(Stall(a, b, b - a, det.time_s if det else None, act.time_s if act else None))
    return stalls


def _recovery(
    fault: Event,
    evs: Sequence[Event],
    steps: Sequence[StepCompletion],
    interval: int | None,
    restart_max_s: float,
) -> FaultRecovery:
    t = fault.time_s
    det = _first(evs, {EventType.DETECTED}, t)
    restart = _first(evs, {EventType.JOB_STARTED}, t)
    before = [s for s in steps if s.end_s <= t]
    last_before = max((s.step for s in before), default=None)
    resumed: int | None = None
    lost_s: float | None = None
    if restart is not None:
        after = [s for s in steps if s.end_s > restart.time_s]
        if after:
            resumed = after[0].step - 1
            saved_end = [s.end_s for s in before if s.step == resumed]
            lost_s = t - saved_end[-1] if saved_end else None
    lost = last_before - resumed if last_before is not None and resumed is not None else None
    until = restart.time_s if restart is not None else None
    admin_between = any(
        (e.by is Actor.ADMINISTRATOR or e.type is EventType.ADMIN_ACTION) and t <= e.time_s <= (until or t)
        for e in evs
    )
    automatic = restart is not None and restart.by is not Actor.ADMINISTRATOR and not admin_between
    excludes = None
    if restart is not None and restart.nodes and fault.node is not None:
        excludes = fault.node not in restart.nodes
    return FaultRecovery(
        fault=fault,
        detected_s=det.time_s if det else None,
        time_to_detect_s=det.time_s - t if det else None,
        restarted_s=until,
        time_to_restart_s=until - t if until is not None else None,
        restart_nodes=restart.nodes if restart is not None else (),
        excludes_faulty_node=excludes,
        automatic=automatic,
        last_step_before=last_before,
        resumed_from_step=resumed,
        lost_steps=lost,
        lost_work_s=lost_s,
        within_checkpoint_interval=(lost <= interval) if lost is not None and interval is not None else None,
        restarted_in_time=(until - t <= restart_max_s) if until is not None else None,
    )
