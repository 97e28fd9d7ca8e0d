"""Megatron-LM and Megatron-Bridge logs: `iteration N/ M | key: value |` lines and `Step Time` lines."""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.log_config import startup_settings
from clustercert.parsers.training import (
    NAN_VALUE,
    LineCounter,
    NanMark,
    TrainingLog,
    column_floats,
    column_ints,
    job_end,
    line_total,
    make_step,
    make_steps,
    may_hold_nan_value,
    parse_number,
    pieces_hold_nan_value,
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
_NAN_COUNT = re.compile(r"\bnumber of nan iterations\s*:\s*(\d+)")
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
    ahead = _throughput_first(text)
    fast = _pipe_log_fast(text, display, fmt=fmt, fields=fields, wrapped=wrapped, ahead=ahead)
    if fast is not None:
        return replace(fast, settings=_settings(text))
    reading = _LineReading(text, display, fields, wrapped, ahead)
    line_of = LineCounter(text).at
    # Only a line holding one of these can change what is read (a record, its throughput line, a pause, a nan);
    # each such line goes through the same steps, in file order, as it did when every line was read
    for start, end in _lines_with(text, _LITERALS, reading.nan_lines):
        reading.line(start, end, line_of(start))
    if not reading.steps:
        raise EvidenceError(display, f"expected {what} 'iteration N/ M |' lines, found none. {HINT}")
    if ahead:
        reading.pair_in_order()
    return TrainingLog(format=fmt, file=display, steps=[make_step(step) for step in reading.steps],
                       nan_marks=reading.nans, line_count=line_total(text), warnings=reading.warnings,
                       settings=_settings(text))


def _settings(text: str) -> dict[str, list[tuple[str, int]]]:
    """The configuration the log printed at its last start-up (log_config.startup_settings)."""
    first = _ITER_FROM_LITERAL.search(text)
    return startup_settings(text, len(text) if first is None else first.start())


class _LineReading:
    """The line-by-line reading of a Megatron-style log: line() takes each line that may matter, in file order."""

    def __init__(self, text: str, display: str, fields: dict[str, tuple[str, float]], wrapped: bool,
                 ahead: bool = False) -> None:
        self.text, self.display, self.fields, self.wrapped = text, display, fields, wrapped
        self.ahead = ahead  # throughput lines come before their records (_throughput_first)
        self.throughputs: list[float] = []  # with `ahead`, each throughput line's TFLOP/s, in file order
        self.steps: list[dict[str, object]] = []  # built as TrainingSteps at the end (a Step Time line amends one)
        self.nans: list[NanMark] = []
        self.warnings: list[str] = []
        self.joined: set[int] = set()  # lines read with the record they finish
        self.pause_ms, self.untimed = 0.0, False  # since the previous record
        self.nan_lines = _nan_lines(text)
        self.stamps: dict[tuple[str, str], float | None] = {}  # each print time read once

    def line(self, start: int, end: int, number: int) -> None:
        """The line text[start:end], line `number`: its records, throughput, pause, evaluation and nan values."""
        if number in self.joined:
            return
        raw = self.text[start:end]
        matches = _records(raw) if "iteration" in raw else []
        ended = job_end(raw, matches[-1].end(), self.display, number, "iteration record") if matches else None
        if ended is not None:
            raw, matches = self._cut(raw, matches, ended)
        if self.wrapped and matches:
            raw, matches = self._unwrapped(raw, matches, end, number)
        if "save-checkpoint" in raw:
            pause = _PAUSE.match(raw)
            if pause is not None:
                self.pause_ms += float(pause.group(1))
        self.untimed = self.untimed or ("validation loss at" in raw and _UNTIMED.search(raw) is not None)
        if start in self.nan_lines:
            counts = _NAN_COUNT.findall(raw)
            counted = int(counts[0]) if len(counts) == 1 else None
            for mark in _NAN.finditer(raw):
                self.nans.append(NanMark(number, mark.group(1), counted))
        if "Step Time" in raw:
            self._step_time(raw, number)
        for index, match in enumerate(matches):
            # a print may run into the next one without a newline: a record ends where the next begins
            stop = matches[index + 1].start() if index + 1 < len(matches) else len(raw)
            step = _record(raw[match.end() : stop], match, number, self.display, self.fields)
            stamp = _STAMP.search(raw, matches[index - 1].end() if index else 0, match.start())
            if stamp is None:
                step["timestamp_s"] = None
            else:
                day_time: tuple[str, str] = (stamp.group(1), stamp.group(2))
                if day_time not in self.stamps:
                    self.stamps[day_time] = _epoch(stamp)
                step["timestamp_s"] = self.stamps[day_time]
            step["pause_s"] = self.pause_ms / 1000.0
            step["untimed_pause"] = self.untimed
            self.steps.append(step)
            self.pause_ms, self.untimed = 0.0, False

    def _cut(self, raw: str, matches: list[re.Match[str]],
             ended: tuple[int, str]) -> tuple[str, list[re.Match[str]]]:
        """A record line srun's end-of-job line ran into: the record read as far as it is whole."""
        cut_at, said = ended
        if raw[:cut_at].rstrip().endswith("|"):
            return raw[:cut_at], matches  # srun's line ran into a whole record (which ends before it): nothing lost
        # the job ended while a task printed this record: its last value may be cut
        raw = raw[:raw.rfind("|", 0, cut_at) + 1]
        matches = _records(raw)
        if not _has_step_time(raw[matches[-1].end():], self.fields):
            self.warnings.append(f"{said}: the record is not read, its step time cut off")
            matches.pop()
        else:
            self.warnings.append(f"{said}: its last value is not read, it may be cut short")
        return raw, matches

    def _unwrapped(self, raw: str, matches: list[re.Match[str]], end: int,
                   number: int) -> tuple[str, list[re.Match[str]]]:
        """A record line joined with the next line where that line finishes the record (a log wrapped at a
        terminal width), with a warning where it stays cut short."""
        text = self.text
        if end < len(text):
            following = text.find("\n", end + 1)
            nxt = text[end + 1:following if following >= 0 else len(text)]
        else:
            nxt = ""
        cut = not raw.rstrip().endswith("|")
        continues = (nxt.rstrip().endswith("|") and (cut or nxt.lstrip().partition(":")[0].strip() in self.fields)
                     and not _records(nxt))
        if continues:
            self.joined.add(number + 1)
            self.warnings.append(f"{self.display} lines {number}-{number + 1}: one iteration record wrapped over "
                                 "two lines; read joined")
            return raw + nxt, _records(raw + nxt)
        if cut:
            self.warnings.append(f"{self.display} line {number}: expected the iteration record to end with '|', got "
                                 "a line cut short; the values after the cut (TFLOPs, loss, ...) are not read")
        return raw, matches

    def _step_time(self, raw: str, number: int) -> None:
        """A `Step Time ... MODEL_TFLOP/s/GPU` line: the last record's throughput (and its step time if it has
        none); with `ahead`, kept for the record it comes with (pair_in_order)."""
        timing = _STEP_TIME.search(raw)
        if timing is None or not (self.steps or self.ahead):
            return
        seconds_text, tflops_text = timing.groups()
        try:  # parse_number(), whose strip() float() does itself
            seconds = float(seconds_text)
        except ValueError:
            seconds = parse_number(seconds_text, file=self.display, line=number, field="Step Time", hint=HINT)
        try:
            tflops = float(tflops_text)
        except ValueError:
            tflops = parse_number(tflops_text, file=self.display, line=number, field="GPU utilization", hint=HINT)
        if self.ahead:
            self.throughputs.append(tflops)
            return
        last = self.steps[-1]
        last["tflops_per_gpu"] = tflops
        if last["step_time_s"] is None:
            last["step_time_s"] = seconds

    def pair_in_order(self) -> None:
        """With `ahead`: the k-th throughput line is the k-th record's, as NVIDIA's llmb-run pairs them (rank 0
        prints it, the last rank the record: in a merged output either may come first); a count that is neither
        the records' nor one more (the job ended between the two prints) is said."""
        for step, tflops in zip(self.steps, self.throughputs, strict=False):
            step["tflops_per_gpu"] = tflops
        if len(self.throughputs) not in (len(self.steps), len(self.steps) + 1):
            self.warnings.append(f"{self.display}: {len(self.throughputs)} 'Step Time' throughput lines for "
                                 f"{len(self.steps)} iteration records; paired in order, as NVIDIA's llmb-run does")


def _throughput_first(text: str) -> bool:
    """Whether a `Step Time ... MODEL_TFLOP/s/GPU` line comes before the line of the first record: Megatron-Bridge
    prints each step's throughput line just before its record (`training_log`: print_rank_0, then print_rank_last).
    Otherwise a throughput line amends the record before it."""
    first = _ITER_FROM_LITERAL.search(text)
    end = len(text) if first is None else text.rfind("\n", 0, first.start()) + 1
    at = text.find("Step Time", 0, end)
    while at >= 0:
        stop = text.find("\n", at, end)
        stop = end if stop < 0 else stop
        if _STEP_TIME.search(text, at, stop) is not None:
            return True
        at = text.find("Step Time", stop, end)
    return False


def _records(line: str) -> list[re.Match[str]]:
    """Every match of _ITER in `line`, as _ITER.finditer() gives them."""
    return [match for match in _ITER_FROM_LITERAL.finditer(line)
            if not match.start() or _WORD.match(line, match.start() - 1) is None]


def _nan_lines(text: str) -> set[int]:
    """The start of every line of `text` with a `: nan` or `: inf` value (NAN_VALUE)."""
    starts: set[int] = set()
    if not may_hold_nan_value(text):
        return starts
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
    """_epoch_of() of a _STAMP match's day and time."""
    return None if stamp is None else _epoch_of(f"{stamp.group(1)} {stamp.group(2)}")


def _pairs(fields: dict[str, tuple[str, float]]) -> re.Pattern[str]:
    """(key, value) of each '|'-separated part whose text before its first ':' is, stripped, a key of `fields`:
    what split('|') and partition(':') find, searched from each '|' (a literal: C speed, linear)."""
    keys = "|".join(re.escape(key) for key in sorted(fields, key=len, reverse=True))
    return re.compile(rf"\|\s*({keys})\s*:([^|]*)")


_PAIRS: dict[int, tuple[dict[str, tuple[str, float]], re.Pattern[str]]] = {}  # by the fields table's id


def _has_step_time(text: str, fields: dict[str, tuple[str, float]]) -> bool:
    """Whether a record's text names its step time."""
    return any(name == "step_time_s" and key in text for key, (name, _) in fields.items())


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


# The fast reading (issue 13). A log prints the same keys in the same order on every record: the first record's
# parts make one pattern for a whole record line (a template), split over the whole text by one compiled pattern
# (C speed) into the text between records (its newlines give each record's line) and each value of each record,
# its values converted column by column. The template is used only where it reads what the line-by-line steps
# above read: every record head in the text (`iteration N/ M |`) starts one of the template's records (no record
# of another shape, none run into another on one line, none after a word character), no nan or inf value, no
# throughput/pause/evaluation line on a record line, no print time before a record unless the template has one
# before each, no wrapped record (with `wrapped`), every number converts and every step time is non-negative.
# Any other file, and any file with an error, is read by those steps, which give its warnings and its located error.
_STAMPED = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\]\s*$")
_MISC = ("Step Time", "save-checkpoint", "validation loss at")
_PAIR_ALONE: dict[int, tuple[dict[str, tuple[str, float]], re.Pattern[str]]] = {}  # _pairs() without its '|'


