"""The table every training-log parser returns: one row per printed step, each with its line."""

from __future__ import annotations

import collections
import itertools
import json
import math
import re
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import Any, overload

import orjson

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import read_chunks, read_regular
from clustercert.parsers.common import refuse_binary, refuse_control_bytes, without_escapes

__all__ = [
    "JSON_DECODER", "LINE_SPACE", "NAN_VALUE", "NOT_DECODED", "STEP_DEFAULTS", "LineCounter", "StepTable",
    "TrainingLog", "TrainingStep", "any_too_deep", "column_floats", "column_ints", "fast_record", "job_end",
    "line_record", "line_total", "make_step", "make_steps", "may_hold_nan_value", "nan_marks", "parse_number",
    "pieces_hold_nan_value", "read_text", "read_text_lines", "read_text_pieces", "step_column", "text_of", "too_deep",
]


# Slurm's own words in a job's output (`srun: error: n1: task 0: Terminated`, `slurmstepd-n1: error: *** STEP ...`):
# found inside a step line, the job ended while a task was printing it (its line end never written), and srun's
# line ran into it: the step's last value may be cut short there
_JOB_END = re.compile(r"(?:srun|slurmstepd(?:-[\w.-]+)?): ")


def job_end(line: str, start: int, display: str, number: int, what: str) -> tuple[int, str] | None:
    """Where Slurm's own words begin in `line` at or after `start` (_JOB_END), with the start of the warning that
    says so; None when they are not there."""
    ended = _JOB_END.search(line, start)
    if ended is None:
        return None
    return ended.start(), (f"{display} line {number}: the job ended while this {what} was printed "
                           f"({line[ended.start():].strip()[:60]!r} ran into it)")


@dataclass(frozen=True)
class TrainingStep:
    """One step as the log printed it; None where the log has no such value. Step time is in seconds."""

    iteration: int
    step_time_s: float | None
    line: int
    tflops_per_gpu: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    global_step: int | None = None
    epoch: int | None = None
    max_iteration: int | None = None
    global_batch_size: int | None = None
    consumed_samples: int | None = None
    samples_per_s: float | None = None
    # the time printed on the step's line (epoch seconds, whole seconds; None when the line has none), the time the
    # log reports spent outside steps since the previous step (a save-checkpoint timer), and whether an untimed
    # pause (an evaluation) came in between: the clock check (checks/training_steps.json) restarts there
    timestamp_s: float | None = None
    pause_s: float = 0.0
    untimed_pause: bool = False


@dataclass(frozen=True)
class NanMark:
    """A line where the log printed a nan loss or grad norm."""

    line: int
    field: str
    # the log's own `number of nan iterations` printed on the same line (Megatron's), where it prints one: Megatron
    # counts only skipped iterations whose loss was nan, so a nan grad norm can stand beside a count of 0
    counted: int | None = None


@dataclass(frozen=True)
class TrainingLog:
    """What a training-log parser read from one file."""

    format: str
    file: str
    steps: Sequence[TrainingStep]  # a list, or a StepTable (a bulk reading's columns)
    nan_marks: list[NanMark] = field(default_factory=list)
    line_count: int = 0
    warnings: list[str] = field(default_factory=list)  # what was read with a caveat, each naming its lines
    # the configuration the log printed at its (last) start-up: key -> its distinct values, each with its first line
    # (parsers.log_config.startup_settings); empty where the format prints none that is read
    settings: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "format": self.format,
            "file": self.file,
            "steps": [_clean(asdict(s)) for s in self.steps],
            "nan": [{k: v for k, v in asdict(m).items() if v is not None} for m in self.nan_marks],
            "lines": self.line_count,
            "warnings": self.warnings,
            **({"settings": {key: [{"value": value, "line": line} for value, line in found]
                             for key, found in self.settings.items()}} if self.settings else {}),
        }


def _clean(row: dict[str, object]) -> dict[str, object]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def parse_number(text: str, *, file: str, line: int, field: str, hint: str) -> float:
    """A float from a log field, or an EvidenceError naming the file, line and field."""
    try:
        return float(text.strip())
    except ValueError:
        message = f"expected a number, got {text.strip()[:40]!r}. {hint}"
        raise EvidenceError(file, message, line=line, field=field) from None


