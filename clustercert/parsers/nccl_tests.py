"""nccl-tests output (text, several tests per file, or `-J` JSON): per-size bus bandwidth with its line."""

from __future__ import annotations

import bisect
import itertools
import json
import math
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import read_regular, short_repr
from clustercert.parsers.common import DEFAULT_LIMIT, json_of, to_float, to_int
from clustercert.parsers.training import line_total, text_of

__all__ = ["JSON_HEAD", "CollectiveTest", "NcclRow", "NcclTestsResult", "entry_lines", "json_devices",
           "parse_nccl_tests"]

FORMAT = "nccl-tests"
_HINT = "Check that the file is nccl-tests output as the tool wrote it; re-run nccl-tests if it was cut short."
_COLLECTIVES = (
    "all_reduce|all_gather|reduce_scatter|alltoall|sendrecv|broadcast|reduce|gather|scatter|hypercube"
)
_BINARY = re.compile(rf"\b({_COLLECTIVES})_perf(?:_mpi)?\b")
_STARTING = re.compile(rf"#\s*Collective test starting:\s*({_COLLECTIVES})_perf")
_CONCLUDED = re.compile(rf"#\s*Collective test concluded(?::\s*({_COLLECTIVES})_perf)?")
_VERSION = re.compile(r"#\s*nccl-tests version")
_NTHREAD = re.compile(r"#\s*nThread\s+\d+")
_RANK = re.compile(r"#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\b(?:\s+\d+\s+on\s+(\S+))?")
# the root cause nccl-tests prints when a test aborts: `host: Test NCCL failure common.cu:401 'remote process ...'`
_CAUSE = re.compile(r"(?:NCCL|CUDA) failure\s+\S+\s+'([^']{1,200})'")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\S+)")
# MPI / srun rank tags: `[1,0]<stdout>:`, `0: ` (srun -l), `rank0: `
_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s|rank\d+:\s?)")
# a text output whose lines mpirun --tag-output prefixed (`[1,0]<stdout>:`): text, though it starts as JSON does
_TAGGED = re.compile(rb"\[\d+,\d+\]<std(?:out|err)>:")
# an NCCL debug print (`host:pid:tid [dev] NCCL INFO ...`) that may start in the middle of a table row
_DEBUG = re.compile(
    r"(?<!\S)\S*:\d+:\d+\s+\[\d+\]\s+NCCL\s+(?:INFO|WARN|TRACE|ERROR).*$|\bNCCL (?:INFO|WARN|TRACE)\b.*$"
)
# what the tools themselves print when a test aborts (nccl-tests, NCCL, CUDA, MPI, srun, the shell, Python), in
# their own spelling: prose that merely mentions an error (a document's text between tables) is not an abort
_ERROR = re.compile(
    r"Test (?:NCCL |CUDA )?failure|(?:NCCL|CUDA) failure|\bNCCL\b.*(?:[Ee]rror|[Ff]ail)|Segmentation fault"
    r"|\bAbort(?:ed|ing)?\b|MPI_ABORT|has been aborted|\berror:|\bERROR\b|\w*Error:|\bFAILED\b|\bfailed with\b"
)
# the column header of a result table (`#  size  count  type  redop  root  time  algbw  busbw  #wrong ...`)
_COLUMNS = re.compile(r"#\s*size\s+count\s+type\b")
_ROW_START = re.compile(r"^\s*\d[\d.eE+]*\s+\d")
# nccl-tests `-S 1` (report_timestamps) prints the local time after each row's in-place columns (`%21s`)
_STAMP_TAIL = re.compile(r"\s+\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")
_ROW_MIN = 11  # size count type [redop] [root] + 4 out-of-place + 4 in-place; old versions lack root
# nccl-tests' per-iteration timing (`# Per-Iteration Report` in the header, src/util.cu writeResultHeader) prints
# i_min i_max i_p99 i_cv% after each side's #wrong: 5 + 2 x (4 + 4) columns
_PER_ITERATION_ROW = 21
_PER_ITERATION = ("i_min", "i_max", "i_p99", "i_cv%")


class NcclRow(NamedTuple):
    """One message size of one test, with the line where its row ends.

    A named tuple (immutable, compared and hashed by value, as the frozen dataclass it replaces): a bulk reading
    builds a file's rows from their columns in C (a cluster's sweep has hundreds of thousands of rows), at a
    fraction of the dataclass' cost and in less memory."""

    size_bytes: int
    time_us_oop: float
    algbw_oop: float
    busbw_oop: float
    time_us_ip: float
    algbw_ip: float
    busbw_ip: float
    wrong_oop: int | None
    wrong_ip: int | None
    line: int

    def to_json(self) -> dict[str, object]:
        return {
            "size_bytes": self.size_bytes,
            "busbw_oop": self.busbw_oop,
            "busbw_ip": self.busbw_ip,
            "algbw_oop": self.algbw_oop,
            "algbw_ip": self.algbw_ip,
            "time_us_oop": self.time_us_oop,
            "time_us_ip": self.time_us_ip,
            "wrong_oop": self.wrong_oop,
            "wrong_ip": self.wrong_ip,
            "line": self.line,
        }