class _Template:
    """The pattern of a log's first record line, with what it captures."""

    __slots__ = ("continued", "fields", "heads", "pattern", "stamped", "step_time", "words")

    def __init__(self, pattern: re.Pattern[str], fields: list[tuple[str | None, float]], stamped: bool,
                 heads: re.Pattern[str], step_time: re.Pattern[str], continued: re.Pattern[str], words: int) -> None:
        self.pattern = pattern  # groups: [print time,] iteration, max, the value of each part
        self.fields = fields  # (TrainingStep field or None for a part no field reads, divisor) of each part's value
        self.stamped = stamped  # the record starts with Megatron's `[day time]`
        self.heads = heads  # every record head of the text, as _ITER_FROM_LITERAL finds them within a line
        self.step_time = step_time  # _STEP_TIME over the whole text, never across a line break
        self.continued = continued  # a line that finishes a wrapped record: a key's part ending with '|'
        self.words = words  # how many times "iteration" is in the pattern's literal text (its head, its keys)


def _template(text: str, fields: dict[str, tuple[str, float]], wrapped: bool) -> _Template | None:
    """The template of the first record line, or None when that line is not one a template reads alike (more
    than one record, cut short, a part without a colon)."""
    if any(":" in key for key in fields):
        return None  # a part is a key's exactly when its text before the first ':' is the key
    first = _ITER_FROM_LITERAL.search(text)  # the first record head (after no word character)
    while first is not None and first.start() and _WORD.match(text, first.start() - 1) is not None:
        first = _ITER_FROM_LITERAL.search(text, first.start() + 1)
    if first is None:
        return None
    at = first.start()
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line = text[start:end if end >= 0 else len(text)]
    matches = _records(line)
    if len(matches) != 1 or not line.rstrip().endswith("|"):
        return None
    head = matches[0]
    parts = line[head.end():].rstrip()[:-1].split("|")
    known = _PAIR_ALONE.get(id(fields))
    if known is None or known[0] is not fields:
        known = _PAIR_ALONE[id(fields)] = (fields, re.compile(_pairs(fields).pattern[2:]))
    pair = known[1]
    stamped = _STAMPED.search(line, 0, head.start()) is not None
    # \s within one line of read_text()'s text (whose only line break is "\n"); in ASCII text a space or a tab
    space = "[ \t]" if text.isascii() else r"[^\S\n]"
    head_text = f"iteration{space}+(\\d+){space}*/{space}*(\\d+){space}*\\|"
    # The pattern's repeats are possessive (`*+`): what follows each (a key, ':', '|', a digit, a line end) is
    # never a character it takes, so giving one back never lets a match succeed that would fail; the engine then
    # keeps no backtracking state for them
    # the print time one group: one text per record to make, look up and free, not two and a pair of them
    pieces = [rf"\[(\d{{4}}-\d{{2}}-\d{{2}} \d{{2}}:\d{{2}}:\d{{2}})\]{space}*+" if stamped else "",
              f"iteration{space}++(\\d++){space}*+/{space}*+(\\d++){space}*+\\|"]
    captured: list[tuple[str | None, float]] = []
    words = 1
    for part in parts:
        found = pair.match(part)
        label = found.group(1) if found is not None else part.partition(":")[0].strip()
        if found is None and (":" not in part or not label):
            return None
        # a key that holds a throughput, pause or evaluation line's text is read line by line (the bulk reading
        # looks for these in the text between records and in the values no field reads)
        if any(literal in label for literal in _MISC):
            return None
        # every part's value is captured: a value no field reads is searched for a nan or inf value all the same
        pieces.append(f"{space}*+{re.escape(label)}{space}*+:([^|\n]*+)\\|")
        captured.append(fields[label] if found is not None else (None, 1.0))
        words += label.count("iteration")
    pieces.append(f"{space}*+")
    if wrapped:  # the next line must not finish this record (a part of a key ending with '|')
        keys = "|".join(re.escape(key) for key in sorted(fields, key=len, reverse=True))
        pieces.append(rf"(?=\n(?!{space}*(?:{keys}){space}*:[^\n]*\|{space}*(?:\n|\Z))|\Z)")
    else:
        pieces.append(r"(?=\n|\Z)")
    step_time = re.compile(_STEP_TIME.pattern.replace(r"\s", space))  # within one line, as on the line alone
    return _Template(re.compile("".join(pieces)), captured, stamped, re.compile(head_text), step_time,
                     re.compile(rf"{space}*(?:{'|'.join(map(re.escape, fields))}){space}*:[^\n]*\|{space}*\Z"),
                     words)


