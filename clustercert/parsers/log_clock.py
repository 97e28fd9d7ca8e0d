"""Timestamps printed on log lines (launcher and NeMo prefixes), so steps without one can be placed in time."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.training import read_text_lines

__all__ = ["LogClock", "parse_log_clock"]

# `[2025-03-07 22:39:36,176]` (torchrun / ft_launcher) and `[NeMo I 2025-03-07 22:38:36 ...]`
_TS = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?(Z|[+-]\d{2}:?\d{2})?")
_WORKERS_START = re.compile(r"\bStarting worker group\b")


@dataclass(frozen=True)
class LogClock:
    """Seconds since the epoch of every timestamped line, and of the lines that start a worker group."""

    file: str
    stamps: tuple[tuple[int, float], ...]  # (line, epoch seconds), in file order
    worker_starts: tuple[tuple[int, float], ...]
    # the finest unit the stamps print (1 s for whole seconds): a time read from them may be late by up to this
    resolution_s: float = 1.0

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "stamps": len(self.stamps), "worker_starts": [list(s) for s in self.worker_starts]}


def parse_log_clock(path: Path, display: str, *, timezone: str = "UTC", limit: int = DEFAULT_LIMIT) -> LogClock:
    """Every line's printed time; a time without an offset is read in `timezone` (bundle.yaml `timezone`)."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise EvidenceError(
            display, f"expected an IANA timezone such as UTC, got {timezone!r}. Fix bundle.yaml", field="timezone"
        ) from None
    stamps: list[tuple[int, float]] = []
    starts: list[tuple[int, float]] = []
    coarsest: int | None = None  # the fewest fractional digits any stamp prints: its resolution is 10^-that s
    for number, raw in enumerate(read_text_lines(path, display, limit=limit), start=1):
        match = _TS.search(raw)
        if match is None:
            continue
        day, clock, frac, offset = match.groups()
        text = f"{day}T{clock}" + (f".{frac}" if frac else "") + (offset or "")
        digits = len(frac or "")
        coarsest = digits if coarsest is None else min(coarsest, digits)
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise EvidenceError(
                display, f"expected a time like 2025-03-07 22:39:36, got {match.group(0)!r}. Fix the log",
                line=number, field="timestamp",
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=zone)
        seconds = moment.timestamp()
        stamps.append((number, seconds))
        if _WORKERS_START.search(raw):
            starts.append((number, seconds))
    return LogClock(file=display, stamps=tuple(stamps), worker_starts=tuple(starts),
                    resolution_s=10.0 ** -(coarsest or 0))
