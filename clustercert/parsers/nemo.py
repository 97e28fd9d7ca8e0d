"""NeMo 2 console logs: `Training epoch E, iteration N/M | key: value | ...` lines, wherever they sit."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

from clustercert.errors import EvidenceError
from clustercert.parsers.training import (
    LineCounter,
    TrainingLog,
    TrainingStep,
    column_floats,
    column_ints,
    job_end,
    line_total,
    make_step,
    make_steps,
    nan_marks,
    parse_number,
    pieces_hold_nan_value,
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
    fast = _nemo_fast(text, display)
    if fast is not None:
        return fast
    nans = nan_marks(text, _NAN)
    steps: list[TrainingStep] = []
    warnings: list[str] = []
    at = LineCounter(text).at
    fields = _FIELDS
    for match in _STEP.finditer(text):
        number = at(match.start())
        epoch, iteration, most, rest = match.groups()
        ended = job_end(rest, 0, display, number, "step line")
        if ended is not None:  # its last part may be cut short where srun's line begins: not read
            cut, said = ended
            rest = rest[:cut].rpartition("|")[0]
            if not any(fields.get(part.partition(":")[0].strip()) == "step_time_s" for part in rest.split("|")):
                warnings.append(f"{said}: the step is not read, its step time cut off")
                continue
            warnings.append(f"{said}: its last value is not read, it may be cut short")
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
    return TrainingLog(format=FORMAT, file=display, steps=steps, nan_marks=nans, line_count=line_total(text),
                       warnings=warnings)


# The fast reading. NeMo prints the same parts in the same order on every step line: the first step line's parts
# make one pattern for a whole step (a template), split over the whole text by one compiled pattern (C speed) into
# the text between steps (its newlines give each step's line) and each part's value, converted column by column.
# It is used only where it reads what the loop above reads: every "Training epoch" of the text is a template
# step's head (so each step _STEP finds is one, with the same parts up to its line's end), every number converts
# and the step time is one of the parts. Any other file, and any file with an error, is read by the loop, which
# gives its located error. nan marks are the whole text's (nan_marks()), looked for only where a nan or inf
# value may be.
_HEAD = "Training epoch"


def _nemo_template(text: str) -> tuple[re.Pattern[str], list[str | None], int] | None:
    """The pattern of the first step line (groups: epoch, iteration, max, the value of each part with a colon),
    the field each value is read as (None: a part the loop skips), and how many times the pattern's literal text
    holds "Training epoch"; None when the line has no step time."""
    first = _STEP.search(text)
    if first is None:
        return None
    # \s within one line of read_text()'s text (whose only line break is "\n"); in ASCII text a space or a tab.
    # The repeats are possessive: what follows each (a key, ':', '|', ',', a line end) is never one they take
    space = "[ \t]" if text.isascii() else r"[^\S\n]"
    pieces = [rf"Training epoch (\d++), iteration (\d++)/(\d++){space}*+\|"]
    names: list[str | None] = []
    heads = 1
    for index, part in enumerate(first.group(4).split("|")):
        key, sep, _ = part.partition(":")
        label = key.strip()
        separator = "\\|" if index else ""
        if not sep:  # skipped by the loop whatever its text, as long as it has no ':'
            pieces.append(f"{separator}[^|\n:]*+")
            continue
        # the loop reads a part by its text before the first ':', stripped: here the label, spaces around it
        pieces.append(f"{separator}{space}*+{re.escape(label)}{space}*+:([^|\n]*+)")
        names.append(_FIELDS.get(label))
        heads += label.count(_HEAD)
    if "step_time_s" not in names:
        return None
    pieces.append(r"(?=\n|\Z)")
    return re.compile("".join(pieces)), names, heads


_CHUNK = 1 << 21  # characters split at a time: the texts of one chunk's values live at once, not the file's


def _nemo_fast(text: str, display: str) -> TrainingLog | None:
    """What parse_nemo() reads from `text`, read by a template (above); None when the template does not apply."""
    template = _nemo_template(text)
    if template is None:
        return None
    pattern, names, heads = template
    width = pattern.groups + 1
    read = [index for index, name in enumerate(names) if name is not None]
    numbers: list[list[float]] = [[] for _ in read]
    epochs: list[int] = []
    iterations: list[int] = []
    most: list[int] = []
    lines: list[int] = []
    line = 1  # the line the current chunk starts on
    maybe_nan = False
    start = 0
    while start < len(text):
        # a chunk ends after a line break: a step (one line) lies in one chunk, between-text may span two
        end = text.find("\n", start + _CHUNK)
        end = len(text) if end < 0 else end + 1
        pieces = pattern.split(text[start:end] if start or end < len(text) else text)
        columns = [pieces[index::width] for index in range(width)]
        del pieces
        for column, index in zip(numbers, read, strict=True):
            floats = column_floats(columns[4 + index])
            if floats is None:
                return None  # a bad number: the loop names its line
            column.extend(floats)
        epochs.extend(column_ints(columns[1]))
        iterations.extend(column_ints(columns[2]))
        most.extend(column_ints(columns[3]))
        # A nan or inf value (NAN_VALUE) starts at a ':' and stays on its line: in the text between steps (a step
        # starts with 'T', which no match reaches into) or in a part's value; a value read as a number holds one
        # only where the number is not finite (checked below)
        unread = [columns[4 + index] for index, name in enumerate(names) if name is None]
        maybe_nan = maybe_nan or pieces_hold_nan_value(columns[0]) or pieces_hold_nan_value(
            itertools.chain.from_iterable(unread), ":")
        newlines = list(map(str.count, columns[0], itertools.repeat("\n")))
        lines.extend(itertools.accumulate(newlines[:-1], initial=line))
        lines.pop(len(lines) - len(newlines))  # accumulate's initial value: no step's
        line += sum(newlines)
        start = end
    count = len(lines)
    # Every "Training epoch" is at a template step's literal text: then the first on each step's line is its head,
    # where _STEP matches and takes the rest of the line, and no line without a template step holds one
    if not count or text.count(_HEAD) != count * heads:
        return None
    values: dict[str, list[Any]] = {}
    for column, index in zip(numbers, read, strict=True):
        name = names[index]
        assert name is not None
        maybe_nan = maybe_nan or not math.isfinite(sum(column))
        # the last of two parts of one field wins, in the first one's place, as in the loop's dict
        values[name] = [int(value) if value.is_integer() else value for value in column] if name in _INTS else column
    nans = nan_marks(text, _NAN) if maybe_nan else []
    steps = make_steps([*values, "iteration", "max_iteration", "epoch", "line"],
                       [*values.values(), iterations, most, epochs, lines])
    return TrainingLog(format=FORMAT, file=display, steps=steps, nan_marks=nans,
                       line_count=line - 1 + (0 if not text or text.endswith("\n") else 1))
