"""Collective bus bandwidth (nccl-tests): busbw factors, large-message busbw, targets, degraded pairs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import chain, repeat
from typing import NamedTuple

from clustercert.evidence.provenance import Span

__all__ = [
    "Bound",
    "BusbwBasis",
    "BusbwSample",
    "Collective",
    "CollectiveResult",
    "CollectiveRun",
    "LinkRates",
    "NodeVerdict",
    "PairResult",
    "Placement",
    "Scope",
    "busbw_factor",
    "busbw_samples",
    "carried",
    "find_below_peers",
    "find_degraded_pairs",
    "judge_collective",
    "large_message_busbw",
    "link_bound",
    "model_shape",
    "plausibility_ceiling_gbps",
    "rank_nodes",
    "row_disagreement",
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
    """Twice the NVLink rate per direction: above it, a busbw is a unit or parsing error at any scope."""
    return 2.0 * nvlink_gbps_per_direction


@dataclass(frozen=True)
class LinkRates:
    """Per-GPU link rates of the declared topology, GB/s per direction."""

    nvlink_gbps: float  # NVLink per GPU
    net_gbps: float | None  # scale-out per GPU: NIC line rate x NICs per node / GPUs per node; None if undeclared


@dataclass(frozen=True)
class Placement:
    """Where a run's ranks sit: how many, over how many NVLink domains, the fewest ranks in any one domain."""

    ranks: int
    domains: int
    ranks_per_domain: int


@dataclass(frozen=True)
class Bound:
    """The link-limited busbw of one run (the model's 'theoretical') and the formula that gave it."""

    gbps: float | None  # None: the run crosses the scale-out network and the bundle declares no interconnect
    formula: str
    ceiling_gbps: float  # 2 x the bound (in-network reduction may double a link's busbw), at most 2 x NVLink


_HIERARCHICAL = (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.BROADCAST,
                 Collective.REDUCE)


def link_bound(collective: Collective, placement: Placement, rates: LinkRates) -> Bound:
    """The busbw a run's slowest links allow (references/README.md, "Collective target model").

    Within one NVLink domain every collective is bound by NVLink per GPU, B_nvl. A run over D >= 2 domains
    with k ranks per domain (N ranks) moves (N - k) / N of each rank's data off its domain over the
    scale-out links, B_net per GPU:
    - all_reduce, all_gather, reduce_scatter, broadcast, reduce (hierarchical: the k GPUs of a domain share
      the off-domain traffic over their k NICs): min(B_nvl, k x B_net x (N - 1) / (N - k));
    - alltoall (every rank sends its own share off the domain): min(B_nvl, B_net x (N - 1) / (N - k));
    - sendrecv (each rank's peer may sit across the network): B_net.
    """
    n, d, k = placement.ranks, placement.domains, placement.ranks_per_domain
    nvl = rates.nvlink_gbps
    top = 2.0 * nvl
    if d <= 1:
        return Bound(nvl, f"one NVLink domain: B_nvl = {nvl:g} GB/s", top)
    net = rates.net_gbps
    if net is None:
        return Bound(None, f"{d} NVLink domains and no declared scale-out interconnect (system.interconnect)", top)
    spread = (n - 1) / (n - k) if n > k else 1.0
    if collective in _HIERARCHICAL:
        value = min(nvl, k * net * spread)
        formula = (f"{d} NVLink domains, k = {k} of N = {n} ranks per domain: min(B_nvl {nvl:g}, k x B_net {net:g} "
                   f"x (N - 1)/(N - k)) = {value:.1f} GB/s")
    elif collective is Collective.ALLTOALL:
        value = min(nvl, net * spread)
        formula = (f"{d} NVLink domains, k = {k} of N = {n} ranks per domain: min(B_nvl {nvl:g}, B_net {net:g} "
                   f"x (N - 1)/(N - k)) = {value:.1f} GB/s")
    else:
        value = min(nvl, net)
        formula = f"{d} NVLink domains: B_net = {value:g} GB/s per GPU"
    return Bound(value, formula, min(top, 2.0 * value))


