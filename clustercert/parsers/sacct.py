"""Slurm `sacct --parsable2` dumps (with or without a header) and `sacct --json` dumps (sacct_json.py): jobs and
their steps, states normalised."""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from datetime import datetime
from itertools import accumulate, compress, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.sacct_json import parse_sacct_json
from clustercert.parsers.sacct_records import STATES, SacctJob, SacctResult, SacctStep, base_state
from clustercert.parsers.training import read_text_pieces

__all__ = ["STATES", "SacctJob", "SacctResult", "SacctStep", "base_state", "fixed_width_rule", "parse_elapsed",
           "parse_sacct"]

_HINT = "Dump with `sacct --parsable2 --format ...` and pass the same field list."
# Digits bounded: a duration of thousands of digits is not a duration (and int() refuses it past 4,300).
_ELAPSED = re.compile(r"^(?:(\d{1,9})-)?(?:(\d{1,9}):)?(\d{1,9}):(\d{1,9})(?:\.(\d{1,9}))?$")
_NO_TIME = {"", "Unknown", "None", "N/A"}


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
    """Job and step rows of a `--parsable2` dump; a header line wins over `fields`, one is required. A dump that
    starts with '{' is read as `sacct --json` prints it (sacct_json.py), which needs no field list.

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
    pieces = read_text_pieces(path, display, limit=limit)
    with closing(pieces):
        ahead: list[str] = []
        for piece in pieces:  # the first piece that is not all blank tells the forms apart
            ahead.append(piece)
            if not piece.isspace():
                break
        if "".join(ahead).lstrip().startswith("{"):  # `sacct --json` (no --parsable2 dump starts with a brace)
            text = "".join([*ahead, *pieces])
            del ahead
            return parse_sacct_json(text, display, timezone=timezone, zone=zone, fields=fields)
        # read a piece at a time, the pieces read dropped: the dump is never held whole beside its records
        fast = _sacct_fast(itertools.chain(ahead, pieces), display, fields, timezone, zone)
    if fast is not None:
        return fast
    # a dump the fast reading does not read is read again, from its start, a line at a time
    with closing(read_text_pieces(path, display, limit=limit)) as again:
        return _sacct_by_line(_lines(again), display, fields, timezone, zone)


def _sacct_by_line(
    lines: Iterator[str], display: str, fields: list[str] | None, timezone: str, zone: ZoneInfo
) -> SacctResult:
    """What parse_sacct() reads from a dump's `lines` (_lines()'), a line at a time: any dump the fast reading does
    not read, each error naming its line and field."""
    head = list(itertools.islice(lines, 50))
    _refuse_fixed_width(head, display)
    lines = itertools.chain(head, lines)
    columns = list(fields) if fields else None
    id_column = _id_column(columns or [])
    jobs: list[SacctJob] = []
    by_id: dict[str, int] = {}
    short: dict[int, list[int]] = {}
    header_seen = False
    # A dump repeats its times, durations and states (a job's steps share its start; many jobs one state): each
    # distinct text is read once per stretch of the file (the tables emptied when full: a dump's every distinct
    # time kept would hold a large share of its size)
    starts: dict[str, str | None] = {}
    ends: dict[str, str | None] = {}
    submits: dict[str, str | None] = {}
    durations: dict[str, float] = {}
    states: dict[str, tuple[str, str]] = {}  # (the state, its text as printed)
    for number, line in enumerate(lines, start=1):
        if _skipped(line):
            continue
        if len(starts) + len(ends) + len(submits) + len(durations) + len(states) > _KNOWN:
            for known in (starts, ends, submits, durations, states):
                known.clear()
        cells = line.split("|")
        if not header_seen and _is_header(line):
            columns = [c.strip() for c in cells]
            id_column = _id_column(columns)
            header_seen = True
            continue
        header_seen = True
        if columns is None:
            raise _no_field_list(display, number)
        row = dict(zip(columns, _row_cells(cells, columns, display, number, short), strict=True))
        if id_column is None or "State" not in row:
            raise _no_column(display, number, columns, "JobID" if id_column is None else "State")
        job_id = row[id_column].strip()
        if not job_id:
            raise EvidenceError(display, f"expected a job id, got an empty one. {_HINT}", line=number, field="JobID")
        read = states.get(row["State"].strip())
        if read is None:  # the first row's text kept for every row that prints the same: one str, not one a row
            state_raw = row["State"].strip()
            read = states[state_raw] = (_state(state_raw, display, number), state_raw)
        state, state_raw = read
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
                raise EvidenceError(display, f"expected job {parent} before its step {job_id}, got none. {_HINT}",
                                    line=number, field="JobID")
            jobs[by_id[parent]].steps.append(SacctStep._make((job_id, state, state_raw, elapsed, start, end, number)))
            continue
        # `sacct --duplicates` prints every incarnation of a requeued job under the same id, each with its steps
        incarnation = jobs[by_id[job_id]].incarnation + 1 if job_id in by_id else 1
        submit_text = row.get("Submit")
        submit = (submits[submit_text] if submit_text in submits
                  else _known_time(submits, submit_text, zone, display, number, "Submit"))
        by_id[job_id] = len(jobs)
        jobs.append(SacctJob._make((job_id, state, state_raw, elapsed, start, end, submit, number, [], incarnation)))
    if not jobs:
        raise EvidenceError(display, f"expected sacct job rows, found none. {_HINT}")
    return SacctResult(file=display, fields=columns or [], timezone=timezone, jobs=jobs,
                       warnings=_short_rows(display, columns or [], short))


_KNOWN = 1 << 14  # distinct texts the line-by-line reading remembers before it starts over


def _lines(pieces: Iterable[str]) -> Iterator[str]:
    """The lines of read_text_pieces()'s `pieces` (what read_text()'s text.splitlines() lists), a piece's at a
    time: a list of them all would hold the dump's size again."""
    for piece in pieces:
        lines = piece.split("\n")
        if piece.endswith("\n"):
            lines.pop()  # the piece's last line end ends its last line: no empty line after it
        yield from lines


