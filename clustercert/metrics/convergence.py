"""Convergence sanity of a throughput run: its logged loss is finite, does not explode, and falls.

A run whose loss does not is not a valid measurement of training (MLPerf judges time to a quality target; a
throughput run is only trusted when it trains)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from clustercert.parsers.training import NanMark, TrainingStep, step_column

__all__ = ["LossProblem", "LossVerdict", "judge_loss"]


class LossProblem(StrEnum):
    NONE = "none"
    NOT_LOGGED = "not logged"
    NOT_FINITE = "not finite"
    EXPLODES = "explodes"
    DOES_NOT_FALL = "does not fall"


@dataclass(frozen=True)
class LossVerdict:
    problem: LossProblem
    steps: int  # logged losses judged
    first: float | None  # the first logged loss
    peak: float | None  # the highest finite logged loss
    head_mean: float | None  # mean of the first quarter of logged losses (at least one)
    tail_mean: float | None  # mean of the last quarter
    line: int | None  # the line that shows the problem (the nan, the explosion, the last step)
    message: str


def judge_loss(steps: Sequence[TrainingStep], nan_marks: Sequence[NanMark], explode_factor: float) -> LossVerdict:
    """Judge the logged loss over the whole run.

    not finite: the log prints a nan/inf loss; explodes: a loss above `explode_factor` x the first logged loss;
    does not fall: the mean of the last quarter of logged losses is not below the mean of the first quarter.
    """
    nan_loss = [m for m in nan_marks if "loss" in m.field]
    logged = [(loss, line) for loss, line in zip(step_column(steps, "loss"), step_column(steps, "line"), strict=True)
              if loss is not None]
    bad = next(((v, line) for v, line in logged if not math.isfinite(v)), None)
    if nan_loss or bad is not None:
        line = nan_loss[0].line if nan_loss else (bad[1] if bad else None)
        return LossVerdict(LossProblem.NOT_FINITE, len(logged), None, None, None, None, line,
                           "the log prints a nan/inf loss")
    if len(logged) < 2:
        return LossVerdict(LossProblem.NOT_LOGGED, len(logged), None, None, None, None, None,
                           f"the log prints {len(logged)} loss value(s); at least 2 are needed to judge it")
    values = [v for v, _ in logged]
    first = values[0]
    peak_at = max(range(len(values)), key=lambda i: values[i])
    peak = values[peak_at]
    quarter = max(1, len(values) // 4)
    head = sum(values[:quarter]) / quarter
    tail = sum(values[-quarter:]) / quarter
    shown = f"first {first:g}, peak {peak:g}, first-quarter mean {head:.4g}, last-quarter mean {tail:.4g}"
    if peak > explode_factor * first:
        return LossVerdict(LossProblem.EXPLODES, len(values), first, peak, head, tail, logged[peak_at][1],
                           f"the loss explodes: {peak:g} is above {explode_factor:g} x the first loss {first:g} "
                           f"({shown})")
    if not tail < head:
        return LossVerdict(LossProblem.DOES_NOT_FALL, len(values), first, peak, head, tail, logged[-1][1],
                           f"the loss does not fall over the run's {len(values)} logged steps ({shown})")
    return LossVerdict(LossProblem.NONE, len(values), first, peak, head, tail, None,
                       f"the loss falls over the run's {len(values)} logged steps ({shown})")
