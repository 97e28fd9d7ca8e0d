"""Job event logs of resilience runs (JSON lines): what happened to the job, when, where and who did it.

Schema, one JSON object per line (blank lines and lines starting with `#` are skipped):

| key | type | required | meaning |
|---|---|---|---|
| `ts` | string, ISO-8601 **with offset** (`2025-03-07T22:39:36+00:00`, `...Z`) | yes | when it happened |
| `type` | one of `EventType` below | yes | what happened |
| `node` | string | no | node concerned (a fault's node, an excluded or added node) |
| `gpu` | integer >= 0 | no | GPU index on that node |
| `rank` | integer >= 0 | no | global rank concerned |
| `by` | string | no | who acted: `injector`, `watchdog`, `straggler-detector`, `scheduler`, `operator`, ... |
| `step` | integer >= 0 | no | training step concerned (checkpoint step, step at the fault) |
| `job_id` | string | no | scheduler job id |
| `detail` | string | no | free text |

Types: `job_started`, `job_finished`, `fault_injected`, `fault_detected`, `straggler_detected`,
`stall_detected`, `node_excluded`, `node_added`, `restart_started`, `checkpoint_saved`,
`checkpoint_loaded`, `admin_action`. Unknown keys are kept in `extra`; an unknown type is an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import partial
from itertools import compress, repeat
from operator import is_not
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.training import JSON_DECODER, read_text

__all__ = ["Event", "EventLog", "EventType", "parse_events"]

FORMAT = "events"
_HINT = "See the schema in clustercert/parsers/events.py and fix the event log."


class EventType(StrEnum):
    """The closed set of job events."""

    JOB_STARTED = "job_started"
    JOB_FINISHED = "job_finished"
    FAULT_INJECTED = "fault_injected"
    FAULT_DETECTED = "fault_detected"
    STRAGGLER_DETECTED = "straggler_detected"
    STALL_DETECTED = "stall_detected"
    NODE_EXCLUDED = "node_excluded"
    NODE_ADDED = "node_added"
    RESTART_STARTED = "restart_started"
    CHECKPOINT_SAVED = "checkpoint_saved"
    CHECKPOINT_LOADED = "checkpoint_loaded"
    ADMIN_ACTION = "admin_action"


class Event(NamedTuple):
    """One event with its line; `extra` holds the record's keys beyond the schema (None: it has none).

    A named tuple (immutable, compared by value, as the frozen dataclass it replaces): a bulk reading builds a
    log's events from their columns in C, without a Python call per event."""

    ts: datetime
    type: EventType
    line: int
    node: str | None = None
    gpu: int | None = None
    rank: int | None = None
    by: str | None = None
    step: int | None = None
    job_id: str | None = None
    detail: str | None = None
    extra: dict[str, object] | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "ts": self.ts.isoformat(),
            "type": self.type.value,
            "node": self.node,
            "gpu": self.gpu,
            "rank": self.rank,
            "by": self.by,
            "step": self.step,
            "job_id": self.job_id,
            "detail": self.detail,
            "line": self.line,
        }


@dataclass(frozen=True)
class EventLog:
    """Every event of one file, in file order."""

    file: str
    events: list[Event]

    def to_json(self) -> dict[str, object]:
        return {"format": FORMAT, "file": self.file, "events": [e.to_json() for e in self.events]}


_STRINGS = ("node", "by", "job_id", "detail")
_INTS = ("gpu", "rank", "step")
_KNOWN = frozenset({"ts", "type", *_STRINGS, *_INTS})
_TYPES: dict[str, EventType] = {t.value: t for t in EventType}