def _row_cells(cells: list[str], columns: list[str], display: str, number: int,
               short: dict[int, list[int]]) -> list[str]:
    """A row's cells, one per column: a `--parsable` row's trailing '|' dropped, the trailing fields a short row
    lacks read as empty and its line noted in `short` by how many it lacks; an error where there are too many."""
    if len(cells) == len(columns) + 1 and cells[-1] == "":
        cells = cells[:-1]  # --parsable (not 2) ends every row with a '|'
    if len(cells) > len(columns):
        raise _too_many_cells(display, number, len(columns), len(cells))
    if len(cells) < len(columns):
        # A field added between dumps: the older rows lack the trailing fields, which read as empty.
        short.setdefault(len(columns) - len(cells), []).append(number)
        cells = cells + [""] * (len(columns) - len(cells))
    return cells


def _no_field_list(display: str, number: int) -> EvidenceError:
    return EvidenceError(
        display,
        f"expected a header line or a field list (--fields State,JobID,...), got neither. {_HINT}",
        line=number,
    )


def _too_many_cells(display: str, number: int, columns: int, cells: int) -> EvidenceError:
    return EvidenceError(
        display,
        f"expected at most {columns} fields as the field list names, got {cells}. Give the "
        "field list the dump was written with (bundle.yaml `fields`, or its header line)",
        line=number,
        field="row",
    )


def _no_column(display: str, number: int, columns: list[str], required: str) -> EvidenceError:
    return EvidenceError(
        display,
        f"expected a '{required}' column, got {', '.join(columns)[:80]}. {_HINT}",
        line=number,
        field=required,
    )


def _state(state_raw: str, display: str, number: int) -> str:
    """base_state() of a row's State text, an error naming the line where it names none."""
    try:
        return base_state(state_raw)
    except ValueError:
        raise EvidenceError(
            display,
            f"expected a Slurm state ({', '.join(sorted(STATES))}), got {state_raw[:40]!r}. {_HINT}",
            line=number,
            field="State",
        ) from None


def _short_rows(display: str, columns: list[str], short: dict[int, list[int]]) -> list[str]:
    """One warning per count of missing trailing fields, naming the rows that lacked them."""
    return [
        f"{display} lines {_line_list(numbers)}: expected {len(columns)} fields as the field list names, got "
        f"{len(columns) - missing}; the last {missing} ({', '.join(columns[-missing:])}) read as empty"
        for missing, numbers in sorted(short.items())
    ]


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