def model_shape(collective: Collective, placement: Placement, rates: LinkRates) -> float | None:
    """The busbw the model gives a run's shape, in GB/s; None where it spans domains and B_net is unknown.

    One NVLink domain: B_nvl. Across D >= 2 domains, k ranks in each (N ranks), the hierarchical collectives
    (all_reduce, all_gather, reduce_scatter, broadcast, reduce) run inside each domain over NVLink, then across
    domains on 1/k of the data per GPU over its own B_net, one phase after the other:
        busbw = ((N - 1) / N) / ((k - 1) / (k B_nvl) + (D - 1) / (D k B_net)),
    which falls as D grows (B_nvl for D = 1, B_net for k = 1). alltoall and sendrecv: their link bound.
    """
    n, d, k = placement.ranks, placement.domains, placement.ranks_per_domain
    if d <= 1:
        return rates.nvlink_gbps
    if rates.net_gbps is None:
        return None
    if collective not in _HIERARCHICAL:
        return link_bound(collective, placement, rates).gbps
    per_byte = (k - 1) / (k * rates.nvlink_gbps) + (d - 1) / (d * k * rates.net_gbps)
    return ((n - 1) / n) / per_byte


def carried(collective: Collective, placement: Placement, rates: LinkRates, reference: Placement,
            reference_gbps: float) -> float | None:
    """A reference result carried to a run's shape: reference busbw x shape(run) / shape(reference), both on the
    run's link rates (a reference is only carried to runs on links of its own rates)."""
    mine, theirs = model_shape(collective, placement, rates), model_shape(collective, reference, rates)
    if mine is None or not theirs:
        return None
    return reference_gbps * mine / theirs


def row_disagreement(
    collective: Collective, ranks: int | None, size_bytes: int, time_us: float, algbw: float, busbw: float,
    factor: float | None = None,
) -> str | None:
    """Why a result row's busbw disagrees with its own size, time and algbw (None when it agrees).

    algbw = bytes / time (GB/s = 1e9 B/s) and busbw = algbw x factor (DOMAIN.md section 6). nccl-tests prints
    algbw and busbw to 2 decimals and large times to 2 significant digits (`1.6e+07`), so algbw may differ from
    bytes / time by 6 % and busbw from algbw x factor by 2 % plus the rounding of the last digit. `factor`:
    busbw_factor(collective, ranks), given by a caller that checks many rows of one test.
    """
    if time_us > 0 and size_bytes > 0:
        expected_alg = size_bytes / (time_us * 1e3)
        if not math.isclose(algbw, expected_alg, rel_tol=0.06, abs_tol=0.02):
            return (f"algbw {algbw:g} GB/s disagrees with size / time = {size_bytes} B / {time_us:g} us "
                    f"= {expected_alg:.2f} GB/s")
    if ranks is not None and ranks >= 2:
        if factor is None:
            factor = busbw_factor(collective, ranks)
        if not math.isclose(busbw, algbw * factor, rel_tol=0.02, abs_tol=0.015):
            return (f"busbw {busbw:g} GB/s disagrees with algbw x factor = {algbw:g} x {factor:.4g} "
                    f"= {algbw * factor:.2f} GB/s ({collective.value}, {ranks} ranks)")
    return None


class BusbwSample(NamedTuple):
    """One row of an nccl-tests table, one of its two placements (out-of-place or in-place). A named tuple
    (immutable, compared by value): a cluster's pairwise sweep makes half a million of them."""

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
    disagreement: str | None = None  # a row whose busbw disagrees with its size, time and algbw


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
    peak_gbps: float | None = None  # highest busbw at any size
    expected_gbps: float | None = None  # the model's expected value (efficiency x bound)
    bound: Bound | None = None


