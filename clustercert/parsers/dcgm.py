"""GPU telemetry: DCGM exporter Prometheus text with timestamps, or `dcgmi dmon` with start and interval.

Prometheus text: `METRIC{gpu="0",Hostname="n1",...} VALUE TIMESTAMP_MS`; `# HELP`/`# TYPE` lines
skipped; the timestamp (ms since the epoch, UTC) is required: the exporter's live page has none, so a dump
must add it.
`dcgmi dmon`: a `#Entity  FIELD ...` header, an optional units line, then `GPU N  v1 v2 ...` rows
(`N/A` -> null).
dmon prints no time: sample k of a GPU (k = 0, 1, ...) is at `start_time + k * interval_s`, both given by the
caller
(`dcgmi dmon -d` is in milliseconds; its default of 1000 ms is interval_s = 1.0).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT, to_float
from clustercert.parsers.training import read_text_lines

__all__ = ["DcgmSample", "Telemetry", "parse_dcgm"]

FORMAT = "dcgm"
_HINT = "Export DCGM telemetry as documented in clustercert/parsers/dcgm.py."
# Each line is read left to right with anchored matches only: no regex here restarts a scan at every offset
# of a line (a 64 KB label line otherwise takes minutes in Python's backtracking engine).
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL = re.compile(r'[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*,?')
_HEAD_LIMIT = 20


@dataclass(frozen=True)
class DcgmSample:
    """One value of one metric of one GPU at one time (ms since the epoch, UTC), with its line."""

    metric: str
    gpu: str
    host: str | None
    value: float | None
    time_ms: int
    line: int


@dataclass(frozen=True)
class Telemetry:
    """Every sample of one telemetry file."""

    file: str
    source: str  # "prometheus" or "dmon"
    samples: list[DcgmSample]

    def to_json(self) -> dict[str, object]:
        series: dict[tuple[str, str, str | None], list[DcgmSample]] = {}
        for sample in self.samples:
            series.setdefault((sample.metric, sample.gpu, sample.host), []).append(sample)
        summary = []
        for (metric, gpu, host), items in series.items():
            values = [s.value for s in items if s.value is not None]
            summary.append(
                {
                    "metric": metric,
                    "gpu": gpu,
                    "host": host,
                    "count": len(items),
                    "first_ms": items[0].time_ms,
                    "last_ms": items[-1].time_ms,
                    "line": items[0].line,
                    "last_line": items[-1].line,
                    "min": min(values) if values else None,
                    "max": max(values) if values else None,
                    "mean": sum(values) / len(values) if values else None,
                }
            )
        head = [
            {
                "metric": s.metric,
                "gpu": s.gpu,
                "host": s.host,
                "value": s.value,
                "time_ms": s.time_ms,
                "line": s.line,
            }
            for s in self.samples[:_HEAD_LIMIT]
        ]
        return {
            "format": FORMAT,
            "file": self.file,
            "source": self.source,
            "samples": len(self.samples),
            "series": summary,
            "head": head,
        }


def parse_dcgm(
    path: Path,
    display: str,
    *,
    start_time: datetime | None = None,
    interval_s: float = 1.0,
    limit: int = DEFAULT_LIMIT,
) -> Telemetry:
    """Every telemetry sample of the file; `start_time` (with offset) is required for `dcgmi dmon` output."""
    lines = read_text_lines(path, display, limit=limit)
    for raw in lines:
        text = raw.strip()
        if text.startswith("#Entity") or text.startswith("# Entity"):
            return _dmon(lines, display, start_time, interval_s)
        if text and not text.startswith("#"):
            break
    return _prometheus(lines, display)


def _prometheus_line(text: str) -> tuple[str, dict[str, str], str, str | None] | None:
    """METRIC, labels, VALUE and TIMESTAMP (or None) of one exposition line, or None when it has another shape."""
    name = _NAME.match(text)
    if name is None:
        return None
    labels: dict[str, str] = {}
    at = name.end()
    if text.startswith("{", at):
        at += 1
        while not text.startswith("}", at):
            label = _LABEL.match(text, at)
            if label is None:
                return None
            labels[label.group(1)] = label.group(2)
            at = label.end()
        at += 1
    rest = text[at:]
    fields = rest.split()
    if not rest[:1].isspace() or len(fields) not in (1, 2):
        return None
    return name.group(0), labels, fields[0], fields[1] if len(fields) == 2 else None


def _series_head(head: str) -> tuple[str, dict[str, str]] | None:
    """METRIC and labels when `head` is exactly `METRIC{labels}` (or METRIC) as _prometheus_line() reads it."""
    name = _NAME.match(head)
    if name is None:
        return None
    labels: dict[str, str] = {}
    at = name.end()
    if head.startswith("{", at):
        at += 1
        while not head.startswith("}", at):
            label = _LABEL.match(head, at)
            if label is None:
                return None
            labels[label.group(1)] = label.group(2)
            at = label.end()
        at += 1
    return (name.group(0), labels) if at == len(head) else None


# distinct series heads remembered per file (a file has one per metric and GPU), each of at most so many characters:
# hostile files of long, all different heads cost no more memory than the file itself
_HEADS_KEPT = 1 << 16
_HEAD_CHARS_KEPT = 1024


def _prometheus(lines: list[str], display: str) -> Telemetry:
    samples: list[DcgmSample] = []
    # A line is `HEAD VALUE TIMESTAMP`, and a file repeats each series' HEAD (`METRIC{labels}`) at every sample:
    # each distinct HEAD is read once; a line of another shape is read whole by _prometheus_line()
    heads: dict[str, tuple[str, dict[str, str]] | None] = {}
    new = object.__new__
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        split = text.rsplit(None, 2)
        known = None
        if len(split) == 3:
            head = split[0]
            if head in heads:
                known = heads[head]
            else:
                known = _series_head(head)
                if len(heads) < _HEADS_KEPT and len(head) <= _HEAD_CHARS_KEPT:
                    heads[head] = known
        if known is not None:
            parts: tuple[str, dict[str, str], str, str | None] | None = (*known, split[1], split[2])
        else:
            parts = _prometheus_line(text)
        if parts is None:
            raise EvidenceError(
                display,
                f"expected 'METRIC{{labels}} VALUE TIMESTAMP', got {text[:60]!r}. {_HINT}",
                line=number,
            )
        metric, labels, value_text, ts_text = parts
        if ts_text is None:
            raise EvidenceError(
                display,
                f"expected a timestamp in milliseconds after the value, got none. {_HINT}",
                line=number,
                field="timestamp",
            )
        try:  # to_float(), whose strip() float() does itself
            value = float(value_text)
        except ValueError:
            value = to_float(value_text, file=display, line=number, field=metric, hint=_HINT, allow_nan=True)
        try:
            stamp = float(ts_text)
        except ValueError:
            stamp = to_float(ts_text, file=display, line=number, field="timestamp", hint=_HINT)
        if not math.isfinite(stamp):
            stamp = to_float(ts_text, file=display, line=number, field="timestamp", hint=_HINT)
        if not stamp.is_integer() or stamp < 0:
            raise EvidenceError(
                display,
                f"expected a timestamp in whole milliseconds, got {ts_text[:30]!r}. {_HINT}",
                line=number,
                field="timestamp",
            )
        gpu = labels.get("gpu")
        if gpu is None:
            raise EvidenceError(
                display,
                f"expected a 'gpu' label, got {', '.join(labels)[:60] or 'none'}. {_HINT}",
                line=number,
                field="gpu",
            )
        sample = new(DcgmSample)  # DcgmSample(...) without the frozen dataclass's per-field __init__
        sample.__dict__.update(metric=metric, gpu=gpu, host=labels.get("Hostname"),
                               value=value if math.isfinite(value) else None, time_ms=int(stamp), line=number)
        samples.append(sample)
    if not samples:
        raise EvidenceError(display, f"expected DCGM samples, found none. {_HINT}")
    return Telemetry(file=display, source="prometheus", samples=samples)


def _dmon(lines: list[str], display: str, start_time: datetime | None, interval_s: float) -> Telemetry:
    if start_time is None or start_time.tzinfo is None:
        raise EvidenceError(
            display,
            f"expected a start time with offset for dcgmi dmon output, got "
            f"{start_time!r}. Pass --start-time.",
            field="start_time",
        )
    if not interval_s > 0 or not math.isfinite(interval_s):
        raise EvidenceError(
            display, f"expected a positive interval in seconds, got {interval_s}.", field="interval_s"
        )
    fields: list[str] = []
    seen: dict[str, int] = {}
    samples: list[DcgmSample] = []
    for number, raw in enumerate(lines, start=1):
        tokens = raw.split()
        if not tokens:
            continue
        if tokens[0] in ("#Entity", "#"):
            names = tokens[1:] if tokens[0] == "#Entity" else tokens[2:]
            if names and names[0] == "ID":
                names = names[1:]
            fields = names
            continue
        if tokens[0] == "ID" or tokens[0].startswith("#"):
            continue
        if not fields:
            raise EvidenceError(
                display, f"expected a '#Entity' header before data rows. {_HINT}", line=number
            )
        if len(tokens) != len(fields) + 2:
            raise EvidenceError(
                display,
                f"expected {len(fields) + 2} columns (entity, id, {len(fields)} fields), got "
                f"{len(tokens)}. {_HINT}",
                line=number,
                field="row",
            )
        entity = f"{tokens[0]} {tokens[1]}"
        index = seen.get(entity, 0)
        seen[entity] = index + 1
        moment = start_time + timedelta(seconds=index * interval_s)
        time_ms = round(moment.timestamp() * 1000)
        for name, text in zip(fields, tokens[2:], strict=True):
            value = (
                None if text == "N/A" else to_float(text, file=display, line=number, field=name, hint=_HINT)
            )
            samples.append(DcgmSample(name, tokens[1], None, value, time_ms, number))
    if not samples:
        raise EvidenceError(display, f"expected dcgmi dmon rows, found none. {_HINT}")
    return Telemetry(file=display, source="dmon", samples=samples)