# The fast reading of a dump (the line-by-line reading spends its time on each row's split, lookups and checks):
# a block of lines split into cells at once, each field read once per distinct text, the records built from the
# columns by map() (C loops), the cells no record reads dropped with their block.
# It reads only a dump whose every row it can prove the line-by-line reading reads alike:
# - every line is a row, a blank or comment line, or the header as the first line that is neither;
# - every row has the field list's count of '|' (or, all of them, one more and a trailing '|': `--parsable`), so
#   no row is short (a warning) or long (an error);
# - field names are distinct (a repeated name: the row's dict keeps the last), JobID and State among them;
# - every job id is distinct (no `--duplicates` incarnations) and comes before the steps naming it;
# - every JobID, State, Elapsed, Start, End (and, on job rows, Submit) text reads without an error.
# Anything else (a dump with an error among them) is read line by line, which names the first bad line and field.
_T = TypeVar("_T")


def _skipped(line: str) -> bool:
    """Whether the line-by-line reading skips `line` (blank, or a comment)."""
    return not line or line.isspace() or line.lstrip().startswith("#")


_RULE = re.compile(r" *-{2,}(?: +-{2,})+ *")  # sacct's table rule under its header: `------------ ---------- ...`
_TABLE_HEAD = re.compile(r" *JobID(?:Raw)? .*\bState\b")


def fixed_width_rule(lines: Iterable[str]) -> int | None:
    """The line number of sacct's table rule when the first two lines that are not blank or comments are the header
    (JobID first, a State column) and the rule of its default, fixed-width output (no --parsable); else None."""
    shown = [(number, line) for number, line in enumerate(itertools.islice(lines, 50), start=1)
             if not _skipped(line)][:2]
    if len(shown) == 2 and _TABLE_HEAD.match(shown[0][1]) and _RULE.fullmatch(shown[1][1]):
        return shown[1][0]
    return None


def _refuse_fixed_width(lines: Iterable[str], display: str) -> None:
    """sacct's fixed-width table is refused naming its rule line: its cells are cut at their width (`CANCELLED+`,
    a node list's end), so what it says cannot be read whole."""
    rule = fixed_width_rule(lines)
    if rule is not None:
        raise EvidenceError(
            display,
            "expected `sacct --parsable2` output, got sacct's fixed-width table (its cells are cut at their width, "
            f"as `CANCELLED+`). {_HINT}",
            line=rule,
        )


def _id_column(columns: Iterable[str]) -> str | None:
    """The job id's column: JobID, else JobIDRaw (`sacct -o JobIDRaw`: an array task's own job id, `1240`, where
    JobID prints `1234_5`); None when there is neither."""
    names = set(columns)
    return next((name for name in ("JobID", "JobIDRaw") if name in names), None)


def _is_header(line: str) -> bool:
    cells = [c.strip() for c in line.split("|")]
    return "State" in cells and _id_column(cells) is not None


def _by_text(column: list[str], read: Callable[[str], _T]) -> dict[str, _T] | None:
    """`read` of every distinct text of `column`, by text; None where `read` raises (the line-by-line reading then
    names the first line whose text it refuses, or an earlier error)."""
    try:
        return {text: read(text) for text in dict.fromkeys(column)}
    except Exception:  # whatever refuses a text, the line-by-line reading meets it (or an earlier error) in file order
        return None


def _fields(values: dict[str, tuple[Any, list[Any] | None]], rows: list[bool], count: int, *,
            submit: bool = True) -> list[Iterable[Any]]:
    """The state, raw state, elapsed, start, end (and submit) of the `count` rows `rows` selects, as _Rows.add
    read them (`values`: a field's one value, or its value on every row)."""
    out: list[Iterable[Any]] = []
    for name in ("State", "Elapsed", "Start", "End", "Submit")[: 5 if submit else 4]:
        value, each = values[name]
        picked = repeat(value, count) if each is None else compress(each, rows)
        if name == "State":  # (state, state as printed)
            both = list(picked)
            out += [map(itemgetter(0), both), map(itemgetter(1), both)]
        else:
            out.append(picked)
    return out


