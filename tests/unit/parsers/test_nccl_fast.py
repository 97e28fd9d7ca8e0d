# ruff: noqa: E501  (result rows and log lines as the tools print them)
"""The fast nccl-tests reading (a stretch of lines at a time) reads what the line-by-line reading reads: the same
tests, rows, float bits, line numbers, ranks and hosts, and the same located error, on generated outputs with
random variations and on the real sweeps."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import FORMATS, nccl_tests
from clustercert.parsers.nccl_tests import (
    _STRETCH,
    CollectiveTest,
    NcclRow,
    _read_fast,
    _read_lines,
    _Reader,
    parse_nccl_tests,
)
from clustercert.parsers.training import line_total, read_text

ROW = "    33554432       4194304    double     sum      -1   182.87  183.49  321.10       0   182.88  183.48  321.08       0"
DEBUG = "host-a:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] via NET/IB"


def reading(text: str, read: Callable[[str, _Reader], None]) -> tuple[str, object]:
    """What one reading of read_text()'s `text` gives: the result's repr (float bits included: repr round-trips a
    float) and JSON, or the located error."""
    reader = _Reader("n.log", "all_reduce")
    try:
        read(text, reader)
        result = reader.finish(line_total(text))
    except EvidenceError as exc:
        return "error", (exc.file, exc.line, exc.field, str(exc))
    return "ok", (repr(result), result.to_json(), [r._asdict() for t in result.tests for r in t.rows])


def assert_alike(text: str) -> tuple[str, object]:
    fast, lines = reading(text, _read_fast), reading(text, _read_lines)
    assert fast == lines
    return fast


def as_read(tmp_path: Path, raw: str) -> str:
    """`raw` as read_text() gives it to the parser (line ends of every kind made '\\n')."""
    path = tmp_path / "raw.log"
    path.write_bytes(raw.encode("utf-8", errors="surrogatepass"))
    return read_text(path, "raw.log", limit=1 << 30)


# ---- hand-computed values ----


def test_rows_values_lines_ranks_and_hosts_by_hand(tmp_path: Path) -> None:
    text = (
        "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902\n"  # 1
        "# Collective test starting: all_gather_perf\n"  # 2
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20\n"  # 3
        "#  Rank  0 Group  0 Pid   6899 on nœud-ä device  0 [0000:04:00] NVIDIA H100 80GB HBM3\n"  # 4
        "#  Rank  1 Group  0 Pid   6900 on host-b device  0 [0000:05:00] NVIDIA H100 80GB HBM3\n"  # 5
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"  # 6
        "        1024           256     float    none      -1    25.10    0.04    0.07     N/A    24.90    0.05    0.08     N/A\n"  # 7
        f"{DEBUG}\n"  # 8
        f"{DEBUG}\n"  # 9
        "     2097152        524288     float    none      -1   100.5   20.87   10.44       0   99.   21.10   10.55       3\n"  # 10
        "# Avg bus bandwidth    : 5.285 \n"  # 11
        "# Collective test concluded: all_gather_perf\n"  # 12
    )
    path = tmp_path / "n.log"
    path.write_text(text)
    (test,) = parse_nccl_tests(path, "n.log").tests
    assert (test.collective, test.ranks, test.hosts, test.line, test.last_line) == ("all_gather", 2, ("nœud-ä", "host-b"), 1, 12)  # the version line opens it
    assert test.reported_avg_busbw == 5.285 and test.error is None
    first, second = test.rows
    assert (first.size_bytes, first.time_us_oop, first.algbw_oop, first.busbw_oop, first.wrong_oop) == (1024, 25.1, 0.04, 0.07, None)
    assert (first.time_us_ip, first.algbw_ip, first.busbw_ip, first.wrong_ip, first.line) == (24.9, 0.05, 0.08, None, 7)
    assert (second.size_bytes, second.time_us_oop, second.busbw_oop, second.time_us_ip, second.wrong_oop, second.wrong_ip, second.line) == (
        2097152, 100.5, 10.44, 99.0, 0, 3, 10)
    assert test.computed_avg_busbw == (0.07 + 0.08 + 10.44 + 10.55) / 4
    assert assert_alike(as_read(tmp_path, text))[0] == "ok"


def test_the_bench_shape_reads_its_rows_without_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # bench/bench_parsers.py's nccl generator: in a file longer than a stretch the rows, debug lines and headers all
    # take the fast way; a file of one stretch or less is read line by line (faster where, as in a cluster's
    # pairwise sweep, header and comment lines are a third of it), with the same result
    block = (
        "# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor)\n"
        "#  Rank  0 Group  0 Pid   6899 on host-a device  0 [0000:04:00] NVIDIA H100 80GB HBM3\n"
        "#  Rank  1 Group  0 Pid   6900 on host-b device  0 [0000:05:00] NVIDIA H100 80GB HBM3\n"
        + f"{ROW}\n{DEBUG}\n" * 20
        + "# Avg bus bandwidth    : 321.09 \n# Collective test concluded: all_reduce_perf\n"
    )
    copies = _STRETCH // len(block) + 2
    text = block * copies
    assert len(text) > _STRETCH >= len(block * 3)
    stepped: list[int] = []
    step = _Reader.step

    def counted(self: _Reader, raw: str, number: int) -> None:
        stepped.append(number)
        step(self, raw, number)

    monkeypatch.setattr(_Reader, "step", counted)
    path = tmp_path / "n.log"
    path.write_text(text)
    result = parse_nccl_tests(path, "n.log")
    assert stepped == [1]  # only the first line, which no line break comes before
    assert [len(t.rows) for t in result.tests] == [20] * copies
    assert [t.hosts for t in result.tests] == [("host-a", "host-b")] * copies
    assert [r.line for r in result.tests[1].rows] == list(range(46 + 5, 46 + 45, 2))
    assert {(r.size_bytes, r.busbw_oop, r.busbw_ip, r.wrong_oop) for t in result.tests for r in t.rows} == {(33554432, 321.10, 321.08, 0)}

    stepped.clear()
    path.write_text(block * 3)
    small = parse_nccl_tests(path, "n.log")
    assert stepped == list(range(1, 3 * block.count("\n") + 1))  # line by line
    assert repr(small.tests) == repr(result.tests[:3])


# ---- generated outputs with random variations ----

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce"]
HOSTS = ["host-a", "cnode3-002", "nœud-ä", "rank0", "rank1x", "h.k_1", "ĸelvin", "x NCCL y"]


def number(rng: random.Random) -> str:
    if not DIRTY[0]:
        return rng.choice(["0.00", "1.", "0012.50", f"{rng.uniform(0, 1e5):.1f}", "9" * 20 + "." + "9" * 20]) if rng.random() < 0.05 else f"{rng.uniform(0, 500):.2f}"
    return rng.choice([
        f"{rng.uniform(0, 500):.2f}", f"{rng.uniform(0, 1e5):.1f}", f"{rng.uniform(0, 1e6):.0f}", "0.00", "0",
        "1.", "0012.50", f"{rng.randrange(10**19)}.{rng.randrange(10**19)}", "9" * 20 + "." + "9" * 20,
        "123456789012345678901234567890", "1e3", "2.5e-1", "4.2e+", "-3.5", "nan", "inf", "1e999", "1.2.3", "1_0",
        "N/A", "١٢", "+5",
    ]) if rng.random() < 0.08 else f"{rng.uniform(0, 500):.2f}"


def wrong(rng: random.Random) -> str:
    if not DIRTY[0]:
        return rng.choice(["0", "N/A", "3", "1" * 15]) if rng.random() < 0.15 else "0"
    return rng.choice(["0", "0", "0", "N/A", "3", "1e999", "nan", "-1", "2.5", "1" * 16, "x"]) if rng.random() < 0.15 else "0"


def space(rng: random.Random) -> str:
    return rng.choice([" ", "  ", "   ", "\t", " \t ", "\xa0", "\x1f", "    "]) if rng.random() < 0.1 else "   "


def row(rng: random.Random, size: int) -> str:
    columns = [str(size), str(size // 4), rng.choice(["float", "double", "bfloat16", "int8", "f8_e4m3", "x_perf"]),
               rng.choice(["sum", "none", "max"]), rng.choice(["-1", "0", "3"])]
    shape = rng.random()
    if shape < 0.04 and DIRTY[0]:
        del columns[4]  # an old version without root
    elif shape < 0.06:
        del columns[3:5]
    elif shape < 0.08:
        columns.append("7")  # 14 columns
    elif shape < 0.09:
        columns[0] = str(size) + "0" * 20  # a size past 18 digits
    sides = [number(rng), number(rng), number(rng), wrong(rng), number(rng), number(rng), number(rng), wrong(rng)]
    if rng.random() < 0.03 and DIRTY[0]:
        sides = sides[:rng.randrange(1, 8)]  # missing in-place columns: cut short
    lead = rng.choice(["    ", "", " ", "\t", "  "]) if rng.random() < 0.2 else "    "
    tail = rng.choice(["", "  ", " \t", "\r"]) if rng.random() < 0.1 else ""
    return lead + "".join(c + space(rng) for c in columns[:-1]) + columns[-1] + "".join(space(rng) + s for s in sides) + tail


def debug(rng: random.Random) -> str:
    host = rng.choice(HOSTS)
    return rng.choice([
        f"{host}:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] via NET/IB",
        f"{host}:123:456 [7] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE",
        f"{host}:1:2 [0] NCCL WARN Call to ibv_create_cq failed: error",
        f"{host}:1:2 [0]  NCCL  INFO  two spaces",
        f"{host}:1:2 [0] NCCL  INFO NET/IB : error, two spaces before INFO",
        f"[1,0]<stdout>:{host}:1:2 [0] NCCL INFO prefixed",
        f"0: {host}:1:2 [0] NCCL INFO srun prefixed",
        "NCCL INFO Bootstrap : Using eth0",
        f"{host}: Test NCCL failure common.cu:401 'remote process exited or there was a network error'",
        f" .. {host} pid 1: Test failure common.cu:2",
        "Segmentation fault (core dumped)",
        "prose line without any word that matters",
        "",
        "   ",
    ])


def header(rng: random.Random, name: str, ranks: int) -> list[str]:
    lines = []
    if rng.random() < 0.4:
        lines.append("# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902")
    if rng.random() < 0.15:
        lines.append(f"$ mpirun -np 2 ./build/{name}_perf -b 8 -e 16")
    if rng.random() < 0.85:
        lines.append(f"# Collective test starting: {name}_perf" + rng.choice(["", "", "  ", " extra", "\t"]))
    lines.append(rng.choice([
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#  nThread 1 nGpus 8 minBytes 33554432 maxBytes 68719476736 step: 2(factor)",
        "# nThread 1 nGpus 1 Rank 0 NCCL odd",
        "#\tnThread\t1",
        "# nThread 1 nGpus 1 all_reduce_perf",
        "# nThread 1 nGpus 1 Avg bus bandwidth : 3",
        "# nThread 1 # Collective test concluded",
    ]))
    lines += ["#", "# Using devices"]
    for rank in range(ranks):
        host = rng.choice(HOSTS[:3]) if rng.random() < 0.9 else rng.choice(HOSTS)
        lines.append(rng.choice([
            f"#  Rank {rank:2d} Group  0 Pid {rng.randrange(1, 99999):6d} on {host:>10} device {rank:2d} [0000:04:00] NVIDIA H100 80GB HBM3",
            f"#  Rank {rank:2d} Group  0 Pid {rng.randrange(1, 99999):6d} on {host} device  0 [0000:04:00] NVIDIA H100 NCCL",
            f"#  Rank {rank:2d} Pid {rng.randrange(1, 99999):6d} on {host} device  0 [0000:04:00] Tesla V100",
            f"#\tRank\t{rank}\tGroup\t0\tPid\t1\ton\t{host}\tdevice 0 Avg bus bandwidth : 3",
            f"#  Rank {rank} Group 0 Pid 1 on a#nThread 5 device 0",
            f"#  Rank {rank} Group 0 Pid 1 on xNCCLy device 0",
            f"#  Rank {rank} Group 0 Pid 1 on {host} Collective test concluded",
        ]) if rng.random() < 0.2 else
            f"#  Rank {rank:2d} Group  0 Pid {rng.randrange(1, 99999):6d} on {host:>10} device {rank:2d} [0000:04:00] NVIDIA H100 80GB HBM3")
    lines += ["#", "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    return lines


DIRTY = [False]  # whether output() puts numbers that step() refuses or reads its own way into a file


def output(rng: random.Random) -> str:
    DIRTY[0] = rng.random() < 0.4
    lines: list[str] = []
    for _ in range(rng.randrange(1, 4)):
        name = rng.choice(COLLECTIVES)
        lines += header(rng, name, rng.randrange(1, 5))
        size = 8
        for _ in range(rng.randrange(0, 12)):
            while rng.random() < 0.35:
                lines.append(debug(rng) if rng.random() < 0.3 else rng.choice([DEBUG, "h:1:2 [0] NCCL INFO x"]))
            if rng.random() < 0.03:  # a debug print in the middle of a row, the row finished on the next line
                cut = row(rng, size).split()
                lines += [" ".join(cut[:6]) + "  " + DEBUG, "  ".join(cut[6:])]
            else:
                lines.append(row(rng, size))
            size *= 2
        if rng.random() < 0.85:
            lines.append("# Out of bounds values : 0 OK")
            lines.append("# Avg bus bandwidth    : " + (number(rng) if rng.random() < 0.2 else "12.5") + rng.choice([" ", "", "\t"]))
            lines.append("#")
        if rng.random() < 0.7:
            lines.append(f"# Collective test concluded: {name}_perf" + rng.choice(
                ["", "", " ", " tail", ": x NCCL", " # nThread 1", " # Collective test starting: sendrecv_perf"]))
    text = "\n".join(lines) + rng.choice(["\n", "", "\n\n", "\r\n"])
    if rng.random() < 0.2:
        text = text.replace("\n", "\r\n")
    if rng.random() < 0.1 and DIRTY[0]:
        text = text[: rng.randrange(1, len(text))]  # cut short
    return text


@pytest.mark.parametrize("seed", range(300))
def test_random_outputs_read_alike(tmp_path: Path, seed: int) -> None:
    text = as_read(tmp_path, output(random.Random(seed)))
    assert_alike(text)


@pytest.mark.parametrize("seed", range(40))
def test_random_outputs_read_alike_through_the_parser(tmp_path: Path, seed: int) -> None:
    # the public path: the file as written, its line ends of any kind, bounded as FORMATS runs it
    raw = output(random.Random(1000 + seed))
    path = tmp_path / "all_reduce_perf.log"
    path.write_bytes(raw.encode())
    text = read_text(path, "n.log", limit=1 << 30)
    reader = _Reader("n.log", "all_reduce")
    try:
        _read_lines(text, reader)
        expected: object = reader.finish(line_total(text))
    except EvidenceError as exc:
        expected = (exc.line, exc.field, str(exc))
    try:
        got: object = FORMATS["nccl-tests"](path, "n.log")
    except EvidenceError as exc:
        got = (exc.line, exc.field, str(exc))
    assert got == expected


def test_the_variations_reach_both_ways(tmp_path: Path) -> None:
    # the generator makes files the fast way reads mostly at once, and files with errors
    kinds = [assert_alike(as_read(tmp_path, output(random.Random(seed))))[0] for seed in range(300)]
    assert kinds.count("ok") > 100 and kinds.count("error") > 30


@pytest.mark.parametrize(
    ("bad", "field"),
    [("4.2e+", "busbw"), ("-321.10", "busbw"), ("nan", "busbw"), ("1e999", "busbw"), ("1.2.3", "busbw")],
)
def test_a_bad_number_mid_table_is_the_same_error(tmp_path: Path, bad: str, field: str) -> None:
    rows = [ROW.replace("33554432", str(8 << i)) for i in range(6)]
    rows[3] = rows[3].replace("321.10", bad)
    text = "# nThread 1 nGpus 1\n" + "".join(f"{r}\n{DEBUG}\n" for r in rows) + "# Avg bus bandwidth    : 1 \n"
    kind, error = assert_alike(text)
    assert kind == "error" and isinstance(error, tuple)
    assert error[:3] == ("n.log", 8, field)
    assert error[3].startswith("n.log line 8 field 'busbw'")



@pytest.mark.parametrize(
    ("said", "noted"),
    [
        ("host-a:1:2 [0] NCCL  INFO NET/IB : got error 12", True),  # not "NCCL INFO": step() notes the error
        ("host-a:1:2 [0] NCCL WARN NET/IB : failed", True),
        ("rank0: host-a:1:2 [0] NCCL INFO prefixed, failed", False),  # an NCCL INFO print: never an error
        ("#  Rank  1 Group  0 Pid 2 on xNCCLy device 0 Test NCCL failure common.cu:1 'gone'", False),  # a rank line
    ],
)
def test_a_line_that_says_why_a_test_aborted_is_noted_alike(said: str, noted: bool) -> None:
    # an aborted test's error names the first line that said why: a line taken the fast way must not hide it
    text = (
        "# Collective test starting: alltoall_perf\n# nThread 1 nGpus 1\n"
        "#  Rank  0 Group  0 Pid 1 on host-a device 0 [0000:04:00] NVIDIA H100\n"
        f"{ROW}\n{DEBUG}\n{said}\n{ROW}\n{DEBUG}\n"
    )
    kind, result = assert_alike(text)
    assert kind == "ok" and isinstance(result, tuple)
    test, *later = result[1]["tests"]
    if said.startswith("#  Rank"):  # a rank line after rows opens a table of its own (issue 56), never an error
        assert [t["line"] for t in later] == [6] and not any("line 6 says" in t["error"] for t in [test, *later])
    if noted:
        assert test["error"].startswith("aborted before its '# Avg bus bandwidth' line: line 6 says")
    else:  # nothing printed why it stopped: a capture cut short, not an abort (issue 56)
        assert test["error"].startswith("truncated capture: the output stops after line")
        assert test["truncated"] and test["cause"] is None


@pytest.mark.parametrize("host", ["rank0", "rank12", "ranking", "rank"])
def test_a_debug_print_after_a_cut_row_reads_alike(host: str) -> None:
    # `rank<digit>:` is a rank tag (_PREFIX): what is left of such a print finishes a row cut by a debug print
    cut = ROW.split()
    text = (
        "# nThread 1 nGpus 1\n"
        + " ".join(cut[:6]) + "  " + DEBUG + "\n"
        + f"{host}:1:2 [0] NCCL INFO Channel 00\n"
        + "  ".join(cut[6:]) + "\n# Avg bus bandwidth : 1\n"
    )
    assert_alike(text)

def test_numbers_of_many_digits_keep_their_float_bits(tmp_path: Path) -> None:
    rng = random.Random(7)
    texts = [f"{rng.randrange(10 ** rng.randrange(1, 21))}.{rng.randrange(10 ** 20):020d}" for _ in range(300)]
    texts += ["9" * 20 + "." + "9" * 20, "0.1", "0.30000000000000004", "1.", "00000000000000000001.5"]
    rows = [f"  8  2  float  sum  -1  {t}  {t}  {t}  0  {t}  {t}  {t}  0" for t in texts]
    text = "# nThread 1\n" + "\n".join(rows) + "\n# Avg bus bandwidth : 1\n"
    kind, result = assert_alike(text)
    assert kind == "ok" and isinstance(result, tuple)
    assert [v["busbw_ip"].hex() for v in result[2]] == [float(t).hex() for t in texts]


def test_a_type_column_naming_a_binary_is_not_a_row() -> None:
    # step() takes `x_perf` for a binary name (the line is no row): the fast way leaves such a line to it
    text = "# nThread 1\n  8  2  all_reduce_perf  sum  -1  1.0  1.0  1.5  0  1.0  1.0  2.5  0\n# Avg bus bandwidth : 1\n"
    kind, result = assert_alike(text)
    assert kind == "error" or "rows': []" in str(result)


@pytest.mark.parametrize("stretch", [1, 50, 200])
def test_stretch_bounds_never_change_the_reading(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stretch: int) -> None:
    monkeypatch.setattr(nccl_tests, "_STRETCH", stretch)
    for seed in range(30):
        assert_alike(as_read(tmp_path, output(random.Random(2000 + seed))))


def test_rows_are_rows_as_the_constructor_makes_them(tmp_path: Path) -> None:
    text = "# nThread 1\n" + f"{ROW}\n" + "# Avg bus bandwidth : 1\n"
    reader = _Reader("n.log", None)
    _read_fast(text, reader)
    (made,) = reader.finish(3).tests[0].rows
    built = NcclRow(size_bytes=33554432, time_us_oop=182.87, algbw_oop=183.49, busbw_oop=321.10, wrong_oop=0,
                    time_us_ip=182.88, algbw_ip=183.48, busbw_ip=321.08, wrong_ip=0, line=2)
    assert made == built and repr(made) == repr(built) and hash(made) == hash(built)
    with pytest.raises(AttributeError):
        made.line = 3  # type: ignore[misc]  # still frozen
    (test,) = reader.tests
    assert list(vars(test)) == [f.name for f in dataclasses.fields(CollectiveTest)]
    assert test == CollectiveTest(**vars(test)) and repr(test) == repr(CollectiveTest(**vars(test)))
    with pytest.raises(AttributeError):
        test.line = 3  # type: ignore[misc]
