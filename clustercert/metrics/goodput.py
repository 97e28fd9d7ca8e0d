"""Goodput of a training job's timeline under both definitions of DOMAIN.md section 7."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from clustercert.evidence.provenance import Span

__all__ = [
    "BadputKind",
    "CheckpointSave",
    "GoodputDefinition",
    "GoodputResult",
    "Interruption",
    "InterruptionCost",
    "Interval",
    "ReadinessGoodput",
    "StepCompletion",
    "Timeline",
    "compute_ml_goodput",
    "compute_readiness_goodput",
]


class GoodputDefinition(StrEnum):
    ML_GOODPUT = "google-ml-goodput-measurement"  # productive time / wall time, badput by kind
    READINESS_ENGINE = "nvidia-cluster-readiness-engine"  # per-interruption t_ch, t_re, t_rm and T_save


class BadputKind(StrEnum):
    STARTUP = "startup"
    DATA_LOADING = "data_loading"
    CHECKPOINT_SAVE = "checkpoint_save"
    WASTED_PROGRESS = "wasted_progress"
    INFRASTRUCTURE_RECOVERY = "infrastructure_recovery"
    OTHER = "other"


@dataclass(frozen=True)
class StepCompletion:
    step: int
    end_s: float


@dataclass(frozen=True)
class CheckpointSave:
    """A blocking checkpoint save of the state after `step`."""

    start_s: float
    end_s: float
    step: int


@dataclass(frozen=True)
class Interval:
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Interruption:
    """One interruption: when it happened, when the job was rescheduled, when training resumed.

    `last_checkpoint_s` overrides the time of the last checkpoint (default: the end of the last save
    finished by `interrupted_s`, or the previous resumption or job start when that is later).
    """

    interrupted_s: float
    scheduled_s: float
    resumed_s: float
    last_checkpoint_s: float | None = None


@dataclass(frozen=True)
class Timeline:
    """A job's life from its first start to `end_s`; times in seconds on one clock."""

    job_starts: tuple[float, ...]
    end_s: float
    steps: tuple[StepCompletion, ...]
    checkpoints: tuple[CheckpointSave, ...] = ()
    interruptions: tuple[Interruption, ...] = ()
    data_loading: tuple[Interval, ...] = ()  # time steps spent waiting on input
    evidence: tuple[Span, ...] = ()


@dataclass(frozen=True)
class GoodputResult:
    definition: GoodputDefinition
    goodput: float
    wall_s: float
    productive_s: float
    badput_s: dict[BadputKind, float]
    disruptions: int  # job starts after the first
    wasted_steps: tuple[int, ...]  # step numbers completed and later re-done
    evidence: tuple[Span, ...] = field(default=())


@dataclass(frozen=True)
class InterruptionCost:
    last_checkpoint_s: float
    lost_work_s: float  # t_ch
    reschedule_s: float  # t_re
    resume_s: float  # t_rm


@dataclass(frozen=True)
class ReadinessGoodput:
    definition: GoodputDefinition
    goodput: float
    wall_s: float
    lost_work_s: float
    reschedule_s: float
    resume_s: float
    save_s: float
    interruptions: tuple[InterruptionCost, ...]
    evidence: tuple[Span, ...] = field(default=())


def _check_timeline(t: Timeline) -> None:
    if not t.job_starts:
        raise ValueError("timeline: expected at least one job start, got none")
    if list(t.job_starts) != sorted(t.job_starts):
        raise ValueError(f"timeline: expected job starts in time order, got {list(t.job_starts)}")
    if t.end_s < t.job_starts[-1]:
        raise ValueError(f"timeline: end {t.end_s} is before the last job start {t.job_starts[-1]}")
    ends = [s.end_s for s in t.steps]
    if ends != sorted(ends):
        raise ValueError("timeline: expected step completions in time order")
    if ends and (ends[0] < t.job_starts[0] or ends[-1] > t.end_s):
        raise ValueError(f"timeline: steps must lie within [{t.job_starts[0]}, {t.end_s}]")
    intervals: list[CheckpointSave | Interval] = [*t.checkpoints, *t.data_loading]
    for iv in intervals:
        if iv.end_s < iv.start_s:
            raise ValueError(f"timeline: interval ends before it starts: {iv}")


