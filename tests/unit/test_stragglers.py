"""Straggler scores against hand-computed cases, the 1/(1+x) property, and column inputs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustercert.metrics.stragglers import Detection, RankPlace, RankTimings, StragglerRules, score_stragglers

PLACES = {
    0: RankPlace("node-a", 0, "rack1"),
    1: RankPlace("node-a", 1, "rack1"),
    2: RankPlace("node-b", 0, "rack2"),
    3: RankPlace("node-b", 1, "rack2"),
}


def _grid(n_ranks: int, n_steps: int, compute: np.ndarray) -> RankTimings:
    """Rows for every (rank, step); step k ends at 10 k seconds; compute has shape (ranks, steps)."""
    rank, step = np.meshgrid(np.arange(n_ranks), np.arange(n_steps), indexing="ij")
    return RankTimings.from_columns(rank.ravel(), step.ravel(), compute.ravel(), 10.0 * step.ravel())


def _slow_rank3() -> RankTimings:
    compute = np.ones((4, 20))
    compute[3, 10:] = 1.25  # rank 3 slows by 25 % from step 10
    return _grid(4, 20, compute)


def test_hand_computed_scores_and_attribution() -> None:
    # Rank 3: 10 steps at 1.0 s and 10 at 1.25 s -> median 1.125 s; relative 1.0 / 1.125 = 0.8889.
    # Its best window median is 1.0 -> individual 0.8889. Window 2 (steps 10-19) scores 1 / 1.25 = 0.8,
    # first visible at that window's last timestamp, 190 s. The cluster reported node-b GPU 1 at 400 s.
    detections = [Detection(100.0, "node-a", gpu=0), Detection(400.0, "node-b", gpu=1)]
    report = score_stragglers(_slow_rank3(), PLACES, detections, StragglerRules(threshold=0.9, window_steps=10))
    (s,) = report.stragglers
    assert s.rank == 3 and s.place == RankPlace("node-b", 1, "rack2")
    assert s.median_compute_s == pytest.approx(1.125)
    assert s.relative_score == pytest.approx(1 / 1.125)
    assert s.individual_score == pytest.approx(1 / 1.125)
    assert s.first_visible_s == 190.0
    assert s.detection_s == 400.0 and s.detection_delay_s == 210.0 and s.detected_in_time is True
    others = [r for r in report.ranks if r.rank != 3]
    assert all(r.relative_score == 1.0 and not r.flagged and r.detected_in_time is None for r in others)


def test_late_or_missing_detection() -> None:
    late = score_stragglers(_slow_rank3(), PLACES, [Detection(800.0, "node-b")], StragglerRules(detect_max_s=600))
    (s,) = late.stragglers
    assert s.detection_delay_s == 610.0 and s.detected_in_time is False  # node-only detection matches
    (s,) = score_stragglers(_slow_rank3(), PLACES, [Detection(300.0, "x", rank=2)]).stragglers
    assert s.detection_s is None and s.detected_in_time is False
    (s,) = score_stragglers(_slow_rank3(), PLACES, [Detection(300.0, "x", rank=3)]).stragglers
    assert s.detection_delay_s == 110.0


def test_warmup_is_excluded() -> None:
    compute = np.ones((4, 20))
    compute[2, :12] = 2.0  # rank 2 is slow for its first 12 steps only
    timings = _grid(4, 20, compute)
    assert [s.rank for s in score_stragglers(timings, PLACES).stragglers] == [2]  # median 2.0 -> 0.5
    assert score_stragglers(timings, PLACES, rules=StragglerRules(warmup_steps=12)).stragglers == ()


def test_pyarrow_columns() -> None:
    t = _slow_rank3()
    chunked = pa.chunked_array([t.compute_s[:40], t.compute_s[40:]])
    timings = RankTimings.from_columns(pa.array(t.rank), pa.array(t.step), chunked, pa.array(t.timestamp_s))
    (s,) = score_stragglers(timings, PLACES).stragglers
    assert s.rank == 3 and s.relative_score == pytest.approx(1 / 1.125)


def test_large_input_is_reduced_column_wise() -> None:
    # 1024 ranks x 1000 steps = 1,024,000 rows; rank 777 is 20 % slow throughout -> 1 / 1.2 = 0.8333
    rng = np.random.default_rng(7)
    compute = 1.0 + rng.uniform(-0.001, 0.001, size=(1024, 1000))
    compute[777] *= 1.2
    report = score_stragglers(_grid(1024, 1000, compute), {}, rules=StragglerRules(window_steps=50))
    (s,) = report.stragglers
    assert s.rank == 777 and s.place is None
    assert s.relative_score == pytest.approx(1 / 1.2, rel=3e-3)
    assert s.first_visible_s == 490.0  # end of the first 50-step window


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="expected four 1-D columns of one length"):
        RankTimings.from_columns([0, 1], [0], [1.0], [0.0])
    with pytest.raises(ValueError, match=r"straggler threshold must lie in \(0, 1\], got 0"):
        score_stragglers(_slow_rank3(), PLACES, rules=StragglerRules(threshold=0))
    zero = RankTimings.from_columns([0], [0], [0.0], [0.0])
    with pytest.raises(ValueError, match="expected positive compute_s"):
        score_stragglers(zero, PLACES)


@settings(max_examples=50, deadline=None)
@given(x=st.floats(min_value=0.0, max_value=1.0), slow=st.integers(0, 7), seed=st.integers(0, 1000))
def test_rank_slowed_by_x_scores_one_over_one_plus_x(x: float, slow: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    compute = 1.0 + rng.uniform(-0.001, 0.001, size=(8, 30))
    compute[slow] *= 1.0 + x
    report = score_stragglers(_grid(8, 30, compute), {})
    assert report.ranks[slow].relative_score == pytest.approx(1.0 / (1.0 + x), rel=3e-3)


@pytest.mark.parametrize("high", [7, 70_000, 5_000_000_000, -3])
def test_rows_sorted_by_key_then_value_as_lexsort_sorts_them(high: int) -> None:
    """The radix order of (key, value) gives lexsort's sequence of keys and values: small keys, keys past 16 bits,
    and keys radix passes cannot take (past 32 bits, negative), with ties."""
    from clustercert.metrics.stragglers import _by_key_then_value, _group_median

    rng = np.random.default_rng(7)
    keys = rng.integers(min(high, 0), max(high, 1), 20_000).astype(np.int64)
    values = rng.integers(0, 50, 20_000).astype(np.float64) / 7  # ties within keys
    order, want = _by_key_then_value(keys, values), np.lexsort((values, keys))
    assert np.array_equal(keys[order], keys[want]) and np.array_equal(values[order], values[want])
    uniq, med, _ = _group_median(keys, values)
    first = int(uniq[0])
    assert med[0] == float(np.median(values[keys == first]))


@pytest.mark.parametrize("group_rows", [1, 7, 100, 10**9])
def test_scored_a_few_ranks_at_a_time_as_each_ranks_own_rows_say(group_rows: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks scored in groups (a cluster's 45.8 M rows are not sorted at once) give each rank the medians of its
    own rows: checked against np.median over each rank's and each window's rows, picked out one by one."""
    import clustercert.metrics.stragglers as stragglers

    monkeypatch.setattr(stragglers, "_GROUP_ROWS", group_rows)
    rng = np.random.default_rng(11)
    ranks = np.array([3, 9, 40, 41, 77, 1000])  # sparse, not 0..n-1
    rank = rng.permutation(np.repeat(ranks, 30))  # file order mixed
    step = rng.integers(5, 60, size=rank.size)
    compute = rng.uniform(0.99, 1.01, size=rank.size)
    compute[rank == 41] *= 1.3
    stamp = 10.0 * step + rng.uniform(0, 1, size=rank.size)
    told: list[tuple[int, int]] = []
    rules = StragglerRules(window_steps=10, flag_windows=True)
    report = score_stragglers(RankTimings.from_columns(rank, step, compute, stamp), {}, rules=rules,
                              told=lambda done, of: told.append((done, of)))
    assert report == score_stragglers(RankTimings.from_columns(rank, step, compute, stamp), {}, rules=rules)
    # told as each group is scored: 30 rows a rank, so a group of about `group_rows` rows is 100 // 30 = 3 ranks,
    # at least one, at most all six
    scored = {1: [1, 2, 3, 4, 5, 6], 7: [1, 2, 3, 4, 5, 6], 100: [3, 6], 10**9: [6]}[group_rows]
    assert told == [(done, 6) for done in scored]
    overall = {r: float(np.median(compute[rank == r])) for r in ranks}
    window = (step - step.min()) // 10
    windows = {r: {w: float(np.median(compute[(rank == r) & (window == w)]))
                   for w in np.unique(window[rank == r])} for r in ranks}
    best = min(overall.values())
    assert [s.rank for s in report.ranks] == ranks.tolist()
    for s in report.ranks:
        assert s.median_compute_s == overall[s.rank]
        assert s.relative_score == best / overall[s.rank]
        assert s.individual_score == min(windows[s.rank].values()) / overall[s.rank]
    assert [s.rank for s in report.stragglers] == [41]
    (slow,) = report.stragglers
    first_low = min(w for w, m in windows[41].items()
                    if min(windows[r].get(w, np.inf) for r in ranks) / m < 0.9)
    assert slow.first_visible_s == float(stamp[(rank == 41) & (window == first_low)].max())


