"""Every real sample parses; oracles are numbers read from the files by hand or recomputed here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import detect_format, inspect_evidence
from clustercert.parsers.megatron import parse_megatron
from clustercert.parsers.megatron_golden import parse_megatron_golden
from clustercert.parsers.mlperf import parse_mlperf
from clustercert.parsers.nccl_tests import parse_nccl_tests
from clustercert.parsers.nemo import parse_nemo
from clustercert.parsers.nemo_resilience import LogEventKind, parse_nemo_resilience
from clustercert.parsers.sacct import parse_sacct

FIVE = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"]
NCCL = {
    "nccl_N1_G8_cnode3-002.log": (FIVE, 8),
    "nccl_N10_G8.log": (FIVE, 80),
    "nccl_N10_G1.log": (FIVE, 10),
    "nccl_N2_G1_cnode2-001_cnode2-002.log": (["alltoall", "sendrecv"], 2),
}
SACCT_FIELDS = (
    "State,JobID,ReqCPUS,ReqMem,ReqNodes,Constraints,Submit,Eligible,Start,Elapsed,Suspended,End,ExitCode,"
    "DerivedExitCode,AllocNodes,NCPUS,MaxDiskRead,MaxDiskWrite,MaxPages,MaxRSS,MaxVMSize,CPUTime,UserCPU,"
    "SystemCPU,TotalCPU"
).split(",")


@pytest.mark.parametrize("name", sorted(NCCL))
def test_nccl_every_test_found_and_average_recomputed(real_samples: Path, name: str) -> None:
    path = real_samples / "nccl-tests" / name
    text = path.read_text()
    result = parse_nccl_tests(path, name)
    collectives, ranks = NCCL[name]
    assert [t.collective for t in result.tests] == collectives
    assert len(result.tests) == text.count("# Collective test starting")
    file_averages = [float(v) for v in re.findall(r"# Avg bus bandwidth\s*:\s*(\S+)", text)]
    assert [t.reported_avg_busbw for t in result.tests] == file_averages
    for test in result.tests:
        assert test.error is None and test.ranks == ranks and len(test.rows) == 10
        assert test.computed_avg_busbw is not None
        assert abs(test.computed_avg_busbw - test.reported_avg_busbw) <= 0.02  # type: ignore[operator]
    assert detect_format(path) == "nccl-tests"


# each line of a multi-node run as its launcher prints it: mpirun --tag-output, srun --label, a `rankN:` tag
LAUNCHERS = {"mpirun-tag-output": "[1,0]<stdout>:", "srun-label": " 0: ", "rank-tag": "rank0: "}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
@pytest.mark.parametrize("name", ["nccl_N10_G8.log", "nccl_N2_G1_cnode2-001_cnode2-002.log"])
def test_nccl_output_a_launcher_prefixed_reads_as_written(real_samples: Path, tmp_path: Path, name: str,
                                                          launcher: str) -> None:
    """mpirun's tag made the file look like JSON ("expected valid JSON, got Extra data"), srun's label hid its
    format from detection: each now reads, detected, as the file its launcher did not tag."""
    text = (real_samples / "nccl-tests" / name).read_text()
    tagged = tmp_path / name
    tagged.write_text("".join(LAUNCHERS[launcher] + line for line in text.splitlines(keepends=True)))
    assert detect_format(tagged) == "nccl-tests"
    result = parse_nccl_tests(tagged, name)
    collectives, ranks = NCCL[name]
    assert [t.collective for t in result.tests] == collectives
    assert [t.reported_avg_busbw for t in result.tests] == [
        float(v) for v in re.findall(r"# Avg bus bandwidth\s*:\s*(\S+)", text)]
    assert all(t.error is None and t.ranks == ranks and len(t.rows) == 10 for t in result.tests)
    assert result.to_json() == parse_nccl_tests(real_samples / "nccl-tests" / name, name).to_json()


@pytest.mark.parametrize("name", ["nccl_N10_G8.log", "nccl_N2_G1_cnode2-001_cnode2-002.log"])
def test_nccl_output_with_row_timestamps_reads_as_without(real_samples: Path, tmp_path: Path, name: str) -> None:
    """nccl-tests `-S 1` prints the local time after each row's in-place columns (`%21s`, src/util.cu): each row
    reads as the same row without it (it was "expected at most 13 columns in a result row, got 15")."""
    text = (real_samples / "nccl-tests" / name).read_text()
    rows = 0
    lines = []
    for line in text.splitlines(keepends=True):
        cells = line.split()
        if len(cells) == 13 and cells[0].isdigit():
            rows += 1
            line = line.rstrip("\n") + f"{f'2025-11-20 10:{rows // 60:02d}:{rows % 60:02d}':>21}\n"
        lines.append(line)
    stamped = tmp_path / name
    stamped.write_text("".join(lines))
    assert rows > 0 and text.count("\n") == stamped.read_text().count("\n")
    assert parse_nccl_tests(stamped, name).to_json() == parse_nccl_tests(real_samples / "nccl-tests" / name,
                                                                         name).to_json()


@pytest.mark.parametrize("name", ["nccl_N10_G8.log", "nccl_N2_G1_cnode2-001_cnode2-002.log"])
def test_nccl_output_with_per_iteration_timing_reads_as_without(real_samples: Path, tmp_path: Path,
                                                                name: str) -> None:
    """nccl-tests' per-iteration timing prints i_min i_max i_p99 i_cv% after each side's #wrong (each `%7s`, its
    header says so: src/util.cu writeResultHeader): each row reads as the same row without them (it was "expected at
    most 13 columns in a result row, got 21"); a statistic that is not a number is a located error."""
    text = (real_samples / "nccl-tests" / name).read_text()
    lines, rows = [], 0
    for line in text.splitlines(keepends=True):
        cells = line.split()
        if line.startswith("# nThread "):  # the header line util.cu adds with per-iteration timing
            line += "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows \n"
        elif len(cells) == 13 and cells[0].isdigit():
            rows += 1
            stats = "".join(f"  {v:>7}" for v in (cells[5], f"{float(cells[5]) * 1.5:.1f}", cells[5], "12.50"))
            line = ("  ".join(f"{c:>12}" for c in cells[:5]) + "".join(f"  {c:>7}" for c in cells[5:9]) + stats
                    + "".join(f"  {c:>7}" for c in cells[9:13]) + stats + "\n")
        lines.append(line)
    timed = tmp_path / name
    timed.write_text("".join(lines))
    assert rows > 0 and all(len(ln.split()) == 21 for ln in lines if ln[:1] == " " and ln.split()[0].isdigit())
    plain = parse_nccl_tests(real_samples / "nccl-tests" / name, name)
    read = parse_nccl_tests(timed, name)
    # the same rows and averages; each row one line later for each header line added above it
    assert [[r._replace(line=0) for r in t.rows] for t in read.tests] == [
        [r._replace(line=0) for r in t.rows] for t in plain.tests]
    assert [t.reported_avg_busbw for t in read.tests] == [t.reported_avg_busbw for t in plain.tests]
    bad = [ln.replace("12.50", "n/a", 1) if ln.split()[-1:] == ["12.50"] else ln for ln in lines]
    written = "".join(bad)
    at = written[:written.index("n/a")].count("\n") + 1  # its line in the file (a header line was added above)
    timed.write_text(written)
    with pytest.raises(EvidenceError, match=rf"{name} line {at} field 'i_cv%': expected a number"):
        parse_nccl_tests(timed, name)


def test_nccl_first_row_read_by_hand(real_samples: Path) -> None:
    result = parse_nccl_tests(real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log", "n")
    row = result.tests[0].rows[0]
    assert (row.size_bytes, row.busbw_oop, row.busbw_ip, row.line) == (33554432, 321.10, 321.08, 20)
    last = result.tests[0].rows[-1]
    assert (last.size_bytes, last.busbw_oop, last.busbw_ip) == (17179869184, 482.27, 482.12)


def _olympic_from_files(folder: Path) -> tuple[list[float], float]:
    """Independent oracle: run_start/run_stop times straight from the :::MLLOG lines."""
    durations = []
    for index in range(10):
        start = stop = None
        for line in (folder / f"result_{index}.txt").read_text().splitlines():
            if ":::MLLOG" not in line:
                continue
            record = json.loads(line.split(":::MLLOG", 1)[1])
            if record["key"] == "run_start":
                start = record["time_ms"]
            if record["key"] == "run_stop" and record["metadata"]["status"] == "success":
                stop = record["time_ms"]
        assert start is not None and stop is not None
        durations.append((stop - start) / 60000)
    kept = sorted(durations)[1:-1]
    factor = json.loads((folder / "scaling.json").read_text())["scaling_factor"]
    return durations, sum(kept) / 8 * factor


def test_mlperf_ten_runs_and_score(real_samples: Path) -> None:
    folder = real_samples / "mlperf-training" / "dell-xe9680-h100-llama2_70b_lora"
    result = parse_mlperf(folder, "dell", ruleset="4.0.0")
    durations, score = _olympic_from_files(folder)
    assert len(result.runs) == 10 and all(r.status == "success" for r in result.runs)
    assert [r.minutes for r in result.runs] == pytest.approx(durations)
    # hand-read from result_0.txt: run_start 1713994395504, run_stop 1713996161336
    assert result.runs[0].minutes == pytest.approx((1713996161336 - 1713994395504) / 60000)
    assert result.scaling_factor == pytest.approx(1.034722222222222)
    assert result.score_minutes == pytest.approx(score)
    assert (result.benchmark, result.system_name) == ("llama2_70b_lora", "XE9680x8H100-SXM-80GB")
    out = inspect_evidence(folder, None, display="dell", ruleset="4.0.0")
    assert out["format"] == "mlperf" and out["score_minutes"] == pytest.approx(score)


def test_sacct_jobs_steps_states(real_samples: Path) -> None:
    path = real_samples / "slurm" / "sacct-multi-node.txt"
    result = parse_sacct(path, "sacct", fields=SACCT_FIELDS, timezone="UTC")
    (job,) = result.jobs
    assert (job.job_id, job.state, job.state_raw, job.elapsed_s, job.line) == (
        "845",
        "OUT_OF_MEMORY",
        "OUT_OF_MEMORY",
        301,
        4,
    )
    assert (job.start, job.end, job.submit) == (
        "2022-07-05T16:17:52+00:00",
        "2022-07-05T16:22:53+00:00",
        "2022-07-05T16:16:09+00:00",
    )
    assert [(s.step_id, s.state, s.elapsed_s, s.line) for s in job.steps] == [
        ("845.batch", "OUT_OF_MEMORY", 301, 5)
    ]
    assert detect_format(path) == "sacct"

def test_sacct_read_column_by_column_as_line_by_line(real_samples: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real multi-node dump through the block reading (the parser bench's 50 MB/s) and the line-by-line one:
    the same jobs, steps, values, lines and warnings."""
    from tests.unit.parsers.test_sacct_events_fast import REAL_SACCT_FIELDS, _compare_sacct

    assert _compare_sacct(real_samples / "slurm" / "sacct-multi-node.txt", monkeypatch, fields=REAL_SACCT_FIELDS)



@pytest.mark.parametrize(
    ("machine", "count", "first", "last"),
    [("h100", 12, (2, 7.90648), (24, 1.15105)), ("gb200", 12, (2, 8.5543), (24, 0.7843))],
)
def test_golden_values(
    real_samples: Path, machine: str, count: int, first: tuple[int, float], last: tuple[int, float]
) -> None:
    path = (
        real_samples
        / "megatron-lm"
        / "gpt3_7b_tp1_pp4_memory_speed"
        / f"golden_values_dev_dgx_{machine}.json"
    )
    log = parse_megatron_golden(path, machine)
    assert len(log.steps) == count
    assert (log.steps[0].iteration, log.steps[0].step_time_s) == first
    assert (log.steps[-1].iteration, log.steps[-1].step_time_s) == last
    assert detect_format(path) == "megatron-golden"


@pytest.mark.parametrize(
    ("name", "count", "first", "last"),
    [
        ("megatron-bridge-llama3-8b-8gpu-bf16-20iters.log", 20, (1, 12.953, 8404), (20, 0.4492, 8450)),
        (
            "megatron-lm-via-ms-swift-qwen2-0.5b-2gpu-bf16-120iters.log",
            12,
            (10, 8.1959, 565),
            (120, 0.7172, 578),
        ),
    ],
)
def test_megatron_logs(
    real_samples: Path, name: str, count: int, first: tuple[int, float, int], last: tuple[int, float, int]
) -> None:
    path = real_samples / "training-logs" / name
    log = parse_megatron(path, name)
    assert len(log.steps) == count
    for step, (iteration, seconds, line) in ((log.steps[0], first), (log.steps[-1], last)):
        assert (step.iteration, step.line) == (iteration, line)
        assert step.step_time_s == pytest.approx(seconds, abs=1e-9)
    assert detect_format(path) == "megatron"


@pytest.mark.parametrize(
    ("name", "count", "first", "last"),
    [
        ("nemo2-llama3-toy-1gpu-bf16-20steps.log", 20, (0, 3.632, 479), (19, 0.4437, 498)),
        ("nemo2-nemorun-llama-54m-8gpu-tp2-20steps.log", 20, (0, 10.31, 139), (0, 7.592, 163)),
        ("nemo2-nemorun-llama-54m-8gpu-crash-and-in-job-restart.log", 26, (0, 10.51, 141), (19, 7.592, 772)),
        ("nemo2-nemorun-llama-54m-8gpu-straggler-terminated.log", 16, (0, 10.4, 139), (15, 7.611, 157)),
    ],
)
def test_nemo_logs(
    real_samples: Path, name: str, count: int, first: tuple[int, float, int], last: tuple[int, float, int]
) -> None:
    path = real_samples / "training-logs" / name
    log = parse_nemo(path, name)
    assert len(log.steps) == count
    for step, (iteration, seconds, line) in ((log.steps[0], first), (log.steps[-1], last)):
        assert (step.iteration, step.step_time_s, step.line) == (iteration, seconds, line)
    assert detect_format(path) == "nemo"


def test_nemo_crash_and_restart_events(real_samples: Path) -> None:
    log = parse_nemo_resilience(
        real_samples / "training-logs" / "nemo2-nemorun-llama-54m-8gpu-crash-and-in-job-restart.log", "crash"
    )
    kinds = [(e.kind, e.line, e.step) for e in log.events]
    # read by hand: save of step=9 at 154, worker exit at 614, group FAILED at 615, restore at 758,
    # iteration 10 printed again at 763, save of step=19 at 776, SUCCEEDED at 778
    assert kinds == [
        (LogEventKind.CHECKPOINT_SAVED, 154, 9),
        (LogEventKind.WORKER_FAILED, 614, 15),
        (LogEventKind.WORKER_GROUP_FAILED, 615, 15),
        (LogEventKind.CHECKPOINT_LOADED, 758, 9),
        (LogEventKind.RESTART, 763, 10),
        (LogEventKind.CHECKPOINT_SAVED, 776, 19),
        (LogEventKind.WORKER_GROUP_SUCCEEDED, 778, 19),
    ]
    assert log.straggler_reports == []


def test_nemo_straggler_report(real_samples: Path) -> None:
    log = parse_nemo_resilience(
        real_samples / "training-logs" / "nemo2-nemorun-llama-54m-8gpu-straggler-terminated.log", "strag"
    )
    relative, individual = log.straggler_reports
    assert relative.kind == "relative" and relative.line == 159
    assert [(s.rank, s.score, s.line) for s in relative.scores][:2] == [(5, 0.97, 160), (4, 0.97, 161)]
    assert sorted(s.rank for s in relative.scores) == list(range(8))
    assert individual.kind == "individual" and all(s.score == 1.0 for s in individual.scores)
    warning = next(e for e in log.events if e.kind is LogEventKind.STRAGGLER_WARNING)
    assert (warning.line, warning.ranks, warning.nodes) == (180, [0, 1, 2, 4, 5, 6], ["4809917ea058"])
    assert any(e.kind is LogEventKind.STRAGGLER_TERMINATION and e.line == 181 for e in log.events)


def test_nccl_sweeps_read_by_pattern_as_line_by_line(real_samples: Path) -> None:
    """Every real nccl-tests output (the two pairwise sweeps included) through the whole-text reading (the parser
    bench's 50 MB/s) and the line-by-line one: the same tests, rows, float bits, hosts and lines."""
    from clustercert.parsers.training import read_text
    from tests.unit.parsers.test_nccl_fast import assert_alike

    logs = sorted((real_samples / "nccl-tests").rglob("*.log"))
    kinds = [assert_alike(read_text(path, path.name, limit=1 << 30))[0] for path in logs]
    assert len(kinds) > 300 and set(kinds) == {"ok"}
