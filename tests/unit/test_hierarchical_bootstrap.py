"""The hierarchical bootstrap against its exact distribution, enumerated by hand on tiny data."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from clustercert.metrics.stats import combine_repeats, hierarchical_bootstrap_interval


def _exact_quantile(atoms: dict[Fraction, Fraction], q: float) -> float:
    """The smallest value whose cumulative probability reaches q (q chosen away from every jump)."""
    total = Fraction(0)
    for value in sorted(atoms):
        total += atoms[value]
        if total >= Fraction(q).limit_denominator(10_000):
            return float(value)
    raise AssertionError("unreachable")


def _exact_distribution(groups: list[list[int]], rule: str) -> dict[Fraction, Fraction]:
    """Every outcome of the two-level bootstrap, with its probability, by enumeration."""
    r = len(groups)
    atoms: dict[Fraction, Fraction] = {}
    for pick in itertools.product(range(r), repeat=r):
        per_slot = []
        for g in pick:
            n = len(groups[g])
            per_slot.append([Fraction(sum(groups[g][i] for i in draw), n)
                             for draw in itertools.product(range(n), repeat=n)])
        for means in itertools.product(*per_slot):
            p = Fraction(1, r ** r)
            for g in pick:
                p /= len(groups[g]) ** len(groups[g])
            value = Fraction(combine_repeats([float(m) for m in means], rule)).limit_denominator(1000)
            atoms[value] = atoms.get(value, Fraction(0)) + p
    return atoms


def test_two_repeats_of_two_steps_match_the_enumerated_distribution() -> None:
    # Repeat means 2 and 11; each repeat's step mean is low/mid/high with 1/4, 1/2, 1/4. Mean of the two
    # slots: P(both slots repeat A) = 1/4 -> values 1..3; so the 2.5 % point is 1.5 (P(<=1) = 1/64 < 2.5 %,
    # P(<=1.5) = 1/64 + 1/16 > 2.5 %) and the 97.5 % point 11.5 by symmetry.
    groups = [[1, 3], [10, 12]]
    atoms = _exact_distribution(groups, "mean")
    assert sum(atoms.values()) == 1
    assert _exact_quantile(atoms, 0.025) == 1.5
    assert _exact_quantile(atoms, 0.975) == 11.5
    low, high = hierarchical_bootstrap_interval(groups, rule="mean", resamples=40_000, seed=7)
    assert (low, high) == (1.5, 11.5)


def test_median_of_three_repeats_matches_the_enumerated_distribution() -> None:
    groups = [[4, 6], [5, 5], [8, 10]]
    atoms = _exact_distribution(groups, "median")
    want = (_exact_quantile(atoms, 0.025), _exact_quantile(atoms, 0.975))
    # By hand: a slot is 4 w.p. 1/12, 5 w.p. 1/2, 6, 8 and 10 w.p. 1/12 each, 9 w.p. 1/6, slots independent.
    # P(median <= 4) = 3 p^2 (1 - p) + p^3 with p = 1/12: 34/1728 = 1.97 % < 2.5 %, so the low point is 5;
    # P(median <= 8) = 84.4 %, P(median <= 9) = 1694/1728 = 98.0 % >= 97.5 %, so the high point is 9.
    assert want == (5.0, 9.0)
    assert hierarchical_bootstrap_interval(groups, rule="median", resamples=40_000, seed=3) == want


def test_one_repeat_is_the_plain_step_bootstrap() -> None:
    # Steps 1, 2, 9: the resampled mean's 27 equally likely outcomes; 2.5 % -> 1 (1/27 = 3.7 %), 97.5 % -> 9.
    groups = [[1, 2, 9]]
    atoms = _exact_distribution(groups, "median")
    assert (_exact_quantile(atoms, 0.025), _exact_quantile(atoms, 0.975)) == (1.0, 9.0)
    assert hierarchical_bootstrap_interval(groups, rule="median", resamples=20_000, seed=1) == (1.0, 9.0)


def test_constant_repeats_bootstrap_only_the_repeat_means() -> None:
    # No spread within a repeat: the interval is that of the median of three draws from {3, 4, 20}.
    # P(median = 3) = P(at least two 3s) = 7/27; P(median = 20) = 7/27; so the interval is (3, 20).
    groups = [[3, 3, 3], [4, 4, 4], [20, 20, 20]]
    assert hierarchical_bootstrap_interval(groups, rule="median", resamples=5_000, seed=11) == (3.0, 20.0)


def test_identical_repeats_without_spread_give_a_point() -> None:
    assert hierarchical_bootstrap_interval([[5.0, 5.0], [5.0, 5.0]], rule="worst", resamples=200, seed=0) == (5.0, 5.0)


def test_seeded_and_wider_than_the_median_repeat_alone() -> None:
    groups = [[9.9, 10.1, 10.0, 10.05], [10.8, 11.0, 10.9, 11.1], [9.5, 9.6, 9.4, 9.55]]
    a = hierarchical_bootstrap_interval(groups, rule="median", resamples=2000, seed=5)
    assert a == hierarchical_bootstrap_interval(groups, rule="median", resamples=2000, seed=5)
    alone = hierarchical_bootstrap_interval([groups[0]], rule="median", resamples=2000, seed=5)
    assert a[0] < alone[0] and a[1] > alone[1]  # the spread between repeats widens it


def test_unknown_rule_and_empty_input_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown repeat rule"):
        hierarchical_bootstrap_interval([[1.0]], rule="typical", resamples=100, seed=0)
    with pytest.raises(ValueError, match="at least one repeat"):
        hierarchical_bootstrap_interval([], rule="median", resamples=100, seed=0)