_STEP_FIELDS = tuple(TrainingStep.__dataclass_fields__)
STEP_DEFAULTS = {name: f.default for name, f in TrainingStep.__dataclass_fields__.items()
                  if f.default is not MISSING}
_new = object.__new__
_FIELD_SET = frozenset(_STEP_FIELDS)
_REQUIRED = _FIELD_SET - STEP_DEFAULTS.keys()


def make_step(values: dict[str, object]) -> TrainingStep:
    """TrainingStep(**values), built without the frozen dataclass's per-field __init__ (much slower, and a log
    of millions of steps builds one per step). `values` must hold iteration, step_time_s and line and only
    field names; the object is equal to, and indistinguishable from, the one TrainingStep(**values) makes."""
    step = _new(TrainingStep)
    state = step.__dict__
    state.update(STEP_DEFAULTS)
    state.update(values)
    return step


def make_steps(names: Sequence[str], columns: Sequence[Iterable[object]]) -> StepTable:
    """The steps of the rows of `columns` (one iterable per name of `names`, all of one length: ValueError
    otherwise), kept as those columns: a StepTable, whose steps are the ones make_step() builds of each row, built
    only when a reader asks for them one by one (a reader of a column takes it as it is)."""
    return StepTable(names, columns)


class StepTable(Sequence[TrainingStep]):
    """A log's steps as columns, one list per TrainingStep field: what a bulk reading gives. It is the sequence
    of the steps make_step() builds of each row (equal to a list of them, in order), and `column(name)` is the
    list of one field's values (a defaulted field's default on every row), which a reader of a whole column
    (validation, the window's step times, the loss) takes without a TrainingStep per step.

    The steps themselves are built on the first iteration or slice (all at once, in C: make_steps' former loop)
    and kept; an item asked for alone is built alone until a reader has asked for many. A pickle holds the
    columns only."""

    __slots__ = ("_asked", "_built", "_columns", "_rows")
    _BUILD_AFTER = 64  # items asked for one at a time before all steps are built

    def __init__(self, names: Sequence[str], columns: Sequence[Iterable[object]]) -> None:
        listed = [column if isinstance(column, list) else list(column) for column in columns]
        lengths = {len(column) for column in listed}
        if len(lengths) > 1:
            raise ValueError(f"make_steps: columns of different lengths {sorted(lengths)}")
        if len(names) != len(listed):
            raise ValueError(f"make_steps: {len(names)} names for {len(listed)} columns")
        given = dict(zip(names, listed, strict=True))  # the last of a name given twice, as make_step's update
        unknown = given.keys() - _FIELD_SET
        if unknown:
            raise ValueError(f"make_steps: no TrainingStep field is named {sorted(unknown)}")
        if not _REQUIRED <= given.keys():
            raise ValueError(f"make_steps: the required fields {sorted(_REQUIRED - given.keys())} are not given")
        self._rows = lengths.pop() if lengths else 0
        self._columns = given
        self._built: list[TrainingStep] | None = None
        self._asked = 0

    def column(self, name: str) -> list[Any]:
        """Every step's value of the field `name`, in order (the list kept: the caller must not change it)."""
        if name in self._columns:
            return self._columns[name]
        if name not in STEP_DEFAULTS:
            raise KeyError(name)
        return [STEP_DEFAULTS[name]] * self._rows

    def __len__(self) -> int:
        return self._rows

    def _steps(self) -> list[TrainingStep]:
        if self._built is None:
            self._built = _build_steps(self._columns, self._rows)
        return self._built

    @overload
    def __getitem__(self, index: int) -> TrainingStep: ...
    @overload
    def __getitem__(self, index: slice) -> list[TrainingStep]: ...
    def __getitem__(self, index: int | slice) -> TrainingStep | list[TrainingStep]:
        if self._built is not None or isinstance(index, slice):
            return self._steps()[index]
        position = range(self._rows)[index]  # an int's IndexError and negative index, as a list's
        self._asked += 1
        if self._asked > self._BUILD_AFTER:
            return self._steps()[position]
        return make_step({name: column[position] for name, column in self._columns.items()})

    def __iter__(self) -> Iterator[TrainingStep]:
        return iter(self._steps())

    def __reversed__(self) -> Iterator[TrainingStep]:
        return reversed(self._steps())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepTable) and self._built is None and other._built is None:
            return self._rows == other._rows and all(
                self.column(name) == other.column(name) for name in _STEP_FIELDS)
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == self._rows and self._steps() == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable-free but compared by value, as the list it replaces

    def __repr__(self) -> str:
        return f"StepTable({self._rows} steps: {', '.join(self._columns)})"

    def __getstate__(self) -> tuple[dict[str, list[Any]], int]:
        return self._columns, self._rows

    def __setstate__(self, state: tuple[dict[str, list[Any]], int]) -> None:
        self._columns, self._rows = state
        self._built = None
        self._asked = 0