def _union(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _intersect(xs: list[tuple[float, float]], ys: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    i = j = 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


class _Coverage:
    """Length of a disjoint sorted interval set inside [a, b], by binary search over prefix sums."""

    def __init__(self, merged: list[tuple[float, float]]) -> None:
        self._starts = [a for a, _ in merged]
        self._merged = merged
        self._prefix = [0.0]
        for a, b in merged:
            self._prefix.append(self._prefix[-1] + (b - a))

    def _upto(self, x: float) -> float:
        i = bisect.bisect_right(self._starts, x)
        if i == 0:
            return 0.0
        a, b = self._merged[i - 1]
        return self._prefix[i - 1] + (min(b, x) - a)

    def within(self, a: float, b: float) -> float:
        return max(0.0, self._upto(b) - self._upto(a)) if b > a else 0.0


def compute_ml_goodput(timeline: Timeline) -> GoodputResult:
    """Productive step time over wall time, with badput by kind (ml-goodput-measurement style).

    Each job start opens a segment. Its first logged step carries no start time, so the time from the
    job start to that step's end counts as startup; each later step is productive from the previous
    step's end to its own. A step number completed again later was wasted progress the first time(s).
    From a segment's last step (or its start, if it logged none) to the next job start is
    infrastructure recovery. Blocking checkpoint saves, then data-loading waits, are carved out of step
    and trailing time; whatever is left after the last step is other.
    """
    t = timeline
    _check_timeline(t)
    wall = t.end_s - t.job_starts[0]
    badput = dict.fromkeys(BadputKind, 0.0)
    saves = _union([(c.start_s, c.end_s) for c in t.checkpoints])
    loading = _union([(d.start_s, d.end_s) for d in t.data_loading])
    save_cov, load_cov = _Coverage(saves), _Coverage(loading)
    both_cov = _Coverage(_intersect(saves, loading))

    last_occurrence: dict[int, int] = {}
    for i, s in enumerate(t.steps):
        last_occurrence[s.step] = i

    def carve(a: float, b: float, kind: BadputKind | None) -> float:
        """Book [a, b] under `kind` (None = productive) after carving out saves and data loading."""
        save = save_cov.within(a, b)
        load = load_cov.within(a, b) - both_cov.within(a, b)
        badput[BadputKind.CHECKPOINT_SAVE] += save
        badput[BadputKind.DATA_LOADING] += load
        rest = (b - a) - save - load
        if kind is not None:
            badput[kind] += rest
            return 0.0
        return rest

    productive = 0.0
    wasted: set[int] = set()
    starts = [*t.job_starts, math.inf]
    step_ends = [s.end_s for s in t.steps]
    for k, start in enumerate(t.job_starts):
        nxt = starts[k + 1]
        lo = bisect.bisect_left(step_ends, start)
        hi = bisect.bisect_left(step_ends, nxt) if math.isfinite(nxt) else len(step_ends)
        seg_end = t.end_s if not math.isfinite(nxt) else nxt
        if lo == hi:
            kind = BadputKind.INFRASTRUCTURE_RECOVERY if math.isfinite(nxt) else BadputKind.STARTUP
            badput[kind] += seg_end - start
            continue
        badput[BadputKind.STARTUP] += step_ends[lo] - start
        for i in range(lo + 1, hi):
            redone = last_occurrence[t.steps[i].step] != i
            if redone:
                wasted.add(t.steps[i].step)
            step_kind = BadputKind.WASTED_PROGRESS if redone else None
            productive += carve(step_ends[i - 1], step_ends[i], step_kind)
        if last_occurrence[t.steps[lo].step] != lo:
            wasted.add(t.steps[lo].step)
        if math.isfinite(nxt):
            badput[BadputKind.INFRASTRUCTURE_RECOVERY] += seg_end - step_ends[hi - 1]
        else:
            carve(step_ends[hi - 1], seg_end, BadputKind.OTHER)
    goodput = min(1.0, max(0.0, productive / wall)) if wall > 0 else 0.0
    return GoodputResult(
        definition=GoodputDefinition.ML_GOODPUT,
        goodput=goodput,
        wall_s=wall,
        productive_s=productive,
        badput_s=badput,
        disruptions=len(t.job_starts) - 1,
        wasted_steps=tuple(sorted(wasted)),
        evidence=t.evidence,
    )


def compute_readiness_goodput(timeline: Timeline) -> ReadinessGoodput:
    """(t_wall - sum(t_ch + t_rm) - sum t_re - T_save) / (t_wall - sum t_re), DOMAIN.md section 7.

    Lost work t_ch runs from the last checkpoint; when the job resumed (or started) after that
    checkpoint, from the resumption, since work before it was already booked to earlier interruptions.
    """
    t = timeline
    _check_timeline(t)
    t0, wall = t.job_starts[0], t.end_s - t.job_starts[0]
    save_ends = sorted(c.end_s for c in t.checkpoints)
    costs: list[InterruptionCost] = []
    previous_resume = t0
    for i, it in enumerate(sorted(t.interruptions, key=lambda x: x.interrupted_s)):
        if not (previous_resume <= it.interrupted_s <= it.scheduled_s <= it.resumed_s <= t.end_s):
            raise ValueError(
                f"interruption {i}: expected previous resume <= interrupted <= scheduled <= resumed <= end, "
                f"got {previous_resume}, {it.interrupted_s}, {it.scheduled_s}, {it.resumed_s}, {t.end_s}"
            )
        if it.last_checkpoint_s is not None:
            ckpt = it.last_checkpoint_s
        else:
            j = bisect.bisect_right(save_ends, it.interrupted_s)
            ckpt = save_ends[j - 1] if j else t0
        ckpt = max(ckpt, previous_resume)
        costs.append(
            InterruptionCost(
                last_checkpoint_s=ckpt,
                lost_work_s=it.interrupted_s - ckpt,
                reschedule_s=it.scheduled_s - it.interrupted_s,
                resume_s=it.resumed_s - it.scheduled_s,
            )
        )
        previous_resume = it.resumed_s
    t_ch = sum(c.lost_work_s for c in costs)
    t_re = sum(c.reschedule_s for c in costs)
    t_rm = sum(c.resume_s for c in costs)
    t_save = sum(c.end_s - c.start_s for c in t.checkpoints)
    denominator = wall - t_re
    goodput = (wall - (t_ch + t_rm) - t_re - t_save) / denominator if denominator > 0 else 0.0
    return ReadinessGoodput(
        definition=GoodputDefinition.READINESS_ENGINE,
        goodput=min(1.0, max(0.0, goodput)),
        wall_s=wall,
        lost_work_s=t_ch,
        reschedule_s=t_re,
        resume_s=t_rm,
        save_s=t_save,
        interruptions=tuple(costs),
        evidence=t.evidence,
    )