def _step_by_step(rng: np.random.Generator, run: int = 40) -> RankTimings:
    """A file written one step at a time, as a launcher's per-rank timer writes it: 16 places a step, steps 0-39
    (`run`), then a restart from step 30 to 59 (steps 30-39 twice), on which place 5's node was replaced (rank 105
    gives way to 205) and places 9 and 12 swapped ranks; compute times with ties, some slow ranks."""
    places = np.arange(100, 116)
    steps = [*range(run), *range(run - 10, run + 20)]
    rank = np.concatenate([places if i < run else np.where(np.arange(16) == 5, 205, places[[*range(9), 12, 10, 11,
                                                                                             9, 13, 14, 15]])
                           for i in range(len(steps))])
    step = np.repeat(steps, 16)
    compute = np.where(rank % 2, rng.uniform(0.9, 1.1, size=rank.size),
                       rng.integers(90, 110, size=rank.size) / 100.0)  # ties within the even ranks
    compute[rank == 103] *= 1.4
    compute[(rank == 111) & (step >= run + 5)] *= 1.3  # slow late
    stamp = 10.0 * np.arange(len(steps)).repeat(16) + rng.uniform(0, 1, size=rank.size)
    return RankTimings.from_columns(rank, step, compute, stamp)


@pytest.mark.parametrize(("window_steps", "warmup_steps", "group_rows", "run"),
                         [(1, 0, 10**9, 40), (3, 0, 10**9, 40), (7, 5, 10**9, 40), (4, 0, 100, 40), (10, 2, 1, 40),
                          (3, 0, 10**9, 1000), (3, 1, 10**9, 1000)])
