"""Small statistics used across metrics: mean, sample std, seeded bootstrap intervals (plain and hierarchical)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MeanStats",
    "bootstrap_mean_interval",
    "combine_repeats",
    "hierarchical_bootstrap_interval",
    "mean_stats",
    "median_index",
]


@dataclass(frozen=True)
class MeanStats:
    n: int
    mean: float
    std: float  # sample standard deviation (n - 1); 0 for a single value

    @property
    def cv(self) -> float:
        return self.std / self.mean if self.mean else math.inf


def mean_stats(values: Sequence[float]) -> MeanStats:
    if not values:
        raise ValueError("mean_stats needs at least one value")
    arr = np.asarray(values, dtype=float)
    # A forged value near the float maximum (1e308) overflows the squares: the std is then inf, silently (the
    # run is refused by checks/training_steps.json window_step_time_plausible; no numpy warning on the terminal).
    with np.errstate(over="ignore", invalid="ignore"):
        std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
        return MeanStats(n=int(arr.size), mean=float(arr.mean()), std=std)


def bootstrap_mean_interval(
    values: Sequence[float], *, resamples: int, seed: int, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean, resampling values with replacement; seeded, so repeatable."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        return (float(arr.mean()), float(arr.mean()))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(resamples, arr.size))
    tail = (1.0 - level) / 2.0
    with np.errstate(over="ignore", invalid="ignore"):  # see mean_stats
        means = arr[idx].mean(axis=1)
        low, high = np.quantile(means, [tail, 1.0 - tail])
    return (float(low), float(high))


def median_index(values: Sequence[float]) -> int:
    """Index of the median value (the lower median for an even count), ties broken by position."""
    if not values:
        raise ValueError("median_index needs at least one value")
    order = sorted(range(len(values)), key=lambda i: (values[i], i))
    return order[(len(order) - 1) // 2]


def combine_repeats(values: Sequence[float], rule: str) -> float:
    """One value from repeat means by the catalog's rule: median (lower median), best (min), worst (max), mean."""
    if not values:
        raise ValueError("combine_repeats needs at least one value")
    if rule == "median":
        return float(values[median_index(values)])
    if rule == "best":
        return float(min(values))
    if rule == "worst":
        return float(max(values))
    if rule == "mean":
        return float(sum(values) / len(values))
    raise ValueError(f"unknown repeat rule {rule!r}: expected median, best, worst or mean")


def hierarchical_bootstrap_interval(
    groups: Sequence[Sequence[float]], *, rule: str, resamples: int, seed: int, level: float = 0.95
) -> tuple[float, float]:
    """Percentile interval of `combine_repeats(repeat means, rule)` by a two-level (hierarchical) bootstrap.

    Each resample draws as many repeats as there are, with replacement, then, within each drawn repeat,
    as many of its steps as it has, with replacement; the statistic is the rule applied to the drawn
    repeats' step means. The spread between repeats and the spread of steps within them both widen the
    interval. Seeded (numpy default_rng), so the same input gives the same interval.
    """
    arrays = [np.asarray(g, dtype=float) for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("hierarchical_bootstrap_interval needs at least one repeat, each with a step")
    count = len(arrays)
    rng = np.random.default_rng(seed)
    chosen = rng.integers(0, count, size=(resamples, count))  # which repeat fills each slot
    # For each repeat, its resampled step mean in every (resample, slot): used where that repeat was drawn.
    slot_means = np.stack([a[rng.integers(0, a.size, size=(resamples, count, a.size))].mean(axis=2)
                           for a in arrays])  # (repeat, resample, slot)
    drawn = np.take_along_axis(slot_means, chosen[np.newaxis, :, :], axis=0)[0]  # (resample, slot)
    if rule == "median":
        stat = np.sort(drawn, axis=1)[:, (count - 1) // 2]
    elif rule == "best":
        stat = drawn.min(axis=1)
    elif rule == "worst":
        stat = drawn.max(axis=1)
    elif rule == "mean":
        stat = drawn.mean(axis=1)
    else:
        raise ValueError(f"unknown repeat rule {rule!r}: expected median, best, worst or mean")
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(stat, [tail, 1.0 - tail])
    return (float(low), float(high))
