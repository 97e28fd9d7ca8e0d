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
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.training import JSON_DECODER, read_text_lines

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


@dataclass(frozen=True)
class Event:
    """One event with its line."""

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
    extra: dict[str, object] = field(default_factory=dict)

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
_new = object.__new__


def parse_events(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> EventLog:
    """Every event line, validated against the schema in this module's docstring."""
    lines = read_text_lines(path, display, limit=limit)
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
    values["extra"] = {} if _KNOWN.issuperset(record) else {k: v for k, v in record.items() if k not in _KNOWN}
    values["ts"] = ts
    values["type"] = event_type
    values["line"] = number
    event = _new(Event)  # Event(**values) without the frozen dataclass's per-field __init__: every field is set
    event.__dict__.update(values)
    return event