@dataclass(frozen=True)
class CollectiveTest:
    """One collective test of a file; `error` set when it aborted (rows empty) or was cut short (the rows read).

    `truncated`: the output stops inside the test with no error printed (a capture cut short, which says nothing
    against the cluster), where an abort prints why (`Test NCCL failure ...`). `ranks` is the highest rank printed
    plus one (nccl-tests numbers ranks from 0), `hosts` the host of each rank when every rank line was printed,
    `hosts_seen` every host the printed rank lines name."""

    collective: str
    ranks: int | None
    rows: list[NcclRow]
    reported_avg_busbw: float | None
    error: str | None
    line: int
    last_line: int
    hosts: tuple[str, ...] = ()  # the host of each rank, in rank order (empty when the file lists none)
    cause: str | None = None  # the root cause an aborted test printed, quoted as written
    cause_line: int | None = None
    truncated: bool = False
    avg_line: int | None = None  # the line of its `# Avg bus bandwidth`
    hosts_seen: tuple[str, ...] = ()

    @property
    def average_disagreement(self) -> str | None:
        """Why the printed `# Avg bus bandwidth` disagrees with the mean of the rows read (None when it agrees).

        nccl-tests prints each busbw to 2 decimals and the average with `%g` (6 significant digits): the mean of
        the printed rows may differ from the printed average by half a unit of the rows' last digit plus the
        average's own rounding. More than that means rows were lost, added or misread."""
        printed, mean = self.reported_avg_busbw, self.computed_avg_busbw
        if printed is None or mean is None or abs(printed - mean) <= 0.006 + 1e-5 * abs(printed):
            return None
        return (f"line {self.avg_line}: the printed average busbw {printed:g} GB/s disagrees with the mean "
                f"{mean:.4f} GB/s of the {len(self.rows)} rows read (lines {self.rows[0].line}-{self.rows[-1].line})")

    @property
    def ranks_per_host(self) -> int | None:
        """Ranks on each host when every host holds the same number, else None."""
        if not self.hosts:
            return None
        counts = {self.hosts.count(h) for h in set(self.hosts)}
        return counts.pop() if len(counts) == 1 else None

    @property
    def computed_avg_busbw(self) -> float | None:
        """Mean of every busbw value, out-of-place and in-place, all sizes (nccl-tests' own definition)."""
        values = [v for r in self.rows for v in (r.busbw_oop, r.busbw_ip)]
        return sum(values) / len(values) if values else None

    def to_json(self) -> dict[str, object]:
        return {
            "collective": self.collective,
            "ranks": self.ranks,
            "rows": [r.to_json() for r in self.rows],
            "reported_avg_busbw": self.reported_avg_busbw,
            "computed_avg_busbw": self.computed_avg_busbw,
            "error": self.error,
            "cause": self.cause,
            "cause_line": self.cause_line,
            "hosts": list(self.hosts),
            "hosts_seen": list(self.hosts_seen),
            "truncated": self.truncated,
            "avg_line": self.avg_line,
            "line": self.line,
            "last_line": self.last_line,
        }


@dataclass(frozen=True)
class NcclTestsResult:
    """Every test found in one nccl-tests output file."""

    file: str
    tests: list[CollectiveTest] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """Each test whose printed average disagrees with its rows, as `evidence check` shows it."""
        return [f"{self.file} {why}: the table is not read as nccl-tests printed it"
                for t in self.tests if (why := t.average_disagreement) is not None]

    def to_json(self) -> dict[str, object]:
        return {"format": FORMAT, "file": self.file, "tests": [t.to_json() for t in self.tests]}


@dataclass
class _Open:
    collective: str | None
    line: int
    ranks: set[int] = field(default_factory=set)
    hosts: dict[int, str] = field(default_factory=dict)
    cause: tuple[str, int] | None = None  # the first root cause printed, with its line
    cause_text: str | None = None  # the whole line that printed it
    rows: list[NcclRow] = field(default_factory=list)
    avg: float | None = None
    avg_line: int | None = None
    error: str | None = None
    last_line: int = 0
    last_row: int | None = None  # the line of the last row or of the column header, where a cut capture stops
    ended: bool = False  # a blank line after its table: later text is not this test's (a document's prose)
    cut_at: int | None = None  # the line of a result row the file ends inside (the capture stopped mid-line)
    width: int | None = None  # the columns of its last row read: a row with fewer that cannot be read was cut