_STAMP_BEFORE_HEAD = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\]\s*iteration")
_LAST_CHAR = operator.itemgetter(slice(-1, None))


def _pipe_log_fast(
    text: str, display: str, *, fmt: str, fields: dict[str, tuple[str, float]], wrapped: bool, ahead: bool = False
) -> TrainingLog | None:
    """What parse_pipe_log() reads from `text`, read by a template (above); None when the template does not
    apply, and the line-by-line reading must."""
    template = _template(text, fields, wrapped)
    if template is None:
        return None
    # The whole text is split: a template match holds a record head, so none starts after the last head's line;
    # a match ends at its line's end and tries each later offset once (a bounded try), so the split is linear.
    # With `wrapped`, the pattern's look at the next line also covers the last record's next line
    pieces = template.pattern.split(text)
    width = template.pattern.groups + 1
    # column by column (each freed once read, so the texts of a column are not all kept to the end):
    # the text before the first record, between each two and after the last; [print time,] iteration, max, values
    columns: list[list[str]] = [pieces[index::width] for index in range(width)]
    del pieces
    between = _Between(columns[0])
    columns[0] = []
    count = between.count
    if not count or not _only_records(text, template, between) or not _unread_values_plain(columns, template, between):
        return None
    read = _field_columns(columns, template)
    if read is None:
        return None
    values, step_times = read
    lines, unrecorded, total = between.layout()
    del between
    pauses = _pauses(unrecorded, lines, count)
    if pauses is None:
        return None
    pause, untimed = pauses
    # a throughput line after each record (Megatron-Bridge): split like the records, the text freed once split
    parts = template.step_time.split(unrecorded) if "Step Time" in unrecorded else []
    del unrecorded
    if len(parts) > 1 and not _throughputs(template, parts, lines, values, ahead):
        return None
    del parts
    timestamps: list[float | None]
    if template.stamped:
        # each distinct print time converted once (a whole second: many records share one)
        stamps: dict[str, float | None] = dict.fromkeys(columns[1])
        for stamp in stamps:
            stamps[stamp] = _epoch_of(stamp)
        timestamps = list(map(stamps.__getitem__, columns[1]))
        columns[1] = []
    else:
        timestamps = [None] * count
    offset = 1 if template.stamped else 0
    names = ["iteration", "max_iteration", "step_time_s", "line", "timestamp_s", "pause_s", "untimed_pause",
             *values]
    iterations, most = column_ints(columns[offset + 1]), column_ints(columns[offset + 2])
    del columns
    steps = make_steps(names, [iterations, most, step_times, lines, timestamps, [ms / 1000.0 for ms in pause], untimed,
                               *values.values()])
    return TrainingLog(format=fmt, file=display, steps=steps, nan_marks=[],
                       line_count=total + (0 if not text or text.endswith("\n") else 1), warnings=[])


