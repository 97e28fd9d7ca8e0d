"""Megatron-LM and Megatron-Bridge logs: `iteration N/ M | key: value |` lines and `Step Time` lines."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.training import NanMark, TrainingLog, TrainingStep, parse_number, read_text_lines

__all__ = ["parse_megatron", "parse_pipe_log"]

FORMAT = "megatron"
HINT = "Keep the file as evidence; re-run the job and add the new log to bundle.yaml as a further run."
_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_STEP_TIME = re.compile(r"Step Time\s*:\s*(\S+?)s\s+GPU utilization:\s*(\S+?)\s*MODEL_TFLOP/s/GPU")
# ` [2025-08-29 17:02:50] iteration ...`: Megatron's whole-second print time, just before the record
_STAMP = re.compile(r"\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})\]\s*$")
# time spent outside the timed steps, as the log reports it: `save-checkpoint ....: (min, max)` in ms
_PAUSE = re.compile(r"^\s*save-checkpoint\s*\.*:\s*\(\s*[\d.]+\s*,\s*([\d.]+)\s*\)\s*$")
_UNTIMED = re.compile(r"\bvalidation loss at\b")
_NAN = re.compile(r"\b(grad norm|lm loss)\s*:\s*(nan|-?inf)\b", re.IGNORECASE)
# printed key -> (TrainingStep field, divisor to seconds or 1)
MEGATRON_FIELDS: dict[str, tuple[str, float]] = {
    "elapsed time per iteration (ms)": ("step_time_s", 1000.0),
    "elapsed time per iteration (s)": ("step_time_s", 1.0),
    "throughput per GPU (TFLOP/s/GPU)": ("tflops_per_gpu", 1.0),
    "TFLOPs": ("tflops_per_gpu", 1.0),
    "lm loss": ("loss", 1.0),
    "grad norm": ("grad_norm", 1.0),
    "global batch size": ("global_batch_size", 1.0),
    "consumed samples": ("consumed_samples", 1.0),
    "samples per second": ("samples_per_s", 1.0),
}
_INTS = {"global_batch_size", "consumed_samples"}


def parse_pipe_log(
    path: Path, display: str, *, fmt: str, fields: dict[str, tuple[str, float]], what: str, limit: int,
    wrapped: bool = False,
) -> TrainingLog:
    """Every `iteration N/ M | key: value |` record of a Megatron-style log, with its line.

    With `wrapped`, a record that does not end with '|' is joined with the next line when that line finishes
    it (ends with '|', starts no record): a log wrapped at a terminal width keeps its TFLOPs and loss; a record
    that stays cut short is read as far as it goes, with a warning naming its line.
    """
    lines = read_text_lines(path, display, limit=limit)
    steps: list[TrainingStep] = []
    nans: list[NanMark] = []
    warnings: list[str] = []
    joined: set[int] = set()
    pause_ms, untimed = 0.0, False  # since the previous record
    for number, raw in enumerate(lines, start=1):
        if number in joined:
            continue
        nxt = lines[number] if number < len(lines) else ""
        cut = not raw.rstrip().endswith("|")
        continues = (_ITER.search(nxt) is None and nxt.rstrip().endswith("|")
                     and (cut or nxt.lstrip().partition(":")[0].strip() in fields))
        if wrapped and _ITER.search(raw) and (cut or continues):
            if continues:
                raw = raw + nxt
                joined.add(number + 1)
                warnings.append(f"{display} lines {number}-{number + 1}: one iteration record wrapped over two "
                                "lines; read joined")
            else:
                warnings.append(f"{display} line {number}: expected the iteration record to end with '|', got a "
                                "line cut short; the values after the cut (TFLOPs, loss, ...) are not read")
        pause = _PAUSE.match(raw)
        if pause is not None:
            pause_ms += float(pause.group(1))
        untimed = untimed or _UNTIMED.search(raw) is not None
        for mark in _NAN.finditer(raw):
            nans.append(NanMark(number, mark.group(1)))
        timing = _STEP_TIME.search(raw)
        if timing is not None and steps:
            seconds = parse_number(timing.group(1), file=display, line=number, field="Step Time", hint=HINT)
            tflops = parse_number(
                timing.group(2), file=display, line=number, field="GPU utilization", hint=HINT
            )
            last = steps[-1]
            steps[-1] = replace(
                last,
                tflops_per_gpu=tflops,
                step_time_s=last.step_time_s if last.step_time_s is not None else seconds,
            )
        matches = list(_ITER.finditer(raw))
        for index, match in enumerate(matches):
            # a print may run into the next one without a newline: a record ends where the next begins
            end = matches[index + 1].start() if index + 1 < len(matches) else len(raw)
            step = _record(raw[match.end() : end], match, number, display, fields)
            stamp = _STAMP.search(raw, matches[index - 1].end() if index else 0, match.start())
            steps.append(replace(step, timestamp_s=_epoch(stamp), pause_s=pause_ms / 1000.0, untimed_pause=untimed))
            pause_ms, untimed = 0.0, False
    if not steps:
        raise EvidenceError(display, f"expected {what} 'iteration N/ M |' lines, found none. {HINT}")
    return TrainingLog(format=fmt, file=display, steps=steps, nan_marks=nans, line_count=len(lines),
                       warnings=warnings)


def _epoch(stamp: re.Match[str] | None) -> float | None:
    # read as UTC: only differences between a log's own stamps are used
    if stamp is None:
        return None
    try:
        return datetime.fromisoformat(f"{stamp.group(1)}T{stamp.group(2)}").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None  # not a calendar time (month 13): the step is not placed on the clock


def _record(
    text: str, match: re.Match[str], number: int, display: str, fields: dict[str, tuple[str, float]]
) -> TrainingStep:
    values: dict[str, float | int | None] = {}
    for part in text.split("|"):
        key, sep, value = part.partition(":")
        spec = fields.get(key.strip())
        if not sep or spec is None:
            continue
        name, factor = spec
        parsed = parse_number(value, file=display, line=number, field=key.strip(), hint=HINT) / factor
        values[name] = int(parsed) if name in _INTS and parsed.is_integer() else parsed
    step_time = values.pop("step_time_s", None)
    if step_time is None:
        raise EvidenceError(
            display,
            f"expected 'elapsed time per iteration (ms)' or '(s)' on an iteration line. {HINT}",
            line=number,
            field="elapsed time per iteration",
        )
    if step_time < 0:
        raise EvidenceError(
            display,
            f"expected a non-negative step time, got {step_time}. {HINT}",
            line=number,
            field="elapsed time per iteration",
        )
    return TrainingStep(
        iteration=int(match.group(1)),
        max_iteration=int(match.group(2)),
        step_time_s=float(step_time),
        line=number,
        **values,  # type: ignore[arg-type]
    )


def parse_megatron(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> TrainingLog:
    """Every Megatron-LM / Megatron-Bridge iteration record, with `Step Time` throughput attached."""
    return parse_pipe_log(path, display, fmt=FORMAT, fields=MEGATRON_FIELDS, what="Megatron", limit=limit)
