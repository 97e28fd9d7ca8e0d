"""The column-by-column readings of sacct dumps and event logs (the parser bench's 50 MB/s) read exactly what the
line-by-line readings read: the same records, values, types, lines, warnings and located errors."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import events, sacct, training
from clustercert.parsers.events import EventType, parse_events
from clustercert.parsers.sacct import SacctJob, SacctStep, parse_sacct
from clustercert.parsers.training import read_text

REPO = Path(__file__).resolve().parents[3]
REAL_SACCT_FIELDS = (
    "State,JobID,ReqCPUS,ReqMem,ReqNodes,Constraints,Submit,Eligible,Start,Elapsed,Suspended,End,ExitCode,"
    "DerivedExitCode,AllocNodes,NCPUS,MaxDiskRead,MaxDiskWrite,MaxPages,MaxRSS,MaxVMSize,CPUTime,UserCPU,"
    "SystemCPU,TotalCPU"
).split(",")


def _outcome(read: Callable[[], Any]) -> tuple[str, Any]:
    """What a reading gives: its result, or its error's type, text, line and field."""
    try:
        return "result", read()
    except EvidenceError as exc:
        return "error", (type(exc), str(exc), exc.file, exc.line, exc.field)


def _attributes(record: object) -> list[tuple[str, str]]:
    """Every attribute in order with its value's repr (1 and 1.0 differ here, as in the JSON written)."""
    fields = record._asdict() if isinstance(record, tuple) else vars(record)  # an Event is a named tuple
    return [(key, repr(value)) for key, value in fields.items()]


def _assert_same_sacct(fast: tuple[str, Any], slow: tuple[str, Any]) -> None:
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "error":
        assert fast[1] == slow[1]
        return
    got, want = fast[1], slow[1]
    assert got == want
    assert repr(got.to_json()) == repr(want.to_json())
    assert (got.fields, got.warnings) == (want.fields, want.warnings)
    for job, other in zip(got.jobs, want.jobs, strict=True):
        assert _attributes(job) == _attributes(other)
        for step, twin in zip(job.steps, other.steps, strict=True):
            assert _attributes(step) == _attributes(twin)


def _assert_same_events(fast: tuple[str, Any], slow: tuple[str, Any]) -> None:
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "error":
        assert fast[1] == slow[1]
        return
    got, want = fast[1], slow[1]
    assert got == want
    assert repr(got.to_json()) == repr(want.to_json())
    for event, other in zip(got.events, want.events, strict=True):
        assert _attributes(event) == _attributes(other)
        assert type(event.type) is EventType and event.ts.utcoffset() == other.ts.utcoffset()


def _compare_sacct(path: Path, monkeypatch: pytest.MonkeyPatch, **options: Any) -> bool:
    """Asserts parse_sacct() reads `path` as the line-by-line reading does; whether the fast reading read it."""
    fields, zone = options.get("fields"), options.get("timezone", "UTC")
    # the whole text as one piece: the same records as the file's pieces one at a time
    fast = sacct._sacct_fast([read_text(path, path.name, limit=1 << 30)], path.name, fields, zone, ZoneInfo(zone))
    got = _outcome(lambda: parse_sacct(path, path.name, **options))
    with monkeypatch.context() as patch:
        patch.setattr(sacct, "_sacct_fast", lambda *args: None)
        want = _outcome(lambda: parse_sacct(path, path.name, **options))
    _assert_same_sacct(got, want)
    if fast is not None:
        _assert_same_sacct(("result", fast), want)
    return fast is not None