class _Rows:
    """The records of a dump's rows, read a block of lines at a time (add()), each block's rows checked as the
    comment above says; what the blocks share: the jobs so far, the ids seen, the last job (a block's first steps
    may be its)."""

    def __init__(self, columns: list[str], trailing: bool, display: str, zone: ZoneInfo) -> None:
        self.columns = columns
        self.bars = len(columns) if trailing else len(columns) - 1
        self.trailing = trailing
        self.index = {name: i for i, name in enumerate(columns)}
        self.id_name = _id_column(columns) or "JobID"  # the caller checked there is one
        self.read = (self.id_name, "State", "Elapsed", "Start", "End", "Submit")
        self.jobs: list[SacctJob] = []
        self.seen: set[str] = set()
        self.last: SacctJob | None = None
        self.last_id: str | None = None
        read_time = _time
        self.reads: list[tuple[str, Callable[[str], Any]]] = [
            ("State", lambda t: (base_state(t), t.strip())),
            ("Elapsed", lambda t: parse_elapsed(t, file=display, line=0) if t.strip() else None),
            ("Start", lambda t: read_time(t, zone, display, 0, "Start")),
            ("End", lambda t: read_time(t, zone, display, 0, "End")),
            ("Submit", lambda t: read_time(t, zone, display, 0, "Submit")),
        ]

    def add(self, block: str, number: int) -> bool:
        """Reads the lines of `block` (the first is line `number`); False where the block is not as the comment
        above says (the dump is then read line by line)."""
        rows = self._rows(block, number)
        if rows is None:
            return False
        cells, numbers = rows
        if not numbers:
            return True
        by_column = self._by_column(cells)
        del cells
        ids = list(map(str.strip, by_column[self.id_name]))
        if "" in ids:
            return False
        is_step = list(map(str.__contains__, ids, repeat(".")))
        is_job = list(map(operator.not_, is_step))
        job_ids = list(compress(ids, is_job))
        owner = self._owners(ids, is_step, is_job, job_ids)
        if owner is None:
            return False
        values = self._values(by_column, is_job)
        if values is None:
            return False
        # the records in C (tuple.__new__, as NamedTuple._make), their fields in SacctJob's and SacctStep's order
        jobs: list[SacctJob] = list(map(tuple.__new__, repeat(SacctJob), zip(
            job_ids, *_fields(values, is_job, len(job_ids)), compress(numbers, is_job),
            [[] for _ in job_ids], repeat(1, len(job_ids)), strict=True)))
        steps = map(tuple.__new__, repeat(SacctStep), zip(
            compress(ids, is_step), *_fields(values, is_step, len(owner), submit=False), compress(numbers, is_step),
            strict=True))
        # index 0 is the blocks before's last job: a step names it only where there is one (_owners checked)
        owners = cast("list[SacctJob]", [self.last, *jobs])
        for index, step in zip(owner, steps, strict=True):  # each step to its job's list, in file order
            owners[index].steps.append(step)
        self.jobs.extend(jobs)
        if jobs:
            self.last, self.last_id = jobs[-1], job_ids[-1]
        return True

    def _rows(self, block: str, number: int) -> tuple[list[str], Sequence[int]] | None:
        """The cells of `block`'s rows, flat, and each row's line number (blank and comment lines left out); None
        where a row has another count of '|' than the first row's, or not all end with one."""
        lines = block.split("\n")
        numbers: Sequence[int] = range(number, number + len(lines))
        skips = set()
        for i in compress(range(len(lines)), map(self.bars.__ne__, map(str.count, lines, repeat("|")))):
            if not _skipped(lines[i]):
                return None  # a short or long row, or a mix of `--parsable` rows and others
            skips.add(i)
        if "#" in block:  # a comment line may hold as many '|' as a row
            skips.update(i for i in compress(range(len(lines)), map(str.__contains__, lines, repeat("#")))
                         if _skipped(lines[i]))
        if skips:
            keep = [i not in skips for i in range(len(lines))]
            lines = list(compress(lines, keep))
            numbers = list(compress(numbers, keep))
            if not lines:
                return [], []
            cells = "|".join(lines).split("|")
        else:
            cells = block.replace("\n", "|").split("|")
        if self.trailing and not all(map(str.endswith, lines, repeat("|"))):
            return None
        return cells, numbers

    def _by_column(self, cells: list[str]) -> dict[str, list[str]]:
        """The texts of each column a record reads (the job id, State, Elapsed, Start, End, Submit: the others'
        cells are not kept), by name, from the rows' flat `cells`."""
        stride = self.bars + 1
        return {name: cells[self.index[name]::stride] for name in self.read if name in self.index}

    def _owners(self, ids: list[str], is_step: list[bool], is_job: list[bool], job_ids: list[str]) -> list[int] | None:
        """For each step row, its job: 0 for the last job of the blocks before, i for this block's i-th job; None
        where a job id was seen before (`--duplicates` incarnations) or a step does not follow its job."""
        known = len(self.seen)
        self.seen.update(job_ids)
        if len(self.seen) != known + len(job_ids):
            return None
        # sacct prints a job's steps after it: the job of each step is the last job row before it
        owner: list[int] = list(compress(accumulate(is_job), is_step))  # a running count of job rows
        parents = list(map(itemgetter(0), map(str.partition, compress(ids, is_step), repeat("."))))
        if list(map([self.last_id, *job_ids].__getitem__, owner)) != parents:
            return None  # another order, or a step without its job
        return owner

    def _values(self, by_column: dict[str, list[str]],
                is_job: list[bool]) -> dict[str, tuple[Any, list[Any] | None]] | None:
        """Each read field's value on every row: one value where every row's text reads alike (all COMPLETED,
        say), else the list of the rows' values; None where a text does not read."""
        values: dict[str, tuple[Any, list[Any] | None]] = {}
        for name, read in self.reads:
            if name not in self.index:
                values[name] = (None, None)
                continue
            texts = by_column[name]
            if name == "Submit":
                texts = list(compress(texts, is_job))  # a step's Submit is not read
            by_text = _by_text(texts, read)
            if by_text is None:
                return None
            if len(by_text) == 1:
                values[name] = (next(iter(by_text.values())), None)
            else:  # a step row's Submit: None (or a job's value, never used)
                values[name] = (None, list(map(by_text.get, by_column[name])))
        return values


