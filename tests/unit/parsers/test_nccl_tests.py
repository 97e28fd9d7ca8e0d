"""nccl-tests text and JSON output: every quirk on small hand-written files."""
# ruff: noqa: E501  (test data lines are copied as the tools print them)

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import detect_format, inspect_evidence
from clustercert.parsers.nccl_tests import parse_nccl_tests

HEADER = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1
#
# Using devices
#  Rank  0 Group  0 Pid   6899 on host-a device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   6900 on host-b device  0 [0000:05:00] NVIDIA H100 80GB HBM3
#
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
"""


def write(tmp_path: Path, text: str, name: str = "n.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_old_version_collective_from_command_line_mpi_prefix_debug_mid_row(tmp_path: Path) -> None:
    text = (
        "```\n$ mpirun -np 2 ./build/all_reduce_perf -b 8 -e 16\n"
        + HEADER
        + "[1,0]<stdout>:           8             2     float     sum      -1    10.00    0.00    0.00      0  "
        "host-a:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] via NET/IB\n"
        "[1,0]<stdout>:  10.10    0.00    1.0e+00    0\n"
        "host-a:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n"
        "          16             4     float     sum      -1    11.00    0.00    3.00      0    11.00    0.00    4.00      0\n"
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 2 \n#\n```\n"
    )
    result = parse_nccl_tests(write(tmp_path, text), "n.log")
    (test,) = result.tests
    assert (test.collective, test.ranks, test.reported_avg_busbw, test.error) == ("all_reduce", 2, 2.0, None)
    assert [(r.size_bytes, r.busbw_oop, r.busbw_ip, r.line) for r in test.rows] == [
        (8, 0.0, 1.0, 4 + 7),
        (16, 3.0, 4.0, 13),
    ]
    assert test.computed_avg_busbw == 2.0


def test_several_tests_and_aborted_one(tmp_path: Path) -> None:
    block = (
        "# Collective test starting: {name}_perf\n"
        + HEADER
        + "           8             2     float     sum      -1    10.00    0.00    {bw}      0    10.00    0.00    {bw}    N/A\n"
    )
    text = (
        block.format(name="alltoall", bw="5.00")
        + "# Avg bus bandwidth    : 5 \n# Collective test concluded: alltoall_perf\n"
        + "# Collective test starting: sendrecv_perf\n"
        + HEADER
        + "host-a: Test NCCL failure common.cu:1 'remote process exited or there was a network error'\n"
        + " .. host-a pid 1: Test failure common.cu:2\n"
    )
    result = parse_nccl_tests(write(tmp_path, text), "n.log")
    assert [t.collective for t in result.tests] == ["alltoall", "sendrecv"]
    assert result.tests[0].rows[0].wrong_ip is None and result.tests[0].rows[0].busbw_oop == 5.0
    aborted = result.tests[1]
    assert aborted.rows == [] and aborted.error is not None and aborted.error.startswith("aborted")
    assert aborted.reported_avg_busbw is None and aborted.computed_avg_busbw is None


def test_collective_from_file_name(tmp_path: Path) -> None:
    text = (
        HEADER + "  8  2  float  sum  -1  1.0  1.0  1.5  0  1.0  1.0  2.5  0\n# Avg bus bandwidth    : 2 \n"
    )
    result = parse_nccl_tests(write(tmp_path, text, "reduce_scatter_perf.out"), "r")
    assert result.tests[0].collective == "reduce_scatter"


def test_inspect_contract_and_detection(tmp_path: Path) -> None:
    text = (
        "# Collective test starting: all_reduce_perf\n"
        + HEADER
        + (
            "    33554432       4194304    double     sum      -1   182.87  183.49  321.10       0   182.88  183.48  321.08       0\n"
            "# Avg bus bandwidth    : 321.09 \n"
        )
    )
    path = write(tmp_path, text)
    assert detect_format(path) == "nccl-tests"
    out = inspect_evidence(path, None, display="n.log")
    test = out["tests"][0]  # type: ignore[index]
    assert out["format"] == "nccl-tests"
    row = test["rows"][0]
    assert (row["size_bytes"], row["busbw_oop"], row["busbw_ip"], row["line"]) == (
        33554432,
        321.10,
        321.08,
        9,
    )
    assert (test["collective"], test["ranks"], test["reported_avg_busbw"], test["error"]) == (
        "all_reduce",
        2,
        321.09,
        None,
    )
    assert test["computed_avg_busbw"] == pytest.approx(321.09)


# nccl-tests' `-J` JSON (src/util.cu, version 1), as it writes a 4-process all_gather (the real logs written this
# way are compared with their text in tests/real/test_real_nccl_json.py)
_JSON_RUN = {
    "version": 1, "start_time": "2025-11-20 10:00:00", "args": ["./build/all_gather_perf", "-J", "n.json"],
    "env": [], "nccl_version": 22807,
    "config": {"nthreads": 1, "ngpus": 1, "devices": [{"rank": r, "hostname": f"h{r // 2}"} for r in range(4)]},
    "results": [{"size": 1024, "count": 256, "type": "float", "redop": "none", "root": "    -1",
                 "out_of_place": {"time": 1.0, "alg_bw": 1.0, "bus_bw": 1.5, "nwrong": 0.0},
                 "in_place": {"time": 1.0, "alg_bw": 1.0, "bus_bw": 2.5, "nwrong": 0.0},
                 "actual_iterations": 20, "experiment_name": ""}],
    "out_of_bounds": {"count": 0, "okay": "true"}, "average_bus_bandwidth": {"bandwidth": 2.0, "okay": "unchecked"},
    "errors": [""], "end_time": "2025-11-20 10:00:01"}


def test_json_output(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps(_JSON_RUN, separators=(",", ":")), "n.json")
    assert detect_format(path) == "nccl-tests"
    (test,) = parse_nccl_tests(path, "n.json").tests
    assert (test.collective, test.ranks, test.hosts, test.computed_avg_busbw, test.reported_avg_busbw) == (
        "all_gather", 4, ("h0", "h0", "h1", "h1"), 2.0, 2.0)
    assert test.rows[0] == (1024, 1.0, 1.0, 1.5, 1.0, 1.0, 2.5, 0, 0, 1)


def test_a_file_is_opened_once_text_or_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first byte tells JSON from text in the bytes read once (a sweep is thousands of small files); a JSON
    file that is not a document is still a located error."""
    from clustercert.evidence import guards

    opened: list[str] = []
    real = guards.open_regular

    def counting(path: Path, *args: object, **kwargs: object) -> object:
        opened.append(Path(path).name)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(guards, "open_regular", counting)
    assert parse_nccl_tests(write(tmp_path, json.dumps(_JSON_RUN), "n.json"), "n.json").tests[0].rows[0].busbw_ip == 2.5
    text = HEADER + "  8  2  float  sum  -1  1.0  1.0  4.2  0  1.0  1.0  2.5  0\n# Avg bus bandwidth : 3.35\n"
    assert parse_nccl_tests(write(tmp_path, text), "n.log").tests[0].rows[0].busbw_oop == 4.2
    with pytest.raises(EvidenceError, match=r"n2.json.*expected valid JSON"):
        parse_nccl_tests(write(tmp_path, '{"collective": ', "n2.json"), "n2.json")
    assert opened == ["n.json", "n.log", "n2.json"]


def test_bad_number_and_not_nccl(tmp_path: Path) -> None:
    text = HEADER + "  8  2  float  sum  -1  1.0  1.0  4.2e+  0  1.0  1.0  2.5  0\n"
    with pytest.raises(EvidenceError) as info:
        parse_nccl_tests(write(tmp_path, text), "n.log")
    assert str(info.value).startswith("n.log line 8 field 'busbw': expected a number, got '4.2e+'")
    with pytest.raises(EvidenceError, match="found none"):
        parse_nccl_tests(write(tmp_path, "hello\n"), "n.log")
