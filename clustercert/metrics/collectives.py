"""Collective bus bandwidth (nccl-tests): busbw factors, large-message busbw, targets, degraded pairs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from clustercert.evidence.provenance import Span

__all__ = [
    "BusbwBasis",
    "BusbwSample",
    "Collective",
    "CollectiveResult",
    "CollectiveRun",
    "PairResult",
    "Scope",
    "busbw_factor",
    "find_degraded_pairs",
    "judge_collective",
    "large_message_busbw",
    "plausibility_ceiling_gbps",
]


class Collective(StrEnum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALLTOALL = "alltoall"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SENDRECV = "sendrecv"


class Scope(StrEnum):
    NVLINK_DOMAIN = "nvlink-domain"  # within one NVLink domain (an NVL72 rack, an H100 node)
    CROSS_RACK = "cross-rack"  # spanning NVLink domains over the scale-out network
    FULL_SCALE = "full-scale"  # every GPU of the certification
    PAIR = "pair"  # two nodes, one per run, to single out a degraded link


class BusbwBasis(StrEnum):
    LARGE_MESSAGES = "max busbw over sizes >= large_message_bytes"
    ALL_SIZES = "max busbw over all sizes (no size reached large_message_bytes)"


def busbw_factor(collective: Collective, ranks: int) -> float:
    """busbw = algbw x factor (nccl-tests PERFORMANCE.md, DOMAIN.md section 6)."""
    if ranks < 1:
        raise ValueError(f"busbw factor: expected at least 1 rank, got {ranks}")
    n = float(ranks)
    if collective is Collective.ALL_REDUCE:
        return 2.0 * (n - 1.0) / n
    if collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALLTOALL):
        return (n - 1.0) / n
    return 1.0


def plausibility_ceiling_gbps(nvlink_gbps_per_direction: float) -> float:
    """Twice the NVLink rate per direction: above it, a busbw is a unit or parsing error."""
    return 2.0 * nvlink_gbps_per_direction


@dataclass(frozen=True)
class BusbwSample:
    """One row of an nccl-tests table, one of its two placements (out-of-place or in-place)."""

    size_bytes: int
    busbw_gbps: float
    in_place: bool = False


@dataclass(frozen=True)
class CollectiveRun:
    """One nccl-tests run; `complete` is False when its table is missing or cut short."""

    collective: Collective
    scope: Scope
    ranks: int
    samples: tuple[BusbwSample, ...]
    complete: bool = True
    nodes: tuple[str, ...] = ()
    evidence: tuple[Span, ...] = ()


@dataclass(frozen=True)
class CollectiveResult:
    collective: Collective
    scope: Scope
    ranks: int
    busbw_gbps: float | None  # None: failed measurement (never a zero)
    basis: BusbwBasis | None
    at_size_bytes: int | None
    target_gbps: float | None
    ratio: float | None  # measured / target
    meets_target: bool | None  # None when there is no target or no measurement
    implausible: bool  # some sample above the plausibility ceiling
    ceiling_gbps: float
    problem: str | None
    nodes: tuple[str, ...] = ()
    evidence: tuple[Span, ...] = field(default=())


def large_message_busbw(
    samples: Sequence[BusbwSample], large_message_bytes: int
) -> tuple[float, int, BusbwBasis] | None:
    """The highest busbw among sizes >= `large_message_bytes` (all sizes when none is that large)."""
    if not samples:
        return None
    large = [s for s in samples if s.size_bytes >= large_message_bytes]
    basis = BusbwBasis.LARGE_MESSAGES if large else BusbwBasis.ALL_SIZES
    best = max(large or samples, key=lambda s: (s.busbw_gbps, s.size_bytes))
    return best.busbw_gbps, best.size_bytes, basis


def judge_collective(
    run: CollectiveRun,
    targets_gbps: Mapping[str, Mapping[str, float]],
    nvlink_gbps_per_direction: float,
    large_message_bytes: int,
) -> CollectiveResult:
    """Large-message busbw of one run against the catalog target for its scope and collective."""
    ceiling = plausibility_ceiling_gbps(nvlink_gbps_per_direction)
    target = targets_gbps.get(run.scope.value, {}).get(run.collective.value)
    implausible = any(s.busbw_gbps > ceiling or not math.isfinite(s.busbw_gbps) for s in run.samples)
    problem: str | None = None
    if not run.complete:
        problem = "table missing or cut short: a failed measurement, not a zero"
    elif not run.samples:
        problem = "no busbw rows"
    elif run.ranks < 2:
        problem = "single-rank run: busbw is 0 by definition"
    elif implausible:
        problem = f"busbw above the plausibility ceiling {ceiling:g} GB/s: check units and parsing"
    best = large_message_busbw(run.samples, large_message_bytes) if problem is None else None
    value, size, basis = best if best is not None else (None, None, None)
    ratio = value / target if value is not None and target else None
    return CollectiveResult(
        collective=run.collective,
        scope=run.scope,
        ranks=run.ranks,
        busbw_gbps=value,
        basis=basis,
        at_size_bytes=size,
        target_gbps=target,
        ratio=ratio,
        meets_target=None if ratio is None else ratio >= 1.0,
        implausible=implausible,
        ceiling_gbps=ceiling,
        problem=problem,
        nodes=run.nodes,
        evidence=run.evidence,
    )


@dataclass(frozen=True)
class PairResult:
    nodes: tuple[str, ...]
    busbw_gbps: float | None
    median_gbps: float
    fraction_of_median: float | None
    degraded: bool  # below `fraction` of the median of pairs, or failed
    evidence: tuple[Span, ...] = field(default=())


def find_degraded_pairs(results: Sequence[CollectiveResult], fraction: float = 0.8) -> tuple[PairResult, ...]:
    """Pair results (one collective) against the median of all pairs; a failed pair counts as degraded."""
    if not 0 < fraction <= 1:
        raise ValueError(f"degraded-pair fraction must lie in (0, 1], got {fraction}")
    measured = [r.busbw_gbps for r in results if r.busbw_gbps is not None]
    if not measured:
        return tuple(PairResult(r.nodes, None, math.nan, None, True, r.evidence) for r in results)
    median = statistics.median(measured)
    out = []
    for r in results:
        share = r.busbw_gbps / median if r.busbw_gbps is not None and median > 0 else None
        out.append(
            PairResult(r.nodes, r.busbw_gbps, median, share, share is None or share < fraction, r.evidence)
        )
    return tuple(out)