class _Between:
    """The texts before the first record, between each two and after the last, of a text split by a template."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.count = len(texts) - 1  # records
        # Records on consecutive lines (nothing printed between them, as a log without timers has it): every text
        # between two records is the same (a line break and the next record's indent), and each check reads the
        # texts between records one by one, so this one text is read once, with the first and the last
        self.gap = texts[1] if self.count > 1 else ""
        self.uniform = (self.count > 1 and texts.count(self.gap) - (texts[0] == self.gap)
                        - (texts[-1] == self.gap) == self.count - 1)
        self.outer = [texts[0], self.gap, texts[-1]] if self.uniform else texts  # the distinct texts

    def layout(self) -> tuple[list[int], str, int]:
        """Each record's line, the text without its records, and the text's line breaks.

        A record holds no line break, so in the text without its records each line keeps its number; a line
        without a record is as in the text. No record holds a throughput, pause or evaluation line's text
        (_unread_values_plain), and none is made where a record was taken out (a record starts with "iteration"
        or '[' and ends before a line break): each such text of the file is in it, on its line."""
        texts, count = self.texts, self.count
        if self.uniform:
            # the gap holds a line break or more (a record ends at one)
            first, step, last = (text.count("\n") for text in self.outer)
            return (list(range(1 + first, 1 + first + step * count, step)),
                    texts[0] + self.gap * (count - 1) + texts[-1], first + step * (count - 1) + last)
        newlines = list(map(str.count, texts, itertools.repeat("\n")))
        return list(itertools.accumulate(newlines[:-1], initial=1))[1:], "".join(texts), sum(newlines)


def _only_records(text: str, template: _Template, between: _Between) -> bool:
    """Whether every record head of the text is one of the template's records, and no print time before a record
    is left out of one (only a stamped template reads them), nor a word character runs into a record's head."""
    # Each record holds `words` times "iteration" in its literal text, where no head can start (a key's is followed
    # by ':' before any '|'): when the text holds no more, every head is a record's (the count, a C scan, spares
    # most files the head pattern's scan)
    count = between.count
    if text.count("iteration") != count * template.words and len(template.heads.findall(text)) != count:
        return False
    if template.stamped:
        return True
    # A print time just before a record (the line-by-line reading's _STAMP, on the record's line) lies with the
    # spaces after it in the text before the record: the texts between records joined by "iteration" hold
    # every such one (and more: _STAMP_BEFORE_HEAD also finds one a line before, which is then read line by
    # line all the same)
    if _STAMP_BEFORE_HEAD.search("iteration".join(between.outer)) is not None:
        return False
    return _WORD.search("".join(map(_LAST_CHAR, between.outer[:-1]))) is None  # `preiteration`: no record


