"""NeMo 2 console logs: `Training epoch E, iteration N/M | key: value | ...` lines, wherever they sit."""

from __future__ import annotations

import re
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.training import NanMark, TrainingLog, TrainingStep, parse_number, read_text_lines

__all__ = ["parse_nemo"]

FORMAT = "nemo"
_STEP = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+)\s*\|")
_NAN = re.compile(r"\b(grad[ _]norm|reduced_train_loss|lm loss)\s*:\s*(nan|-?inf)\b", re.IGNORECASE)
_HINT = "Keep the file as evidence; re-run the job and add the new log to bundle.yaml as a further run."
_FIELDS = {
    "train_step_timing in s": "step_time_s",
    "TFLOPS_per_GPU": "tflops_per_gpu",
    "reduced_train_loss": "loss",
    "grad_norm": "grad_norm",
    "global_step": "global_step",
    "global_batch_size": "global_batch_size",
    "consumed_samples": "consumed_samples",
}
_INTS = {"global_step", "global_batch_size", "consumed_samples"}


def parse_nemo(path: Path, display: str, *, limit: int = 2 * 1024**3) -> TrainingLog:
    """Every NeMo 2 step line of the file, in file order, with its 1-based line number."""
    lines = read_text_lines(path, display, limit=limit)
    steps: list[TrainingStep] = []
    nans: list[NanMark] = []
    for number, raw in enumerate(lines, start=1):
        for mark in _NAN.finditer(raw):
            nans.append(NanMark(number, mark.group(1)))
        match = _STEP.search(raw)
        if match is None:
            continue
        values: dict[str, float | int | None] = {}
        for part in raw[match.end():].split("|"):
            key, sep, value = part.partition(":")
            name = _FIELDS.get(key.strip())
            if not sep or name is None:
                continue
            number_value = parse_number(value, file=display, line=number, field=key.strip(), hint=_HINT)
            values[name] = int(number_value) if name in _INTS and number_value.is_integer() else number_value
        if "step_time_s" not in values:
            raise EvidenceError(
                display, f"expected 'train_step_timing in s' on a step line. {_HINT}", line=number,
                field="train_step_timing in s",
            )
        steps.append(
            TrainingStep(
                iteration=int(match.group(2)),
                max_iteration=int(match.group(3)),
                epoch=int(match.group(1)),
                line=number,
                **values,  # type: ignore[arg-type]
            )
        )
    if not steps:
        raise EvidenceError(
            display, f"expected NeMo 'Training epoch E, iteration N/M' lines, found none. {_HINT}"
        )
    return TrainingLog(format=FORMAT, file=display, steps=steps, nan_marks=nans, line_count=len(lines))
