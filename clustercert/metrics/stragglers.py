"""Straggler scores per rank (nvidia-resiliency-ext style), reduced column-wise, matched to detections."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from clustercert.evidence.provenance import Span

__all__ = [
    "Detection",
    "RankPlace",
    "RankScore",
    "RankTimings",
    "StragglerReport",
    "StragglerRules",
    "score_stragglers",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class RankTimings:
    """Columns of per-rank, per-step compute time (NCCL kernels left out) and when the step ended."""

    rank: IntArray
    step: IntArray
    compute_s: FloatArray
    timestamp_s: FloatArray
    evidence: tuple[Span, ...] = ()

    @classmethod
    def from_columns(
        cls, rank: Any, step: Any, compute_s: Any, timestamp_s: Any, evidence: Sequence[Span] = ()
    ) -> RankTimings:
        """From numpy arrays, pyarrow arrays or chunked arrays, or sequences, all of one length."""
        cols = (
            np.asarray(rank, dtype=np.int64),
            np.asarray(step, dtype=np.int64),
            np.asarray(compute_s, dtype=np.float64),
            np.asarray(timestamp_s, dtype=np.float64),
        )
        if len({c.shape for c in cols}) != 1 or cols[0].ndim != 1:
            raise ValueError(
                f"rank timings: expected four 1-D columns of one length, got {[c.shape for c in cols]}"
            )
        return cls(*cols, evidence=tuple(evidence))


@dataclass(frozen=True)
class RankPlace:
    node: str
    gpu: int
    domain: str  # NVLink domain


@dataclass(frozen=True)
class Detection:
    """The cluster's own report of a slow GPU: a node and a local GPU index or a global rank."""

    time_s: float
    node: str
    gpu: int | None = None
    rank: int | None = None


@dataclass(frozen=True)
class RankScore:
    rank: int
    place: RankPlace | None
    median_compute_s: float
    relative_score: float  # fastest rank's median / this rank's median
    individual_score: float  # this rank's best window median / its median
    flagged: bool
    first_visible_s: float | None  # end of the first window whose relative score fell below the threshold
    detection_s: float | None
    detection_delay_s: float | None
    detected_in_time: bool | None  # None when not flagged
    lowest_window_score: float = 1.0  # the lowest relative score of any window (what a periodic detector sees)


@dataclass(frozen=True)
class StragglerReport:
    threshold: float
    window_steps: int
    warmup_steps: int
    reference_rank: int
    ranks: tuple[RankScore, ...]  # by rank
    evidence: tuple[Span, ...] = field(default=())

    @property
    def stragglers(self) -> tuple[RankScore, ...]:
        return tuple(r for r in self.ranks if r.flagged)


def _by_key_then_value(keys: IntArray, values: FloatArray) -> IntArray:
    """The row order sorted by (key, value): the values sorted, then stable radix passes over the key's two 16-bit
    halves (NumPy sorts 16-bit integers by radix), where np.lexsort compares whole rows, much slower for the
    millions of rank-window keys of a cluster; keys outside 0..2**32-1 take np.lexsort."""
    if keys.size == 0 or int(keys.min()) < 0 or int(keys.max()) >= 1 << 32:
        return np.lexsort((values, keys))
    order = np.argsort(values)
    for shift in (0, 16):
        half = ((keys[order] >> shift) & 0xFFFF).astype(np.uint16)
        if shift and not half.any():
            break
        order = order[np.argsort(half, kind="stable")]
    return order


_GROUP_ROWS = 4_000_000  # rows scored at a time (score_stragglers)


def _distinct(values: IntArray) -> IntArray:
    """np.unique(values) (sorted), by a count when the values are small non-negative integers (no sort)."""
    if values.size and int(values.min()) >= 0 and int(values.max()) < 4 * values.size + 1024:
        return np.flatnonzero(np.bincount(values)).astype(values.dtype)
    return np.unique(values)