def _unread_values_plain(columns: list[list[str]], template: _Template, between: _Between) -> bool:
    """Whether the texts between records and the values no field reads hold no nan or inf value and no
    throughput, pause or evaluation line's text; those values' columns are freed."""
    # No nan or inf value (NAN_VALUE) in the text: a match starts at a ':' and stays on its line, so it lies in the
    # text between records (a record starts with '[' or 'iteration', which no match reaches into) or in a part's
    # value (a record's other ':' are its print time's, followed by digits): the values a field reads are checked
    # as numbers (_field_columns: a value NAN_VALUE matches is not a number or not finite), the others here
    offset = 1 if template.stamped else 0
    unread = [offset + 3 + index for index, (name, _) in enumerate(template.fields) if name is None]
    # the values no field reads, each after its ':' and before a line break (`pieces_hold_nan_value`'s reading)
    unread_values = "\n:".join(map("\n:".join, map(columns.__getitem__, unread)))  # lists joined: no chain's copy
    for index in unread:
        columns[index] = []
    if pieces_hold_nan_value(between.outer) or pieces_hold_nan_value([unread_values], ":"):
        return False
    # A throughput, pause or evaluation line's text within a record sends the file line by line (these are read
    # from the text without its records). A record's text is its keys (none holds one: _template), its digits and
    # its values: those a field reads convert to numbers, which hold none; the others are searched here
    return not any(literal in unread_values for literal in _MISC)