def parse_events(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> EventLog:
    """Every event line, validated against the schema in this module's docstring."""
    text = read_text(path, display, limit=limit)
    fast = _events_fast(text, display)
    if fast is not None:
        return fast
    lines = text.splitlines()  # read_text() joins its lines with "\n" only: these are the file's lines
    events: list[Event] = []
    decode = JSON_DECODER.raw_decode
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:  # json.loads(text): `text` is stripped, so the document must end where the text does
            record, end = decode(text)
            if end != len(text):
                raise json.JSONDecodeError("Extra data", text, end)
        except (ValueError, RecursionError):  # json.JSONDecodeError, or an integer of over 4,300 digits
            raise EvidenceError(
                display, f"expected one JSON object per line, got invalid JSON. {_HINT}", line=number
            ) from None
        if not isinstance(record, dict):
            raise EvidenceError(
                display, f"expected a JSON object, got {type(record).__name__}. {_HINT}", line=number
            )
        events.append(_event(record, number, display))
    if not events:
        raise EvidenceError(display, f"expected event lines, found none. {_HINT}")
    return EventLog(file=display, events=events)


def _event(record: dict[str, object], number: int, display: str) -> Event:
    ts_raw = record.get("ts")
    if not isinstance(ts_raw, str):
        raise EvidenceError(
            display,
            f"expected an ISO-8601 time with offset, got {str(ts_raw)[:40]!r}. {_HINT}",
            line=number,
            field="ts",
        )
    try:
        ts = datetime.fromisoformat(ts_raw)
    except ValueError:
        raise EvidenceError(
            display,
            f"expected an ISO-8601 time with offset, got {ts_raw[:40]!r}. {_HINT}",
            line=number,
            field="ts",
        ) from None
    if ts.tzinfo is None:
        raise EvidenceError(
            display,
            f"expected a time with an offset (+00:00 or Z), got {ts_raw[:40]!r}. {_HINT}",
            line=number,
            field="ts",
        )
    kind = record.get("type")
    try:
        event_type = _TYPES.get(kind) if isinstance(kind, str) else None
        if event_type is None:
            event_type = EventType(str(kind))
    except ValueError:
        raise EvidenceError(
            display,
            f"expected a type in ({', '.join(t.value for t in EventType)}), got {str(kind)[:40]!r}. {_HINT}",
            line=number,
            field="type",
        ) from None
    values: dict[str, object] = {}
    for key in _STRINGS:
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            raise EvidenceError(
                display, f"expected a string, got {str(value)[:40]!r}. {_HINT}", line=number, field=key
            )
        values[key] = value
    for key in _INTS:
        value = record.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise EvidenceError(
                display,
                f"expected a whole number >= 0, got {str(value)[:40]!r}. {_HINT}",
                line=number,
                field=key,
            )
        values[key] = value
    extra = None if _KNOWN.issuperset(record) else {k: v for k, v in record.items() if k not in _KNOWN}
    return Event(ts, event_type, number, extra=extra, **values)  # type: ignore[arg-type]


# The fast reading of a log (the line-by-line reading spends its time in json and in checking each record's fields
# one by one): a block of lines decoded by orjson, one C call per line from map(), the fields checked column by
# column, each distinct `ts` parsed once. It reads only what it can prove the line-by-line reading reads alike:
# - every line that is not blank or a comment is one JSON object orjson decodes (json may read what orjson
#   refuses, NaN say: that block is read line by line);
# - `ts` is an ISO time with offset, `type` an EventType, the strings strings, the whole numbers integers >= 0:
#   orjson's one difference, a float where json reads an integer past 64 bits, is refused, and so is a document
#   deeper than json's recursion allows (it holds a list or object, which no schema field takes);
# - a record with keys beyond the schema's (kept in `extra`, where both differences would show) is decoded by json
#   and read by _event(), as the line-by-line reading reads it.
# Anything else (a log with an error) is read line by line, which names the first bad line and field.
_BLOCK = 1 << 16  # characters of a log read at a time: a block's records stay in the CPU's caches, and the next
                  # block's reuse their memory
_not_none = partial(is_not, None)


def _events_fast(text: str, display: str) -> EventLog | None:
    """What parse_events() reads from `text` (read_text()'s), read a block of lines at a time, column by column;
    None where the log is not one the comment above describes, and the line-by-line reading must."""
    events: list[Event] = []
    stop = len(text) - 1 if text.endswith("\n") else len(text)  # the last line's end
    offset, number = 0, 1
    while offset < stop:
        end = text.find("\n", min(offset + _BLOCK, stop), stop)
        end = stop if end < 0 else end
        block = text[offset:end].split("\n")
        read = _read_block(block, range(number, number + len(block)), display)
        if read is None:
            return None
        events.extend(read)
        number += len(block)
        offset = end + 1
    return EventLog(file=display, events=events) if events else None


def _read_block(lines: list[str], numbers: Iterable[int], display: str) -> list[Event] | None:
    """The events of `lines` (line `numbers`), or None (read line by line)."""
    try:  # orjson skips the JSON whitespace around a document, as the line-by-line reading's strip() does
        records = list(map(orjson.loads, lines))
        texts = lines
    except orjson.JSONDecodeError:  # a blank or comment line among them, or other whitespace; or not JSON
        texts = list(map(str.strip, lines))
        keep = [bool(t) and not t.startswith("#") for t in texts]
        texts = list(compress(texts, keep))
        numbers = list(compress(numbers, keep))
        try:
            records = list(map(orjson.loads, texts))
        except orjson.JSONDecodeError:
            return None
    if not records:
        return []
    if set(map(type, records)) != {dict}:
        return None
    plain = list(map(_KNOWN.issuperset, records))
    if not all(plain):  # keys beyond the schema: those records as json reads them, merged back in file order
        return _with_extra(list(map(str.strip, texts)), list(numbers), records, plain, display)
    return _read_columns(records, numbers)


def _read_columns(records: list[dict[str, Any]], numbers: Iterable[int]) -> list[Event] | None:
    """The events of `records` (none with a key beyond the schema), their fields checked column by column."""
    column: dict[str, list[Any]] = {key: list(map(dict.get, records, repeat(key)))
                                    for key in ("ts", "type", *_STRINGS, *_INTS)}
    if set(map(type, column["ts"])) != {str} or set(map(type, column["type"])) != {str}:
        return None
    try:
        times = {text: datetime.fromisoformat(text) for text in dict.fromkeys(column["ts"])}
        kinds = {text: _TYPES[text] for text in dict.fromkeys(column["type"])}
    except (ValueError, KeyError):
        return None
    if any(moment.tzinfo is None for moment in times.values()):
        return None
    for key in _STRINGS:
        texts = column[key]
        if not set(map(type, texts)) <= {str, type(None)}:
            return None
        if texts.count(texts[0]) == len(texts):  # one text in every record (`by`, say): one str kept, not one each
            column[key] = [texts[0]] * len(texts)
    for key in _INTS:  # bool is not int here: type(), not isinstance()
        if not set(map(type, column[key])) <= {int, type(None)} or min(filter(_not_none, column[key]),
                                                                        default=0) < 0:
            return None
    # in Event's field order (ts, type, line, node, gpu, rank, by, step, job_id, detail; no extra), each built in C
    rows = zip(map(times.__getitem__, column["ts"]), map(kinds.__getitem__, column["type"]), numbers,
               *(column[key] for key in Event._fields[3:-1]), repeat(None))
    return list(map(tuple.__new__, repeat(Event), rows))


def _with_extra(texts: list[str], numbers: list[int], records: list[dict[str, Any]], plain: list[bool],
                display: str) -> list[Event] | None:
    """_read_columns() of the records within the schema, and each other record decoded by json and read by
    _event(), in file order."""
    within = _read_columns(list(compress(records, plain)), compress(numbers, plain))
    if within is None:
        return None
    others: list[Event] = []
    for text, number, ok in zip(texts, numbers, plain, strict=True):
        if ok:
            continue
        try:
            record = json.loads(text)
            others.append(_event(record, number, display))
        except (ValueError, RecursionError, EvidenceError):  # the line-by-line reading names it, or an earlier one
            return None
    ordered = iter(within)
    other = iter(others)
    return [next(ordered) if ok else next(other) for ok in plain]
