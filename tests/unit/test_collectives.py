"""Collective bus bandwidth against DOMAIN.md section 6 and hand-computed cases."""

from __future__ import annotations

import math

import pytest

from clustercert.evidence.provenance import Span
from clustercert.metrics.collectives import (
    BusbwBasis,
    BusbwSample,
    Collective,
    CollectiveRun,
    Scope,
    busbw_factor,
    find_degraded_pairs,
    judge_collective,
    large_message_busbw,
    plausibility_ceiling_gbps,
)

GIB = 1 << 30
TARGETS = {"nvlink-domain": {"all_reduce": 360.0}, "pair": {"all_reduce": 40.0}}


@pytest.mark.parametrize(
    ("collective", "ranks", "factor"),
    [
        (Collective.ALL_REDUCE, 8, 1.75),  # 2 x 7 / 8
        (Collective.ALL_REDUCE, 72, 142 / 72),  # 2 x 71 / 72
        (Collective.ALL_REDUCE, 1, 0.0),  # a single rank moves nothing
        (Collective.ALL_GATHER, 8, 0.875),
        (Collective.REDUCE_SCATTER, 16, 0.9375),
        (Collective.ALLTOALL, 4, 0.75),
        (Collective.BROADCAST, 8, 1.0),
        (Collective.REDUCE, 8, 1.0),
        (Collective.SENDRECV, 2, 1.0),
    ],
)
def test_busbw_factor(collective: Collective, ranks: int, factor: float) -> None:
    assert busbw_factor(collective, ranks) == pytest.approx(factor)


def test_plausibility_ceiling_is_twice_nvlink() -> None:
    assert plausibility_ceiling_gbps(450) == 900  # H100
    assert plausibility_ceiling_gbps(900) == 1800  # GB200


SAMPLES = (
    BusbwSample(1 << 20, 100.0),
    BusbwSample(512 << 20, 470.0),  # larger than any >= 1 GiB value but below the threshold
    BusbwSample(GIB, 450.0),
    BusbwSample(GIB, 455.0, in_place=True),
    BusbwSample(8 * GIB, 440.0),
)


def test_large_message_busbw_ignores_small_sizes() -> None:
    assert large_message_busbw(SAMPLES, GIB) == (455.0, GIB, BusbwBasis.LARGE_MESSAGES)
    assert large_message_busbw(SAMPLES, 16 * GIB) == (470.0, 512 << 20, BusbwBasis.ALL_SIZES)
    assert large_message_busbw((), GIB) is None


def test_judge_against_target() -> None:
    span = Span("nccl/all_reduce.log", 30, 60, 31)
    run = CollectiveRun(Collective.ALL_REDUCE, Scope.NVLINK_DOMAIN, 8, SAMPLES, evidence=(span,))
    result = judge_collective(run, TARGETS, 450, GIB)
    assert result.busbw_gbps == 455.0 and result.at_size_bytes == GIB
    assert result.target_gbps == 360.0
    assert result.ratio == pytest.approx(455 / 360)  # 1.2639
    assert result.meets_target is True and result.problem is None and not result.implausible
    assert result.evidence == (span,)


def test_real_sample_maxima_stay_below_the_ceiling() -> None:
    # DOMAIN.md section 6: real H100 samples reach 482 GB/s (one node) and 364 GB/s (10 nodes).
    for busbw, scope in ((482.0, Scope.NVLINK_DOMAIN), (364.0, Scope.FULL_SCALE)):
        run = CollectiveRun(Collective.ALL_REDUCE, scope, 8, (BusbwSample(8 * GIB, busbw),))
        result = judge_collective(run, TARGETS, 450, GIB)
        assert not result.implausible and result.busbw_gbps == busbw


def test_no_target_means_no_judgement() -> None:
    run = CollectiveRun(Collective.ALL_GATHER, Scope.CROSS_RACK, 16, SAMPLES)
    result = judge_collective(run, TARGETS, 450, GIB)
    assert result.target_gbps is None and result.meets_target is None and result.busbw_gbps == 455.0


def test_below_target_fails() -> None:
    run = CollectiveRun(Collective.ALL_REDUCE, Scope.NVLINK_DOMAIN, 8, (BusbwSample(GIB, 300.0),))
    result = judge_collective(run, TARGETS, 450, GIB)
    assert result.ratio == pytest.approx(300 / 360) and result.meets_target is False


def test_failed_single_rank_and_implausible_runs_give_no_value() -> None:
    cut = CollectiveRun(Collective.ALL_REDUCE, Scope.NVLINK_DOMAIN, 8, SAMPLES[:2], complete=False)
    assert judge_collective(cut, TARGETS, 450, GIB).problem == (
        "table missing or cut short: a failed measurement, not a zero"
    )
    single = CollectiveRun(Collective.ALL_REDUCE, Scope.NVLINK_DOMAIN, 1, (BusbwSample(GIB, 0.0),))
    assert judge_collective(single, TARGETS, 450, GIB).problem == "single-rank run: busbw is 0 by definition"
    # 4550 GB/s: a value ten times too large (units), above the 900 GB/s H100 ceiling
    wild = CollectiveRun(Collective.ALL_REDUCE, Scope.NVLINK_DOMAIN, 8, (BusbwSample(GIB, 4550.0),))
    result = judge_collective(wild, TARGETS, 450, GIB)
    assert result.implausible and result.busbw_gbps is None and result.meets_target is None
    assert result.problem == "busbw above the plausibility ceiling 900 GB/s: check units and parsing"


def test_degraded_pair_singled_out() -> None:
    # pairs at 45, 46, 44 and 20 GB/s: median (44 + 45) / 2 = 44.5; 20 / 44.5 = 0.449 < 0.8
    values = {("n1", "n2"): 45.0, ("n3", "n4"): 46.0, ("n5", "n6"): 44.0, ("n7", "n8"): 20.0}
    runs = [
        CollectiveRun(Collective.ALL_REDUCE, Scope.PAIR, 16, (BusbwSample(GIB, v),), nodes=k)
        for k, v in values.items()
    ]
    failed = CollectiveRun(Collective.ALL_REDUCE, Scope.PAIR, 16, (), complete=False, nodes=("n9", "n10"))
    results = [judge_collective(r, TARGETS, 450, GIB) for r in (*runs, failed)]
    pairs = find_degraded_pairs(results, fraction=0.8)
    assert [p.nodes for p in pairs if p.degraded] == [("n7", "n8"), ("n9", "n10")]
    assert pairs[0].median_gbps == pytest.approx(44.5)
    assert pairs[3].fraction_of_median == pytest.approx(20 / 44.5)
    assert pairs[4].busbw_gbps is None and pairs[4].fraction_of_median is None


def test_degraded_pairs_all_failed() -> None:
    failed = CollectiveRun(Collective.ALL_REDUCE, Scope.PAIR, 16, (), complete=False, nodes=("a", "b"))
    (pair,) = find_degraded_pairs([judge_collective(failed, TARGETS, 450, GIB)])
    assert pair.degraded and math.isnan(pair.median_gbps)
    with pytest.raises(ValueError, match=r"degraded-pair fraction must lie in \(0, 1\], got 1.5"):
        find_degraded_pairs([], fraction=1.5)
