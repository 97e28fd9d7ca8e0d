"""nccl-tests outputs as operators publish them: each `# Avg bus bandwidth` closes a test of its own, tables without
their header lines are read, and a capture cut short is told from a test NCCL aborted (issue 56)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers.nccl_tests import CollectiveTest, parse_nccl_tests
from tests.conftest import run_cli

_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s.*?\son\s+(\S+)\s")


@dataclass
class _Printed:
    """One test as the file prints it, read by eye's rules: its rank lines, its rows' busbw, its average."""

    ranks: list[int]
    hosts: list[str]
    busbw: list[float]
    avg: float


def _printed(text: str) -> list[_Printed]:
    """The oracle: every block of rank lines and rows that a `# Avg bus bandwidth` line ends, with the numbers as
    printed (busbw: the 8th and 12th columns of a 13-column row)."""
    out: list[_Printed] = []
    ranks: list[int] = []
    hosts: list[str] = []
    busbw: list[float] = []
    for line in text.splitlines():
        rank = _RANK.match(line)
        if rank:
            ranks.append(int(rank.group(1)))
            hosts += [rank.group(2)] if rank.group(2) not in hosts else []
        elif line.startswith("# Avg bus bandwidth"):
            out.append(_Printed(ranks, hosts, busbw, float(line.split(":")[1])))
            ranks, hosts, busbw = [], [], []
        elif not line.startswith("#") and len(cols := line.split()) == 13 and cols[0].isdigit():
            busbw += [float(cols[7]), float(cols[11])]
    return out


def _assert_as_printed(test: CollectiveTest, printed: _Printed, collective: str) -> None:
    """collective, ranks, hosts, row count, printed average, mean of rows and peak: each as the file prints it."""
    assert test.error is None and not test.truncated
    assert test.collective == collective
    assert test.ranks == (max(printed.ranks) + 1 if printed.ranks else None)
    assert list(test.hosts_seen) == printed.hosts
    assert len(test.rows) == len(printed.busbw) // 2
    assert test.reported_avg_busbw == printed.avg
    assert test.computed_avg_busbw == pytest.approx(sum(printed.busbw) / len(printed.busbw), abs=1e-9)
    assert max(max(r.busbw_oop, r.busbw_ip) for r in test.rows) == max(printed.busbw)
    assert test.average_disagreement is None  # nccl-tests' own average agrees with its rows


def _collectives(text: str) -> list[str]:
    return re.findall(r"# Collective test starting: (\w+)_perf", text)


@pytest.mark.parametrize("name", [
    "nccl_N10_G8.log", "nccl_N10_G1.log", "nccl_N1_G8_cnode3-002.log", "nccl_N2_G1_cnode2-001_cnode2-002.log",
    "cluster01-pairwise/nccl_N2_G8_cnode3-002_cnode3-011.log",
    "cluster01-pairwise/nccl_N2_G2_cnode3-005_cnode3-006.log",
])
def test_each_real_test_reads_as_printed(real_samples: Path, name: str) -> None:
    path = real_samples / "nccl-tests" / name
    text = path.read_text()
    printed, collectives = _printed(text), _collectives(text)
    result = parse_nccl_tests(path, name)
    assert len(result.tests) == len(printed) == len(collectives)
    for test, shown, collective in zip(result.tests, printed, collectives, strict=True):
        _assert_as_printed(test, shown, collective)
    assert result.warnings == []


def test_the_80_rank_all_reduce_by_hand(real_samples: Path) -> None:
    # read off the file: lines 6-85 list ranks 0-79 on cnode3-002..011, 8 each; lines 92-101 hold 10 sizes; line 103
    # prints 265.631; the largest busbw is the in-place 364.07 of 2147483648 B (line 98)
    test = parse_nccl_tests(real_samples / "nccl-tests" / "nccl_N10_G8.log", "n10g8.log").tests[0]
    assert (test.collective, test.ranks, len(test.hosts_seen), len(test.rows)) == ("all_reduce", 80, 10, 10)
    assert test.hosts_seen == tuple(f"cnode3-{n:03d}" for n in range(2, 12))
    assert (test.reported_avg_busbw, test.avg_line, test.line, test.last_line) == (265.631, 103, 1, 105)
    assert max(test.rows, key=lambda r: r.busbw_ip).busbw_ip == 364.07
    assert max(test.rows, key=lambda r: r.busbw_ip).line == 98


def test_two_real_outputs_appended_are_their_own_tests(real_samples: Path, tmp_path: Path) -> None:
    first = (real_samples / "nccl-tests" / "nccl_N10_G8.log").read_text()
    second = (real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text()
    path = tmp_path / "appended.log"
    path.write_text(first + second)
    tests = parse_nccl_tests(path, "appended.log").tests
    printed = _printed(first) + _printed(second)
    assert len(tests) == 10
    for test, shown, collective in zip(tests, printed, _collectives(first) + _collectives(second), strict=True):
        _assert_as_printed(test, shown, collective)
    assert [t.ranks for t in tests] == [80] * 5 + [8] * 5


def _table(text: str, collective: str) -> list[str]:
    """The lines of one test of a real output, from its `# nccl-tests version` line to its `concluded` line."""
    lines = text.splitlines()
    start = lines.index(f"# Collective test starting: {collective}_perf") - 1
    end = lines.index(f"# Collective test concluded: {collective}_perf", start)
    return lines[start:end + 1]


def test_a_table_without_its_header_lines_is_read(real_samples: Path, tmp_path: Path) -> None:
    table = _table((real_samples / "nccl-tests" / "nccl_N10_G8.log").read_text(), "all_reduce")
    # what a capture that starts at the column header holds: no `# nThread`, no rank lines
    kept = table[next(i for i, line in enumerate(table) if "out-of-place" in line):]
    path = tmp_path / "headless.log"
    path.write_text("\n".join(kept) + "\n")
    (test,) = parse_nccl_tests(path, "headless.log").tests
    _assert_as_printed(test, _printed("\n".join(kept))[0], "all_reduce")  # named by its `concluded` line
    assert (test.ranks, test.hosts, test.hosts_seen) == (None, (), ())  # unknown: the bundle must place it


def test_a_document_of_consecutive_tables_is_one_test_per_average(real_samples: Path, tmp_path: Path) -> None:
    # as an operator's page shows them: prose between tables, one with only two of its 80 rank lines, one without
    # any header line, one whole; each `# Avg bus bandwidth` line closes its own test
    big = _table((real_samples / "nccl-tests" / "nccl_N10_G8.log").read_text(), "all_reduce")
    some = [line for line in big if not line.startswith("#  Rank") or " Rank  0 " in line or " Rank 79 " in line]
    node = _table((real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text(), "all_reduce")
    bare = [line for line in node if not line.startswith("#") or "Avg bus" in line or "concluded" in line]
    small = _table((real_samples / "nccl-tests" / "nccl_N10_G1.log").read_text(), "all_reduce")
    parts = ["## all_reduce at 80 ranks", "", *some, "", "Within one node, rows only:", "", *bare, "",
             "Then 10 ranks (an error here would be prose, not an abort):", "", *small]
    path = tmp_path / "page.md"
    path.write_text("\n".join(parts) + "\n")
    tests = parse_nccl_tests(path, "page.md").tests
    assert len(tests) == 3
    for test, shown in zip(tests, [_printed("\n".join(p))[0] for p in (some, bare, small)], strict=True):
        assert test.error is None and test.average_disagreement is None
        assert len(test.rows) == len(shown.busbw) // 2 and test.reported_avg_busbw == shown.avg
        assert test.computed_avg_busbw == pytest.approx(sum(shown.busbw) / len(shown.busbw), abs=1e-9)
    assert [(t.collective, t.ranks, t.hosts_seen) for t in tests] == [
        ("all_reduce", 80, ("cnode3-002", "cnode3-011")),  # rank 79 printed: 80 ranks, 2 of their hosts named
        ("all_reduce", None, ()),  # no header: named by its `concluded` line; ranks and hosts unknown
        ("all_reduce", 10, tuple(f"cnode3-{n:03d}" for n in range(2, 12))),
    ]
    assert tests[0].hosts == ()  # 78 of its 80 rank lines missing: the host of each rank is not known


def test_a_table_cut_mid_way_is_a_truncated_capture(real_samples: Path, tmp_path: Path) -> None:
    table = _table((real_samples / "nccl-tests" / "nccl_N10_G8.log").read_text(), "all_reduce")
    rows = [i for i, line in enumerate(table) if line and not line.startswith("#")]
    cut = table[:rows[4] + 1]  # the capture stops after the fifth of ten rows
    later = ["", "Notes: the 1440-rank job failed with an error on another day; NCCL failure reports are below.",
             "srun: error: cnode9: task 3: Exited with exit code 1"]
    path = tmp_path / "cut.log"
    path.write_text("\n".join(cut + later) + "\n")
    (test,) = parse_nccl_tests(path, "cut.log").tests
    assert test.truncated and test.error is not None and test.error.startswith("truncated capture")
    assert f"stops after line {rows[4] + 1}" in test.error
    assert (test.cause, test.cause_line) == (None, None)  # the text further down is not why it stopped
    assert (test.collective, test.ranks, len(test.hosts_seen), len(test.rows)) == ("all_reduce", 80, 10, 5)
    assert test.reported_avg_busbw is None
    assert max(max(r.busbw_oop, r.busbw_ip) for r in test.rows) == 318.68  # line 96, the fifth row, as printed


def _cut_in_the_sixth_gather_row(text: str, words: int, chars: int | None) -> tuple[list[str], list[int]]:
    """The real output up to its sixth all_gather row, of which only `words` columns are kept, the last of them
    cut to `chars` characters (None: whole); and the lines (0-based) of the six rows."""
    lines = text.splitlines()
    gather = lines.index("# Collective test starting: all_gather_perf")
    rows = [n for n in range(gather, len(lines)) if lines[n] and not lines[n].startswith("#")][:6]
    kept = lines[rows[5]].split()[:words]
    kept[-1] = kept[-1][:chars]
    return [*lines[:rows[5]], "  ".join(kept)], rows


@pytest.mark.parametrize("end", ["", "\n", "\n\n"])
@pytest.mark.parametrize(("words", "chars"), [(3, None), (11, None), (12, 3)])
def test_a_row_cut_mid_line_at_the_end_is_a_truncated_capture(real_samples: Path, tmp_path: Path, end: str,
                                                              words: int, chars: int | None) -> None:
    # the capture stops inside the sixth all_gather row: after its type, after 11 of its 13 columns, or inside the
    # in-place busbw ('347' of '347.87'), with or without a line end after it
    text = (real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text()
    kept, rows = _cut_in_the_sixth_gather_row(text, words, chars)
    path = tmp_path / "cut.log"
    path.write_text("\n".join(kept) + end)
    whole, cut = parse_nccl_tests(path, "cut.log").tests
    _assert_as_printed(whole, _printed(text)[0], "all_reduce")  # the test before it is as the file prints it
    assert cut.truncated and cut.error is not None and (cut.cause, cut.cause_line) == (None, None)
    assert f"capture cut short at cut.log:{rows[5] + 1}, inside a result row" in cut.error
    assert "not evidence against the cluster" in cut.error
    lines = text.splitlines()
    printed = [float(lines[n].split()[c]) for n in rows[:5] for c in (7, 11)]  # the five whole rows' busbw
    assert (cut.collective, cut.ranks, len(cut.rows)) == ("all_gather", 8, 5)
    assert [v for r in cut.rows for v in (r.busbw_oop, r.busbw_ip)] == printed
    assert cut.reported_avg_busbw is None


def test_a_whole_last_row_with_a_bad_value_is_still_refused(real_samples: Path, tmp_path: Path) -> None:
    # all 13 columns are there: a bad value is damage, not a capture that stopped
    kept, rows = _cut_in_the_sixth_gather_row(
        (real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text(), 13, None)
    path = tmp_path / "bad.log"
    path.write_text("\n".join([*kept[:-1], kept[-1].replace("345.46", "345.4.6")]) + "\n")
    with pytest.raises(EvidenceError) as caught:
        parse_nccl_tests(path, "bad.log")
    assert (caught.value.line, caught.value.field) == (rows[5] + 1, "busbw")


def test_a_row_cut_mid_table_is_still_refused(real_samples: Path, tmp_path: Path) -> None:
    # a row broken and the output going on to its average is not a capture that stopped: the file is damaged
    lines = (real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text().splitlines()
    avg = next(n for n, line in enumerate(lines) if line.startswith("# Avg bus bandwidth"))
    last = max(n for n in range(avg) if lines[n] and not lines[n].startswith("#"))  # the table's last row
    broken = [*lines[:last], " ".join(lines[last].split()[:3]), *lines[last + 1:avg + 1]]
    path = tmp_path / "broken.log"
    path.write_text("\n".join(broken) + "\n")
    with pytest.raises(EvidenceError) as caught:
        parse_nccl_tests(path, "broken.log")
    assert (caught.value.line, caught.value.field) == (last + 1, "row")
    assert "expected a complete result row" in caught.value.message


def test_evidence_parse_reads_a_capture_cut_mid_row(real_samples: Path, tmp_path: Path) -> None:
    text = (real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text()
    path = tmp_path / "nccl_N1_G8_cnode3-002.log"
    path.write_text(text[:text.index("  1073741824      16777216    double", text.index("all_gather_perf")) + 30])
    proc = run_cli("evidence", "parse", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "2 tests, 1 cut short;" in proc.stdout
    assert "all_gather: 8 ranks on 1 host, lines 36-60: CUT SHORT, truncated capture:" in " ".join(proc.stdout.split())


def test_a_test_nccl_aborted_is_not_a_truncated_capture(real_samples: Path) -> None:
    name = "cluster00-pairwise-g4/nccl_N2_G4_cnode2-001_cnode2-003.log"
    aborted, done = parse_nccl_tests(real_samples / "nccl-tests" / name, name).tests
    assert (aborted.collective, aborted.ranks, aborted.truncated, aborted.rows) == ("alltoall", 8, False, [])
    assert aborted.cause == "remote process exited or there was a network error"
    assert aborted.error is not None and aborted.error.startswith("aborted")
    assert (done.collective, done.error, done.reported_avg_busbw) == ("sendrecv", None, 5.9895)


def test_a_printed_average_that_disagrees_with_its_rows_is_a_finding(real_samples: Path, tmp_path: Path) -> None:
    table = _table((real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text(), "all_reduce")
    rows = [i for i, line in enumerate(table) if line and not line.startswith("#")]
    del table[rows[0]]  # a row lost in copying: the printed average no longer is its rows' mean
    path = tmp_path / "lost.log"
    path.write_text("\n".join(table) + "\n")
    result = parse_nccl_tests(path, "lost.log")
    (test,) = result.tests
    why = test.average_disagreement
    assert why is not None and why.startswith(f"line {test.avg_line}: the printed average busbw 437.957 GB/s")
    assert result.warnings == [f"lost.log {why}: the table is not read as nccl-tests printed it"]
