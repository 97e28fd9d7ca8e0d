"""NeMo DLLogger JSON lines (`DLLL {...}`): a PARAMETER line with the config, then one LOG line per step."""

from __future__ import annotations

from itertools import compress, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT, to_float, to_int
from clustercert.parsers.training import (
    STEP_DEFAULTS,
    NanMark,
    StepTable,
    TrainingLog,
    TrainingStep,
    any_too_deep,
    job_end,
    line_record,
    line_total,
    make_steps,
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
    where orjson's reading of its step could differ: `_exact_step`). A log whose records all read alike is read
    column by column (`_columns`); any other is read record by record, which names the first bad line and field."""
    text = read_text(path, display, limit=limit)
    steps = _columns(text)
    if steps is not None:
        return TrainingLog(format=FORMAT, file=display, steps=steps, nan_marks=[], line_count=line_total(text))
    return _records(text, display)


def _records(text: str, display: str) -> TrainingLog:
    """The log read record by record (the reading `_columns` gives the same steps as, where it reads a log)."""
    steps: list[TrainingStep] = []
    nans: list[NanMark] = []
    warnings: list[str] = []
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
            warnings.append(_cut_record(text[at:line_end], display, number))
            at = text.find(_MARK, line_end)
            continue
        at = text.find(_MARK, line_end)
        if not isinstance(record, dict):
            raise _not_an_object(display, number, type(record).__name__)
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
            raise EvidenceError(display, f"expected a non-negative step time in seconds, got {step_time}. {_HINT}",
                                line=number, field="train_step_timing in s")
        values["iteration"] = iteration
        values["step_time_s"] = step_time
        values["line"] = number
        steps.append(step_row)  # built as make_step() builds it
    if not steps:
        raise EvidenceError(
            display, f"expected 'DLLL {{...}}' step lines with 'train_step_timing in s', found none. {_HINT}"
        )
    return TrainingLog(format=FORMAT, file=display, steps=steps, nan_marks=nans, line_count=line_total(text),
                       warnings=warnings)


def _cut_record(line: str, display: str, number: int) -> str:
    """The warning for a record whose JSON does not decode because Slurm's words are in it (the job ended while it
    was printed, srun's line ran into it: its JSON cut short, nothing of it sure, so it is not read); an error for
    any other."""
    ended = job_end(line, len(_MARK), display, number, "DLLogger record")
    if ended is None:
        raise _not_an_object(display, number, "invalid JSON") from None
    return f"{ended[1]}: it is not read, its JSON cut short"


def _not_an_object(display: str, number: int, got: str) -> EvidenceError:
    return EvidenceError(display, f"expected a JSON object after 'DLLL', got {got}. {_HINT}", line=number,
                         field="DLLL")


_ABSENT: Any = object()
_READ_AS_IS = frozenset({float, int, object})  # the types of the values `_columns` reads (object: _ABSENT's)
_BLOCK = 4096  # records decoded at a time: the block's objects stay in the CPU's caches, and are freed before the next


def _columns(text: str) -> StepTable | None:
    """The steps `_records` reads from `text`, read column by column: orjson decodes the records a block at a
    time, each field is taken from all of a block's records in turn; None where a record is not as this reading
    needs, and `_records` must read (and name) it:
    - every `DLLL ` line's JSON is a document orjson reads (no NaN, Infinity or number past a float's range, none
      too deep for json: see too_deep) and an object;
    - every step record's step is an integer (not a list, a float or a text) and its step time is not negative;
    - every field it has is a JSON number (not null or a text: no nan mark to note, nothing for to_float to read).
    A record that is a PARAMETER record, or has no object `data` with a step time, is skipped, as `_records`
    skips it."""
    lines = text.split("\n")  # line i + 1 is lines[i]: read_text's text has only "\n" for a line break
    marked = list(compress(range(len(lines)), map(str.__contains__, lines, repeat(_MARK))))
    pieces = list(map(itemgetter(2), map(str.partition, map(lines.__getitem__, marked), repeat(_MARK))))
    del lines
    if any_too_deep(pieces):
        return None
    names = ["iteration", "line", *dict.fromkeys(_FIELDS.values())]
    columns: list[list[Any]] = [[] for _ in names]
    for at in range(0, len(pieces), _BLOCK):
        block = _block(pieces[at:at + _BLOCK], marked[at:at + _BLOCK])
        if block is None:
            return None
        for column, values in zip(columns, block, strict=True):
            column.extend(values)
    if not columns[0] or not all(time >= 0 for time in columns[names.index("step_time_s")]):
        return None
    return make_steps(names, columns)


def _block(pieces: list[str], marked: list[int]) -> list[list[Any]] | None:
    """The columns of a block of `DLLL ` lines (their JSON, their 0-based line numbers) as `_columns` orders them
    (iteration, line, each field of _FIELDS' values once), or None where the block is not as `_columns` says.
    Taken in C (itemgetter mapped over the records) where every record has what is taken."""
    try:
        records = list(map(orjson.loads, pieces))
    except orjson.JSONDecodeError:
        return None
    if set(map(type, records)) - {dict}:
        return None
    try:  # every record a step record: no PARAMETER record, each with a `data` object holding a step time
        datas = list(map(_DATA, records))
        steps = list(map(_STEP, records))
        every = set(map(type, datas)) == {dict} and all(map(dict.__contains__, datas, repeat(_TIME))) and \
            "PARAMETER" not in steps and "PARAMETER" not in map(dict.get, records, repeat("type"))
    except KeyError:
        every = False
    if every:
        lines = [i + 1 for i in marked]
    else:
        kept = [type(data := record.get("data")) is dict and _TIME in data
                and record.get("step") != "PARAMETER" and record.get("type") != "PARAMETER" for record in records]
        records = list(compress(records, kept))
        steps = [record.get("step") for record in records]  # a record without one: left to _records, which names it
        datas = list(map(_DATA, records))
        lines = [i + 1 for i in compress(marked, kept)]
    if set(map(type, steps)) - {int}:
        return None
    out: dict[str, list[Any]] = {"iteration": steps, "line": lines}
    keys: set[str] = set().union(*datas)
    for key, name in _FIELDS.items():
        if key not in keys:  # in no record: None, or the value of another key for the field
            out.setdefault(name, [None] * len(datas))
            continue
        try:
            values = list(map(itemgetter(key), datas))
        except KeyError:  # absent from some records: None there, or the value of another key for the field
            values = [data.get(key, _ABSENT) for data in datas]
        kinds = set(map(type, values))
        if kinds - _READ_AS_IS:
            return None
        if object in kinds:
            earlier = out.get(name, repeat(None))
            read = [old if value is _ABSENT else float(value) for value, old in zip(values, earlier, strict=False)]
        else:
            read = list(map(float, values))
        if name in _INTS:
            read = [int(value) if value is not None and value.is_integer() else value for value in read]
        out[name] = read  # train_loss after reduced_train_loss: a record's last key present, as _records reads it
    return [out["iteration"], out["line"], *(out[name] for name in dict.fromkeys(_FIELDS.values()))]


_TIME = "train_step_timing in s"
_DATA = itemgetter("data")
_STEP = itemgetter("step")


def _exact_step(record: object) -> bool:
    """Whether fast_record() read a DLLogger record's step as json does: no float in it (json may read an integer
    past 64 bits there; the values are read with float(), which reads both alike)."""
    step = record.get("step") if type(record) is dict else None
    return not (type(step) is float or (type(step) is list and any(type(part) is float for part in step)))
