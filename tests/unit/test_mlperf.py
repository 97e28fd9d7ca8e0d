"""MLPerf time-to-train scoring against hand-computed olympic means."""

from __future__ import annotations

import math
import re

import pytest

from clustercert.evidence.provenance import Span
from clustercert.metrics.mlperf import MlperfRun, RunStatus, score_time_to_train


def _runs(*times: float | None) -> list[MlperfRun]:
    return [
        MlperfRun(
            f"r{i}", t if t is not None else 0.0, RunStatus.SUCCESS if t is not None else RunStatus.ABORTED
        )
        for i, t in enumerate(times)
    ]


def test_three_runs_is_the_median() -> None:
    score = score_time_to_train(_runs(12.0, 10.0, 11.0))
    assert score.valid and score.minutes == pytest.approx(11.0)
    assert score.dropped == ("r1", "r0")


def test_five_runs_olympic_mean() -> None:
    # sorted 9, 10, 11, 12, 20 -> drop 9 and 20 -> (10 + 11 + 12) / 3 = 11
    score = score_time_to_train(_runs(20.0, 10.0, 9.0, 12.0, 11.0))
    assert score.minutes == pytest.approx(11.0)


def test_scaling_factor_multiplies() -> None:
    # (10 + 11 + 12) / 3 = 11, x 1.25 = 13.75
    score = score_time_to_train(_runs(20.0, 10.0, 9.0, 12.0, 11.0), scaling_factor=1.25)
    assert score.minutes == pytest.approx(13.75)


def test_one_failure_counts_as_slowest_and_is_dropped() -> None:
    # times 10, 11, 12, 13, inf -> drop 10 and inf -> (11 + 12 + 13) / 3 = 12
    score = score_time_to_train(_runs(10.0, 11.0, None, 12.0, 13.0))
    assert score.valid and score.failed_runs == 1
    assert score.minutes == pytest.approx(12.0)
    assert score.dropped == ("r0", "r2")


def test_two_failures_invalid() -> None:
    score = score_time_to_train(_runs(10.0, None, 12.0, None, 13.0))
    assert not score.valid and math.isinf(score.minutes)
    assert score.reason == "2 runs did not finish with status success; at most 1 may"


def test_too_few_runs_invalid() -> None:
    score = score_time_to_train(_runs(10.0, 11.0))
    assert not score.valid and score.reason == "an olympic mean needs at least 3 runs, got 2"


def test_evidence_spans_are_kept() -> None:
    spans = [Span(f"mlperf/r{i}.log", 1, 90, 90) for i in range(3)]
    runs = [MlperfRun(f"r{i}", 10.0 + i, RunStatus.SUCCESS, (spans[i],)) for i in range(3)]
    assert score_time_to_train(runs).evidence == tuple(spans)


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="scaling_factor must be a positive number, got 0"):
        score_time_to_train(_runs(1.0, 2.0, 3.0), scaling_factor=0)
    with pytest.raises(
        ValueError, match=re.escape("run r1: a successful run needs a positive time, got -1.0")
    ):
        score_time_to_train(_runs(1.0, -1.0, 3.0))
