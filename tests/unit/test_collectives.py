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
    LinkRates,
    Placement,
    Scope,
    busbw_factor,
    busbw_samples,
    find_below_peers,
    find_degraded_pairs,
    judge_collective,
    large_message_busbw,
    link_bound,
    plausibility_ceiling_gbps,
    rank_nodes,
    row_disagreement,
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


@pytest.mark.parametrize("odd", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "minus-inf"])
def test_a_busbw_that_is_not_finite_is_implausible_and_left_out_of_the_peak(odd: float) -> None:
    run = CollectiveRun(Collective.ALL_REDUCE, Scope.NVLINK_DOMAIN, 8,
                        (BusbwSample(GIB, 300.0), BusbwSample(2 * GIB, odd), BusbwSample(4 * GIB, 350.0)))
    result = judge_collective(run, TARGETS, 450, GIB)
    assert result.implausible and result.busbw_gbps is None
    assert result.peak_gbps == 350.0  # the highest finite busbw
    clean = judge_collective(CollectiveRun(Collective.ALL_REDUCE, Scope.NVLINK_DOMAIN, 8, SAMPLES), TARGETS, 450, GIB)
    assert not clean.implausible and clean.peak_gbps == 470.0 and clean.busbw_gbps == 455.0


def test_busbw_samples_keep_each_rows_out_of_place_sample_first() -> None:
    samples = busbw_samples([1 << 20, GIB], [10.0, 400.0], [11.0, 401.0])
    assert samples == (BusbwSample(1 << 20, 10.0), BusbwSample(1 << 20, 11.0, in_place=True),
                       BusbwSample(GIB, 400.0), BusbwSample(GIB, 401.0, in_place=True))
    assert all(type(s) is BusbwSample for s in samples)
    assert [s.in_place for s in samples] == [False, True, False, True]
    for columns in (([1, 2], [1.0], [1.0, 2.0]), ([1], [1.0, 2.0], [1.0, 2.0]), ([1, 2], [1.0, 2.0], [1.0])):
        with pytest.raises(ValueError):  # columns of different lengths are a caller's error, never cut short
            busbw_samples(*columns)


def test_row_disagreement_with_the_factor_given_reads_as_without() -> None:
    for busbw in (22.27, 8 * 22.27):
        given = row_disagreement(Collective.ALLTOALL, 8, 33554432, 1318.35, 25.45, busbw, 7 / 8)
        assert given == row_disagreement(Collective.ALLTOALL, 8, 33554432, 1318.35, 25.45, busbw)


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


NDR = LinkRates(nvlink_gbps=450.0, net_gbps=50.0)  # H100: NVLink 4, one 400 Gb/s NIC per GPU


@pytest.mark.parametrize(
    ("collective", "placement", "bound"),
    [
        # one NVLink domain: NVLink per GPU
        (Collective.ALL_REDUCE, Placement(8, 1, 8), 450.0),
        (Collective.ALLTOALL, Placement(8, 1, 8), 450.0),
        # 10 nodes x 8: k x B_net x (N-1)/(N-k) = 8 x 50 x 79/72 = 438.89 (below NVLink's 450)
        (Collective.ALL_REDUCE, Placement(80, 10, 8), 8 * 50 * 79 / 72),
        (Collective.ALLTOALL, Placement(80, 10, 8), 50 * 79 / 72),  # 54.86; the real log reaches 50.66
        (Collective.SENDRECV, Placement(80, 10, 8), 50.0),
        # pairs of 1, 2, 4, 8 GPUs per node: alltoall 50, 75, 87.5, 93.75 (cluster01 reaches 40, 70, 84, 92)
        (Collective.ALLTOALL, Placement(2, 2, 1), 50.0),
        (Collective.ALLTOALL, Placement(4, 2, 2), 75.0),
        (Collective.ALLTOALL, Placement(8, 2, 4), 87.5),
        (Collective.ALLTOALL, Placement(16, 2, 8), 93.75),
        # 1-GPU pair all_reduce: one NIC, 1 x 50 x 1/1
        (Collective.ALL_REDUCE, Placement(2, 2, 1), 50.0),
        # 2 NVL72-like domains of 64: capped by NVLink
        (Collective.ALL_GATHER, Placement(128, 2, 64), 450.0),
    ],
)
def test_link_bound_hand_computed(collective: Collective, placement: Placement, bound: float) -> None:
    result = link_bound(collective, placement, NDR)
    assert result.gbps == pytest.approx(bound)
    assert result.ceiling_gbps == pytest.approx(min(900.0, 2 * bound))