def busbw_samples(sizes: Sequence[int], out_of_place: Sequence[float],
                  in_place: Sequence[float]) -> tuple[BusbwSample, ...]:
    """The samples of a table's rows (their sizes, out-of-place and in-place busbw, one list each), in row order,
    each row's out-of-place sample first; built in C (a cluster's pairwise sweep has a quarter million rows)."""
    new, rows = tuple.__new__, len(sizes)
    return tuple(chain.from_iterable(zip(
        map(new, repeat(BusbwSample), zip(sizes, out_of_place, [False] * rows, strict=True)),
        map(new, repeat(BusbwSample), zip(sizes, in_place, [True] * rows, strict=True)), strict=True)))


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
    *,
    bound: Bound | None = None,
    expected_gbps: float | None = None,
) -> CollectiveResult:
    """Large-message busbw of one run against its target.

    The target is the fixed catalog one for its scope and collective when the catalog sets one, else
    `target_fraction x expected` computed by the caller from the model (passed in `targets_gbps` as well).
    The plausibility ceiling is the bound's (2 x the links the run crosses), else 2 x NVLink.
    """
    ceiling = bound.ceiling_gbps if bound is not None else plausibility_ceiling_gbps(nvlink_gbps_per_direction)
    target = targets_gbps.get(run.scope.value, {}).get(run.collective.value)
    busbw = [s.busbw_gbps for s in run.samples]
    finite = all(map(math.isfinite, busbw))  # a nan or an infinity is implausible, as is any value above the ceiling
    implausible = not finite or (bool(busbw) and max(busbw) > ceiling)
    problem: str | None = None
    if not run.complete:
        problem = "table missing or cut short: a failed measurement, not a zero"
    elif not run.samples:
        problem = "no busbw rows"
    elif run.ranks < 2:
        problem = "single-rank run: busbw is 0 by definition"
    elif implausible:
        problem = f"busbw above the plausibility ceiling {ceiling:g} GB/s: check units and parsing"
    elif run.disagreement is not None:
        problem = run.disagreement
    peak = max(busbw if finite else filter(math.isfinite, busbw), default=None)
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
        peak_gbps=peak,
        expected_gbps=expected_gbps,
        bound=bound,
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


@dataclass(frozen=True)
class PeerResult:
    """One run against the median of the runs of the same shape (scope, collective, ranks, ranks per node)."""

    index: int  # position in the input
    busbw_gbps: float | None
    median_gbps: float
    fraction_of_median: float | None
    below: bool


def find_below_peers(values: Sequence[float | None], fraction: float) -> tuple[PeerResult, ...] | None:
    """Each value against the median of the measured ones; None when fewer than 3 are measured.

    A failed measurement (None) counts as below. The degraded-pair rule, generalised to every scope.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"peer fraction must lie in (0, 1], got {fraction}")
    measured = [v for v in values if v is not None]
    if len(measured) < 3:
        return None
    median = statistics.median(measured)
    out = []
    for i, v in enumerate(values):
        share = v / median if v is not None and median > 0 else None
        out.append(PeerResult(i, v, median, share, share is None or share < fraction))
    return tuple(out)


@dataclass(frozen=True)
class NodeVerdict:
    """One node of a pairwise sweep: how many of its pairs failed or were degraded, of how many."""

    node: str
    bad_pairs: int
    pairs: int
    share: float  # bad_pairs / pairs
    suspect: bool  # in more bad pairs than a single bad link explains, and in at least half of its pairs


def rank_nodes(pairs: Sequence[tuple[tuple[str, str], bool]]) -> tuple[NodeVerdict, ...]:
    """Nodes of failed or degraded pairs ranked by how many of their pairs are bad (most first).

    `pairs` holds each pair's two nodes and whether it is bad. One bad link makes one bad pair for each of
    its ends; a bad node makes most of its pairs bad (17 nodes where one sits in most failed pairs point at
    that node, not at its links). So, greedily: the node with the most bad pairs is suspect when more than
    one and at least half of its pairs are bad; its pairs are then explained and left out when the next
    node is weighed, so a node is not suspected only for sharing pairs with a bad one.
    """
    total: dict[str, int] = {}
    bad: dict[str, int] = {}
    for (a, b), is_bad in pairs:
        for node in (a, b):
            total[node] = total.get(node, 0) + 1
            if is_bad:
                bad[node] = bad.get(node, 0) + 1
    suspects: set[str] = set()
    while True:
        left: dict[str, tuple[int, int]] = {}
        for (a, b), is_bad in pairs:
            if a in suspects or b in suspects:
                continue
            for node in (a, b):
                n_bad, n_all = left.get(node, (0, 0))
                left[node] = (n_bad + is_bad, n_all + 1)
        candidates = [(n_bad, n_all, node) for node, (n_bad, n_all) in left.items()
                      if n_bad > 1 and n_bad * 2 >= n_all]
        if not candidates:
            break
        suspects.add(max(candidates, key=lambda c: (c[0], c[0] / c[1], c[2]))[2])
    out = [NodeVerdict(node, count, total[node], count / total[node], node in suspects) for node, count in bad.items()]
    return tuple(sorted(out, key=lambda v: (-v.bad_pairs, -v.share, v.node)))