def _compare_events(path: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    fast = events._events_fast(read_text(path, path.name, limit=1 << 30), path.name)
    got = _outcome(lambda: parse_events(path, path.name))
    with monkeypatch.context() as patch:
        patch.setattr(events, "_events_fast", lambda *args: None)
        want = _outcome(lambda: parse_events(path, path.name))
    _assert_same_events(got, want)
    if fast is not None:
        _assert_same_events(("result", fast), want)
    return fast is not None


# Every kind of text each field takes (and, rarer, texts it refuses)
STATES = ["COMPLETED", "CANCELLED by 123", "FAILED", "RUNNING", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "completed",
          "CANCELLED+", " PENDING ", "REQUEUED", "PREEMPTED"]
BAD_STATES = ["BOGUS", "", "  "]
ELAPSED = ["1-02:03:04", "00:05:01", "05:01", "05:01.250", "", " ", "12:00:00", "0-00:00:00", "2-00:00:00.5"]
BAD_ELAPSED = ["1:2:3:4", "abc", "1-", "1-2-3", "1234567890:00"]
TIMES = ["2024-01-02T03:04:05", "2024-01-02T03:04:05+02:00", "Unknown", "None", "", "N/A", " 2024-03-10T02:30:00 ",
         "2024-03-31T02:30:00", "2022-07-05T16:17:52.250", "2024-01-02 03:04:05Z"]
BAD_TIMES = ["2024-13-01T00:00:00", "yesterday", "2024-01-02T25:00:00"]
OTHERS = ["node[01-04]", "", "gpu-\u00e9\u4e2d", "0:0", " 1:0 ", "a.b"]


def _cell(rng: random.Random, column: str, bad: float) -> str:
    pools = {"State": (STATES, BAD_STATES), "Elapsed": (ELAPSED, BAD_ELAPSED), "Start": (TIMES, BAD_TIMES),
             "End": (TIMES, BAD_TIMES), "Submit": (TIMES, BAD_TIMES)}
    good, wrong = pools.get(column, (OTHERS, OTHERS))
    return rng.choice(wrong if rng.random() < bad else good)


def _sacct_dump(rng: random.Random) -> tuple[str, list[str] | None]:
    """A dump with random fields, rows and (in half the dumps) the irregular lines sacct output may hold."""
    columns = ["JobID", "State", *rng.sample(["Elapsed", "Start", "End", "Submit", "NodeList", "ExitCode"],
                                             rng.randint(0, 6))]
    rng.shuffle(columns)
    odd = rng.random() < 0.5
    repeat_cells = rng.random() < 0.5  # the bench's shape: one text per field on every row
    rows: list[list[str]] = []
    job = rng.randint(1, 10**6)
    for _ in range(rng.randint(1, 40)):
        job += rng.randint(1, 3)
        job_id = str(job) if rng.random() < 0.9 else f"{job}_{rng.randint(0, 9)}"
        ids = [job_id] + [f"{job_id}.{s}" for s in rng.sample(["batch", "extern", "0", "1", "2"], rng.randint(0, 3))]
        if odd and rng.random() < 0.03:
            ids = ids * 2  # `sacct --duplicates`: a requeued job again, with its steps
        for record_id in ids:
            if odd and rng.random() < 0.03:
                record_id = f" {record_id} "
            rows.append([record_id if c == "JobID" else _cell(rng, c, 0.0) for c in columns])
    if repeat_cells:
        first = rows[0]
        rows = [[r[i] if c == "JobID" else first[i] for i, c in enumerate(columns)] for r in rows]
    if odd and rng.random() < 0.5:  # one text the field refuses (on a step row, a Submit is not read)
        row, column = rng.randrange(len(rows)), rng.randrange(len(columns))
        if columns[column] != "JobID":
            rows[row][column] = _cell(rng, columns[column], 1.0)
    lines = ["|".join(r) for r in rows]
    if odd:
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(lines) + 1)
            kind = rng.choice(["blank", "space", "comment", "comment-bars", "short", "long", "swap", "empty-id",
                               "orphan"])
            if kind == "blank":
                lines.insert(at, "")
            elif kind == "space":
                lines.insert(at, " \t ")
            elif kind == "comment":
                lines.insert(at, "# a note")
            elif kind == "comment-bars":
                lines.insert(at, "  #" + "|" * (len(columns) - 1))
            elif lines and kind == "short" and len(columns) > 2:
                i = rng.randrange(len(lines))
                lines[i] = "|".join(lines[i].split("|")[: rng.randint(2, len(columns) - 1)])
            elif lines and kind == "long":
                i = rng.randrange(len(lines))
                lines[i] += "|extra"
            elif len(lines) > 1 and kind == "swap":
                i = rng.randrange(len(lines) - 1)
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
            elif kind == "empty-id":
                lines.insert(at, "|".join("" if c == "JobID" else "COMPLETED" for c in columns))
            elif kind == "orphan":
                lines.insert(at, "|".join("99.batch" if c == "JobID" else "COMPLETED" for c in columns))
    if rng.random() < 0.2:
        lines = [line + "|" for line in lines]  # `--parsable`
    header = rng.random() < 0.5
    if header:
        lines.insert(0, "|".join(f" {c} " if rng.random() < 0.1 else c for c in columns))
    if rng.random() < 0.3:
        lines[:0] = rng.choice([[""], ["# dumped by sacct"], ["", "# a|b", " "]])
    end = rng.choice(["\n", "\r\n"])
    text = end.join(lines) + (end if rng.random() < 0.8 else "")
    return text, (None if header and rng.random() < 0.5 else columns)


