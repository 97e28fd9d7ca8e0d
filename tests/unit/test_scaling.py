"""Scaling efficiency against DOMAIN.md section 5's H100 weak-scaling table and hand-computed cases."""

from __future__ import annotations

import pytest

from clustercert.metrics.scaling import (
    ScalingMode,
    ScalingPoint,
    classify_scaling,
    compute_scaling,
    strong_scaling,
    weak_scaling,
)

# dgxc-benchmarking v25.04.02 H100, Llama 3.1 70B BF16, GBS = 2 x GPUs, seq 8192, step s by GPU count.
H100_70B_BF16 = {64: 14.66, 128: 14.67, 256: 14.68, 512: 14.67, 1024: 14.65, 2048: 14.66}
H100_70B_FP8 = {64: 9.86, 128: 9.95, 256: 10.00, 512: 10.07, 1024: 10.08, 2048: 10.15}


def _points(table: dict[int, float], gbs_per_gpu: int = 2) -> list[ScalingPoint]:
    return [ScalingPoint(n, gbs_per_gpu * n, 8192, t) for n, t in table.items()]


def test_h100_llama70b_bf16_weak_scaling() -> None:
    result = compute_scaling(_points(H100_70B_BF16))
    assert result.mode is ScalingMode.WEAK and result.reference_gpus == 64
    by_gpus = {p.gpus: p for p in result.points}
    # per-GPU throughput at 64 GPUs: 2 x 8192 / 14.66 = 1117.60 tokens/s/GPU
    assert by_gpus[64].tokens_per_s_per_gpu == pytest.approx(2 * 8192 / 14.66)
    assert by_gpus[64].tokens_per_s_per_gpu == pytest.approx(1117.60, rel=1e-5)
    assert by_gpus[512].efficiency == pytest.approx(14.66 / 14.67)  # 0.99932
    assert by_gpus[256].efficiency == pytest.approx(0.998638, rel=1e-5)  # 14.66 / 14.68
    assert by_gpus[1024].efficiency == pytest.approx(1.000683, rel=1e-5)  # 14.66 / 14.65
    assert by_gpus[2048].efficiency == pytest.approx(1.0)
    assert by_gpus[2048].speedup == pytest.approx(32.0)
    assert result.min_efficiency == pytest.approx(14.66 / 14.68)


def test_h100_llama70b_fp8_weak_scaling() -> None:
    result = weak_scaling(_points(H100_70B_FP8))
    # 9.86 / 10.15 = 0.971429 at 2048 GPUs, the lowest
    assert result.min_efficiency == pytest.approx(0.971429, rel=1e-5)
    assert result.points[-1].gpus == 2048


def test_h100_llama405b_weak_scaling_with_gbs_256_512_1024() -> None:
    points = [
        ScalingPoint(512, 256, 8192, 19.78),
        ScalingPoint(1024, 512, 8192, 19.84),
        ScalingPoint(2048, 1024, 8192, 19.87),
    ]
    assert classify_scaling(points) is ScalingMode.WEAK
    result = compute_scaling(points)
    assert [p.efficiency for p in result.points] == pytest.approx([1.0, 19.78 / 19.84, 19.78 / 19.87])


def test_strong_scaling_hand_case() -> None:
    # GBS 1024 fixed: 8 GPUs 10 s, 16 GPUs 5.5 s, 32 GPUs 3.2 s
    # speedups 1, 10/5.5 = 1.81818, 10/3.2 = 3.125; efficiencies 1, 0.90909, 0.78125
    points = [
        ScalingPoint(16, 1024, 4096, 5.5),
        ScalingPoint(8, 1024, 4096, 10.0),
        ScalingPoint(32, 1024, 4096, 3.2),
    ]
    result = compute_scaling(points)
    assert result.mode is ScalingMode.STRONG
    assert [p.gpus for p in result.points] == [8, 16, 32]
    assert [p.speedup for p in result.points] == pytest.approx([1.0, 1.81818, 3.125], rel=1e-5)
    assert [p.efficiency for p in result.points] == pytest.approx([1.0, 0.909091, 0.78125], rel=1e-5)


def test_unclassifiable_and_bad_inputs() -> None:
    mixed = [ScalingPoint(8, 64, 4096, 1.0), ScalingPoint(16, 96, 4096, 1.0)]
    assert classify_scaling(mixed) is None
    with pytest.raises(ValueError, match=r"expected a fixed GBS or GBS proportional to GPUs"):
        compute_scaling(mixed)
    with pytest.raises(ValueError, match="scaling needs at least 2 GPU counts, got 1"):
        weak_scaling(mixed[:1])
    with pytest.raises(ValueError, match="one point per GPU count"):
        weak_scaling([ScalingPoint(8, 64, 4096, 1.0), ScalingPoint(8, 64, 4096, 1.1)])
    with pytest.raises(ValueError, match="strong scaling needs one GBS across points"):
        strong_scaling(mixed)
