"""MLPerf Training time-to-train score from run durations (DOMAIN.md section 8)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from clustercert.evidence.provenance import Span

__all__ = ["MlperfRun", "MlperfScore", "RunStatus", "score_time_to_train"]


class RunStatus(StrEnum):
    SUCCESS = "success"
    ABORTED = "aborted"  # run_stop with another status
    MISSING_STOP = "missing-stop"  # no run_stop at all


@dataclass(frozen=True)
class MlperfRun:
    """One run's time from run_start to run_stop, in minutes; a non-success run's time is ignored."""

    run_id: str
    minutes: float
    status: RunStatus
    evidence: tuple[Span, ...] = ()


@dataclass(frozen=True)
class MlperfScore:
    """Olympic mean of the run times (times the scaling factor); `minutes` is inf when invalid."""

    minutes: float
    valid: bool
    reason: str | None
    runs: int
    failed_runs: int
    dropped: tuple[str, ...]  # run ids of the fastest and slowest runs left out
    scaling_factor: float
    evidence: tuple[Span, ...] = field(default=())


def score_time_to_train(runs: list[MlperfRun], scaling_factor: float = 1.0) -> MlperfScore:
    """Sort times (non-success = infinite), drop one fastest and one slowest, average the rest, scale."""
    if scaling_factor <= 0 or not math.isfinite(scaling_factor):
        raise ValueError(f"scaling_factor must be a positive number, got {scaling_factor}")
    evidence = tuple(span for run in runs for span in run.evidence)
    failed = sum(1 for run in runs if run.status is not RunStatus.SUCCESS)
    for run in runs:
        if run.status is RunStatus.SUCCESS and not (math.isfinite(run.minutes) and run.minutes > 0):
            raise ValueError(f"run {run.run_id}: a successful run needs a positive time, got {run.minutes}")

    def invalid(reason: str) -> MlperfScore:
        return MlperfScore(math.inf, False, reason, len(runs), failed, (), scaling_factor, evidence)

    if len(runs) < 3:
        return invalid(f"an olympic mean needs at least 3 runs, got {len(runs)}")
    if failed > 1:
        return invalid(f"{failed} runs did not finish with status success; at most 1 may")
    timed = sorted(
        ((run.minutes if run.status is RunStatus.SUCCESS else math.inf), run.run_id) for run in runs
    )
    kept = timed[1:-1]
    mean = sum(t for t, _ in kept) / len(kept)
    dropped = (timed[0][1], timed[-1][1])
    return MlperfScore(
        mean * scaling_factor, True, None, len(runs), failed, dropped, scaling_factor, evidence
    )
