"""The evidence's collection window: the first and last timestamp its files print.

Validity is counted from the last evidence date, never from the day `certify` ran, so re-certifying old
evidence cannot extend its validity. Each file is read at its head and tail only (a log's first and last
stamps sit there), so a large file costs two small reads. They go through the guards (only regular files, never a
blocking open) and are recorded as parts read: the signed digest must be that of the bytes these reads saw too.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from clustercert.evidence.bundle import LoadedBundle
from clustercert.evidence.guards import open_regular

__all__ = ["CollectionWindow", "collection_window", "stamps_in"]

# 2026-11-02 03:00:00, 2026-11-02T03:00:00.123+00:00, [2025-03-07 22:39:36,176]
_TS = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?(Z|[+-]\d{2}:?\d{2})?")
# What every _TS match holds from its year's hyphen on. A pattern that starts with a literal is searched for at C
# speed, while _TS (a lookbehind first) is tried at every offset of every file edge, most of which (nccl-tests
# outputs) print no time. See _stamp_matches.
_HYPHEN = re.compile(r"-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}")
_EDGE = 64 * 1024  # bytes read at each end of a file
_BINARY = (".parquet", ".gz", ".zst", ".bin")


@dataclass(frozen=True)
class CollectionWindow:
    first: dt.datetime  # aware, UTC
    last: dt.datetime
    first_file: str
    last_file: str
    files: int  # evidence files that print a timestamp

    def to_json(self) -> dict[str, object]:
        return {"first": _iso(self.first), "last": _iso(self.last), "first_file": self.first_file,
                "last_file": self.last_file, "files_with_timestamps": self.files}


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def stamps_in(text: str, zone: dt.tzinfo) -> list[dt.datetime]:
    """Every timestamp in `text`, aware (a stamp without an offset is read in `zone`); invalid dates skipped."""
    out: list[dt.datetime] = []
    for match in _stamp_matches(text):
        day, clock, frac, offset = match.groups()
        iso = f"{day}T{clock}" + (f".{frac.ljust(6, '0')}" if frac else "") + (offset or "")
        try:
            moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
        except ValueError:
            continue
        out.append(moment if moment.tzinfo is not None else moment.replace(tzinfo=zone))
    return out


def _stamp_matches(text: str) -> list[re.Match[str]]:
    """What _TS.finditer(text) finds. Each _TS match starts 4 characters (its year) before a match of _HYPHEN, and
    _HYPHEN's own matches never hide one of those: the only hyphen inside one of its matches, after its first
    character, is 3 characters on, and 3 characters after that stands a space or a T, not the hyphen a match
    starting there would need. So _TS is tried where its matches can start, and, as finditer does, a match is
    taken at the first of those at or after the end of the previous one."""
    out: list[re.Match[str]] = []
    end = 0
    for hyphen in _HYPHEN.finditer(text):
        start = hyphen.start() - 4
        if start < end:
            continue
        match = _TS.match(text, start)  # the lookbehind sees the text before `start`, as in finditer
        if match is not None:
            out.append(match)
            end = match.end()
    return out


def _edges(path: Path) -> str:
    with open_regular(path, limit=1 << 50) as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(_EDGE)
        tail = b""
        if size > 2 * _EDGE:
            handle.seek(size - _EDGE)
            tail = handle.read(_EDGE)
        elif size > _EDGE:
            tail = handle.read()
    return (head + b"\n" + tail).decode("utf-8", errors="replace")


def collection_window(bundle: LoadedBundle) -> CollectionWindow | None:
    """The first and last timestamp printed by the bundle's evidence files; None when none prints one."""
    try:
        zone: dt.tzinfo = ZoneInfo(bundle.spec.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = dt.UTC
    first: tuple[dt.datetime, str] | None = None
    last: tuple[dt.datetime, str] | None = None
    files = 0
    for rel in bundle.evidence_files():
        path = bundle.root / rel
        candidates = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in candidates:
            if file.suffix in _BINARY or not file.is_file():
                continue
            stamps = stamps_in(_edges(file), zone)
            if not stamps:
                continue
            files += 1
            shown = str(file.relative_to(bundle.root))
            low, high = min(stamps), max(stamps)
            if first is None or low < first[0]:
                first = (low, shown)
            if last is None or high > last[0]:
                last = (high, shown)
    if first is None or last is None:
        return None
    return CollectionWindow(first[0].astimezone(dt.UTC), last[0].astimezone(dt.UTC), first[1], last[1], files)
