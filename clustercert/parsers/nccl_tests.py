"""nccl-tests output (text, several tests per file, or `-J` JSON): per-size bus bandwidth with its line."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import open_regular
from clustercert.parsers.common import DEFAULT_LIMIT, read_json, to_float, to_int
from clustercert.parsers.training import read_text_lines

__all__ = ["CollectiveTest", "NcclRow", "NcclTestsResult", "parse_nccl_tests"]

FORMAT = "nccl-tests"
_HINT = "Check that the file is nccl-tests output as the tool wrote it; re-run nccl-tests if it was cut short."
_COLLECTIVES = (
    "all_reduce|all_gather|reduce_scatter|alltoall|sendrecv|broadcast|reduce|gather|scatter|hypercube"
)
_BINARY = re.compile(rf"\b({_COLLECTIVES})_perf(?:_mpi)?\b")
_STARTING = re.compile(rf"#\s*Collective test starting:\s*({_COLLECTIVES})_perf")
_CONCLUDED = re.compile(r"#\s*Collective test concluded")
_VERSION = re.compile(r"#\s*nccl-tests version")
_NTHREAD = re.compile(r"#\s*nThread\s+\d+")
_RANK = re.compile(r"#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\b(?:\s+\d+\s+on\s+(\S+))?")
# the root cause nccl-tests prints when a test aborts: `host: Test NCCL failure common.cu:401 'remote process ...'`
_CAUSE = re.compile(r"(?:NCCL|CUDA) failure\s+\S+\s+'([^']{1,200})'")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\S+)")
# MPI / srun rank tags: `[1,0]<stdout>:`, `0: ` (srun -l), `rank0: `
_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s|rank\d+:\s?)")
# an NCCL debug print (`host:pid:tid [dev] NCCL INFO ...`) that may start in the middle of a table row
_DEBUG = re.compile(
    r"(?<!\S)\S*:\d+:\d+\s+\[\d+\]\s+NCCL\s+(?:INFO|WARN|TRACE|ERROR).*$|\bNCCL (?:INFO|WARN|TRACE)\b.*$"
)
_ERROR = re.compile(
    r"(NCCL failure|Test failure|Test NCCL failure|CUDA failure|Aborted|abort|Segmentation fault"
    r"|error|FAILED)",
    re.IGNORECASE,
)
_ROW_START = re.compile(r"^\s*\d[\d.eE+]*\s+\d")
_ROW_MIN = 11  # size count type [redop] [root] + 4 out-of-place + 4 in-place; old versions lack root


@dataclass(frozen=True)
class NcclRow:
    """One message size of one test, with the line where its row ends."""

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
    """One collective test of a file; `error` set (rows empty) when it aborted or was cut short."""

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
            "line": self.line,
            "last_line": self.last_line,
        }


@dataclass(frozen=True)
class NcclTestsResult:
    """Every test found in one nccl-tests output file."""

    file: str
    tests: list[CollectiveTest] = field(default_factory=list)

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
    error: str | None = None
    last_line: int = 0


def parse_nccl_tests(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> NcclTestsResult:
    """Every collective test in the file (text or `-J` JSON), in file order.

    The collective comes from `# Collective test starting`, else from a `*_perf` command or binary name seen
    before the test, else from the file name. A test without its `# Avg bus bandwidth` line or without rows
    aborted: its `error` is set and it has no rows (a failed measurement, never a zero).
    """
    with open_regular(path, display, limit=limit) as handle:  # never read whole, never block on a FIFO
        head = handle.read(1)
    if head in (b"{", b"["):
        return _parse_json(path, display, limit)
    lines = read_text_lines(path, display, limit=limit)
    name_hint = _BINARY.search(path.name)
    last_binary: str | None = name_hint.group(1) if name_hint else None
    tests: list[CollectiveTest] = []
    current: _Open | None = None
    pending: tuple[str, int] | None = None  # a row cut by a debug print, waiting for its remainder
    last_error: tuple[str, int] | None = None  # the first error line of the open test, with its number

    def close(test: _Open, end: int) -> None:
        error = test.error
        first = (test.cause_text, test.cause[1]) if test.cause and test.cause_text else last_error
        said = f": line {first[1]} says {first[0]!r}" if first else ": the log ends without an error message"
        if error is None and test.avg is None:
            error = "aborted before its '# Avg bus bandwidth' line" + said
        if error is None and not test.rows:
            error = "aborted: no result rows" + said
        hosts = tuple(test.hosts[r] for r in sorted(test.hosts)) if len(test.hosts) == len(test.ranks) else ()
        tests.append(
            CollectiveTest(
                collective=test.collective or last_binary or "unknown",
                ranks=len(test.ranks) or None,
                rows=[] if error else test.rows,
                reported_avg_busbw=test.avg,
                error=error,
                line=test.line,
                last_line=max(end, test.line),
                hosts=hosts,
                cause=test.cause[0] if test.cause else None,
                cause_line=test.cause[1] if test.cause else None,
            )
        )

    def note_error(text: str, number: int) -> None:
        nonlocal last_error
        if current is None:
            return
        cause = _CAUSE.search(text)
        if cause and current.cause is None:
            current.cause = (cause.group(1).strip(" /"), number)
            current.cause_text = text.strip()[:160]
        if last_error is None:
            last_error = (text.strip()[:160], number)

    for number, raw in enumerate(lines, start=1):
        # each pattern is tried only on lines that hold the literal it needs (an `in` test is C speed; a search
        # is a call): _PREFIX.sub(count=1) is a match at the start, both _DEBUG forms need "NCCL"
        prefix = _PREFIX.match(raw)
        text = raw[prefix.end():] if prefix else raw
        cleaned = (_DEBUG.sub("", text) if "NCCL" in text else text).rstrip()
        if pending is not None and cleaned.strip() and not cleaned.lstrip().startswith("#"):
            if len(cleaned.split()) < _ROW_MIN:
                cleaned = pending[0] + " " + cleaned.strip()
            pending = None
        if not cleaned.strip():
            if (text.strip() and current is not None and "NCCL INFO" not in text and _may_say_error(text)
                    and _ERROR.search(text)):
                note_error(text, number)
            continue
        starting = _STARTING.search(cleaned) if "Collective test starting" in cleaned else None
        if (
            starting
            or ("nccl-tests version" in cleaned and _VERSION.search(cleaned))
            or ("nThread" in cleaned and _NTHREAD.search(cleaned)
                and (current is None or current.rows or current.avg is not None))
        ):
            if starting and current is not None and current.collective is None and not current.rows:
                current.collective = starting.group(1)
                continue
            if current is not None:
                close(current, number - 1)
            current = _Open(collective=starting.group(1) if starting else None, line=number)
            last_error = None
            continue
        binary = _BINARY.search(cleaned) if "_perf" in cleaned else None
        if binary and not cleaned.lstrip().startswith("#"):
            last_binary = binary.group(1)
            if current is not None and current.collective is None and not current.rows:
                current.collective = last_binary
            continue
        if current is None:
            continue
        if "Collective test concluded" in cleaned and _CONCLUDED.search(cleaned):
            close(current, number)
            current = None
            continue
        rank = _RANK.search(cleaned) if "Rank" in cleaned else None
        if rank:
            index = int(rank.group(1))
            current.ranks.add(index)
            if rank.group(2):
                current.hosts[index] = rank.group(2)
            continue
        avg = _AVG.search(cleaned) if "Avg bus bandwidth" in cleaned else None
        if avg:
            current.avg = to_float(
                avg.group(1), file=display, line=number, field="Avg bus bandwidth", hint=_HINT
            )
            current.last_line = number
            continue
        if cleaned.lstrip().startswith("#"):
            continue
        if _ROW_START.match(cleaned):
            tokens = cleaned.split()
            if len(tokens) < _ROW_MIN:
                pending = (cleaned, number)
                continue
            current.rows.append(_row(tokens, number, display))
            continue
        if _may_say_error(cleaned) and _ERROR.search(cleaned):
            note_error(cleaned, number)
    if pending is not None and current is not None:
        raise EvidenceError(
            display,
            f"expected a complete result row, got {pending[0].strip()[:60]!r} (file cut short). {_HINT}",
            line=pending[1],
            field="row",
        )
    if current is not None:
        close(current, len(lines))
    if not tests:
        raise EvidenceError(
            display,
            f"expected nccl-tests output (a '# nThread' or '# Collective test starting' "
            f"header), found none. {_HINT}",
        )
    return NcclTestsResult(file=display, tests=tests)


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
            row = _new(NcclRow)  # NcclRow(...) without the frozen dataclass's per-field __init__
            row.__dict__.update(size_bytes=size, time_us_oop=time_oop, algbw_oop=algbw_oop, busbw_oop=busbw_oop,
                                wrong_oop=wrong_oop, time_us_ip=time_ip, algbw_ip=algbw_ip, busbw_ip=busbw_ip,
                                wrong_ip=wrong_ip, line=number)
            return row
    return _checked_row(tokens, number, display)


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


def _parse_json(path: Path, display: str, limit: int) -> NcclTestsResult:
    """nccl-tests `-J` output: an object (or list of objects) with `collective`/`name`,
    `nranks` and `results`, each result holding `size` and `out_of_place`/`in_place` objects
    with `time`, `algbw`, `busbw`, `wrong`."""
    doc = read_json(path, display, limit=limit)
    items = doc if isinstance(doc, list) else doc.get("tests", [doc]) if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise EvidenceError(
            display,
            f"expected nccl-tests JSON (an object with 'results'), got {type(doc).__name__}. {_HINT}",
            field="results",
        )
    tests: list[CollectiveTest] = []
    for index, item in enumerate(items, start=1):
        if not isinstance(item, dict) or not isinstance(item.get("results"), list):
            raise EvidenceError(
                display, f"expected test {index} to hold a 'results' list, got none. {_HINT}", field="results"
            )
        name = str(item.get("collective") or item.get("name") or item.get("test") or "unknown")
        match = re.search(_COLLECTIVES, name)
        rows: list[NcclRow] = []
        for row_index, res in enumerate(item["results"], start=1):
            if not isinstance(res, dict):
                raise EvidenceError(
                    display,
                    f"expected result {row_index} to be an object. {_HINT}",
                    line=row_index,
                    field="results",
                )
            sides: list[tuple[float, float, float, int | None]] = []
            for key in ("out_of_place", "in_place"):
                side = res.get(key)
                if not isinstance(side, dict):
                    raise EvidenceError(
                        display,
                        f"expected '{key}' object in result {row_index}, got none. {_HINT}",
                        line=row_index,
                        field=key,
                    )
                t, a, b = (
                    to_float(side.get(k), file=display, line=row_index, field=f"{key}.{k}", hint=_HINT)
                    for k in ("time", "algbw", "busbw")
                )
                wrong = side.get("wrong")
                whole = isinstance(wrong, int) and not isinstance(wrong, bool)
                sides.append((t, a, b, wrong if whole else None))
            o, i = sides
            rows.append(
                NcclRow(
                    size_bytes=to_int(
                        res.get("size"), file=display, line=row_index, field="size", hint=_HINT
                    ),
                    time_us_oop=o[0],
                    algbw_oop=o[1],
                    busbw_oop=o[2],
                    wrong_oop=o[3],
                    time_us_ip=i[0],
                    algbw_ip=i[1],
                    busbw_ip=i[2],
                    wrong_ip=i[3],
                    line=row_index,
                )
            )
        avg_raw = item.get("avg_bus_bandwidth", item.get("avg_busbw"))
        avg = (
            to_float(avg_raw, file=display, line=None, field="avg_bus_bandwidth", hint=_HINT)
            if avg_raw is not None
            else None
        )
        ranks = item.get("nranks", item.get("ranks"))
        tests.append(
            CollectiveTest(
                collective=match.group(0) if match else name,
                ranks=ranks if isinstance(ranks, int) else None,
                rows=rows,
                reported_avg_busbw=avg,
                error=None if rows else "aborted: no results",
                line=1,
                last_line=len(rows),
            )
        )
    return NcclTestsResult(file=display, tests=tests)


def looks_like_json(text: str) -> bool:
    """True when the text is nccl-tests JSON (used by format detection)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict | list) and "results" in text
