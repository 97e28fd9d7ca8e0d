"""Slurm `sacct --parsable2` dumps (with or without a header): jobs and their steps, states normalised."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.training import read_text_lines

__all__ = ["STATES", "SacctJob", "SacctResult", "SacctStep", "parse_elapsed", "parse_sacct"]

FORMAT = "sacct"
_HINT = "Dump with `sacct --parsable2 --format ...` and pass the same field list."
STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PENDING",
        "PREEMPTED",
        "RUNNING",
        "REQUEUED",
        "RESIZING",
        "REVOKED",
        "SUSPENDED",
        "TIMEOUT",
    }
)
# Digits bounded: a duration of thousands of digits is not a duration (and int() refuses it past 4,300).
_ELAPSED = re.compile(r"^(?:(\d{1,9})-)?(?:(\d{1,9}):)?(\d{1,9}):(\d{1,9})(?:\.(\d{1,9}))?$")
_NO_TIME = {"", "Unknown", "None", "N/A"}


@dataclass(frozen=True)
class SacctStep:
    """A step row (`JobID` with a `.`), with its line."""

    step_id: str
    state: str
    state_raw: str
    elapsed_s: float | None
    start: str | None
    end: str | None
    line: int
    fields: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "step_id": self.step_id,
            "state": self.state,
            "state_raw": self.state_raw,
            "elapsed_s": self.elapsed_s,
            "start": self.start,
            "end": self.end,
            "line": self.line,
        }


@dataclass(frozen=True)
class SacctJob:
    """A job row and the step rows that follow it."""

    job_id: str
    state: str
    state_raw: str
    elapsed_s: float | None
    start: str | None
    end: str | None
    submit: str | None
    line: int
    steps: list[SacctStep] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    incarnation: int = 1  # `sacct --duplicates` repeats a requeued job's id: 2 is its first requeue

    def to_json(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "incarnation": self.incarnation,
            "state": self.state,
            "state_raw": self.state_raw,
            "elapsed_s": self.elapsed_s,
            "start": self.start,
            "end": self.end,
            "submit": self.submit,
            "line": self.line,
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass(frozen=True)
class SacctResult:
    """Every job of one dump, with the field list used."""

    file: str
    fields: list[str]
    timezone: str
    jobs: list[SacctJob]
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "file": self.file,
            "fields": self.fields,
            "timezone": self.timezone,
            "jobs": [j.to_json() for j in self.jobs],
            "warnings": self.warnings,
        }


def parse_elapsed(text: str, *, file: str, line: int, field: str = "Elapsed") -> float:
    """Seconds from Slurm's `[D-][HH:]MM:SS[.mmm]`."""
    match = _ELAPSED.match(text.strip())
    if match is None:
        raise EvidenceError(
            file,
            f"expected a duration like 1-02:03:04, got {text.strip()[:40]!r}. {_HINT}",
            line=line,
            field=field,
        )
    days, hours, minutes, seconds, frac = match.groups()
    total = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)
    return total + float(f"0.{frac}") if frac else total