@pytest.mark.parametrize("seed", range(8))
def test_sacct_reads_random_dumps_as_line_by_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  seed: int) -> None:
    rng = random.Random(seed)
    fast = 0
    for case in range(150):
        text, fields = _sacct_dump(rng)
        path = tmp_path / f"sacct-{case}.txt"
        path.write_bytes(text.encode())
        # small blocks: a job's steps in a later block than the job, a block of comment lines only
        monkeypatch.setattr(sacct, "_BLOCK", rng.choice([1, 7, 64, 300, 1 << 16]))
        zone = rng.choice(["UTC", "Europe/Paris", "America/New_York"])
        fast += _compare_sacct(path, monkeypatch, fields=fields, timezone=zone)
    assert fast > 40  # the fast reading read many of them (the others: line by line)


def test_sacct_fast_reading_reads_the_bench_shape_with_hand_computed_values(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rows = "".join(
        f"COMPLETED|{i}|2024-01-02T03:04:05|2024-01-02T03:04:05|1-02:03:04|2024-01-03T05:07:09\n"
        f"COMPLETED|{i}.batch|2024-01-02T03:04:05|2024-01-02T03:04:05|1-02:03:04|2024-01-03T05:07:09\n"
        for i in range(5000)
    )
    path = tmp_path / "sacct.txt"
    path.write_text(rows)
    fields = ["State", "JobID", "Submit", "Start", "Elapsed", "End"]
    assert _compare_sacct(path, monkeypatch, fields=fields)
    result = parse_sacct(path, "sacct.txt", fields=fields)
    assert len(result.jobs) == 5000 and result.warnings == []
    job = result.jobs[4321]
    assert (job.job_id, job.line, job.incarnation, job.state, job.submit) == (
        "4321", 8643, 1, "COMPLETED", "2024-01-02T03:04:05+00:00")
    assert job.elapsed_s == 1 * 86400 + 2 * 3600 + 3 * 60 + 4 and type(job.elapsed_s) is int
    (step,) = job.steps
    assert (step.step_id, step.line, step.end) == ("4321.batch", 8644, "2024-01-03T05:07:09+00:00")
    assert not hasattr(step, "fields") and not hasattr(job, "fields")  # the cells no field reads are not kept
    assert isinstance(job, SacctJob) and isinstance(step, SacctStep)  # records made in C are the classes' own
    assert job.to_json()["steps"] == [step.to_json()] and job._replace(incarnation=2).incarnation == 2
    # made by hand without steps, each job has a list of its own (not one shared default)
    first, second = (SacctJob("1", "COMPLETED", "COMPLETED", None, None, None, None, 1) for _ in range(2))
    first.steps.append(SacctStep("1.0", "COMPLETED", "COMPLETED", None, None, None, 2))
    assert (second.steps, second.incarnation) == ([], 1)


def test_sacct_fast_reading_header_states_times_and_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sacct.txt"
    path.write_bytes(
        b"\r\n# dumped with --parsable\r\n"
        b"JobID|State|Elapsed|Start|End|Submit|\r\n"
        b"845|CANCELLED by 123|05:01.5|2024-01-02T03:04:05|Unknown|2024-01-02T03:00:00+02:00|\r\n"
        b"845.batch|CANCELLED|00:05:01|2024-01-02T03:04:05|None||\r\n"
        b"\r\n"
        b"845.extern|COMPLETED+|1-00:00:00|2024-07-02T03:04:05||bad time, not read on a step|\r\n"
        b"846|RUNNING||Unknown|Unknown|2024-01-02T03:00:00|\r\n"
    )
    assert _compare_sacct(path, monkeypatch, timezone="Europe/Paris")
    result = parse_sacct(path, "sacct.txt", timezone="Europe/Paris")
    assert result.fields == ["JobID", "State", "Elapsed", "Start", "End", "Submit", ""]
    first, second = result.jobs
    assert (first.state, first.state_raw, first.elapsed_s, first.line) == ("CANCELLED", "CANCELLED by 123", 301.5, 4)
    assert (first.start, first.end, first.submit) == ("2024-01-02T03:04:05+01:00", None, "2024-01-02T03:00:00+02:00")
    assert [(s.step_id, s.state, s.elapsed_s, s.start, s.line) for s in first.steps] == [
        ("845.batch", "CANCELLED", 301, "2024-01-02T03:04:05+01:00", 5),
        ("845.extern", "COMPLETED", 86400, "2024-07-02T03:04:05+02:00", 7),
    ]
    assert (second.job_id, second.elapsed_s, second.start, second.submit, second.line) == (
        "846", None, None, "2024-01-02T03:00:00+01:00", 8)


def test_sacct_job_ids_from_jobidraw_where_the_dump_has_no_jobid(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`sacct -p -o JobIDRaw,...` (an array task's own id, as scripts dump it for one id per job) reads as JobID
    does, by either reading, header or field list; the field names stay as the dump prints them. With both, JobID."""
    rows = ("1240|COMPLETED|2024-01-02T03:04:05|01:00:00|\n1240.batch|COMPLETED|2024-01-02T03:04:05|01:00:01|\n"
            "1240.0|FAILED|2024-01-02T03:04:09|00:59:55|\n1241|RUNNING|2024-01-02T04:00:00||\n")
    path = tmp_path / "sacct.txt"
    for text, fields in (("JobIDRaw|State|Start|Elapsed|\n" + rows, None),
                         (rows, ["JobIDRaw", "State", "Start", "Elapsed"])):
        path.write_text(text)
        assert _compare_sacct(path, monkeypatch, fields=fields)
        result = parse_sacct(path, "sacct.txt", fields=fields)
        assert result.fields[:4] == ["JobIDRaw", "State", "Start", "Elapsed"]
        assert [(j.job_id, j.state, [(s.step_id, s.state, s.elapsed_s) for s in j.steps]) for j in result.jobs] == [
            ("1240", "COMPLETED", [("1240.batch", "COMPLETED", 3601), ("1240.0", "FAILED", 3595)]),
            ("1241", "RUNNING", [])]
    path.write_text("JobID|JobIDRaw|State\n1234_5|1240|COMPLETED\n")
    assert [j.job_id for j in parse_sacct(path, "sacct.txt").jobs] == ["1234_5"]
    path.write_text("JobName|State\ntrain|COMPLETED\n")  # neither: no header, and said so at its line
    with pytest.raises(EvidenceError) as refused:
        parse_sacct(path, "sacct.txt")
    assert refused.value.line == 1 and "expected a header line or a field list" in str(refused.value)


@pytest.mark.parametrize(("row", "line", "field"), [
    ("12|BOGUS|2024-01-02T03:04:05", 3, "State"),
    ("12|COMPLETED|2024-13-02T03:04:05", 3, "Start"),
    ("12.batch|COMPLETED|2024-01-02T03:04:05", 3, "JobID"),
    ("12|COMPLETED|2024-01-02T03:04:05|x", 3, "row"),
    ("|COMPLETED|2024-01-02T03:04:05", 3, "JobID"),
])
def test_sacct_errors_keep_their_line_and_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row: str,
                                                line: int, field: str) -> None:
    good = "".join(f"{i}|COMPLETED|2024-01-02T03:04:05\n" for i in range(100, 3000))
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|State|Start\n1|COMPLETED|Unknown\n" + row + "\n" + good)
    _compare_sacct(path, monkeypatch)
    with pytest.raises(EvidenceError) as caught:
        parse_sacct(path, "sacct.txt")
    assert (caught.value.line, caught.value.field) == (line, field)


@pytest.mark.parametrize(("column", "text"), [
    *[("State", t) for t in BAD_STATES], *[("Elapsed", t) for t in BAD_ELAPSED],
    *[(c, t) for c in ("Start", "End", "Submit") for t in BAD_TIMES],
])
def test_sacct_each_refused_text_keeps_its_line_and_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          column: str, text: str) -> None:
    columns = ["JobID", "State", "Elapsed", "Start", "End", "Submit"]
    rows = [[f"{i}", "COMPLETED", "00:01:00", "2024-01-02T03:04:05", "Unknown", "2024-01-02T03:00:00"]
            for i in range(1, 3000)]
    rows[2000][columns.index(column)] = text
    path = tmp_path / "sacct.txt"
    path.write_text("".join("|".join(r) + "|\n" for r in rows))  # `--parsable`
    _compare_sacct(path, monkeypatch, fields=columns)
    with pytest.raises(EvidenceError) as caught:
        parse_sacct(path, "sacct.txt", fields=columns)
    assert (caught.value.line, caught.value.field) == (2001, column)


def test_sacct_parsable_row_without_its_trailing_bar_is_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [f"{i}|COMPLETED|" for i in range(1, 3000)]
    rows[1200] = "1201|COMPLETED|x"
    path = tmp_path / "sacct.txt"
    path.write_text("\n".join(rows) + "\n")
    _compare_sacct(path, monkeypatch, fields=["JobID", "State"])
    with pytest.raises(EvidenceError) as caught:
        parse_sacct(path, "sacct.txt", fields=["JobID", "State"])
    assert (caught.value.line, caught.value.field) == (1201, "row")


def test_sacct_duplicates_and_short_rows_read_line_by_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|State|Elapsed\n7|REQUEUED|00:01\n7.batch|CANCELLED|00:01\n7|COMPLETED|00:02\n"
                    "7.batch|COMPLETED\n")
    assert not _compare_sacct(path, monkeypatch)
    result = parse_sacct(path, "sacct.txt")
    assert [(j.incarnation, [s.line for s in j.steps]) for j in result.jobs] == [(1, [3]), (2, [5])]
    assert result.warnings == ["sacct.txt lines 5: expected 3 fields as the field list names, got 2; the last 1 "
                               "(Elapsed) read as empty"]


def test_sacct_bundled_dumps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped bundles' dumps (the real one: tests/real/test_real_parsers.py)."""
    bundled = sorted((REPO / "evidence").glob("*/resilience/sacct.txt"))
    assert bundled
    for path in bundled:
        assert _compare_sacct(path, monkeypatch)


# Events: values of every kind the schema takes or refuses, and lines json reads another way than orjson
GOOD_TS = ["2025-03-07T22:39:36+00:00", "2025-03-07T22:39:36Z", "2025-03-07T22:39:36.123456+05:30",
           "2025-03-07 22:39:36-07:00"]
BAD_TS = ["2025-03-07T22:39:36", "yesterday", 5, None]
STRING_VALUES: list[Any] = ["n1", "", "tr\u00e4iner \u4e2d", "a\\u0000b", None]
BAD_STRINGS: list[Any] = [1, 1.5, True, ["x"], {"a": 1}]
INT_VALUES: list[Any] = [0, 3, 2**40, 2**63 - 1, None]
BAD_INTS: list[Any] = [-1, True, 1.5, "3", 1.0, [1]]


def _event_line(rng: random.Random, bad: float) -> str:
    def pick(good: list[Any], wrong: list[Any]) -> Any:
        return rng.choice(wrong if rng.random() < bad else good)

    record: dict[str, Any] = {"ts": pick(GOOD_TS, BAD_TS),
                              "type": pick([t.value for t in EventType], ["bogus", 3, None])}
    for key in rng.sample(["node", "by", "job_id", "detail"], rng.randint(0, 4)):
        record[key] = pick(STRING_VALUES, BAD_STRINGS)
    for key in rng.sample(["gpu", "rank", "step"], rng.randint(0, 3)):
        record[key] = pick(INT_VALUES, BAD_INTS)
    if rng.random() < 0.05:
        record[rng.choice(["nodes", "note", "line", "extra"])] = rng.choice([["n1", "n2"], 1.5, None, 2**70, "x"])
    if rng.random() < 0.5:
        keys = list(record)
        rng.shuffle(keys)
        record = {k: record[k] for k in keys}
    text = json.dumps(record, separators=rng.choice([(",", ":"), (", ", ": ")]))
    text = text.replace('"a\\\\u0000b"', '"a\\u0000b"')
    if rng.random() < 0.02:
        text = text.replace("{", '{"step": 1, ', 1)  # a duplicate key: the last one counts
    return text


RAW_EVENT_LINES = [
    "", "   ", "# a comment", "  # indented comment", '\t{"ts": "2025-03-07T22:39:36Z", "type": "job_started"}  ',
    '\x0c{"ts": "2025-03-07T22:39:36Z", "type": "job_started"}\xa0',
    '{"ts": "2025-03-07T22:39:36Z", "type": "job_started", "x": NaN}',
    '{"ts": "2025-03-07T22:39:36Z", "type": "job_started", "step": 1180591620717411303424}',
    '{"ts": "2025-03-07T22:39:36Z", "type": "job_started", "big": 1180591620717411303424}',
    '{"ts": "2025-03-07T22:39:36Z", "type": "job_started", "x": 1E400}',
    '{"ts": "2025-03-07T22:39:36Z", "type": "job_started", "x": "\\ud83d"}',
    '{"ts": "2025-03-07T22:39:36Z", "type": "job_started", "x": ' + "[" * 950 + "]" * 950 + "}",
    '{"ts": "2025-03-07T22:39:36Z", "type": "job_started", "x": ' + "[" * 100 + "]" * 100 + "}",
    '{"ts": "2025-03-07T22:39:36Z", "type": "job_started"} {"a": 1}', "[1, 2]", '"text"', "{", "nul",
]


def _event_log(rng: random.Random) -> str:
    odd = rng.random() < 0.5
    lines = [_event_line(rng, 0.0) for _ in range(rng.randint(1, 60))]
    if odd and rng.random() < 0.5:  # one line with values the schema refuses
        lines[rng.randrange(len(lines))] = _event_line(rng, 0.3)
    if odd:
        for _ in range(rng.randint(1, 3)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(RAW_EVENT_LINES))
    end = rng.choice(["\n", "\r\n"])
    return end.join(lines) + (end if rng.random() < 0.8 else "")


@pytest.mark.parametrize("seed", range(8))
def test_events_read_random_logs_as_line_by_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    fast = 0
    for case in range(150):
        path = tmp_path / f"events-{case}.jsonl"
        path.write_bytes(_event_log(rng).encode())
        monkeypatch.setattr(events, "_BLOCK", rng.choice([1, 50, 400, 1 << 16]))
        fast += _compare_events(path, monkeypatch)
    assert fast > 40


@pytest.mark.parametrize("line", RAW_EVENT_LINES)
def test_events_each_irregular_line_reads_as_line_by_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          line: str) -> None:
    path = tmp_path / "events.jsonl"
    good = '{"ts": "2025-03-07T22:39:36+00:00", "type": "checkpoint_saved", "step": 4}'
    path.write_text("\n".join([good, line, good]) + "\n")
    _compare_events(path, monkeypatch)


def test_events_fast_reading_with_hand_computed_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(
        "# resilience run\n"
        '{"ts": "2025-03-07T22:39:36+00:00", "type": "fault_injected", "node": "n7", "gpu": 3, "by": "injector"}\n'
        "\n"
        '{"ts": "2025-03-07T23:39:36.5+01:00", "type": "node_excluded", "node": "n7", "rank": 56, "detail": "x"}\n'
        '{"ts": "2025-03-07T22:40:00Z", "type": "job_started", "job_id": "48213", "nodes": ["n1", "n2"]}\n'
    )
    assert _compare_events(path, monkeypatch)
    log = parse_events(path, "events.jsonl")
    first, second, third = log.events
    assert (first.line, first.type, first.node, first.gpu, first.by, first.rank, first.extra) == (
        2, EventType.FAULT_INJECTED, "n7", 3, "injector", None, None)
    assert first.ts == datetime(2025, 3, 7, 22, 39, 36, tzinfo=UTC)
    assert second.ts == datetime(2025, 3, 7, 22, 39, 36, 500000, tzinfo=UTC) and second.line == 4
    assert second.ts.utcoffset() == timedelta(hours=1) and second.ts.tzinfo == timezone(timedelta(hours=1))
    assert (third.line, third.job_id, third.extra) == (5, "48213", {"nodes": ["n1", "n2"]})
    assert second.extra is None  # no key beyond the schema: no dict
    with pytest.raises(AttributeError):
        first.node = "n8"  # type: ignore[misc]  # events are immutable


def test_events_bench_shape_and_errors_keep_their_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [f'{{"ts": "2025-03-07T22:39:36+00:00", "type": "checkpoint_saved", "step": {i}, "node": "n{i % 128}", '
             '"by": "trainer", "detail": "async save"}' for i in range(3000)]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert _compare_events(path, monkeypatch)
    log = parse_events(path, "events.jsonl")
    assert [(e.line, e.step, e.node) for e in log.events[2999:]] == [(3000, 2999, "n55")]
    for at, bad, field in [(2500, '"step": -1', "step"), (10, '"step": true', "step"), (2999, '"node": 4', "node")]:
        broken = list(lines)
        broken[at] = broken[at].replace(f'"step": {at}', bad) if field == "step" else broken[at].replace(
            '"node": "n55"', bad)
        path.write_text("\n".join(broken) + "\n")
        _compare_events(path, monkeypatch)
        with pytest.raises(EvidenceError) as caught:
            parse_events(path, "events.jsonl")
        assert (caught.value.line, caught.value.field) == (at + 1, field)


@pytest.mark.parametrize(("key", "value"), [
    *[("ts", v) for v in BAD_TS], ("type", "bogus"), ("type", 3), ("type", None),
    *[(k, v) for k in ("node", "by", "job_id", "detail") for v in BAD_STRINGS],
    *[(k, v) for k in ("gpu", "rank", "step") for v in BAD_INTS],
])
def test_events_each_refused_value_keeps_its_line_and_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            key: str, value: Any) -> None:
    lines = [json.dumps({"ts": "2025-03-07T22:39:36+00:00", "type": "checkpoint_saved", "step": i, "node": "n1"})
             for i in range(2000)]
    record = json.loads(lines[1500])
    record[key] = value
    lines[1500] = json.dumps(record)
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    _compare_events(path, monkeypatch)
    with pytest.raises(EvidenceError) as caught:
        parse_events(path, "events.jsonl")
    assert (caught.value.line, caught.value.field) == (1501, key)


def test_events_bundled_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    bundled = sorted((REPO / "evidence").glob("*/resilience/events.jsonl"))
    assert bundled
    for path in bundled:
        assert _compare_events(path, monkeypatch)


def test_sacct_fixed_width_table_is_detected_and_refused_at_its_rule(tmp_path: Path) -> None:
    """`sacct` without --parsable prints a table of fixed-width columns whose cells are cut (`CANCELLED+`, a node
    list's end): detected as sacct (it was 'could not detect one') and refused naming its rule line, so the user
    dumps it again with --parsable2; by `evidence parse` in one line, exit 3."""
    from clustercert.parsers import detect_format
    from tests.conftest import run_cli

    table = ("\n       JobID    JobName  Partition    Account  AllocCPUS      State ExitCode \n"
             "------------ ---------- ---------- ---------- ---------- ---------- -------- \n"
             "25                train        gpu      acct1         64 CANCELLED+      0:0 \n"
             "25.batch          batch                 acct1         32 CANCELLED+     0:15 \n")
    path = tmp_path / "sacct.txt"
    path.write_text(table)
    assert detect_format(path) == "sacct"
    for fields in (None, ["JobID", "JobName", "Partition", "Account", "AllocCPUS", "State", "ExitCode"]):
        with pytest.raises(EvidenceError) as refused:
            parse_sacct(path, "sacct.txt", fields=fields)
        assert refused.value.line == 3 and "got sacct's fixed-width table" in str(refused.value)
    proc = run_cli("evidence", "parse", str(path))
    assert proc.returncode == 3 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"error: {path} line 3: expected `sacct --parsable2` output, got sacct's "
                                  "fixed-width table")
    # a parsable dump whose first row is all dashes is no table: read as rows (and refused for its state)
    path.write_text("JobID|State\n--|--\n")
    with pytest.raises(EvidenceError) as row:
        parse_sacct(path, "sacct.txt")
    assert (row.value.line, row.value.field) == (2, "State")


