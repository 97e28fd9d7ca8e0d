"""Slurm `sacct --parsable2` dumps (with or without a header) and `sacct --json` dumps (sacct_json.py): jobs and
their steps, states normalised."""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Iterable, Sequence
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
from clustercert.parsers.training import read_text

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
    text = read_text(path, display, limit=limit)
    if text.lstrip().startswith("{"):  # `sacct --json` (no --parsable2 dump starts with a brace)
        return parse_sacct_json(text, display, timezone=timezone, zone=zone, fields=fields)
    fast = _sacct_fast(text, display, fields, timezone, zone)
    if fast is not None:
        return fast
    return _sacct_by_line(text, display, fields, timezone, zone)


def _sacct_by_line(
    text: str, display: str, fields: list[str] | None, timezone: str, zone: ZoneInfo
) -> SacctResult:
    """What parse_sacct() reads from `text` (read_text()'s), a line at a time: any dump the fast reading does not
    read, each error naming its line and field."""
    lines = text.splitlines()  # read_text() joins its lines with "\n" only: these are the file's lines
    _refuse_fixed_width(lines, display)
    columns = list(fields) if fields else None
    id_column = _id_column(columns or [])
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
    for number, text in enumerate(lines, start=1):
        if not text or text.isspace() or text.lstrip().startswith("#"):
            continue
        cells = text.split("|")
        if not header_seen and _is_header(text):
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
        state_raw = row["State"].strip()
        state = states.get(state_raw)
        if state is None:
            state = states[state_raw] = _state(state_raw, display, number)
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
            jobs[by_id[parent]].steps.append(
                SacctStep._make((job_id, state, state_raw, elapsed, start, end, number, row)))
            continue
        # `sacct --duplicates` prints every incarnation of a requeued job under the same id, each with its steps
        incarnation = jobs[by_id[job_id]].incarnation + 1 if job_id in by_id else 1
        submit_text = row.get("Submit")
        submit = (submits[submit_text] if submit_text in submits
                  else _known_time(submits, submit_text, zone, display, number, "Submit"))
        by_id[job_id] = len(jobs)
        jobs.append(SacctJob._make((job_id, state, state_raw, elapsed, start, end, submit, number, [], row,
                                    incarnation)))
    if not jobs:
        raise EvidenceError(display, f"expected sacct job rows, found none. {_HINT}")
    return SacctResult(file=display, fields=columns or [], timezone=timezone, jobs=jobs,
                       warnings=_short_rows(display, columns or [], short))


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
# columns by map() (C loops), a field holding one text on every row of a block kept as one str (half the memory).
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