def test_link_bound_without_a_declared_network_has_no_value_but_keeps_the_nvlink_ceiling() -> None:
    result = link_bound(Collective.ALLTOALL, Placement(8, 2, 4), LinkRates(450.0, None))
    assert result.gbps is None and result.ceiling_gbps == 900.0
    assert "no declared scale-out interconnect" in result.formula


def test_row_disagreement_against_the_real_row() -> None:
    # cluster00 alltoall row: 33554432 B in 1318.35 us -> 25.45 GB/s algbw; x 7/8 = 22.27 busbw (8 ranks)
    assert row_disagreement(Collective.ALLTOALL, 8, 33554432, 1318.35, 25.45, 22.27) is None
    # the 2-significant-digit time nccl-tests prints for 16 GiB sendrecv: 1.6e+07 us, algbw 1.09
    assert row_disagreement(Collective.SENDRECV, 8, 17179869184, 1.6e7, 1.09, 1.09) is None
    edited = row_disagreement(Collective.ALLTOALL, 8, 33554432, 1318.35, 25.45, 8 * 22.27)
    assert edited is not None and edited.startswith("busbw 178.16 GB/s disagrees with algbw x factor = 25.45 x 0.875")
    both = row_disagreement(Collective.ALLTOALL, 8, 33554432, 1318.35, 8 * 25.45, 8 * 22.27)
    assert both is not None and "disagrees with size / time = 33554432 B / 1318.35 us = 25.45 GB/s" in both
    # without a rank count only algbw against bytes / time is checked
    assert row_disagreement(Collective.ALL_REDUCE, None, 33554432, 1318.35, 25.45, 999.0) is None


def test_judge_refuses_an_inconsistent_row_and_uses_the_bound_ceiling() -> None:
    bound = link_bound(Collective.ALLTOALL, Placement(2, 2, 1), NDR)
    run = CollectiveRun(Collective.ALLTOALL, Scope.PAIR, 2, (BusbwSample(GIB, 320.0),))
    result = judge_collective(run, {}, 450, GIB, bound=bound)
    assert result.implausible and result.ceiling_gbps == 100.0 and result.busbw_gbps is None
    odd = CollectiveRun(Collective.ALLTOALL, Scope.PAIR, 2, (BusbwSample(GIB, 40.0),), disagreement="line 9: x")
    assert judge_collective(odd, {}, 450, GIB, bound=bound).problem == "line 9: x"


def test_find_below_peers_needs_three_and_names_the_low_one() -> None:
    assert find_below_peers([465.0, 478.0], 0.8) is None
    # the degraded sample's shape: 189 among 465, 470, 478 -> median (465 + 470) / 2 = 467.5; 189 / 467.5 = 0.404
    judged = find_below_peers([465.0, 189.0, 470.0, 478.0], 0.8)
    assert judged is not None and [p.below for p in judged] == [False, True, False, False]
    assert judged[1].median_gbps == pytest.approx(467.5)
    assert judged[1].fraction_of_median == pytest.approx(0.40428, 1e-4)
    failed = find_below_peers([45.0, None, 46.0, 44.0], 0.8)
    assert failed is not None and failed[1].below and failed[1].fraction_of_median is None


def test_rank_nodes_points_at_the_node_not_at_its_links() -> None:
    # 5 nodes, every pair measured; node c is in 3 of its 4 pairs' failures, one more bad link a-b
    nodes = "abcde"
    bad = {("a", "c"), ("b", "c"), ("c", "d"), ("a", "b")}
    pairs = [((x, y), (x, y) in bad) for i, x in enumerate(nodes) for y in nodes[i + 1:]]
    ranked = rank_nodes(pairs)
    assert [(v.node, v.bad_pairs, v.pairs) for v in ranked] == [("c", 3, 4), ("a", 2, 4), ("b", 2, 4), ("d", 1, 4)]
    # with c's pairs explained, a and b keep one bad pair (their link) of 3: a link, not a node
    assert [v.node for v in ranked if v.suspect] == ["c"]
    worse = bad | {("a", "d")}
    two = rank_nodes([((x, y), (x, y) in worse) for i, x in enumerate(nodes) for y in nodes[i + 1:]])
    assert sorted(v.node for v in two if v.suspect) == ["a", "c"]  # a: 2 bad of its 3 pairs left after c
    single = rank_nodes([(("a", "b"), True), (("a", "c"), False), (("b", "c"), False)])
    assert [v.suspect for v in single] == [False, False]  # one bad link: one bad pair per end
