"""Write a Megatron-Bridge pretraining console log in the line format of NVIDIA's real logs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

__all__ = ["MegatronRun", "render_megatron_log"]


@dataclass(frozen=True)
class MegatronRun:
    """One run: `steps` iterations counted from 1 as Megatron prints them."""

    steps: int
    gbs: int
    mean_step_s: float
    noise: float  # relative standard deviation of a step after warm-up
    tflops_at_mean: float  # model TFLOP/s per GPU at the mean step time (Megatron's causal convention)
    seed: int
    start: datetime


def render_megatron_log(run: MegatronRun) -> str:
    """The console log of rank 0 as text; deterministic for the same `run`."""
    rng = np.random.default_rng(run.seed)
    t = run.start
    stamp = t.strftime("%Y-%m-%d %H:%M:%S")
    lines = [
        f"[after model, optimizer, and learning rate scheduler are built] datetime: {stamp} ",
        "> building train, validation, and test datasets ...",
        "> finished creating GPT datasets ...",
        f"[after dataloaders are built] datetime: {stamp} ",
        "done with setup ...",
        "Training ...",
        "Setting rerun_state_machine.current_iteration to 0...",
        "NCCL version 2.26.5+cuda12.8",  # the cluster's one NCCL, as the simulated nccl-tests print it
    ]
    loss = 12.05
    for it in range(1, run.steps + 1):
        warm = 1.0 + (2.5 if it == 1 else 0.35 if it == 2 else 0.05 if it < 6 else 0.0)
        step = run.mean_step_s * warm * (1.0 + run.noise * float(rng.standard_normal()))
        t += timedelta(seconds=step)
        loss *= 0.985 - 0.01 * float(rng.random())
        lr = 1.5e-07 * it
        grad = 1.0 + 6.0 * float(rng.random()) / it
        lines.append(
            f" [{t.strftime('%Y-%m-%d %H:%M:%S')}] iteration {it:8d}/{run.steps:8d} | "
            f"consumed samples: {it * run.gbs:12d} | elapsed time per iteration (ms): {step * 1000:.1f} | "
            f"learning rate: {lr:E} | global batch size: {run.gbs:5d} | lm loss: {loss:E} | loss scale: 1.0 | "
            f"grad norm: {grad:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
        tflops = run.tflops_at_mean * run.mean_step_s / step
        lines.append(f"Step Time : {step:.2f}s GPU utilization: {tflops:.1f}MODEL_TFLOP/s/GPU")
    return "\n".join(lines) + "\n"