def parse_nccl_tests(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> NcclTestsResult:
    """Every collective test in the file (text or `-J` JSON), in file order.

    The collective comes from `# Collective test starting`, else from a `*_perf` command or binary name seen
    before the test, else from the file name. A test without its `# Avg bus bandwidth` line or without rows
    aborted: its `error` is set and it has no rows (a failed measurement, never a zero).
    """
    data = read_regular(path, display, limit=limit)  # one open and read (a cluster's sweep is 8,141 small files)
    if data[:1] in (b"{", b"[") and not _TAGGED.match(data):
        return _parse_json(data, display)
    text = text_of(data, display)
    del data
    name_hint = _BINARY.search(path.name)
    reader = _Reader(display, name_hint.group(1) if name_hint else None)
    # Read alike both ways (tests compare them): a stretch at a time pays where tables are long, line by line where
    # header and comment lines (which go through reader.step() either way) are much of a small file, as in each
    # output of a cluster's pairwise sweep
    (_read_fast if len(text) > _STRETCH else _read_lines)(text, reader)
    return reader.finish(line_total(text))


def _read_lines(text: str, reader: _Reader) -> None:
    """Every line of read_text()'s `text` through reader.step(), in file order: the reading _read_fast() must
    give alike (tests compare the two)."""
    step = reader.step
    for number, raw in enumerate(text.split("\n")[: line_total(text)], start=1):
        step(raw, number)


class _Reader:
    """The line-by-line reading of a text file: step() takes each line in file order, finish() the end."""

    __slots__ = ("broken", "current", "display", "last_binary", "last_error", "pending", "pending_went_on", "tests")

    def __init__(self, display: str, last_binary: str | None) -> None:
        self.display = display
        self.last_binary = last_binary  # the collective of the last `*_perf` command or binary name seen
        self.tests: list[CollectiveTest] = []
        self.current: _Open | None = None
        self.pending: tuple[str, int] | None = None  # a row cut by a debug print, waiting for its remainder
        self.pending_went_on = False  # a `#` line came after the pending row: the output did not stop inside it
        # a row of the open test that could not be read: raised at the next line read, the file's end (only blank or
        # debug lines after it) shows the capture stopped inside it
        self.broken: EvidenceError | None = None
        self.last_error: tuple[str, int] | None = None  # the first error line of the open test, with its number

    def close(self, test: _Open, end: int) -> None:
        error = test.error
        first = (test.cause_text, test.cause[1]) if test.cause and test.cause_text else self.last_error
        said = f": line {first[1]} says {first[0]!r}" if first else ": no error message printed"
        truncated = error is None and first is None and test.avg is None
        if truncated and test.cut_at is not None:
            error = (f"truncated capture: capture cut short at {self.display}:{test.cut_at}, inside a result row "
                     f"(not read; the {len(test.rows)} rows before it are), before the test's '# Avg bus bandwidth' "
                     "line, and no error is printed (not evidence against the cluster)")
        elif truncated:
            stop = test.last_row or test.line
            error = (f"truncated capture: the output stops after line {stop}, before the test's '# Avg bus "
                     "bandwidth' line, and no error is printed (a capture cut short: not evidence against the "
                     "cluster)")
        if error is None and test.avg is None:
            error = "aborted before its '# Avg bus bandwidth' line" + said
        if error is None and not test.rows:
            error = "aborted: no result rows" + said
        # nccl-tests numbers ranks 0..N-1 and prints one line each: the highest printed says N even where a copy
        # left some out; the host of each rank is known only where every one was printed
        count = max(test.ranks) + 1 if test.ranks else 0
        hosts = tuple(test.hosts[r] for r in range(count)) if count and len(test.hosts) == count else ()
        done = _new(CollectiveTest)  # CollectiveTest(...) without the frozen dataclass's per-field __init__
        done.__dict__.update(  # in field order, as __init__ sets them
            collective=test.collective or self.last_binary or "unknown",
            ranks=count or None,
            rows=[] if error and not truncated else test.rows,  # a cut capture keeps what it measured
            reported_avg_busbw=test.avg,
            error=error,
            line=test.line,
            last_line=max(end, test.line),
            hosts=hosts,
            cause=test.cause[0] if test.cause else None,
            cause_line=test.cause[1] if test.cause else None,
            truncated=truncated,
            avg_line=test.avg_line,
            hosts_seen=tuple(dict.fromkeys(test.hosts[r] for r in sorted(test.hosts))),
        )
        self.tests.append(done)

    def note_error(self, text: str, number: int) -> None:
        current = self.current
        if current is None or current.ended or current.avg is not None:
            return  # text after the table's end or after its average is not why it stopped
        cause = _CAUSE.search(text)
        if cause and current.cause is None:
            current.cause = (cause.group(1).strip(" /"), number)
            current.cause_text = text.strip()[:160]
        if self.last_error is None:
            self.last_error = (text.strip()[:160], number)

    def went_on(self) -> None:
        """A line that is neither blank nor a debug print was read: a row that could not be read before it was not
        where the capture stopped (its error is raised), nor was a row cut short before it."""
        if self.broken is not None:
            raise self.broken
        if self.pending is not None:
            self.pending_went_on = True

    def step(self, raw: str, number: int) -> None:
        """Read line `number` (its text `raw`, without its line break)."""
        current = self.current
        # each pattern is tried only on lines that hold the literal it needs (an `in` test is C speed; a search
        # is a call): _PREFIX.sub(count=1) is a match at the start, both _DEBUG forms need "NCCL"
        prefix = _PREFIX.match(raw)
        text = raw[prefix.end():] if prefix else raw
        cleaned = (_DEBUG.sub("", text) if "NCCL" in text else text).rstrip()
        if self.broken is not None and cleaned.strip():
            raise self.broken
        pending = self.pending
        if pending is not None and cleaned.strip() and not cleaned.lstrip().startswith("#"):
            if len(cleaned.split()) < _ROW_MIN:
                cleaned = pending[0] + " " + cleaned.strip()
            self.pending = None
        elif pending is not None and cleaned.strip():
            self.pending_went_on = True
        if not cleaned.strip():
            if (text.strip() and current is not None and "NCCL INFO" not in text and _may_say_error(text)
                    and _ERROR.search(text)):
                self.note_error(text, number)
            elif not text.strip() and current is not None and current.last_row is not None:
                current.ended = True  # nccl-tests prints no blank line inside a test: what follows is not its own
            return
        starting = _STARTING.search(cleaned) if "Collective test starting" in cleaned else None
        if (
            starting
            or ("nccl-tests version" in cleaned and _VERSION.search(cleaned))
            or ("nThread" in cleaned and _NTHREAD.search(cleaned) and self.after_results())
        ):
            self.begin(starting.group(1) if starting else None, number)
            return
        binary = _BINARY.search(cleaned) if "_perf" in cleaned else None
        if binary and not cleaned.lstrip().startswith("#"):
            self.last_binary = binary.group(1)
            if current is not None and current.collective is None and not current.rows:
                current.collective = self.last_binary
            return
        if "size" in cleaned and _COLUMNS.match(cleaned.lstrip()):
            self.columns(number)
            return
        rank = _RANK.search(cleaned) if "Rank" in cleaned else None
        if rank:
            self.rank(rank.group(1), rank.group(2), number)
            return
        if current is None and not _ROW_START.match(cleaned):
            return
        if "Collective test concluded" in cleaned and (concluded := _CONCLUDED.search(cleaned)):
            self.conclude(number, concluded.group(1))
            return
        avg = _AVG.search(cleaned) if "Avg bus bandwidth" in cleaned else None
        if avg:
            self.average(avg.group(1), number)
            return
        if cleaned.lstrip().startswith("#"):
            return
        if _ROW_START.match(cleaned):
            if cleaned[-3:-2] == ":" and (stamp := _STAMP_TAIL.search(cleaned)) is not None:
                cleaned = cleaned[:stamp.start()]  # `-S 1`: the time the row was printed, after its in-place part
            tokens = cleaned.split()
            if len(tokens) == _PER_ITERATION_ROW:
                tokens = _without_per_iteration(tokens, number, self.display)
            if len(tokens) < _ROW_MIN:
                if current is not None:
                    self.pending, self.pending_went_on = (cleaned, number), False
                return
            if current is None:
                try:  # a table without its header opens a test; other numbers outside a test are not read
                    row = _row(tokens, number, self.display)
                except EvidenceError:
                    return
            else:
                try:
                    row = _row(tokens, number, self.display)
                except EvidenceError as exc:
                    if current.avg is not None or current.width is None or len(tokens) >= current.width:
                        raise  # a whole row with a bad value, or one after the test's average: damaged, not cut
                    self.broken = exc
                    return
            self.add_rows([row], len(tokens))
            return
        if current is None:
            return
        if _may_say_error(cleaned) and _ERROR.search(cleaned):
            self.note_error(cleaned, number)

    # What step() does with a header line, once it knows the line's kind (the fast reading calls these too)

    def after_results(self) -> bool:
        """Whether a `# nThread` line starts a new test: none is open, or the open one has results."""
        current = self.current
        return current is None or bool(current.rows) or current.avg is not None

    def begin(self, collective: str | None, number: int) -> None:
        """A test header on line `number`: `# Collective test starting` (its collective), `# nccl-tests version` or
        a `# nThread` line after results (None). The collective names a just-opened test without rows; any other
        header closes the open test and opens a new one."""
        self.went_on()
        current = self.current
        if collective is not None and current is not None and current.collective is None and not current.rows:
            current.collective = collective
            return
        if current is not None:
            self.close(current, number - 1)
        self.current = _Open(collective=collective, line=number)
        self.last_error = None

    def table(self, number: int) -> _Open:
        """The test a table part on line `number` (its column header, a rank line or a row) belongs to: the open
        one, or a new one where none is open or the open one is done. A test is done at its `# Avg bus bandwidth`
        line (each closes a test of its own), or, without it, at a blank line after its table (nccl-tests prints
        none inside a test); a new table read without its header lines names no ranks or hosts."""
        current = self.current
        if current is not None and current.avg is None and not current.ended:
            return current
        return self.new_table(number)

    def new_table(self, number: int) -> _Open:
        """A new test from line `number` on, the open one closed where its table ended."""
        current = self.current
        if current is not None:
            self.close(current, current.last_line if current.avg is not None else current.last_row or number - 1)
        self.current = _Open(collective=None, line=number)
        self.last_error = None
        return self.current

    def header_part(self, number: int) -> _Open:
        """The test a column header or rank line on line `number` belongs to: the open one while it has no
        results, else a new one (a table printed after another without its `# nThread` line)."""
        current = self.current
        if current is not None and not current.rows and current.avg is None and not current.ended:
            return current
        return self.new_table(number)

    def columns(self, number: int) -> None:
        """The column header of a result table (`#  size  count  type ...`) on line `number`."""
        self.went_on()
        self.header_part(number).last_row = number

    def conclude(self, number: int, collective: str | None = None) -> None:
        """`# Collective test concluded[: X_perf]` on line `number`: closes the open test (named X where no header
        named it)."""
        self.went_on()
        if self.current is not None:
            if collective is not None and self.current.collective is None:
                self.current.collective = collective
            self.close(self.current, number)
            self.current = None

    def rank(self, index_text: str, host: str | None, number: int) -> None:
        """A `#  Rank N ... on HOST` line, on line `number`: of the open test unless that one has results."""
        self.went_on()
        test = self.header_part(number)
        index = int(index_text)
        test.ranks.add(index)
        if host:
            test.hosts[index] = host

    def average(self, text: str, number: int) -> None:
        """The `# Avg bus bandwidth : X` line of the open test, on line `number`."""
        self.went_on()
        if self.current is not None and self.current.avg is None:
            self.current.avg = to_float(text, file=self.display, line=number, field="Avg bus bandwidth", hint=_HINT)
            self.current.avg_line = self.current.last_line = number

    def add_rows(self, rows: list[NcclRow], width: int = 13) -> None:
        """Read whole result rows that follow one another (debug lines between them do nothing), as step() does;
        `width`: the columns of the last (the fast reading takes only rows of 13)."""
        self.went_on()
        self.pending = None  # a whole row ends the wait for a cut row's remainder
        test = self.table(rows[0].line)
        test.rows.extend(rows)
        test.last_row, test.width = rows[-1].line, width

    def finish(self, total: int) -> NcclTestsResult:
        """The tests read, once step() has taken the file's `total` lines."""
        if self.broken is not None and self.current is not None:
            # the file ends inside a row it cannot read (only blank or debug lines after it): the capture stopped
            self.current.cut_at, self.broken = self.broken.line, None
        if (self.pending is not None and self.current is not None and self.current.avg is None
                and not self.pending_went_on):
            # the file ends inside a row (only blank lines after it): the capture stopped there, the row is not read
            self.current.cut_at, self.pending = self.pending[1], None
        if self.pending is not None and self.current is not None:
            raise EvidenceError(
                self.display,
                f"expected a complete result row, got {self.pending[0].strip()[:60]!r} (file cut short). {_HINT}",
                line=self.pending[1],
                field="row",
            )
        if self.current is not None:
            self.close(self.current, total)
        if not self.tests:
            raise EvidenceError(
                self.display,
                f"expected nccl-tests output (a '# nThread' or '# Collective test starting' "
                f"header), found none. {_HINT}",
            )
        return NcclTestsResult(file=self.display, tests=self.tests)


def _may_say_error(text: str) -> bool:
    """False only when _ERROR cannot match `text` (an ASCII line without its words, in any case)."""
    if not text.isascii():
        return True  # case-insensitive matching knows more than str.lower() (the long s, the Kelvin sign)
    lower = text.lower()
    return "fail" in lower or "abort" in lower or "error" in lower or "segmentation fault" in lower


_new = object.__new__


def _row(tokens: list[str], number: int, display: str) -> NcclRow:
    """One result row; the common case (plain numbers) read directly, anything else by _checked_row()."""
    if len(tokens) <= 13 and tokens[0].isdigit():
        side = tokens[-8:]
        try:
            size = int(tokens[0])
            time_oop, algbw_oop, busbw_oop = float(side[0]), float(side[1]), float(side[2])
            time_ip, algbw_ip, busbw_ip = float(side[4]), float(side[5]), float(side[6])
            wrong_oop = None if side[3] == "N/A" else int(float(side[3]))
            wrong_ip = None if side[7] == "N/A" else int(float(side[7]))
        except (ValueError, OverflowError):
            return _checked_row(tokens, number, display)
        numbers = (time_oop, algbw_oop, busbw_oop, time_ip, algbw_ip, busbw_ip)
        # finite and non-negative, as num() checks (a nan or an infinity makes the sum nan or infinite)
        if sum(numbers) < math.inf and min(numbers) >= 0:
            return NcclRow(size, time_oop, algbw_oop, busbw_oop, time_ip, algbw_ip, busbw_ip, wrong_oop, wrong_ip,
                           number)
    return _checked_row(tokens, number, display)


# The fast reading. Most of a large file is result rows and NCCL INFO prints: one compiled pattern reads every line
# of a stretch of the text at once (C speed), the rows' columns are converted at once, the header lines of the
# usual shapes go to the _Reader method step() would call for them, and every other line through step() itself,
# all in file order. A line is taken so only where step() provably reads it alike:
# - a debug line starts with a host name that _PREFIX cannot take (a letter, not `rank<digit>`), so _DEBUG's
#   first form removes it whole, and holds "NCCL INFO", so no error is noted: step() does nothing with it,
#   whatever its state;
# - a row has the 13 columns of nccl-tests 2.x, of ASCII digits, lowercase letters, '.', '-' and `N/A`: no
#   _PREFIX, no "NCCL", none of the literals step() looks for (a type column holding `_perf` is refused), not a
#   '#' line; so step() ends any wait for a cut row and, within a test, reads it with _row(). Its size has at most
#   18 digits, each number at most 40 digits and one point, #wrong is `N/A` or at most 15 digits: int() and float()
#   take each, every value finite and non-negative, where _row() reads it without _checked_row();
# - a header line starts with '#' (no _PREFIX, no wait for a cut row touched), holds no "NCCL" and none of the
#   literals step() tries before the one that decides it: `# Collective test starting: X_perf` (nothing after),
#   `# nThread N ...`, `#  Rank N Group N Pid N on HOST ...`, `# Avg bus bandwidth : X` (X a number as above),
#   `# Collective test concluded...` (lowercase letters, '_', ':' after). ' ' and [ \t] stand for step()'s \s
#   within a line: a line with other white space (a tab between a row's columns) goes through step().
# Any other line (an old 11- or 12-column row, a number with an exponent, a debug line of another shape) is read
# by step() itself, with its located error.
_SPACE = " +"  # between a row's columns: nccl-tests prints spaces (a literal repeat is the pattern's fastest loop)
_NUMBER = "[0-9]{1,20}[.]?[0-9]{0,20}"
_SIDE = f"{_NUMBER}{_SPACE}{_NUMBER}{_SPACE}{_NUMBER}{_SPACE}(?:N/A|[0-9]{{1,15}})"  # time algbw busbw #wrong
_END = "[ \t]*(?![^\n])"  # trailing blanks, then the line ends
# none of these on the rest of the line (tried after its '#')
_UNSAID = r"(?![^\n]*(?:NCCL|Collective test|nccl-tests version|{}))"
# groups: size, then out-of-place and in-place (time algbw busbw #wrong) in one text
_ROW_LINE = (
    f" *([0-9]{{1,18}}){_SPACE}[0-9]+{_SPACE}(?![a-z0-9_]*_perf)[a-z][a-z0-9_]*{_SPACE}[a-z]+{_SPACE}-?[0-9]+"
    f"{_SPACE}({_SIDE}{_SPACE}{_SIDE}) *(?![^\n])"
)
# group: its first letter (a one-letter string, which Python does not allocate)
_DEBUG_LINE = r"(?!rank[0-9])([A-Za-z])[A-Za-z0-9_.-]*:[0-9]+:[0-9]+ +\[[0-9]+\] +NCCL INFO[^\n]*"
_HEADERS = (
    f"#[ \t]*Collective test starting:[ \t]*({_COLLECTIVES})_perf{_END}",  # group: the collective
    "(#)" + _UNSAID.format("Rank|Avg bus bandwidth") + "[ \t]*nThread[ \t]+[0-9]+[^\n]*",  # group: '#' (one character)
    # groups: rank, host (_RANK's \S+)
    "#" + _UNSAID.format("nThread")
    + r"[ \t]+Rank[ \t]+([0-9]{1,9})[ \t]+Group[ \t]+[0-9]+[ \t]+Pid[ \t]+[0-9]+[ \t]+on[ \t]+(\S+)[^\n]*",
    f"#[ \t]*Avg bus bandwidth[ \t]*:[ \t]*({_NUMBER}){_END}",  # group: the average
    "(#[ \t]*Collective test concluded[: \ta-z_]*)(?![^\n])",  # group: the whole line
)
# One line from the line break before it: a row, a debug line, a header line, or any other line (group 13), then
# the debug lines that follow it (group 14: a row and its debug prints make one match, not two). Every match
# succeeds where it starts and ends where the next one starts: each line is read once (linear).
_LINES = re.compile(
    "\n(?:" + "|".join((_ROW_LINE, _DEBUG_LINE, *_HEADERS, "([^\n]*)")) + ")"
    + f"((?:\n{_DEBUG_LINE.replace('([A-Za-z])', '[A-Za-z]')})*)"
)
_STRETCH = 1 << 18  # characters read by one findall(): what it returns stays small (and in cache)


class _Wrong(dict[str, int | None]):
    """#wrong texts and their values, as _row() reads them (a file holds a few distinct texts)."""

    def __missing__(self, text: str) -> int | None:
        value = self[text] = None if text == "N/A" else int(float(text))
        return value


def _read_fast(text: str, reader: _Reader) -> None:
    """What _read_lines() reads: most lines read a stretch at a time (above), the others by reader.step()."""
    first = text.find("\n")
    reader.step(text if first < 0 else text[:first], 1)
    limit = len(text) - 1 if text.endswith("\n") else len(text)  # the last line break ends the last line
    pos, number = first, 2  # the line break before the next line to read, and that line's number
    wrongs = _Wrong()
    while 0 <= pos < limit:
        stop = text.find("\n", pos + _STRETCH)
        stop = limit if stop < 0 or stop > limit else stop
        number = _read_stretch(_LINES.findall(text, pos, stop), number, reader, wrongs)
        pos = stop


def _read_stretch(found: list[tuple[str, ...]], number: int, reader: _Reader, wrongs: _Wrong) -> int:
    """Read _LINES's matches, the first line numbered `number`; returns the number of the line after them."""
    sizes, sides, debug, starting, nthread, rank, host, average, concluded, others, following = zip(*found, strict=True)
    count = len(found)
    # the line of each match: one line before it a match, and the debug lines that followed
    after = list(map(str.count, following, itertools.repeat("\n"))) if any(following) else [0] * count
    lines: list[int] = list(map(operator.add, range(number, number + count), itertools.accumulate(after, initial=0)))
    # each row's 8 columns after its root, as _ROW_LINE took them (white space between them, none within)
    words = " ".join(itertools.compress(sides, sizes)).split()
    # in NcclRow's field order: size, time algbw busbw out of place and in place, #wrong of each, line
    table = zip(
        map(int, itertools.compress(sizes, sizes)), *(map(float, words[at::8]) for at in (0, 1, 2, 4, 5, 6)),
        map(wrongs.__getitem__, words[3::8]), map(wrongs.__getitem__, words[7::8]), itertools.compress(lines, sizes),
        strict=True,
    )
    rows: list[NcclRow] = list(map(tuple.__new__, itertools.repeat(NcclRow), table))  # NcclRow._make(), in C
    # the lines that are neither rows nor debug lines, in order, each after the rows before it
    row_at = list(itertools.compress(range(count), sizes))
    done = 0
    for index in itertools.compress(range(count), map(operator.not_, map(operator.concat, sizes, debug))):
        before = bisect.bisect_left(row_at, index, done)
        if before > done:
            reader.add_rows(rows[done:before])
            done = before
        line = lines[index]
        if rank[index]:
            reader.rank(rank[index], host[index], line)
        elif starting[index]:
            reader.begin(starting[index], line)
        elif average[index]:
            reader.average(average[index], line)
        elif concluded[index]:
            named = _CONCLUDED.search(concluded[index])
            reader.conclude(line, named.group(1) if named else None)
        elif nthread[index]:
            if reader.after_results():
                reader.begin(None, line)
        else:
            reader.step(others[index], line)
    if done < len(rows):
        reader.add_rows(rows[done:])
    return lines[-1] + after[-1] + 1


def _without_per_iteration(tokens: list[str], number: int, display: str) -> list[str]:
    """A per-iteration row's 13 columns of a plain one, its i_* statistics checked as numbers and set aside."""
    for at, name in zip((9, 10, 11, 12, 17, 18, 19, 20), _PER_ITERATION * 2, strict=True):
        if not to_float(tokens[at], file=display, line=number, field=name, hint=_HINT) >= 0:
            raise EvidenceError(display, f"expected a non-negative {name}, got {tokens[at]}. {_HINT}", line=number,
                                field=name)
    return tokens[:9] + tokens[13:17]


def _checked_row(tokens: list[str], number: int, display: str) -> NcclRow:
    if len(tokens) > 13:
        raise EvidenceError(
            display,
            f"expected at most 13 columns in a result row, got {len(tokens)}. {_HINT}",
            line=number,
            field="row",
        )
    side = tokens[-8:]

    def num(text: str, name: str) -> float:
        value = to_float(text, file=display, line=number, field=name, hint=_HINT)
        if value < 0:
            raise EvidenceError(
                display, f"expected a non-negative {name}, got {value}. {_HINT}", line=number, field=name
            )
        return value

    def wrong(text: str, name: str) -> int | None:
        if text == "N/A":
            return None
        return int(to_float(text, file=display, line=number, field=name, hint=_HINT))

    return NcclRow(
        size_bytes=to_int(tokens[0], file=display, line=number, field="size", hint=_HINT),
        time_us_oop=num(side[0], "time"),
        algbw_oop=num(side[1], "algbw"),
        busbw_oop=num(side[2], "busbw"),
        wrong_oop=wrong(side[3], "#wrong"),
        time_us_ip=num(side[4], "time"),
        algbw_ip=num(side[5], "algbw"),
        busbw_ip=num(side[6], "busbw"),
        wrong_ip=wrong(side[7], "#wrong"),
        line=number,
    )


# nccl-tests' `-J FILE.json` output (src/util.cu, JSON_FILE_VERSION 1, and 2 since its per-iteration timing: the
# config's "per_iter_timing" and "parallel_init", and with that timing "out_of_place_per_iter" and
# "in_place_per_iter" objects in each result, which are not read), one object per run of a test binary, written
# on one line without spaces: {"version":1,"start_time":"...","args":["<path>/all_reduce_perf",...],"env":[...],
# "nccl_version":N,"config":{"nthreads":T,"ngpus":G,...,"devices":[{"rank":R,"hostname":H,...}, one per process]},
# "results":[{"size":B,"count":C,"type":...,"redop":...,"root":...,"out_of_place":{"time"|"cpu_time":us,"alg_bw":x,
# "bus_bw":x,"nwrong":x|null}|null,"in_place":{...},"actual_iterations":N,"experiment_name":...}],
# "out_of_bounds":{...},"average_bus_bandwidth":{"bandwidth":x,"okay":...},"errors":[...],"end_time":"..."}.
# A number it could not print is the string "nan". A run that aborts leaves the document unfinished.
JSON_HEAD = re.compile(r'\{\s*"version"\s*:\s*\d+\s*,\s*"start_time"\s*:\s*"[^"]*"\s*,\s*"args"\s*:\s*\[')
_JSON_VERSIONS = (1, 2)
_ARGV0 = re.compile(r'"args"\s*:\s*\[\s*"([^"]*)"')


def _parse_json(data: bytes, display: str) -> NcclTestsResult:
    """A `-J` JSON output's one test (above): each row at the line its entry of `results` starts on (line 1 for all
    in the one line nccl-tests writes, each its own in a document pretty-printed since), its ranks (each process's
    devices entry names its first rank: processes x threads x GPUs per thread) and hosts, its average as printed.
    An unfinished document (the run aborted) is an aborted test, as text without its average is; any other JSON is
    a located error."""
    try:
        doc = json_of(data, display)
    except EvidenceError as exc:
        text = data.decode("utf-8", errors="replace").rstrip()
        if "expected valid JSON" not in str(exc) or JSON_HEAD.match(text) is None or not _ends_unfinished(text):
            raise
        argv0 = _ARGV0.search(text)
        collective = _collective_of(None if argv0 is None else _BINARY.search(argv0.group(1)), display)
        return NcclTestsResult(file=display, tests=[CollectiveTest(
            collective=collective, ranks=None, rows=[], reported_avg_busbw=None, line=1, last_line=1,
            error="aborted: the JSON output ends before its average_bus_bandwidth (the run was cut short)")])
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        got = "an object without a 'results' list" if isinstance(doc, dict) else f"a JSON {type(doc).__name__}"
        raise EvidenceError(display, f"expected nccl-tests `-J` JSON (an object with 'version', 'args', 'config' and "
                                     f"'results'), got {got}. {_HINT}", field="results")
    if doc.get("version") not in _JSON_VERSIONS or isinstance(doc.get("version"), bool):
        raise EvidenceError(display, "expected nccl-tests JSON version 1 or 2 (nccl-tests' util.cu), got "
                                     f"{short_repr(doc.get('version'))}. {_HINT}", field="version")
    args = doc.get("args")
    program = args[0] if isinstance(args, list) and args and isinstance(args[0], str) else ""
    collective = _collective_of(_BINARY.search(program), display)
    devices = json_devices(doc.get("config"), display)
    ranks, hosts = (len(devices) or None), tuple(host for _, host, _, _, _ in devices)
    text = data.decode("utf-8-sig")  # as json_of() read it
    at = entry_lines(text, "results", doc["results"])
    rows = [_json_row(result, index, display, line)
            for index, (result, line) in enumerate(zip(doc["results"], at, strict=True), start=1)]
    average = doc.get("average_bus_bandwidth")
    reported = (to_float(average.get("bandwidth"), file=display, line=None, field="average_bus_bandwidth.bandwidth",
                         hint=_HINT) if isinstance(average, dict) and "bandwidth" in average else None)
    said = doc.get("errors")  # ncclGetLastError()'s text, "" when none
    errors = [e for e in said if isinstance(e, str) and e.strip()] if isinstance(said, list) else []
    error = (None if rows and reported is not None else
             "aborted: no results" if not rows else "aborted: no average_bus_bandwidth")
    return NcclTestsResult(file=display, tests=[CollectiveTest(
        collective=collective, ranks=ranks, rows=rows if error is None else [], reported_avg_busbw=reported,
        error=error, line=1, last_line=line_total(text.rstrip()) or 1, hosts=hosts,
        cause=errors[0][:200] if errors and error is not None else None)])


def entry_lines(text: str, key: str, entries: list[object]) -> list[int]:
    """The line each of `entries`, the list under `key` in the JSON `text`, starts on: walked entry by entry from
    the `key` whose list holds those entries (a string value cannot be followed by ':'); 1 for each where no
    key's does (line 1 is every entry's in the one line nccl-tests writes)."""
    decoder = json.JSONDecoder()
    for found in re.finditer(rf'"{re.escape(key)}"\s*:\s*\[', text):
        pos, line, counted_to, lines = found.end(), 1 + text.count("\n", 0, found.end()), found.end(), []
        for expected in entries:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            try:
                value, end = decoder.raw_decode(text, pos)
            except ValueError:
                break
            if value != expected:
                break
            line += text.count("\n", counted_to, pos)
            lines.append(line)
            counted_to, pos = pos, end
        else:
            return lines
    return [1] * len(entries)


def _ends_unfinished(text: str) -> bool:
    """True when `text` is a JSON document cut short: it fails only where it ends."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg.startswith("Unterminated string"):  # told where the string starts: it runs to the end
            return text.find('"', exc.pos + 1) < 0
        return exc.pos >= len(text)
    except ValueError:
        return False
    return False


def _collective_of(found: re.Match[str] | None, display: str) -> str:
    """The collective a test binary's name (`.../all_reduce_perf`) says; else the file name's; else 'unknown'."""
    if found is None:
        found = _BINARY.search(display.rsplit("/", 1)[-1])
    return found.group(1) if found is not None else "unknown"


def json_devices(config: object, display: str) -> list[tuple[int, str, int, str, int]]:
    """(rank, host, local device, GPU name, index of its devices entry) of every rank of a `-J` output's config, in
    rank order: each process's devices entry is its first rank's (nccl-tests parses one line of the process's
    lines), its other threads x GPUs ranks follow on its host's next devices, the first one's GPU name taken for
    theirs. Empty without devices."""
    if not isinstance(config, dict) or not isinstance(config.get("devices"), list):
        return []
    each = 1
    for key in ("nthreads", "ngpus"):
        value = config.get(key)
        each *= value if isinstance(value, int) and value > 0 else 1
    out: list[tuple[int, str, int, str, int]] = []
    for entry, device in enumerate(config["devices"]):
        rank, host, local, gpu = ((device.get(k) for k in ("rank", "hostname", "device", "device_info"))
                                  if isinstance(device, dict) else (None, None, None, None))
        if not isinstance(rank, int) or not isinstance(host, str):
            raise EvidenceError(display, f"expected each config.devices entry to hold a rank and a hostname, got "
                                         f"{short_repr(device)}. {_HINT}", field="config.devices")
        first = local if isinstance(local, int) else 0
        out += [(rank + i, host, first + i, gpu if isinstance(gpu, str) else "", entry) for i in range(each)]
    return sorted(out)


def _json_row(result: object, index: int, display: str, line: int) -> NcclRow:
    """One entry of `results` as a row (the `index`th, at `line`); a missing or bad value is an error naming its line
    and field."""
    where = f"results[{index - 1}]"
    if not isinstance(result, dict):
        raise EvidenceError(display, f"expected {where} to be an object, got {short_repr(result)}. {_HINT}",
                            line=line, field="results")
    sides: list[tuple[float, float, float, int | None]] = []
    for key in ("out_of_place", "in_place"):
        side = result.get(key)
        if not isinstance(side, dict):
            raise EvidenceError(display, f"expected {where}.{key} to be an object (time, alg_bw, bus_bw, nwrong), got "
                                         f"{short_repr(side)}. {_HINT}", line=line, field=f"{where}.{key}")
        timed = "cpu_time" if "cpu_time" in side and "time" not in side else "time"
        values = []
        for name in (timed, "alg_bw", "bus_bw"):
            value = to_float(side.get(name), file=display, line=line, field=f"{where}.{key}.{name}", hint=_HINT)
            if value < 0:
                raise EvidenceError(display, f"expected a non-negative {name}, got {value}. {_HINT}", line=line,
                                    field=f"{where}.{key}.{name}")
            values.append(value)
        wrong = side.get("nwrong")
        count = None if wrong is None else to_float(wrong, file=display, line=line, field=f"{where}.{key}.nwrong",
                                                    hint=_HINT)
        sides.append((values[0], values[1], values[2], None if count is None else int(count)))
    (t_o, a_o, b_o, w_o), (t_i, a_i, b_i, w_i) = sides
    size = to_int(result.get("size"), file=display, line=line, field=f"{where}.size", hint=_HINT)
    return NcclRow(size, t_o, a_o, b_o, t_i, a_i, b_i, w_o, w_i, line)


