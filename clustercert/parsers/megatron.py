"""Megatron-LM and Megatron-Bridge logs: `iteration N/ M | key: value |` lines and `Step Time` lines."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.training import (
    NAN_VALUE,
    LineCounter,
    NanMark,
    TrainingLog,
    line_total,
    make_step,
    parse_number,
    read_text,
)

__all__ = ["parse_megatron", "parse_pipe_log"]

FORMAT = "megatron"
HINT = "Keep the file as evidence; re-run the job and add the new log to bundle.yaml as a further run."
_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
# _ITER without its leading \b: a pattern that starts with a literal is searched for as a literal (C speed); a
# leading \b makes the engine try every offset of the line. _records() checks the \b.
_ITER_FROM_LITERAL = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_WORD = re.compile(r"\w")
_STEP_TIME = re.compile(r"Step Time\s*:\s*(\S+?)s\s+GPU utilization:\s*(\S+?)\s*MODEL_TFLOP/s/GPU")
# ` [2025-08-29 17:02:50] iteration ...`: Megatron's whole-second print time, just before the record
_STAMP = re.compile(r"\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})\]\s*$")
# time spent outside the timed steps, as the log reports it: `save-checkpoint ....: (min, max)` in ms
_PAUSE = re.compile(r"^\s*save-checkpoint\s*\.*:\s*\(\s*[\d.]+\s*,\s*([\d.]+)\s*\)\s*$")
_UNTIMED = re.compile(r"\bvalidation loss at\b")
_NAN = re.compile(r"\b(grad norm|lm loss)\s*:\s*(nan|-?inf)\b", re.IGNORECASE)
# what a line must hold for _ITER, _STEP_TIME, _PAUSE or _UNTIMED to match it (_NAN: NAN_VALUE)
_LITERALS = ("iteration", "Step Time", "save-checkpoint", "validation loss at")
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
    text = read_text(path, display, limit=limit)
    steps: list[dict[str, object]] = []  # built as TrainingSteps at the end (a Step Time line amends the last)
    nans: list[NanMark] = []
    warnings: list[str] = []
    joined: set[int] = set()
    pause_ms, untimed = 0.0, False  # since the previous record
    nan_lines = _nan_lines(text)
    stamps: dict[tuple[str, str], float | None] = {}
    line_of = LineCounter(text).at
    size = len(text)
    # Only a line holding one of these can change what is read (a record, its throughput line, a pause, a nan);
    # each such line goes through the same steps, in file order, as it did when every line was read
    for start, end in _lines_with(text, _LITERALS, nan_lines):
        number = line_of(start)
        if number in joined:
            continue
        raw = text[start:end]
        matches = _records(raw) if "iteration" in raw else []
        if wrapped and matches:
            if end < size:
                following = text.find("\n", end + 1)
                nxt = text[end + 1:following if following >= 0 else size]
            else:
                nxt = ""
            cut = not raw.rstrip().endswith("|")
            continues = (nxt.rstrip().endswith("|") and (cut or nxt.lstrip().partition(":")[0].strip() in fields)
                         and not _records(nxt))
            if cut or continues:
                if continues:
                    raw = raw + nxt
                    matches = _records(raw)
                    joined.add(number + 1)
                    warnings.append(f"{display} lines {number}-{number + 1}: one iteration record wrapped over "
                                    "two lines; read joined")
                else:
                    warnings.append(f"{display} line {number}: expected the iteration record to end with '|', got "
                                    "a line cut short; the values after the cut (TFLOPs, loss, ...) are not read")
        if "save-checkpoint" in raw:
            pause = _PAUSE.match(raw)
            if pause is not None:
                pause_ms += float(pause.group(1))
        untimed = untimed or ("validation loss at" in raw and _UNTIMED.search(raw) is not None)
        if start in nan_lines:
            for mark in _NAN.finditer(raw):
                nans.append(NanMark(number, mark.group(1)))
        if "Step Time" in raw:
            timing = _STEP_TIME.search(raw)
            if timing is not None and steps:
                seconds_text, tflops_text = timing.groups()
                try:  # parse_number(), whose strip() float() does itself
                    seconds = float(seconds_text)
                except ValueError:
                    seconds = parse_number(seconds_text, file=display, line=number, field="Step Time", hint=HINT)
                try:
                    tflops = float(tflops_text)
                except ValueError:
                    tflops = parse_number(tflops_text, file=display, line=number, field="GPU utilization", hint=HINT)
                last = steps[-1]
                last["tflops_per_gpu"] = tflops
                if last["step_time_s"] is None:
                    last["step_time_s"] = seconds
        for index, match in enumerate(matches):
            # a print may run into the next one without a newline: a record ends where the next begins
            stop = matches[index + 1].start() if index + 1 < len(matches) else len(raw)
            step = _record(raw[match.end() : stop], match, number, display, fields)
            stamp = _STAMP.search(raw, matches[index - 1].end() if index else 0, match.start())
            if stamp is None:
                step["timestamp_s"] = None
            else:
                day_time: tuple[str, str] = (stamp.group(1), stamp.group(2))
                if day_time not in stamps:
                    stamps[day_time] = _epoch(stamp)
                step["timestamp_s"] = stamps[day_time]
            step["pause_s"] = pause_ms / 1000.0
            step["untimed_pause"] = untimed
            steps.append(step)
            pause_ms, untimed = 0.0, False
    if not steps:
        raise EvidenceError(display, f"expected {what} 'iteration N/ M |' lines, found none. {HINT}")
    return TrainingLog(format=fmt, file=display, steps=[make_step(step) for step in steps], nan_marks=nans,
                       line_count=line_total(text), warnings=warnings)


def _records(line: str) -> list[re.Match[str]]:
    """Every match of _ITER in `line`, as _ITER.finditer() gives them."""
    return [match for match in _ITER_FROM_LITERAL.finditer(line)
            if not match.start() or _WORD.match(line, match.start() - 1) is None]


def _nan_lines(text: str) -> set[int]:
    """The start of every line of `text` with a `: nan` or `: inf` value (NAN_VALUE)."""
    starts: set[int] = set()
    line_end = -1
    for hint in NAN_VALUE.finditer(text):
        at = hint.start()
        if at > line_end:
            starts.add(text.rfind("\n", 0, at) + 1)
            line_end = text.find("\n", at)
            if line_end < 0:
                break
    return starts


def _lines_with(text: str, literals: tuple[str, ...], starts: set[int]) -> list[tuple[int, int]]:
    """(start, end) of every line of `text` that holds one of `literals` or starts at one of `starts`, in file
    order; found by str.find over the whole text."""
    found = set(starts)
    find, rfind = text.find, text.rfind
    for literal in literals:
        at = find(literal)
        while at >= 0:
            found.add(rfind("\n", 0, at) + 1)
            at = find("\n", at)
            if at < 0:
                break
            at = find(literal, at)
    out = []
    for start in sorted(found):
        end = find("\n", start)
        out.append((start, end if end >= 0 else len(text)))
    return out


def _epoch(stamp: re.Match[str] | None) -> float | None:
    # read as UTC: only differences between a log's own stamps are used
    if stamp is None:
        return None
    try:
        return datetime.fromisoformat(f"{stamp.group(1)}T{stamp.group(2)}").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None  # not a calendar time (month 13): the step is not placed on the clock


def _pairs(fields: dict[str, tuple[str, float]]) -> re.Pattern[str]:
    """(key, value) of each '|'-separated part whose text before its first ':' is, stripped, a key of `fields`:
    what split('|') and partition(':') find, searched from each '|' (a literal: C speed, linear)."""
    keys = "|".join(re.escape(key) for key in sorted(fields, key=len, reverse=True))
    return re.compile(rf"\|\s*({keys})\s*:([^|]*)")


_PAIRS: dict[int, tuple[dict[str, tuple[str, float]], re.Pattern[str]]] = {}  # by the fields table's id


def _record(
    text: str, match: re.Match[str], number: int, display: str, fields: dict[str, tuple[str, float]]
) -> dict[str, Any]:
    """The TrainingStep fields of one record (make_step() builds it)."""
    values: dict[str, Any] = {}
    known = _PAIRS.get(id(fields))
    if known is None or known[0] is not fields:
        known = _PAIRS[id(fields)] = (fields, _pairs(fields))
    pattern = known[1]
    for key, value in pattern.findall("|" + text):
        name, factor = fields[key]
        try:
            parsed = float(value) / factor  # float() ignores the whitespace strip() removes
        except ValueError:
            parsed = parse_number(value, file=display, line=number, field=key, hint=HINT) / factor
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
    values["iteration"] = int(match.group(1))
    values["max_iteration"] = int(match.group(2))
    values["step_time_s"] = float(step_time)
    values["line"] = number
    return values


def parse_megatron(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> TrainingLog:
    """Every Megatron-LM / Megatron-Bridge iteration record, with `Step Time` throughput attached."""
    return parse_pipe_log(path, display, fmt=FORMAT, fields=MEGATRON_FIELDS, what="Megatron", limit=limit)
