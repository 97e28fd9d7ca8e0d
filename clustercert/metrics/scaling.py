"""Weak- and strong-scaling efficiency of one workload across GPU counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from clustercert.evidence.provenance import Span

__all__ = [
    "ScalingMode",
    "ScalingPoint",
    "ScalingPointResult",
    "ScalingResult",
    "classify_scaling",
    "compute_scaling",
    "strong_scaling",
    "weak_scaling",
]


class ScalingMode(StrEnum):
    WEAK = "weak"  # work grows with the GPU count (GBS proportional to GPUs): per-GPU throughput should hold
    STRONG = "strong"  # fixed GBS: step time should fall as 1/N


@dataclass(frozen=True)
class ScalingPoint:
    """One configuration's measured step time (e.g. a run's windowed mean)."""

    gpus: int
    gbs: int
    seq_len: int
    step_time_s: float
    evidence: tuple[Span, ...] = ()

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.gbs * self.seq_len / self.step_time_s / self.gpus


@dataclass(frozen=True)
class ScalingPointResult:
    gpus: int
    gbs: int
    step_time_s: float
    tokens_per_s_per_gpu: float
    efficiency: float  # 1.0 at the smallest GPU count
    speedup: float  # throughput over that at the smallest GPU count
    evidence: tuple[Span, ...] = field(default=())


@dataclass(frozen=True)
class ScalingResult:
    mode: ScalingMode
    reference_gpus: int
    points: tuple[ScalingPointResult, ...]  # by GPU count

    @property
    def min_efficiency(self) -> float:
        return min(p.efficiency for p in self.points)


def _sorted_points(points: Sequence[ScalingPoint]) -> list[ScalingPoint]:
    if len(points) < 2:
        raise ValueError(f"scaling needs at least 2 GPU counts, got {len(points)}")
    ordered = sorted(points, key=lambda p: p.gpus)
    counts = [p.gpus for p in ordered]
    if len(set(counts)) != len(counts):
        raise ValueError(f"scaling expects one point per GPU count (combine repeats first), got {counts}")
    for p in ordered:
        if p.gpus <= 0 or p.gbs <= 0 or p.seq_len <= 0 or not p.step_time_s > 0:
            raise ValueError(f"scaling point at {p.gpus} GPUs: expected positive values, got {p}")
    if len({p.seq_len for p in ordered}) != 1:
        raise ValueError("scaling expects one sequence length across points")
    return ordered


def classify_scaling(points: Sequence[ScalingPoint]) -> ScalingMode | None:
    """STRONG when every point has the same GBS, WEAK when GBS / GPUs is constant, else None."""
    ordered = _sorted_points(points)
    if len({p.gbs for p in ordered}) == 1:
        return ScalingMode.STRONG
    ref = ordered[0]
    if all(p.gbs * ref.gpus == ref.gbs * p.gpus for p in ordered):
        return ScalingMode.WEAK
    return None


def weak_scaling(points: Sequence[ScalingPoint]) -> ScalingResult:
    """Efficiency = tokens/s/GPU at N over tokens/s/GPU at the smallest N."""
    ordered = _sorted_points(points)
    ref = ordered[0]
    out = tuple(
        ScalingPointResult(
            gpus=p.gpus,
            gbs=p.gbs,
            step_time_s=p.step_time_s,
            tokens_per_s_per_gpu=p.tokens_per_s_per_gpu,
            efficiency=p.tokens_per_s_per_gpu / ref.tokens_per_s_per_gpu,
            speedup=(p.tokens_per_s_per_gpu * p.gpus) / (ref.tokens_per_s_per_gpu * ref.gpus),
            evidence=p.evidence,
        )
        for p in ordered
    )
    return ScalingResult(ScalingMode.WEAK, ref.gpus, out)


def strong_scaling(points: Sequence[ScalingPoint]) -> ScalingResult:
    """At fixed GBS: speedup = t(N_min) / t(N), efficiency = speedup / (N / N_min)."""
    ordered = _sorted_points(points)
    if len({p.gbs for p in ordered}) != 1:
        raise ValueError(
            f"strong scaling needs one GBS across points, got {sorted({p.gbs for p in ordered})}"
        )
    ref = ordered[0]
    out = []
    for p in ordered:
        speedup = ref.step_time_s / p.step_time_s
        out.append(
            ScalingPointResult(
                gpus=p.gpus,
                gbs=p.gbs,
                step_time_s=p.step_time_s,
                tokens_per_s_per_gpu=p.tokens_per_s_per_gpu,
                efficiency=speedup / (p.gpus / ref.gpus),
                speedup=speedup,
                evidence=p.evidence,
            )
        )
    return ScalingResult(ScalingMode.STRONG, ref.gpus, tuple(out))


def compute_scaling(points: Sequence[ScalingPoint]) -> ScalingResult:
    """Weak or strong scaling, whichever the points' GBS pattern shows."""
    mode = classify_scaling(points)
    if mode is ScalingMode.STRONG:
        return strong_scaling(points)
    if mode is ScalingMode.WEAK:
        return weak_scaling(points)
    gbs = [(p.gpus, p.gbs) for p in sorted(points, key=lambda p: p.gpus)]
    raise ValueError(f"scaling: expected a fixed GBS or GBS proportional to GPUs, got (gpus, gbs) {gbs}")
