"""Megatron-DeepSpeed console logs: `elapsed time per iteration (s)`, `samples per second`, `TFLOPs`."""

from __future__ import annotations

from pathlib import Path

from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.megatron import MEGATRON_FIELDS, parse_pipe_log
from clustercert.parsers.training import TrainingLog

__all__ = ["parse_megatron_deepspeed"]

FORMAT = "megatron-deepspeed"


def parse_megatron_deepspeed(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> TrainingLog:
    """Every Megatron-DeepSpeed iteration record with its line; step time in seconds; wrapped records rejoined."""
    return parse_pipe_log(
        path, display, fmt=FORMAT, fields=MEGATRON_FIELDS, what="Megatron-DeepSpeed", limit=limit,
        wrapped=True,
    )