def _field_columns(columns: list[list[str]],
                   template: _Template) -> tuple[dict[str, list[Any]], list[float]] | None:
    """Each field's values, column by column, and the step times; None where a value is not a finite number or a
    step time is negative. Each column is freed once read."""
    offset = 1 if template.stamped else 0
    values: dict[str, list[Any]] = {}
    step_times: list[float] | None = None
    for index, (name, factor) in enumerate(template.fields):
        if name is None:
            continue
        floats = column_floats(columns[offset + 3 + index])
        columns[offset + 3 + index] = []
        if floats is None or not math.isfinite(sum(floats)):  # not a number, or nan or inf (or a sum past 1e308)
            return None
        if factor != 1.0:
            floats = [value / factor for value in floats]
        if name == "step_time_s":
            step_times = floats  # the last of two parts of one field wins, as in _record()
        elif name in _INTS:
            values[name] = (list(map(int, floats)) if all(map(float.is_integer, floats))
                            else [int(value) if value.is_integer() else value for value in floats])
        else:
            values[name] = floats
    if step_times is None or any(map((0.0).__gt__, step_times)):  # none, or one below 0
        return None
    return values, step_times


def _pauses(unrecorded: str, lines: list[int], count: int) -> tuple[list[float], list[bool]] | None:
    """Each record's checkpoint pause (ms) and whether an evaluation ran before it, from the text without its
    records, line by line (they are few); None where such a line is a record's."""
    pause = [0.0] * count
    untimed = [False] * count
    record_lines = set(lines)
    line_of = LineCounter(unrecorded).at
    for start, end in _lines_with(unrecorded, _MISC[1:], set()):
        number = line_of(start)
        if number in record_lines:
            return None
        raw = unrecorded[start:end]  # a line without a record, as in the text
        after = bisect.bisect_left(lines, number)  # how many records come before this line
        if "save-checkpoint" in raw:
            matched = _PAUSE.match(raw)
            if matched is not None and after < count:
                pause[after] += float(matched.group(1))
        if after < count and "validation loss at" in raw and _UNTIMED.search(raw) is not None:
            untimed[after] = True
    return pause, untimed