def _refuse_fixed_width(lines: list[str], display: str) -> None:
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
        self.id_at = self.index[_id_column(columns) or "JobID"]  # the caller checked there is one
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
        by_column, varying = self._by_column(cells)
        del cells
        ids = list(map(str.strip, by_column[self.id_at]))
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
        by_name = self._cells_by_name(by_column, varying, len(ids))
        # the records in C (tuple.__new__, as NamedTuple._make), their fields in SacctJob's and SacctStep's order
        jobs: list[SacctJob] = list(map(tuple.__new__, repeat(SacctJob), zip(
            job_ids, *_fields(values, is_job, len(job_ids)), compress(numbers, is_job),
            [[] for _ in job_ids], compress(by_name, is_job), repeat(1, len(job_ids)), strict=True)))
        steps = map(tuple.__new__, repeat(SacctStep), zip(
            compress(ids, is_step), *_fields(values, is_step, len(owner), submit=False), compress(numbers, is_step),
            compress(by_name, is_step), strict=True))
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

    def _by_column(self, cells: list[str]) -> tuple[list[list[str]], list[int]]:
        """Each column's texts from the rows' flat `cells`, and the columns whose text varies from row to row."""
        stride = self.bars + 1
        by_column = [cells[i::stride] for i in range(len(self.columns))]
        varying = []
        for i, texts in enumerate(by_column):
            if texts.count(texts[0]) == len(texts):  # one text in every row: one str kept, not one per row
                by_column[i] = [texts[0]] * len(texts)
            else:
                varying.append(i)
        return by_column, varying

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

    def _values(self, by_column: list[list[str]], is_job: list[bool]) -> dict[str, tuple[Any, list[Any] | None]] | None:
        """Each read field's value on every row: one value where every row's text reads alike (all COMPLETED,
        say), else the list of the rows' values; None where a text does not read."""
        values: dict[str, tuple[Any, list[Any] | None]] = {}
        for name, read in self.reads:
            if name not in self.index:
                values[name] = (None, None)
                continue
            texts = by_column[self.index[name]]
            if name == "Submit":
                texts = list(compress(texts, is_job))  # a step's Submit is not read
            by_text = _by_text(texts, read)
            if by_text is None:
                return None
            if len(by_text) == 1:
                values[name] = (next(iter(by_text.values())), None)
            else:  # a step row's Submit: None (or a job's value, never used)
                values[name] = (None, list(map(by_text.get, by_column[self.index[name]])))
        return values

    def _cells_by_name(self, by_column: list[list[str]], varying: list[int], count: int) -> list[dict[str, str]]:
        """Each row's dict of its cells by field name, as dict(zip(columns, cells)) makes it (a trailing '|'
        dropped)."""
        columns = self.columns
        if len(varying) * 2 > len(columns):
            return list(map(dict, map(zip, repeat(columns), zip(*by_column, strict=True))))
        # the first row's dict copied (a copy is a memcpy), the varying cells set on each
        by_name = list(map(dict.copy, repeat(dict(zip(columns, [texts[0] for texts in by_column], strict=True)),
                                             count)))
        for i in varying:
            name = columns[i]
            for row, text in zip(by_name, by_column[i], strict=True):
                row[name] = text
        return by_name


_BLOCK = 1 << 16  # characters of a dump read at a time: a block's lists and records stay in the CPU's caches, and
                  # the next block's lists reuse the memory of the last's


def _sacct_fast(
    text: str, display: str, fields: list[str] | None, timezone: str, zone: ZoneInfo
) -> SacctResult | None:
    """What parse_sacct() reads from `text` (read_text()'s), read column by column; None where the dump is not
    one the comment above describes, and the line-by-line reading must."""
    first = offset = 0  # the first line that is not blank or a comment (0-based), and where it starts
    while True:
        end = text.find("\n", offset)
        line = text[offset:] if end < 0 else text[offset:end]
        if not _skipped(line):
            break
        if end < 0:
            return None  # no row
        first, offset = first + 1, end + 1
    if _is_header(line):
        columns = [c.strip() for c in line.split("|")]
        first, offset = first + 1, (len(text) if end < 0 else end + 1)
    elif fields:
        columns = list(fields)
    else:
        return None
    id_column = _id_column(columns)
    if len(set(columns)) != len(columns) or id_column is None or "State" not in columns:
        return None
    stop = len(text) - 1 if text.endswith("\n") else len(text)  # the last line's end
    at = offset
    while at < stop:  # the first row says whether rows end with a '|' (`--parsable`)
        end = text.find("\n", at, stop)
        line = text[at:stop] if end < 0 else text[at:end]
        if not _skipped(line):
            break
        at = stop if end < 0 else end + 1
    else:
        return None  # no row
    rows = _Rows(columns, line.count("|") == len(columns), display, zone)
    number = first + 1
    while offset < stop:
        end = text.find("\n", min(offset + _BLOCK, stop), stop)
        end = stop if end < 0 else end
        block = text[offset:end]
        if not rows.add(block, number):
            return None
        number += block.count("\n") + 1
        offset = end + 1
    if not rows.jobs:
        return None
    return SacctResult(file=display, fields=columns, timezone=timezone, jobs=rows.jobs, warnings=[])