def _group_median(keys: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray, IntArray]:
    """Unique keys, the median of values per key, and the row order sorted by (key, value)."""
    order = _by_key_then_value(keys, values)
    k, v = keys[order], values[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if k.size else np.zeros(0, dtype=np.int64)
    counts = np.diff(np.r_[starts, k.size])
    uniq = k[starts]
    med = 0.5 * (v[starts + (counts - 1) // 2] + v[starts + counts // 2])
    return uniq, med, order


def _blocks(rank: IntArray, step: IntArray) -> tuple[int, npt.NDArray[np.bool_]] | None:
    """How a file written one step at a time lays its rows out: blocks of `width` rows, each block one step's, its
    rows in the same places, and which places (0 .. width - 1) hold one rank in every block, a rank no other place
    holds (a replaced node's place holds two, the old node's and the new one's). None for another layout, or when
    half the places move (then each rank's rows are looked for one by one)."""
    total = rank.size
    width = int(np.argmax(step != step[0])) or total  # the first block's rows
    if width < 2 or total % width:
        return None
    steps = step.reshape(-1, width)
    if not (steps == steps[:, :1]).all():
        return None
    keys = rank.reshape(-1, width)
    steady = (keys == keys[0]).all(axis=0)
    if 2 * int(np.count_nonzero(~steady)) > width:
        return None
    first = keys[0]
    if not steady.all():
        steady &= ~np.isin(first, keys[:, ~steady])  # a rank also seen in a place that moves
    distinct, counts = np.unique(first, return_counts=True)
    steady &= ~np.isin(first, distinct[counts > 1])  # a rank in two places
    return (width, steady) if steady.any() else None


def _median_of_sorted(values: FloatArray, count: int, axis: int) -> FloatArray:
    """The median along `axis` of values sorted (or partitioned) there, `count` of them: _group_median's sum."""
    low, high = np.take(values, (count - 1) // 2, axis=axis), np.take(values, count // 2, axis=axis)
    return 0.5 * (low + high)  # type: ignore[no-any-return]


class _Medians:
    """Each rank's median compute time, and each of its windows' median and last timestamp, filled rank group by
    rank group (about _GROUP_ROWS rows at a time: a cluster's tens of millions of rows are never sorted at once)."""

    def __init__(self, ranks: IntArray, low_step: int, window_steps: int, n_windows: int,
                 told: Callable[[int, int], None] | None) -> None:
        self.ranks, self.low_step, self.window_steps, self.n_windows = ranks, low_step, window_steps, n_windows
        self.overall = np.empty(ranks.size)
        self.medians = np.full((ranks.size, n_windows), np.nan)
        self.ends = np.full((ranks.size, n_windows), np.nan)
        self.told, self.done = told, 0

    def _scored(self, count: int) -> None:
        self.done += count
        if self.told is not None:
            self.told(self.done, self.ranks.size)

    def by_place(self, width: int, steady: npt.NDArray[np.bool_], rank: IntArray, step: IntArray,
                 compute: FloatArray, stamp: FloatArray) -> None:
        """The ranks of the `steady` places of a file laid out in blocks of `width` rows (_blocks): a rank's rows
        are a column of the blocks, its medians partitions of that column, no sort of rows."""
        values, stamps = compute.reshape(-1, width), stamp.reshape(-1, width)
        order = np.argsort(step[::width], kind="stable")  # the blocks by step: a window's blocks follow each other
        window = (step[::width][order] - self.low_step) // self.window_steps
        starts = np.flatnonzero(np.r_[True, window[1:] != window[:-1]])
        sizes = np.diff(np.r_[starts, window.size])
        places = np.flatnonzero(steady)
        where = np.searchsorted(self.ranks, rank[places])  # each place's rank among all ranks
        per_group = max(1, _GROUP_ROWS // window.size)
        for at in range(0, places.size, per_group):
            cols, to = places[at:at + per_group], where[at:at + per_group]
            block = np.ascontiguousarray(values[np.ix_(order, cols)].T)  # (ranks, blocks by step)
            count = block.shape[1]
            kth = sorted({(count - 1) // 2, count // 2})
            self.overall[to] = _median_of_sorted(np.partition(block, kth, axis=1), count, axis=1)
            ended = stamps[np.ix_(order, cols)].T
            for size in np.unique(sizes).tolist():
                which = np.flatnonzero(sizes == size)
                span = starts[which][:, None] + np.arange(size)  # (windows, size): their blocks
                inside = np.sort(block[:, span], axis=2)  # (ranks, windows, size)
                self.medians[to[:, None], window[starts[which]][None, :]] = _median_of_sorted(inside, size, axis=2)
                self.ends[to[:, None], window[starts[which]][None, :]] = ended[:, span].max(axis=2)
            self._scored(cols.size)

    def by_rows(self, ranks: IntArray, rank: IntArray, step: IntArray, compute: FloatArray,
                stamp: FloatArray) -> None:
        """`ranks` (sorted) from their rows, wherever they lie: each group's rows sorted by (rank, value) and by
        (rank, window, value)."""
        n_windows = self.n_windows
        per_group = max(1, int(ranks.size * _GROUP_ROWS // rank.size))
        for at in range(0, ranks.size, per_group):
            lowest, highest = ranks[at], ranks[min(at + per_group, ranks.size) - 1]
            rows = np.flatnonzero((rank >= lowest) & (rank <= highest))
            rank_idx = np.searchsorted(self.ranks, rank[rows]).astype(np.int64)  # the rank's place among all ranks
            values = compute[rows]
            found, median, _ = _group_median(rank_idx, values)
            self.overall[found] = median
            window = (step[rows] - self.low_step) // self.window_steps
            key = rank_idx * n_windows + window
            del rank_idx, window
            wkeys, wmed, order = _group_median(key, values)
            self.medians[wkeys // n_windows, wkeys % n_windows] = wmed
            starts = np.searchsorted(key[order], wkeys)
            self.ends[wkeys // n_windows, wkeys % n_windows] = np.maximum.reduceat(stamp[rows][order], starts)
            del rows, values, key, order
            self._scored(found.size)


@dataclass(frozen=True)
class StragglerRules:
    """How ranks are judged: a rank is a straggler below `threshold` (its median against the fastest rank's);
    steps below the first step + `warmup_steps` are left out; windows of `window_steps` steps tell when a straggler
    first became visible, and with `flag_windows` any window below the threshold flags the rank too; a detection
    more than `detect_max_s` after that is late."""

    threshold: float = 0.90
    window_steps: int = 10
    warmup_steps: int = 0
    detect_max_s: float = 600.0
    flag_windows: bool = False


def score_stragglers(
    timings: RankTimings,
    placement: Mapping[int, RankPlace],
    detections: Sequence[Detection] = (),
    rules: StragglerRules | None = None,
    *,
    told: Callable[[int, int], None] | None = None,
) -> StragglerReport:
    """Relative and individual scores per rank, flagged below `rules.threshold`, matched to detections.

    A straggler first became visible at the last timestamp of that rank in its first window whose relative score
    is below the threshold. With `rules.flag_windows`, a rank is also flagged when any window's relative score is
    below the threshold (a GPU that turns slow late, or is replaced, is caught as a periodic detector would catch
    it); by default only its score over the whole run counts. `told` is told (ranks scored, ranks in all) as each
    group of ranks is: a cluster's rows take seconds a group.
    """
    rules = rules or StragglerRules()
    if not 0 < rules.threshold <= 1:
        raise ValueError(f"straggler threshold must lie in (0, 1], got {rules.threshold}")
    if rules.window_steps < 1 or rules.warmup_steps < 0:
        raise ValueError(
            f"expected window_steps >= 1 and warmup_steps >= 0, got {rules.window_steps}, {rules.warmup_steps}"
        )
    rank, step, compute, stamp = _after_warmup(timings, rules.warmup_steps)
    ranks = _distinct(rank)
    low_step = step.min()
    scores = _Medians(ranks, low_step, rules.window_steps, int((step.max() - low_step) // rules.window_steps) + 1,
                      told)
    # The medians of each rank, and of each of its windows, are its own rows' alone: a rank that keeps its place
    # in a file written one step at a time is read from that layout (_blocks), every other from its own rows
    blocks = _blocks(rank, step)
    if blocks is not None:
        width, steady = blocks
        scores.by_place(width, steady, rank, step, compute, stamp)
        rest = np.flatnonzero(np.tile(~steady, rank.size // width))
        rank, step, compute, stamp = rank[rest], step[rest], compute[rest], stamp[rest]
        del rest
    if rank.size:
        scores.by_rows(_distinct(rank), rank, step, compute, stamp)
    del rank, step, compute, stamp
    ref_i = int(np.argmin(scores.overall))
    return StragglerReport(
        threshold=rules.threshold,
        window_steps=rules.window_steps,
        warmup_steps=rules.warmup_steps,
        reference_rank=int(ranks[ref_i]),
        ranks=tuple(_rank_scores(ranks, scores, placement, detections, rules)),
        evidence=timings.evidence,
    )


def _after_warmup(t: RankTimings, warmup_steps: int) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
    """The rank, step, compute and timestamp columns without the warm-up steps; ValueError where no row is left
    or a compute time is not positive."""
    if t.rank.size == 0:
        raise ValueError("rank timings: expected rows, got none")
    keep = t.step >= t.step.min() + warmup_steps
    if keep.all():  # the columns themselves, not copies: a cluster's columns are hundreds of MB each
        rank, step, compute, stamp = t.rank, t.step, t.compute_s, t.timestamp_s
    else:
        rank, step, compute, stamp = t.rank[keep], t.step[keep], t.compute_s[keep], t.timestamp_s[keep]
    del keep
    if rank.size == 0:
        raise ValueError(f"rank timings: no rows left after excluding {warmup_steps} warm-up steps")
    if not np.all(compute > 0):
        raise ValueError("rank timings: expected positive compute_s, got a zero, negative or nan value")
    return rank, step, compute, stamp


def _rank_scores(ranks: IntArray, scores: _Medians, placement: Mapping[int, RankPlace],
                 detections: Sequence[Detection], rules: StragglerRules) -> list[RankScore]:
    """Each rank's scores from its medians, flagged or not, with its first detection where flagged."""
    overall, medians, ends = scores.overall, scores.medians, scores.ends
    relative = overall[int(np.argmin(overall))] / overall
    individual = np.nanmin(medians, axis=1) / overall
    with np.errstate(invalid="ignore"):
        window_scores = np.nanmin(medians, axis=0)[None, :] / medians
    below = np.nan_to_num(window_scores, nan=1.0) < rules.threshold
    first_window = np.where(below.any(axis=1), below.argmax(axis=1), -1)
    out = []
    for i, r in enumerate(ranks.tolist()):
        lowest = float(np.nanmin(np.nan_to_num(window_scores[i], nan=1.0)))
        flagged = bool(relative[i] < rules.threshold) or (rules.flag_windows and lowest < rules.threshold)
        place = placement.get(r)
        first: float | None = None
        if flagged:
            w = int(first_window[i])
            first = float(ends[i, w]) if w >= 0 else float(np.nanmax(ends[i]))
        det = _first_detection(r, place, detections) if flagged else None
        delay = det - first if det is not None and first is not None else None
        out.append(
            RankScore(
                rank=r,
                place=place,
                median_compute_s=float(overall[i]),
                relative_score=float(relative[i]),
                individual_score=float(individual[i]),
                flagged=flagged,
                first_visible_s=first,
                detection_s=det,
                detection_delay_s=delay,
                detected_in_time=(delay is not None and delay <= rules.detect_max_s) if flagged else None,
                lowest_window_score=lowest,
            )
        )
    return out


def _first_detection(rank: int, place: RankPlace | None, detections: Sequence[Detection]) -> float | None:
    """Earliest detection naming this rank, or its node and GPU (or its node alone when no GPU is given)."""
    times = [
        d.time_s
        for d in detections
        if d.rank == rank
        or (
            d.rank is None
            and place is not None
            and d.node == place.node
            and (d.gpu is None or d.gpu == place.gpu)
        )
    ]
    return min(times) if times else None