def _big_dump(jobs: int, end: str) -> str:
    """A dump past read_text_pieces()'s first 64 KiB: a header, comment lines, jobs with two steps each, names
    with characters of more than one byte and a terminal colour sequence."""
    lines = ["# sacct -P --format JobID,JobName,State,Start,End,Elapsed,Submit",
             "JobID|JobName|State|Start|End|Elapsed|Submit"]
    for i in range(jobs):
        start = f"2024-01-02T03:{i // 60 % 60:02d}:{i % 60:02d}"
        lines += [f"{1000 + i}|entraînement-{i}|{'COMPLETED' if i % 7 else 'FAILED'}|{start}|2024-01-02T05:00:00|"
                  f"0{i % 9}:00:00|2024-01-02T03:00:00",
                  f"{1000 + i}.batch|batch|\x1b[32mCOMPLETED\x1b[0m|{start}|2024-01-02T05:00:00|00:01:00|",
                  f"{1000 + i}.0|python|COMPLETED|{start}|2024-01-02T05:00:00|00:02:{i % 60:02d}|"]
        if i % 500 == 0:
            lines.append("# a comment between jobs")
    return end.join(lines) + end


@pytest.mark.parametrize("end", ["\n", "\r\n"])
def test_a_dump_read_in_small_pieces_reads_as_its_whole_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             end: str) -> None:
    """parse_sacct() reads a dump a piece at a time (read_text_pieces(): a megabyte each, so that the decoded file
    is never held whole beside its records). Pieces of a kilobyte, cut between any two lines (a job's steps in the
    next piece), give read_text()'s lines, and the same records, warnings and refusals as the whole text: the fast
    reading, the line-by-line one (a row short of a field) and a NUL late in the file, at its line."""
    path = tmp_path / "sacct.txt"
    text = _big_dump(800, end)
    short = text + "9999|late|COMPLETED|2024-01-02T06:00:00|2024-01-02T07:00:00|01:00:00" + end
    lines = text.split(end)
    nul = end.join([*lines[:2000], "4000|x\x00|COMPLETED||||", *lines[2000:]])  # line 2001
    for dump in (text, short, nul):
        path.write_bytes(("\ufeff" + dump).encode())  # a byte order mark, as a Windows editor saves it
        whole = _outcome(lambda: parse_sacct(path, "sacct.txt"))
        with monkeypatch.context() as patch:
            patch.setattr(training, "_PIECE_BYTES", 1000)
            if dump is not nul:
                pieces = list(training.read_text_pieces(path, "sacct.txt", limit=1 << 30))
                assert len(pieces) > 50 and all(piece.endswith("\n") for piece in pieces)
                assert "".join(pieces).splitlines() == read_text(path, "sacct.txt", limit=1 << 30).splitlines()
            small = _outcome(lambda: parse_sacct(path, "sacct.txt"))
        _assert_same_sacct(small, whole)
        if dump is text:
            assert small[0] == "result" and len(small[1].jobs) == 800 and small[1].warnings == []
            assert small[1].jobs[799].steps[1].line == 2 + 800 * 3 + 2  # the header at 2, 2 comment lines
        elif dump is short:
            assert small[0] == "result" and small[1].jobs[-1].job_id == "9999" and len(small[1].warnings) == 1
        else:
            assert small[0] == "error" and small[1][3] == 2001 and "NUL" in small[1][1]
