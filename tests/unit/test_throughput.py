"""Windowed step time, comparison and MFU against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from clustercert.metrics.throughput import (
    RunThroughput,
    compare_with_baseline,
    measure_window,
    mfu,
    tokens_per_s_per_gpu,
)
from clustercert.parsers.training import NanMark, TrainingStep


def _steps(times: dict[int, float], max_it: int = 9) -> list[TrainingStep]:
    return [TrainingStep(iteration=i, step_time_s=t, line=100 + i, max_iteration=max_it) for i, t in times.items()]


def test_window_mean_and_sample_std_by_hand() -> None:
    steps = _steps({i: 1.0 for i in range(3)} | {3: 2.0, 4: 4.0, 5: 6.0} | {i: 9.0 for i in range(6, 10)})
    got = measure_window(steps, [], (3, 5), resamples=500, seed=1)
    assert isinstance(got, RunThroughput)
    assert got.mean_s == pytest.approx(4.0)
    assert got.std_s == pytest.approx(2.0)  # sqrt(((2-4)^2 + 0 + (6-4)^2) / 2)
    assert got.lines == (103, 104, 105)
    assert 2.0 <= got.ci_low_s <= 4.0 <= got.ci_high_s <= 6.0


def test_bootstrap_is_seeded() -> None:
    steps = _steps({i: 1.0 + 0.1 * (i % 3) for i in range(10)})
    a = measure_window(steps, [], (2, 8), resamples=300, seed=5)
    b = measure_window(steps, [], (2, 8), resamples=300, seed=5)
    assert a == b


def test_missing_window_iteration_names_the_line_after_the_gap() -> None:
    times = {i: 1.0 for i in range(10) if i != 6}
    got = measure_window(_steps(times), [], (3, 8), resamples=100, seed=1)
    assert isinstance(got, list)
    assert "iteration(s) 6 of the window 3-8 are missing" in got[0].message
    assert got[0].line == 107


def test_duplicate_window_iteration_is_a_problem() -> None:
    steps = _steps({i: 1.0 for i in range(10)})
    steps.insert(6, TrainingStep(iteration=5, step_time_s=1.0, line=999, max_iteration=9))
    got = measure_window(steps, [], (3, 8), resamples=100, seed=1)
    assert isinstance(got, list)
    assert any("printed more than once" in p.message for p in got)


def test_nan_grad_norm_anywhere_invalidates_the_run() -> None:
    got = measure_window(_steps({i: 1.0 for i in range(10)}), [NanMark(77, "grad norm")], (3, 8), resamples=10, seed=1)
    assert isinstance(got, list)
    assert got[0].line == 77 and "nan" in got[0].message


def test_final_iteration_never_logged() -> None:
    got = measure_window(_steps({i: 1.0 for i in range(9)}, max_it=49), [], (3, 8), resamples=10, seed=1)
    assert isinstance(got, list)
    assert "final iteration 49 was never logged" in got[0].message


def test_negative_step_time_in_window() -> None:
    got = measure_window(_steps({i: (-1.0 if i == 4 else 1.0) for i in range(10)}), [], (3, 8), resamples=10, seed=1)
    assert isinstance(got, list)
    assert got[0].line == 104


def test_comparison_ratio_and_threshold() -> None:
    measured = RunThroughput((35, 44), (5.0,) * 10, tuple(range(10)), 5.0, 0.0, 4.9, 5.1)
    cmp = compare_with_baseline(measured, 5.5, 0.95)
    assert cmp.ratio == pytest.approx(1.1)
    assert cmp.delta_pct == pytest.approx(10.0)
    assert cmp.ci_low_pct == pytest.approx(100 * (5.5 / 5.1 - 1))
    assert cmp.ci_high_pct == pytest.approx(100 * (5.5 / 4.9 - 1))
    assert cmp.passed
    slow = RunThroughput((35, 44), (6.0,) * 10, tuple(range(10)), 6.0, 0.0, 6.0, 6.0)
    assert not compare_with_baseline(slow, 5.7, 0.95).passed  # 5.7 / 6.0 = 0.95 exactly: not above


def test_tokens_and_mfu_from_domain_worked_numbers() -> None:
    # DOMAIN.md section 4: Grok-1 BF16, GBS 1024, 7.324 s on 512 GB200 -> 47.64 % with 4.27405e15 FLOPs/sequence.
    assert mfu(4.27405e15, 1024, 7.324, 512, 2450) == pytest.approx(0.4764, rel=3e-4)
    # Llama 3 70B illustrative baseline: 2048 x 8192 / (4224 x 512) = 7.758 s.
    assert tokens_per_s_per_gpu(8192, 2048, 7.758, 512) == pytest.approx(4224, rel=1e-3)
    assert math.isclose(mfu(1.0e15, 10, 2.0, 5, 1000.0), 1.0)