_BLOCK = 1 << 16  # characters of a dump read at a time: a block's lists and records stay in the CPU's caches, and
                  # the next block's lists reuse the memory of the last's


def _sacct_fast(
    pieces: Iterable[str], display: str, fields: list[str] | None, timezone: str, zone: ZoneInfo
) -> SacctResult | None:
    """What parse_sacct() reads from a dump's `pieces` (read_text_pieces()'), read column by column; None where
    the dump is not one the comment above describes, and the line-by-line reading must."""
    columns: list[str] | None = None
    rows: _Rows | None = None
    number = 1  # the line the next block starts at
    for piece in pieces:
        at = 0
        stop = len(piece) - 1 if piece.endswith("\n") else len(piece)  # the piece's last line's end
        while rows is None and at < stop:  # the lines before the first row: blank lines, comments, the header
            end = piece.find("\n", at, stop)
            end = stop if end < 0 else end
            line = piece[at:end]
            if not _skipped(line):
                if columns is None:
                    header = _is_header(line)
                    columns = [c.strip() for c in line.split("|")] if header else list(fields or [])
                    if not columns or len(set(columns)) != len(columns) or _id_column(columns) is None \
                            or "State" not in columns:
                        return None
                    if header:
                        at, number = end + 1, number + 1
                        continue
                # the first row says whether rows end with a '|' (`--parsable`)
                rows = _Rows(columns, line.count("|") == len(columns), display, zone)
                break
            at, number = end + 1, number + 1
        while rows is not None and at < stop:
            end = piece.find("\n", min(at + _BLOCK, stop), stop)
            end = stop if end < 0 else end
            block = piece[at:end]
            if not rows.add(block, number):
                return None
            number += block.count("\n") + 1
            at = end + 1
    if rows is None or not rows.jobs:
        return None
    return SacctResult(file=display, fields=columns or [], timezone=timezone, jobs=rows.jobs, warnings=[])