def step_column(steps: Sequence[TrainingStep], name: str) -> list[Any]:
    """Every step's value of the field `name`, in order: a StepTable's column as kept (not to be changed), or
    the list of each step's attribute."""
    if isinstance(steps, StepTable):
        return steps.column(name)
    return [getattr(step, name) for step in steps]


def _build_steps(given: dict[str, list[Any]], rows: int) -> list[TrainingStep]:
    """make_step() of every row of the columns `given` (field name -> list, each `rows` long).

    Each step's state is one dict built from the row (a default a column of its own) in the order of the dict
    make_step() leaves (the defaulted fields first, each replaced in place, then the others); set as the
    instance's __dict__, which is cheaper than two updates of the empty one."""
    # make_step's order: the defaulted fields first, then the others as given
    fields = (*STEP_DEFAULTS, *(name for name in given if name not in STEP_DEFAULTS))
    full = [given[name] if name in given else itertools.repeat(STEP_DEFAULTS[name], rows) for name in fields]
    # all in C, no bytecode per row: the instances, then each
    # given the dict of its row (lengths checked by StepTable)
    steps: list[TrainingStep] = list(map(_new, itertools.repeat(TrainingStep, rows)))
    states = map(dict, map(zip, itertools.repeat(fields), zip(*full, strict=False)))
    collections.deque(map(object.__setattr__, steps, itertools.repeat("__dict__"), states), maxlen=0)
    return steps


# A column with few distinct texts (a constant batch size or maximum iteration, a step time printed to a few
# digits) converts each distinct text once: a dict lookup of a short string is cheaper than float()'s parse.
# Which columns repeat is judged on their first texts; a wrong guess costs time, never a different value (equal
# texts convert to the same number)
_SAMPLE = 256


def _converted(texts: list[str], convert: Callable[[str], Any]) -> list[Any]:
    if len(texts) > 4 * _SAMPLE and len(set(texts[:_SAMPLE])) * 8 <= _SAMPLE:
        table = {text: convert(text) for text in set(texts)}
        return list(map(table.__getitem__, texts))
    return list(map(convert, texts))


def column_floats(texts: list[str]) -> list[float] | None:
    """float() of each text (what parse_number() gives for a good number), or None when one is not a number: the
    caller then reads line by line, which names the line."""
    try:
        return _converted(texts, float)
    except ValueError:
        return None


def column_ints(texts: list[str]) -> list[int]:
    """int() of each text; the texts are digits (a pattern's \\d+), which int() always reads (a text of more than
    4,300 digits raises ValueError, as int() does line by line)."""
    return _converted(texts, int)


# Every line break str.splitlines() knows besides "\n" (CRLF included through "\r").
_OTHER_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def read_text(path: Path, display: str, *, limit: int) -> str:
    """The file as text whose lines are exactly read_text_lines()'s, joined by "\\n" (no line break of another
    kind is left in it): parsers scan it whole with compiled patterns and count "\\n" for line numbers.

    Refuses empty, binary or oversized files with a located error, as read_text_lines() does."""
    return text_of(read_regular(path, display, limit=limit), display)


def text_of(data: bytes, display: str) -> str:
    """read_text()'s text of a file's bytes `data` (for a parser that has looked at the bytes first)."""
    if not data or data.isspace():  # what `not data.strip()` says, without copying the file
        raise EvidenceError(display, "expected log text, got an empty file")
    refuse_binary(data[:65536], display)
    text = without_escapes(data.decode("utf-8-sig", errors="replace"))  # no byte order mark
    refuse_control_bytes(text, display)
    if not any(mark in text for mark in _OTHER_BREAKS):
        return text
    if "\r\n" in text:  # Windows line ends: when every other break was one of them, one copy makes them "\n"
        plain = text.replace("\r\n", "\n")
        if not any(mark in plain for mark in _OTHER_BREAKS):
            return plain
    return "\n".join(text.splitlines()) + "\n"