def test_a_file_written_step_by_step_scores_as_its_rows_in_any_order(
        window_steps: int, warmup_steps: int, group_rows: int, run: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank that keeps its place in the file's blocks is scored from that layout (columns of the blocks); the
    same rows in another order are scored from each rank's rows: the reports are the same, number for number."""
    import clustercert.metrics.stragglers as stragglers

    monkeypatch.setattr(stragglers, "_GROUP_ROWS", group_rows)
    timings = _step_by_step(np.random.default_rng(group_rows + window_steps), run)
    width, steady = stragglers._blocks(timings.rank, timings.step)  # type: ignore[misc]
    assert width == 16 and np.flatnonzero(~steady).tolist() == [5, 9, 12]  # the replaced and the swapped
    order = np.random.default_rng(3).permutation(timings.rank.size)
    mixed = RankTimings.from_columns(timings.rank[order], timings.step[order], timings.compute_s[order],
                                     timings.timestamp_s[order])
    assert stragglers._blocks(mixed.rank, mixed.step) is None
    told: list[tuple[int, int]] = []
    rules = StragglerRules(window_steps=window_steps, warmup_steps=warmup_steps, flag_windows=True)
    report = score_stragglers(timings, {}, rules=rules, told=lambda done, of: told.append((done, of)))
    assert report == score_stragglers(mixed, {}, rules=rules)
    assert told[-1] == (17, 17) and [done for done, _ in told] == sorted({done for done, _ in told})
    assert {s.rank for s in report.stragglers} >= {103}
    # and against np.median over each rank's own rows, picked out one by one
    keep = timings.step >= timings.step.min() + warmup_steps
    for s in report.ranks:
        assert s.median_compute_s == float(np.median(timings.compute_s[keep & (timings.rank == s.rank)]))


def test_a_layout_of_blocks_is_told_apart() -> None:
    """Blocks are one step each, of one width, holding most places still; anything else is read row by row."""
    from clustercert.metrics.stragglers import _blocks

    rank, step = np.tile(np.arange(4), 3), np.repeat([0, 1, 2], 4)
    width, steady = _blocks(rank, step)  # type: ignore[misc]
    assert width == 4 and steady.all()
    assert _blocks(rank[:-1], step[:-1]) is None  # the last block short
    assert _blocks(rank, np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2])) is None  # a block of two steps
    assert _blocks(np.array([0, 1, 2, 3, 1, 0, 3, 2, 2, 3, 0, 1]), step) is None  # every place moves
    assert _blocks(np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64)) is None  # one rank in every place
    width, steady = _blocks(np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 3, 2]), step)  # type: ignore[misc]
    assert steady.tolist() == [True, True, False, False]
