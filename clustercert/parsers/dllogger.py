"""NeMo DLLogger JSON lines (`DLLL {...}`): a PARAMETER line with the config, then one LOG line per step."""

from __future__ import annotations

import json
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT, to_float, to_int
from clustercert.parsers.training import NanMark, TrainingLog, TrainingStep, read_text_lines

__all__ = ["parse_dllogger"]

FORMAT = "dllogger"
_HINT = ("Keep the file as evidence; re-run the job with DLLogger enabled and add the new log to bundle.yaml as a "
         "further run.")
_MARK = "DLLL "
_FIELDS = {
    "train_step_timing in s": "step_time_s",
    "TFLOPS_per_GPU": "tflops_per_gpu",
    "reduced_train_loss": "loss",
    "train_loss": "loss",
    "grad_norm": "grad_norm",
    "global_batch_size": "global_batch_size",
    "consumed_samples": "consumed_samples",
}
_INTS = {"global_batch_size", "consumed_samples"}


def parse_dllogger(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> TrainingLog:
    """Every DLLogger step record that carries `train_step_timing in s`, with its line."""
    lines = read_text_lines(path, display, limit=limit)
    steps: list[TrainingStep] = []
    nans: list[NanMark] = []
    for number, raw in enumerate(lines, start=1):
        at = raw.find(_MARK)
        if at < 0:
            continue
        try:
            record = json.loads(raw[at + len(_MARK) :])
        except (json.JSONDecodeError, RecursionError):
            raise EvidenceError(
                display,
                f"expected a JSON object after 'DLLL', got invalid JSON. {_HINT}",
                line=number,
                field="DLLL",
            ) from None
        if not isinstance(record, dict):
            raise EvidenceError(
                display,
                f"expected a JSON object after 'DLLL', got {type(record).__name__}. {_HINT}",
                line=number,
                field="DLLL",
            )
        data = record.get("data")
        step = record.get("step")
        if step == "PARAMETER" or record.get("type") == "PARAMETER" or not isinstance(data, dict):
            continue
        if "train_step_timing in s" not in data:
            continue
        if isinstance(step, list):  # DLLogger prints tuple steps as lists
            step = step[-1] if step else None
        iteration = to_int(step, file=display, line=number, field="step", hint=_HINT)
        values: dict[str, float | int] = {}
        for key, name in _FIELDS.items():
            if key not in data:
                continue
            value = to_float(data[key], file=display, line=number, field=key, hint=_HINT, allow_nan=True)
            if value != value and name in {"loss", "grad_norm"}:
                nans.append(NanMark(number, key))
            values[name] = int(value) if name in _INTS and value.is_integer() else value
        step_time = float(values.pop("step_time_s"))
        if not step_time >= 0:
            raise EvidenceError(
                display,
                f"expected a non-negative step time in seconds, got {step_time}. {_HINT}",
                line=number,
                field="train_step_timing in s",
            )
        steps.append(TrainingStep(iteration=iteration, step_time_s=step_time, line=number, **values))  # type: ignore[arg-type]
    if not steps:
        raise EvidenceError(
            display, f"expected 'DLLL {{...}}' step lines with 'train_step_timing in s', found none. {_HINT}"
        )
    return TrainingLog(format=FORMAT, file=display, steps=steps, nan_marks=nans, line_count=len(lines))
