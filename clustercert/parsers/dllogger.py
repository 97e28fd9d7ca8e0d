"""NeMo DLLogger JSON lines (`DLLL {...}`): a PARAMETER line with the config, then one LOG line per step."""

from __future__ import annotations

from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT, to_float, to_int
from clustercert.parsers.training import (
    STEP_DEFAULTS,
    NanMark,
    TrainingLog,
    TrainingStep,
    line_record,
    line_total,
    read_text,
)

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
_NAN_FIELDS = {"loss", "grad_norm"}


def parse_dllogger(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> TrainingLog:
    """Every DLLogger step record that carries `train_step_timing in s`, with its line.

    Lines are found by their `DLLL ` mark in the whole text; each record is decoded by line_record() (by json
    where orjson's reading of its step could differ: `_exact_step`)."""
    text = read_text(path, display, limit=limit)
    steps: list[TrainingStep] = []
    nans: list[NanMark] = []
    fields = _FIELDS.items()
    count = text.count
    new, defaults = object.__new__, STEP_DEFAULTS
    number, counted = 1, 0  # the line at offset `counted`
    at = text.find(_MARK)
    while at >= 0:
        line_end = text.find("\n", at)
        if line_end < 0:
            line_end = len(text)
        number += count("\n", counted, at)
        counted = at
        try:  # json.loads(text[at + 5:line_end])
            record = line_record(text, at + len(_MARK), line_end, _exact_step)
        except (ValueError, RecursionError):  # json.JSONDecodeError, or an integer of over 4,300 digits
            raise EvidenceError(
                display,
                f"expected a JSON object after 'DLLL', got invalid JSON. {_HINT}",
                line=number,
                field="DLLL",
            ) from None
        at = text.find(_MARK, line_end)
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
        iteration = step if type(step) is int else to_int(step, file=display, line=number, field="step", hint=_HINT)
        step_row = new(TrainingStep)
        values = step_row.__dict__
        values.update(defaults)
        for key, name in fields:
            if key not in data:
                continue
            raw = data[key]
            try:
                value = float(raw) if type(raw) is float or type(raw) is int else to_float(
                    raw, file=display, line=number, field=key, hint=_HINT, allow_nan=True)
            except OverflowError:  # an integer past float's range: to_float() names it
                value = to_float(raw, file=display, line=number, field=key, hint=_HINT, allow_nan=True)
            if value != value and name in _NAN_FIELDS:
                nans.append(NanMark(number, key))
            values[name] = int(value) if name in _INTS and value.is_integer() else value
        step_time = values.pop("step_time_s")
        if not step_time >= 0:
            raise EvidenceError(
                display,
                f"expected a non-negative step time in seconds, got {step_time}. {_HINT}",
                line=number,
                field="train_step_timing in s",
            )
        values["iteration"] = iteration
        values["step_time_s"] = step_time
        values["line"] = number
        steps.append(step_row)  # built as make_step() builds it
    if not steps:
        raise EvidenceError(
            display, f"expected 'DLLL {{...}}' step lines with 'train_step_timing in s', found none. {_HINT}"
        )
    return TrainingLog(format=FORMAT, file=display, steps=steps, nan_marks=nans, line_count=line_total(text))


def _exact_step(record: object) -> bool:
    """Whether fast_record() read a DLLogger record's step as json does: no float in it (json may read an integer
    past 64 bits there; the values are read with float(), which reads both alike)."""
    step = record.get("step") if type(record) is dict else None
    return not (type(step) is float or (type(step) is list and any(type(part) is float for part in step)))
