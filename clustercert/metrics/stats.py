"""Small statistics used across metrics: mean, sample std and a seeded bootstrap interval of the mean."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MeanStats", "bootstrap_mean_interval", "mean_stats", "median_index"]


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