def _throughputs(template: _Template, parts: list[str], lines: list[int], values: dict[str, list[Any]],
                 ahead: bool) -> bool:
    """The throughput lines after the records (Megatron-Bridge), all at once, as each record's `tflops_per_gpu` in
    `values`; False where the line-by-line reading must read them. `parts`: the text without its records split by
    the template's throughput pattern.

    Searched in the text without its records (a line with a record and a throughput match goes line by line): a
    line without a record reads as in the text, and a match holds no line break. Split like the records (the text
    between the lines and their two numbers, no Match objects): a line's number is 1 + the line breaks of the
    texts before it."""
    count = len(lines)
    width = template.step_time.groups + 1
    gaps = map(str.count, parts[0:-1:width], itertools.repeat("\n"))
    numbers = list(itertools.accumulate(gaps, initial=1))[1:]
    if column_floats(parts[1::width]) is None:  # the seconds must be a number too
        return False
    throughputs = column_floats(parts[2::width])
    if throughputs is None:
        return False
    if ahead:  # paired in order (_LineReading.pair_in_order); a count it warns about is read line by line
        if len(numbers) not in (count, count + 1) or len(set(numbers)) != len(numbers) \
                or not set(lines).isdisjoint(numbers):
            return False
        values["tflops_per_gpu"] = throughputs[:count]
        return True
    if len(numbers) == count and all(map(operator.lt, lines, numbers)) and all(map(operator.lt, numbers, lines[1:])):
        # one after each record, before the next (the usual log): none on a record's line, none two to a line, and
        # the column is the records' own
        values["tflops_per_gpu"] = throughputs
        return True
    if not set(lines).isdisjoint(numbers) or len(set(numbers)) != len(numbers):
        return False  # on a record's line, or two on one line (the first counts): line by line
    afters = list(map(bisect.bisect_left, itertools.repeat(lines), numbers))  # the records before each
    tflops = {after - 1: value for after, value in zip(afters, throughputs, strict=True) if after}
    if tflops:
        amended = values.get("tflops_per_gpu", [None] * count)
        for index, value in tflops.items():
            amended[index] = value
        values["tflops_per_gpu"] = amended
    return True


def _epoch_of(stamp: str) -> float | None:
    """The epoch seconds of a print time `day time` (ten characters, a space and eight: each \\d of the patterns is
    one), read as UTC: only differences between a log's own print times are used."""
    try:
        return datetime.fromisoformat(f"{stamp[:10]}T{stamp[11:]}").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None  # not a calendar time (month 13): the step is not placed on the clock