_PIECE_BYTES = 1 << 20  # bytes of a file read_text_pieces() decodes at a time


def read_text_pieces(path: Path, display: str, *, limit: int) -> Generator[str, None, None]:
    """read_text()'s text in pieces that each end with a line end ("\\n"; the last may not), so that a parser can
    read a large file without the whole of it, decoded, beside what it keeps: "".join() of the pieces has the lines
    of read_text()'s text, and the same refusals (compressed or binary data, empty text, a NUL or stray ESC at its
    line), each raised when its piece is reached."""
    chunks = read_chunks(path, display, limit=limit, chunk_bytes=_PIECE_BYTES)
    try:
        yield from _text_pieces(chunks, display)
    finally:
        chunks.close()  # a reader that stops early closes the file at once


def _text_pieces(chunks: Iterator[bytes], display: str) -> Iterator[str]:
    """read_text_pieces()'s pieces of a file's `chunks` (read_chunks()'s)."""
    ahead: list[bytes] = []  # the first 64 KiB, as read_text() looks at them for binary data
    seen = 0
    for chunk in chunks:
        ahead.append(chunk)
        seen += len(chunk)
        if seen >= 65536:
            break
    head = b"".join(ahead)
    if not head:
        raise EvidenceError(display, "expected log text, got an empty file")
    refuse_binary(head[:65536], display)
    lines = 0  # the lines of the pieces before: a refusal's line is the file's
    blank = True
    for number, chunk in enumerate(itertools.chain([head], chunks)):
        # a piece ends with a line end, so no character's bytes, escape sequence or "\r\n" is cut in two
        text = without_escapes(chunk.decode("utf-8-sig" if number == 0 else "utf-8", errors="replace"))
        try:
            refuse_control_bytes(text, display)
        except EvidenceError as exc:
            raise EvidenceError(display, exc.message, line=(exc.line or 1) + lines) from None
        if any(mark in text for mark in _OTHER_BREAKS):
            text = "\n".join(text.splitlines()) + "\n"
        blank = blank and text.isspace()
        lines += text.count("\n")
        yield text
    if blank:
        raise EvidenceError(display, "expected log text, got an empty file")


def line_total(text: str) -> int:
    """How many lines read_text()'s `text` has (what len(read_text_lines()) gives)."""
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


