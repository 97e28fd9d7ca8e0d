"""Throughput of one training run: windowed step time, tokens/s/GPU, TFLOP/s/GPU and MFU."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from clustercert.metrics.stats import bootstrap_mean_interval, mean_stats
from clustercert.parsers.training import NanMark, TrainingStep, step_column

__all__ = [
    "Comparison",
    "RunThroughput",
    "WindowProblem",
    "compare_printed_tflops",
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
    # the mean of the TFLOP/s per GPU the log prints over the same window (as NVIDIA's llmb-run reports it beside
    # the step time), over the window's steps that print one; None when none does
    tflops_mean: float | None = None
    tflops_steps: int = 0


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
    problems: list[WindowProblem] = [WindowProblem(_nan_message(m), m.line, m.field) for m in nan_marks]
    # column by column (a bulk reading's StepTable keeps its columns: no step object is built)
    iterations, lines = step_column(steps, "iteration"), step_column(steps, "line")
    step_times = step_column(steps, "step_time_s")
    in_window = [i for i, iteration in enumerate(iterations) if first <= iteration <= last]
    counts = Counter(iterations[i] for i in in_window)
    for i in in_window:
        if counts[iterations[i]] > 1:
            problems.append(WindowProblem(f"iteration {iterations[i]} of the window is printed more than once",
                                          lines[i]))
            counts[iterations[i]] = 1
    missing = [i for i in range(first, last + 1) if i not in counts]
    if missing:
        after = next((line for iteration, line in zip(iterations, lines, strict=True) if iteration > missing[0]),
                     lines[-1] if lines else None)
        problems.append(
            WindowProblem(f"iteration(s) {_ranges(missing)} of the window {first}-{last} are missing", after,
                          "iteration")
        )
    for i in in_window:
        seconds = step_times[i]
        if seconds is None or not math.isfinite(seconds) or seconds <= 0:
            problems.append(WindowProblem(f"step time {seconds!r} is not a positive number", lines[i], "step time"))
    most = step_column(steps, "max_iteration")[-1] if steps else None
    if most is not None:
        reached = max(step if step is not None else iteration
                      for step, iteration in zip(step_column(steps, "global_step"), iterations, strict=True))
        if reached < most:
            problems.append(
                WindowProblem(f"the final iteration {most} was never logged (last: {reached})", lines[-1], "iteration")
            )
    if problems:
        return problems
    times = [float(step_times[i]) for i in in_window if step_times[i] is not None]
    stats = mean_stats(times)
    low, high = bootstrap_mean_interval(times, resamples=resamples, seed=seed)
    printed = step_column(steps, "tflops_per_gpu")
    tflops = [float(printed[i]) for i in in_window if printed[i] is not None and math.isfinite(printed[i])]
    return RunThroughput(
        window=window, step_times=tuple(times), lines=tuple(lines[i] for i in in_window),
        mean_s=stats.mean, std_s=stats.std, ci_low_s=low, ci_high_s=high,
        tflops_mean=math.fsum(tflops) / len(tflops) if tflops else None, tflops_steps=len(tflops),
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


def compare_printed_tflops(
    mean_tflops: float, baseline_tflops: float, pass_ratio: float, interval: tuple[float, float],
) -> Comparison:
    """The mean TFLOP/s per GPU a log prints over the window against a TFLOP/s baseline: ratio = measured /
    baseline (more TFLOP/s is faster); `interval` is a TFLOP/s interval of that mean."""
    ratio = mean_tflops / baseline_tflops
    return Comparison(ratio=ratio, delta_pct=100.0 * (ratio - 1.0),
                      ci_low_pct=100.0 * (interval[0] / baseline_tflops - 1.0),
                      ci_high_pct=100.0 * (interval[1] / baseline_tflops - 1.0), passed=ratio - pass_ratio > _EXACT)


def _nan_message(mark: NanMark) -> str:
    """What a nan or inf value means for the run, with what the log's own nan count says beside it."""
    if mark.counted == 0:
        return (f"the log prints a nan/inf {mark.field} while its own count on that line reads 'number of nan "
                "iterations: 0' (Megatron counts only skipped iterations whose loss is nan); the run is invalid all "
                "the same (NVIDIA's llmb-run: a nan grad norm anywhere in the log)")
    return f"the log prints a nan/inf {mark.field}"


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
