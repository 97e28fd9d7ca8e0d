"""Throughput of one training run: windowed step time, tokens/s/GPU, TFLOP/s/GPU and MFU."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from clustercert.metrics.stats import bootstrap_mean_interval, mean_stats
from clustercert.parsers.training import NanMark, TrainingStep

__all__ = [
    "Comparison",
    "RunThroughput",
    "WindowProblem",
    "compare_with_baseline",
    "measure_window",
    "mfu",
    "tflops_per_gpu",
    "tokens_per_s_per_gpu",
]


@dataclass(frozen=True)
class WindowProblem:
    """Why a run's measurement window cannot be used; line is where the evidence shows it, if anywhere."""

    message: str
    line: int | None = None
    field: str | None = None


@dataclass(frozen=True)
class RunThroughput:
    window: tuple[int, int]
    step_times: tuple[float, ...]
    lines: tuple[int, ...]
    mean_s: float
    std_s: float
    ci_low_s: float
    ci_high_s: float


def tokens_per_s_per_gpu(seq_len: int, gbs: int, step_time_s: float, gpus: int) -> float:
    return seq_len * gbs / step_time_s / gpus


def tflops_per_gpu(flops_per_sequence: float, gbs: int, step_time_s: float, gpus: int) -> float:
    return flops_per_sequence * gbs / step_time_s / gpus / 1e12


def mfu(flops_per_sequence: float, gbs: int, step_time_s: float, gpus: int, peak_tflops: float) -> float:
    """Model FLOPs utilization: achieved model FLOP/s per GPU over the precision's dense peak."""
    return tflops_per_gpu(flops_per_sequence, gbs, step_time_s, gpus) / peak_tflops


def measure_window(
    steps: Sequence[TrainingStep],
    nan_marks: Sequence[NanMark],
    window: tuple[int, int],
    *,
    resamples: int,
    seed: int,
) -> RunThroughput | list[WindowProblem]:
    """Mean, sample std and bootstrap CI of step time over the printed iterations `window` (both included).

    Returns every reason the run is invalid instead, when there is any: a window iteration missing or
    printed twice, a step time that is not a positive number, a nan loss or grad norm, or a final
    iteration that was never logged.
    """
    first, last = window
    problems: list[WindowProblem] = [
        WindowProblem(f"the log prints a nan/inf {m.field}", m.line, m.field) for m in nan_marks
    ]
    counts = Counter(s.iteration for s in steps if first <= s.iteration <= last)
    for s in steps:
        if first <= s.iteration <= last and counts[s.iteration] > 1:
            problems.append(WindowProblem(f"iteration {s.iteration} of the window is printed more than once", s.line))
            counts[s.iteration] = 1
    missing = [i for i in range(first, last + 1) if i not in counts]
    if missing:
        after = next((s.line for s in steps if s.iteration > missing[0]), steps[-1].line if steps else None)
        problems.append(
            WindowProblem(f"iteration(s) {_ranges(missing)} of the window {first}-{last} are missing", after,
                          "iteration")
        )
    in_window = [s for s in steps if first <= s.iteration <= last]
    for s in in_window:
        if s.step_time_s is None or not math.isfinite(s.step_time_s) or s.step_time_s <= 0:
            problems.append(WindowProblem(f"step time {s.step_time_s!r} is not a positive number", s.line, "step time"))
    final = steps[-1] if steps else None
    if final is not None and final.max_iteration is not None:
        reached = max((s.global_step if s.global_step is not None else s.iteration) for s in steps)
        if reached < final.max_iteration:
            problems.append(
                WindowProblem(f"the final iteration {final.max_iteration} was never logged (last: {reached})",
                              final.line, "iteration")
            )
    if problems:
        return problems
    times = [float(s.step_time_s) for s in in_window if s.step_time_s is not None]
    stats = mean_stats(times)
    low, high = bootstrap_mean_interval(times, resamples=resamples, seed=seed)
    return RunThroughput(
        window=window, step_times=tuple(times), lines=tuple(s.line for s in in_window),
        mean_s=stats.mean, std_s=stats.std, ci_low_s=low, ci_high_s=high,
    )


@dataclass(frozen=True)
class Comparison:
    """Step-time comparison with a baseline: ratio = t_baseline / t_measured, positive delta is faster."""

    ratio: float
    delta_pct: float
    ci_low_pct: float
    ci_high_pct: float
    passed: bool


# A ratio within float noise of the threshold is at it, not above it ("> 95 %" is strict).
_EXACT = 1e-12


def compare_with_baseline(
    measured: RunThroughput, baseline_step_s: float, pass_ratio: float,
    interval_s: tuple[float, float] | None = None,
) -> Comparison:
    """The run's mean step time against the baseline's; `interval_s` (a step-time interval, e.g. the
    hierarchical bootstrap over every repeat) replaces the run's own step bootstrap for the delta's CI."""
    ratio = baseline_step_s / measured.mean_s
    ci_low_s, ci_high_s = interval_s if interval_s is not None else (measured.ci_low_s, measured.ci_high_s)
    # A slower upper bound of step time is the lower bound of the delta.
    low = 100.0 * (baseline_step_s / ci_high_s - 1.0)
    high = 100.0 * (baseline_step_s / ci_low_s - 1.0)
    return Comparison(ratio=ratio, delta_pct=100.0 * (ratio - 1.0), ci_low_pct=low, ci_high_pct=high,
                      passed=ratio - pass_ratio > _EXACT)


def _ranges(values: Sequence[int]) -> str:
    out: list[str] = []
    start = prev = values[0]
    for v in values[1:]:
        if v == prev + 1:
            prev = v
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = v
    out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(out)
