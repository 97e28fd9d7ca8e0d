"""Write a NeMo 2 training log in the exact line format of NVIDIA's performance recipes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NemoRun", "render_nemo_log"]

# Lines a NeMo 2 run prints before training; the step lines follow the real logs under samples/real.
_PREAMBLE = [
    "[NeMo I {ts} nemo_logging:393] Experiments will be logged at /nemo_run/{name}",
    "GPU available: True (cuda), used: True",
    "TPU available: False, using: 0 TPU cores",
    "HPU available: False, using: 0 HPUs",
    "[NeMo I {ts} utils:302] Setting up ModelTransform for stage: TrainerFn.FITTING",
    "[NeMo I {ts} megatron_strategy:329] Fixing mis-match between ddp-config & mcore-optimizer config",
    "[NeMo I {ts} num_microbatches_calculator:228] setting number of microbatches to constant {micro}",
    "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [{devices}]",
    "",
    "  | Name   | Type     | Params | Mode ",
    "----------------------------------------------",
    "0 | module | GPTModel | {params} | train",
    "----------------------------------------------",
]


@dataclass(frozen=True)
class NemoRun:
    name: str
    steps: int
    gbs: int
    mean_step_s: float
    noise: float  # relative standard deviation of a step after warm-up
    tflops_at_mean: float
    seed: int
    timestamp: str = "2026-11-02 03:00:00"
    params: str = "405 B"
    visible_devices: str = "0,1,2,3"


def render_nemo_log(run: NemoRun) -> str:
    """The whole console log as text; deterministic for the same `run`."""
    rng = np.random.default_rng(run.seed)
    lines = [p.format(ts=run.timestamp, name=run.name, micro=run.gbs // 8 or 1, params=run.params,
                      devices=run.visible_devices) for p in _PREAMBLE]
    max_it = run.steps - 1
    loss = 12.1
    for it in range(run.steps):
        warm = 1.0 + (2.5 if it == 0 else 0.35 if it == 1 else 0.05 if it < 5 else 0.0)
        t = run.mean_step_s * warm * (1.0 + run.noise * float(rng.standard_normal()))
        loss = loss * (0.985 - 0.01 * float(rng.random()))
        tflops = run.tflops_at_mean * run.mean_step_s / t
        lr = 1.5e-07 * (it + 1)
        fields = [
            f"lr: {lr:.4g}",
            f"global_batch_size: {run.gbs}",
            f"global_step: {it}",
            f"reduced_train_loss: {loss:.4g}",
            f"train_step_timing in s: {t:.4g}",
        ]
        if it > 0:
            fields.append(f"consumed_samples: {(it + 1) * run.gbs}")
        fields.append(f"TFLOPS_per_GPU: {tflops:.2f}")
        lines.append(f"Training epoch 0, iteration {it}/{max_it} | " + " | ".join(fields))
    lines.append(f"`Trainer.fit` stopped: `max_steps={run.steps}` reached.")
    return "\n".join(lines) + "\n"
