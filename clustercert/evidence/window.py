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
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle
from clustercert.evidence.guards import open_regular

__all__ = ["STAMP_AHEAD", "STAMP_APART", "CollectionWindow", "check_stamps", "collection_window", "stamps_in"]

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
    return [moment for moment, _ in _stamps_at(text, zone)]


def _stamps_at(text: str, zone: dt.tzinfo) -> list[tuple[dt.datetime, int]]:
    """stamps_in()'s stamps, each with its offset in `text`."""
    out: list[tuple[dt.datetime, int]] = []
    for match in _stamp_matches(text):
        day, clock, frac, offset = match.groups()
        iso = f"{day}T{clock}" + (f".{frac.ljust(6, '0')}" if frac else "") + (offset or "")
        try:
            moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
        except ValueError:
            continue
        out.append((moment if moment.tzinfo is not None else moment.replace(tzinfo=zone), match.start()))
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


@dataclass(frozen=True)
class _Edges:
    """A file's first and last `_EDGE` bytes as text (`tail` empty for a file read whole in `head`), and the offset
    in the file where `tail` starts."""

    head: str
    tail: str
    tail_at: int


def _edges(path: Path) -> _Edges:
    with open_regular(path, limit=1 << 50) as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(_EDGE)
        tail, tail_at = b"", len(head)
        if size > 2 * _EDGE:
            tail_at = handle.seek(size - _EDGE)
            tail = handle.read(_EDGE)
        elif size > _EDGE:
            tail = handle.read()
    return _Edges(head.decode("utf-8", errors="replace"), tail.decode("utf-8", errors="replace"), tail_at)


@dataclass(frozen=True)
class _Stamp:
    moment: dt.datetime | None  # in UTC; None where the stamp, read in its offset, is outside datetime's range
    printed: dt.datetime
    in_tail: bool
    offset: int  # in the part's text


def _file_stamps(bundle: LoadedBundle) -> Iterator[tuple[Path, _Edges, list[_Stamp]]]:
    """Each text evidence file that prints a timestamp at its head or tail, with its edges and those stamps."""
    try:
        zone: dt.tzinfo = ZoneInfo(bundle.spec.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = dt.UTC
    for rel in bundle.evidence_files():
        path = bundle.root / rel
        candidates = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in candidates:
            if file.suffix in _BINARY or not file.is_file():
                continue
            edges = _edges(file)
            stamps = [_stamp(moment, False, at) for moment, at in _stamps_at(edges.head, zone)]
            stamps += [_stamp(moment, True, at) for moment, at in _stamps_at(edges.tail, zone)]
            if stamps:
                yield file, edges, stamps


def _stamp(printed: dt.datetime, in_tail: bool, offset: int) -> _Stamp:
    try:
        moment: dt.datetime | None = printed.astimezone(dt.UTC)
    except (OverflowError, ValueError):  # year 1 at +14:00, year 9999 at -02:00
        moment = None
    return _Stamp(moment, printed, in_tail, offset)


def collection_window(bundle: LoadedBundle) -> CollectionWindow | None:
    """The first and last timestamp printed by the bundle's evidence files; None when none prints one (a stamp
    outside datetime's range in UTC is left out: `check_stamps` refuses it before a run)."""
    first: tuple[dt.datetime, str] | None = None
    last: tuple[dt.datetime, str] | None = None
    files = 0
    for file, _, stamps in _file_stamps(bundle):
        moments = [s.moment for s in stamps if s.moment is not None]
        if not moments:
            continue
        files += 1
        shown = str(file.relative_to(bundle.root))
        low, high = min(moments), max(moments)
        if first is None or low < first[0]:
            first = (low, shown)
        if last is None or high > last[0]:
            last = (high, shown)
    if first is None or last is None:
        return None
    return CollectionWindow(first[0], last[0], first[1], last[1], files)


# A stamp later than certify's own clock by more than this was not printed when the evidence was collected (a
# cluster's clock and that of the machine running certify may differ by a time zone wrongly declared).
STAMP_AHEAD = dt.timedelta(days=1)
# A stamp this far from its file's other stamps (their median) is not of the same collection: a run, even a
# week-long one, prints its stamps close together, and validity counts from the last stamp.
STAMP_APART = dt.timedelta(days=92)


def check_stamps(bundle: LoadedBundle, now: dt.datetime) -> None:
    """Refuse (EvidenceError at the file and line) the first evidence stamp, in the bundle's order, that is outside
    datetime's range, later than `now` (certify's clock) by more than STAMP_AHEAD, or further than STAMP_APART
    from the median of its file's stamps: validity counts from the last stamp, so one appended line of a far date
    would otherwise stretch it."""
    for file, edges, stamps in _file_stamps(bundle):
        known = [s.moment for s in stamps if s.moment is not None]
        middle = statistics.median_low(known) if known else None
        for stamp in stamps:
            problem = _stamp_problem(stamp, now, middle)
            if problem is not None:
                shown = bundle.shown(str(file.relative_to(bundle.root)))
                raise EvidenceError(shown, f"expected a timestamp {problem}. Remove the line or correct its date",
                                    line=_line_of(file, edges, stamp))


def _stamp_problem(stamp: _Stamp, now: dt.datetime, middle: dt.datetime | None) -> str | None:
    printed = stamp.printed.isoformat()
    if stamp.moment is None:
        return f"between years 1 and 9999 once in UTC, got {printed}"
    if stamp.moment > now + STAMP_AHEAD:
        return f"no later than certify's clock ({_iso(now)}), got {printed}"
    if middle is not None and abs(stamp.moment - middle) > STAMP_APART:
        return (f"within {STAMP_APART.days} days of its file's other stamps (their median {_iso(middle)}), got "
                f"{printed}")
    return None


def _line_of(file: Path, edges: _Edges, stamp: _Stamp) -> int:
    """The 1-based line of `stamp` in `file`: in the head, counted there; in the tail, the file's line breaks
    before the tail are counted too (read only now: a refusal, not every certification, pays for it)."""
    if not stamp.in_tail:
        return edges.head.count("\n", 0, stamp.offset) + 1
    before = 0
    with open_regular(file, limit=1 << 50) as handle:
        left = edges.tail_at
        while left > 0:
            block = handle.read(min(left, 1 << 20))
            if not block:
                break
            before += block.count(b"\n")
            left -= len(block)
    return before + edges.tail.count("\n", 0, stamp.offset) + 1
