"""The logged-loss sanity check on real training logs: what each real run's loss does, by its own lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.metrics.convergence import LossProblem, judge_loss
from clustercert.parsers.megatron import parse_megatron
from clustercert.parsers.nemo import parse_nemo


@pytest.mark.parametrize(("name", "parser", "problem", "first", "peak"), [
    # lm loss 10.57 at iteration 1, a spike back to 10.17 at 12, 8.227 at 20: it falls, nothing explodes
    ("megatron-bridge-llama3-8b-8gpu-bf16-20iters.log", parse_megatron, LossProblem.NONE, 10.57, 10.58),
    # Qwen2-0.5B continued pretraining: 8.482 at iteration 10 down to 0.95 at 120
    ("megatron-lm-via-ms-swift-qwen2-0.5b-2gpu-bf16-120iters.log", parse_megatron, LossProblem.NONE, 8.482, 8.724),
    # NeMo toy runs with mock data stop inside warm-up (lr 1.5e-07 .. 3e-06): the printed loss never moves
    # from 10.84 / 11.03 (two decimals), so the check says it does not fall: true of these runs.
    ("nemo2-llama3-toy-1gpu-bf16-20steps.log", parse_nemo, LossProblem.DOES_NOT_FALL, 10.84, 10.84),
    ("nemo2-nemorun-llama-54m-8gpu-tp2-20steps.log", parse_nemo, LossProblem.DOES_NOT_FALL, 11.03, 11.03),
])
def test_real_losses_are_judged_as_they_are(
    real_samples: Path, name: str, parser: object, problem: LossProblem, first: float, peak: float
) -> None:
    path = real_samples / "training-logs" / name
    log = parser(path, name)  # type: ignore[operator]
    verdict = judge_loss(log.steps, log.nan_marks, 1.5)
    assert verdict.problem is problem, verdict.message
    assert verdict.first == pytest.approx(first, abs=0.005) and verdict.peak == pytest.approx(peak, abs=0.005)