def parse_sacct(
    path: Path,
    display: str,
    *,
    fields: list[str] | None = None,
    timezone: str = "UTC",
    limit: int = DEFAULT_LIMIT,
) -> SacctResult:
    """Job and step rows of a `--parsable2` dump; a header line wins over `fields`, one is required.

    Rows short of trailing fields (a field added between dumps) read them as empty, with a warning naming the
    lines; a requeued job repeated by `sacct --duplicates` is one SacctJob per incarnation.

    States are normalised to their first word (`CANCELLED by 1234` is CANCELLED; the raw text is kept);
    times without an offset are read in `timezone` and written as ISO-8601 with offset.
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise EvidenceError(
            display,
            f"expected an IANA timezone such as UTC, got {timezone!r}. Fix bundle.yaml",
            field="timezone",
        ) from None
    lines = read_text_lines(path, display, limit=limit)
    columns = list(fields) if fields else None
    jobs: list[SacctJob] = []
    by_id: dict[str, int] = {}
    short: dict[int, list[int]] = {}
    header_seen = False
    # A dump repeats its times, durations and states (a job's steps share its start; many jobs one state): each
    # distinct text is read once per file
    starts: dict[str, str | None] = {}
    ends: dict[str, str | None] = {}
    submits: dict[str, str | None] = {}
    durations: dict[str, float] = {}
    states: dict[str, str] = {}
    new = object.__new__
    for number, text in enumerate(lines, start=1):
        if not text or text.isspace() or text.lstrip().startswith("#"):
            continue
        cells = text.split("|")
        if not header_seen and {"JobID", "State"} <= {c.strip() for c in cells}:
            columns = [c.strip() for c in cells]
            header_seen = True
            continue
        header_seen = True
        if columns is None:
            raise EvidenceError(
                display,
                f"expected a header line or a field list (--fields State,JobID,...), got neither. {_HINT}",
                line=number,
            )
        if len(cells) == len(columns) + 1 and cells[-1] == "":
            cells = cells[:-1]  # --parsable (not 2) ends every row with a '|'
        if len(cells) > len(columns):
            raise EvidenceError(
                display,
                f"expected at most {len(columns)} fields as the field list names, got {len(cells)}. Give the "
                "field list the dump was written with (bundle.yaml `fields`, or its header line)",
                line=number,
                field="row",
            )
        if len(cells) < len(columns):
            # A field added between dumps: the older rows lack the trailing fields, which read as empty.
            short.setdefault(len(columns) - len(cells), []).append(number)
            cells = cells + [""] * (len(columns) - len(cells))
        row = dict(zip(columns, cells, strict=True))
        if "JobID" not in row or "State" not in row:
            required = "JobID" if "JobID" not in row else "State"
            raise EvidenceError(
                display,
                f"expected a '{required}' column, got {', '.join(columns)[:80]}. {_HINT}",
                line=number,
                field=required,
            )
        job_id = row["JobID"].strip()
        if not job_id:
            raise EvidenceError(
                display, f"expected a job id, got an empty one. {_HINT}", line=number, field="JobID"
            )
        state_raw = row["State"].strip()
        state = states.get(state_raw)
        if state is None:
            state = state_raw.split(" ")[0].rstrip("+").upper() if state_raw else ""
            if state not in STATES:
                raise EvidenceError(
                    display,
                    f"expected a Slurm state ({', '.join(sorted(STATES))}), got {state_raw[:40]!r}. {_HINT}",
                    line=number,
                    field="State",
                )
            states[state_raw] = state
        elapsed_text = row.get("Elapsed", "")
        elapsed = durations.get(elapsed_text)
        if elapsed is None and elapsed_text.strip():
            elapsed = durations[elapsed_text] = parse_elapsed(elapsed_text, file=display, line=number)
        start_text, end_text = row.get("Start"), row.get("End")
        start = starts[start_text] if start_text in starts else _known_time(starts, start_text, zone, display, number,
                                                                           "Start")
        end = ends[end_text] if end_text in ends else _known_time(ends, end_text, zone, display, number, "End")
        parent, dot, _ = job_id.partition(".")
        if dot:
            if parent not in by_id:
                raise EvidenceError(
                    display,
                    f"expected job {parent} before its step {job_id}, got none. {_HINT}",
                    line=number,
                    field="JobID",
                )
            step = new(SacctStep)  # SacctStep(...) without the frozen dataclass's per-field __init__
            step.__dict__.update(step_id=job_id, state=state, state_raw=state_raw, elapsed_s=elapsed,
                                 start=start, end=end, line=number, fields=row)
            jobs[by_id[parent]].steps.append(step)
            continue
        # `sacct --duplicates` prints every incarnation of a requeued job under the same id, each with its steps
        incarnation = jobs[by_id[job_id]].incarnation + 1 if job_id in by_id else 1
        submit_text = row.get("Submit")
        submit = (submits[submit_text] if submit_text in submits
                  else _known_time(submits, submit_text, zone, display, number, "Submit"))
        by_id[job_id] = len(jobs)
        job = new(SacctJob)
        job.__dict__.update(job_id=job_id, state=state, state_raw=state_raw, elapsed_s=elapsed, start=start,
                            end=end, submit=submit, line=number, steps=[], fields=row, incarnation=incarnation)
        jobs.append(job)
    if not jobs:
        raise EvidenceError(display, f"expected sacct job rows, found none. {_HINT}")
    warnings = [
        f"{display} lines {_line_list(numbers)}: expected {len(columns or [])} fields as the field list names, got "
        f"{len(columns or []) - missing}; the last {missing} ({', '.join((columns or [])[-missing:])}) read as empty"
        for missing, numbers in sorted(short.items())
    ]
    return SacctResult(file=display, fields=columns or [], timezone=timezone, jobs=jobs, warnings=warnings)


def _line_list(numbers: list[int]) -> str:
    """'4, 7-9' from [4, 7, 8, 9]."""
    parts: list[str] = []
    first = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(first) if first == prev else f"{first}-{prev}")
        if n is not None:
            first = prev = n
    return ", ".join(parts)


def _known_time(
    known: dict[str, str | None], text: str | None, zone: ZoneInfo, display: str, number: int, name: str
) -> str | None:
    """_time() of field `name`, remembered in `known` (one table per field: the error names the field)."""
    if text is None:
        return None
    value = known[text] = _time(text, zone, display, number, name)
    return value


def _time(text: str | None, zone: ZoneInfo, display: str, number: int, name: str) -> str | None:
    if text is None or text.strip() in _NO_TIME:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise EvidenceError(
            display,
            f"expected a time like 2022-07-05T16:17:52, got {text.strip()[:40]!r}. {_HINT}",
            line=number,
            field=name,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.isoformat()