class LineCounter:
    """1-based line numbers of offsets into read_text()'s text, asked in non-decreasing order (each call counts
    only the newlines since the previous one)."""

    __slots__ = ("_line", "_pos", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0
        self._line = 1

    def at(self, pos: int) -> int:
        """The line holding offset `pos` (at or after the previous call's offset)."""
        self._line += self._text.count("\n", self._pos, pos)
        self._pos = pos
        return self._line


# where a nan or inf value is printed after a colon: every line a nan pattern can match holds one
NAN_VALUE = re.compile(r":[^\S\n]*-?(?:nan|inf)\b", re.IGNORECASE)
_LINE_SPACES = b" \t\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what [^\S\n] matches in ASCII text
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
_NAN_TEXTS = (b":nan", b":-nan", b":inf", b":-inf")


def may_hold_nan_value(text: str) -> bool:
    """False only where NAN_VALUE matches nowhere in `text`: ASCII text, lower-cased and without the spaces the
    pattern allows, holds none of `:nan`, `:-nan`, `:inf`, `:-inf` (found in C several times faster than the
    pattern's scan). True for any other text, which the pattern must search."""
    if "n" not in text and "N" not in text:  # in every match (nan, inf): numbers alone hold none (a C scan each)
        return False
    if not text.isascii():
        return True
    squeezed = text.encode().translate(_LOWER, _LINE_SPACES)
    if b"nan" not in squeezed and b"inf" not in squeezed:
        return False
    return any(mark in squeezed for mark in _NAN_TEXTS)


def pieces_hold_nan_value(pieces: Iterable[str], prefix: str = "") -> bool:
    """Whether NAN_VALUE may match within any of `pieces`, each read as `prefix` + piece followed by a line break
    (False only where it matches in none). A bulk reading asks it of the text between records and of the values
    after a record's colons, which together hold every place NAN_VALUE can match in the text."""
    joined = prefix + f"\n{prefix}".join(pieces) + "\n"
    return may_hold_nan_value(joined) and NAN_VALUE.search(joined) is not None


def nan_marks(text: str, pattern: re.Pattern[str]) -> list[NanMark]:
    """A NanMark (line, the pattern's group 1) for every match of `pattern` on a line of read_text()'s `text`, in
    order; `pattern` matches `key: nan` within one line, so only the lines NAN_VALUE finds are searched."""
    marks: list[NanMark] = []
    if not may_hold_nan_value(text):
        return marks
    lines = LineCounter(text)
    line_end = -1
    for hint in NAN_VALUE.finditer(text):
        at = hint.start()
        if at < line_end:
            continue
        line_start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        if line_end < 0:
            line_end = len(text)
        number = lines.at(line_start)
        marks.extend(NanMark(number, mark.group(1)) for mark in pattern.finditer(text[line_start:line_end]))
    return marks


# json.loads(line) decoded in place: JSON_DECODER.raw_decode(text, LINE_SPACE.match(text, at).end()), then only
# LINE_SPACE up to the line's end (the whitespace json.loads skips around a document, within one line)
LINE_SPACE = re.compile(r"[ \t]*")
JSON_DECODER = json.JSONDecoder()

# What fast_record() gives for a record json must decide.
NOT_DECODED: Any = object()
_DEEP = 900  # brackets enough for json's C decoder to reach the interpreter's recursion limit (orjson's: 1024)


def fast_record(piece: str) -> Any:
    """json.loads(piece) for the JSON document on one line, several times faster (orjson, in C), or NOT_DECODED
    for what orjson refuses and json may accept (NaN and Infinity, 1E400, a lone surrogate escape, a line that is
    not JSON at all) and for a document deep enough for json to raise RecursionError: the caller decodes those
    with json, which accepts or names them as before.

    One difference remains, and callers guard it: an integer past 64 bits comes as a float (the float float()
    gives of that integer), where json gives the integer. A caller that needs a field as an exact integer decodes
    the record with json when that field is a float."""
    if too_deep(piece):
        return NOT_DECODED
    try:
        return orjson.loads(piece)
    except orjson.JSONDecodeError:
        return NOT_DECODED


def too_deep(piece: str) -> bool:
    """Whether the JSON document `piece` may nest deep enough for json to raise RecursionError (fast_record
    leaves it to json)."""
    return len(piece) > _DEEP and piece.count("[") + piece.count("{") > _DEEP


def any_too_deep(pieces: list[str]) -> bool:
    """Whether any of the JSON documents `pieces` is too_deep()."""
    return bool(pieces) and max(map(len, pieces)) > _DEEP and any(map(too_deep, pieces))


def line_record(text: str, start: int, end: int, exact: Callable[[Any], bool] | None = None) -> Any:
    """json.loads(text[start:end]) for the JSON document on one line of read_text()'s `text` (`end`: the line's
    end): decoded by fast_record(), or where it lies by json when fast_record() leaves it to json or `exact(record)`
    says its reading may differ for the caller (an integer past 64 bits). Raises what json raises for a line that
    is not one JSON document (ValueError, of which json.JSONDecodeError is one, or RecursionError); callers name
    the file and line."""
    record = fast_record(text[start:end])
    if record is not NOT_DECODED and (exact is None or exact(record)):
        return record
    record, stop = JSON_DECODER.raw_decode(text, LINE_SPACE.match(text, start).end())  # type: ignore[union-attr]
    if stop > end or LINE_SPACE.match(text, stop).end() != end:  # type: ignore[union-attr]
        raise json.JSONDecodeError("Extra data", text, stop)
    return record


def read_text_lines(path: Path, display: str, *, limit: int) -> list[str]:
    """The file's lines as text; refuses empty, binary or oversized files with a located error."""
    data = read_regular(path, display, limit=limit)
    if not data.strip():
        raise EvidenceError(display, "expected log text, got an empty file")
    refuse_binary(data[:65536], display)
    text = without_escapes(data.decode("utf-8-sig", errors="replace"))  # no byte order mark
    refuse_control_bytes(text, display)
    return text.splitlines()
