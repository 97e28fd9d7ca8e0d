"""NeMo 2 console logs: `Training epoch E, iteration N/M | key: value | ...` lines, wherever they sit."""

from __future__ import annotations

import re
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.training import (
    LineCounter,
    TrainingLog,
    TrainingStep,
    line_total,
    make_step,
    nan_marks,
    parse_number,
    read_text,
)

__all__ = ["parse_nemo"]

FORMAT = "nemo"
# [^\S\n] is \s within one line: the patterns run over the whole text and must not match across a line break
# the first step pattern of a line and the rest of that line (so a line is read once, by its first pattern)
_STEP = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+)[^\S\n]*\|([^\n]*)")
_NAN = re.compile(r"\b(grad[ _]norm|reduced_train_loss|lm loss)[^\S\n]*:[^\S\n]*(nan|-?inf)\b", re.IGNORECASE)
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
    """Every NeMo 2 step line of the file, in file order, with its 1-based line number.

    The text is scanned whole (one compiled pattern, C speed); only the step lines are split in Python."""
    text = read_text(path, display, limit=limit)
    nans = nan_marks(text, _NAN)
    steps: list[TrainingStep] = []
    at = LineCounter(text).at
    fields = _FIELDS
    for match in _STEP.finditer(text):
        number = at(match.start())
        epoch, iteration, most, rest = match.groups()
        values: dict[str, object] = {}
        for part in rest.split("|"):
            key, sep, value = part.partition(":")
            name = fields.get(key.strip())
            if name is None or not sep:
                continue
            try:
                number_value = float(value)  # float() ignores the whitespace strip() removes
            except ValueError:
                number_value = parse_number(value, file=display, line=number, field=key.strip(), hint=_HINT)
            values[name] = int(number_value) if name in _INTS and number_value.is_integer() else number_value
        if "step_time_s" not in values:
            raise EvidenceError(
                display, f"expected 'train_step_timing in s' on a step line. {_HINT}", line=number,
                field="train_step_timing in s",
            )
        values["iteration"] = int(iteration)
        values["max_iteration"] = int(most)
        values["epoch"] = int(epoch)
        values["line"] = number
        steps.append(make_step(values))
    if not steps:
        raise EvidenceError(
            display, f"expected NeMo 'Training epoch E, iteration N/M' lines, found none. {_HINT}"
        )
    return TrainingLog(format=FORMAT, file=display, steps=steps, nan_marks=nans, line_count=line_total(text))
