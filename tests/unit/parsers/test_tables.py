"""MLPerf, sacct, events, rank timings, DCGM and NeMo resilience parsers on small hand-written inputs."""
# ruff: noqa: E501  (test data lines are copied as the tools print them)

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import detect_format, inspect_evidence
from clustercert.parsers.dcgm import parse_dcgm
from clustercert.parsers.events import EventType, parse_events
from clustercert.parsers.mlperf import parse_mlperf
from clustercert.parsers.nemo_resilience import LogEventKind, parse_nemo_resilience
from clustercert.parsers.rank_timings import parse_rank_timings
from clustercert.parsers.sacct import parse_elapsed, parse_sacct


def mllog(key: str, time_ms: int, **meta: object) -> str:
    record = {"time_ms": time_ms, "key": key, "value": None, "metadata": meta}
    return ":::MLLOG " + json.dumps(record)


def mlperf_folder(tmp_path: Path, minutes: list[float | None]) -> Path:
    folder = tmp_path / "res"
    folder.mkdir()
    for index, value in enumerate(minutes):
        lines = [
            ':::MLLOG {"time_ms": 1, "key": "submission_benchmark", "value": "bert", "metadata": {}}',
            mllog("run_start", 1000),
        ]
        if value is not None:
            lines.append(mllog("run_stop", 1000 + int(value * 60000), status="success"))
        else:
            lines.append(mllog("run_stop", 5000, status="aborted"))
        (folder / f"result_{index}.txt").write_text("\n".join(lines) + "\n")
    (folder / "scaling.json").write_text('{"scaling_factor": 2.0}')
    return folder


def test_mlperf_olympic_score(tmp_path: Path) -> None:
    folder = mlperf_folder(tmp_path, [10.0, 12.0, 11.0, 30.0, 9.0])
    result = parse_mlperf(folder, "res", ruleset="4.0.0")
    assert [r.minutes for r in result.runs] == [10.0, 12.0, 11.0, 30.0, 9.0]
    assert result.score_minutes == pytest.approx((10 + 11 + 12) / 3 * 2.0)
    assert (result.benchmark, result.ruleset, result.scaling_factor, result.error) == (
        "bert",
        "4.0.0",
        2.0,
        None,
    )
    assert detect_format(folder) == "mlperf"
    out = inspect_evidence(folder, None, display="res", ruleset="4.0.0")
    assert out["score_minutes"] == pytest.approx(22.0)
    assert out["runs"][0]["start_line"] == 2  # type: ignore[index]


def test_mlperf_one_failed_run_is_infinite_two_make_it_invalid(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    one = parse_mlperf(mlperf_folder(tmp_path / "a", [10.0, 12.0, None]), "a")
    assert one.score_minutes == 12.0 * 2.0 and one.runs[2].status == "aborted" and one.runs[2].minutes is None
    (tmp_path / "b").mkdir()
    two = parse_mlperf(mlperf_folder(tmp_path / "b", [10.0, None, None]), "b")
    assert two.score_minutes is None and two.error is not None and "2 runs" in two.error


def test_mlperf_missing_run_start(tmp_path: Path) -> None:
    path = tmp_path / "result_0.txt"
    path.write_text(mllog("run_stop", 5, status="success") + "\n")
    with pytest.raises(EvidenceError, match="field 'run_start'"):
        parse_mlperf(path, "result_0.txt")


SACCT_HEADER = """\
JobID|State|Elapsed|Start|End
# a comment

101|CANCELLED by 1234|1-02:03:04|2024-01-02T03:04:05|Unknown
101.batch|CANCELLED|00:05.5|2024-01-02T03:04:05|2024-01-02T03:09:05
101.0|NODE_FAIL|05:00|None|None
102|REQUEUED|00:00:00|2024-01-02T03:04:05|2024-01-02T03:04:05
"""


def test_sacct_header_states_elapsed_timezone(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text(SACCT_HEADER)
    result = parse_sacct(path, "s.txt", timezone="Europe/Paris")
    job = result.jobs[0]
    assert (job.job_id, job.state, job.state_raw, job.elapsed_s, job.line) == (
        "101",
        "CANCELLED",
        "CANCELLED by 1234",
        93784,
        4,
    )
    assert job.start == "2024-01-02T03:04:05+01:00" and job.end is None
    assert [(s.step_id, s.state, s.elapsed_s) for s in job.steps] == [
        ("101.batch", "CANCELLED", 5.5),
        ("101.0", "NODE_FAIL", 300),
    ]
    assert result.jobs[1].state == "REQUEUED"
    assert detect_format(path) == "sacct"
    out = inspect_evidence(path, "sacct", display="s.txt")
    assert out["jobs"][0]["steps"][0]["step_id"] == "101.batch"  # type: ignore[index]


def test_sacct_field_count_and_state_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text("FAILED|7|00:01\n")
    with pytest.raises(
        EvidenceError, match=r"s line 1 field 'row': expected at most 2 fields as the field list names, got 3\. Give"
    ):
        parse_sacct(path, "s", fields=["State", "JobID"])
    assert parse_sacct(path, "s", fields=["State", "JobID", "Elapsed"]).jobs[0].elapsed_s == 1
    path.write_text("BOGUS|7|00:01\n")
    with pytest.raises(EvidenceError, match="field 'State'"):
        parse_sacct(path, "s", fields=["State", "JobID", "Elapsed"])
    with pytest.raises(EvidenceError, match="field list"):
        parse_sacct(path, "s")


def test_elapsed_forms() -> None:
    assert parse_elapsed("1-02:03:04", file="f", line=1) == 93784
    assert parse_elapsed("02:03", file="f", line=1) == 123
    with pytest.raises(EvidenceError, match="f line 3 field 'Elapsed'"):
        parse_elapsed("2h", file="f", line=3)


def test_events_schema(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(
        '{"ts": "2025-03-07T22:39:36+00:00", "type": "fault_injected", "node": "n1", "gpu": 3, "by": "injector"}\n'
        "\n"
        '{"ts": "2025-03-07T22:40:00Z", "type": "node_excluded", "node": "n1", "by": "scheduler", "why": "x"}\n'
    )
    log = parse_events(path, "e")
    assert [(e.type, e.line, e.node) for e in log.events] == [
        (EventType.FAULT_INJECTED, 1, "n1"),
        (EventType.NODE_EXCLUDED, 3, "n1"),
    ]
    assert log.events[1].extra == {"why": "x"} and log.events[0].gpu == 3
    assert detect_format(path) == "events"
    path.write_text('{"ts": "2025-03-07T22:39:36", "type": "fault_injected"}\n')
    with pytest.raises(EvidenceError, match="e line 1 field 'ts': expected a time with an offset"):
        parse_events(path, "e")
    path.write_text('{"ts": "2025-03-07T22:39:36Z", "type": "reboot"}\n')
    with pytest.raises(EvidenceError, match="field 'type'"):
        parse_events(path, "e")


def test_rank_timings_csv_and_parquet(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text(
        "rank,node,gpu,step,compute_s,comm_s,timestamp\n0,n1,0,1,0.5,0.1,2025-03-07T22:39:36+00:00\n"
        "1,n2,0,2,0.6,0.2,2025-03-07T22:39:37+00:00\n"
    )
    result = parse_rank_timings(csv, "t.csv")
    assert (result.ranks, result.nodes, result.first_step, result.last_step) == (2, 2, 1, 2)
    assert detect_format(csv) == "rank-timings"
    parquet = tmp_path / "t.parquet"
    pq.write_table(result.table, parquet)
    assert parse_rank_timings(parquet, "t.parquet").table.num_rows == 2
    assert detect_format(parquet) == "rank-timings"
    bad = tmp_path / "b.csv"
    bad.write_text(
        "rank,node,gpu,step,compute_s,comm_s,timestamp\n0,n1,0,1,0.5,0.1,2025-03-07T22:39:36+00:00\n"
        "1,n2,0,2,-0.6,0.2,2025-03-07T22:39:37+00:00\n"
    )
    with pytest.raises(EvidenceError, match=r"b.csv line 2 field 'compute_s': expected values >= 0"):
        parse_rank_timings(bad, "b.csv")
    table = pa.table({"rank": [0]})
    pq.write_table(table, tmp_path / "m.parquet")
    with pytest.raises(EvidenceError, match="field 'node'"):
        parse_rank_timings(tmp_path / "m.parquet", "m")


def test_dcgm_prometheus_and_dmon(tmp_path: Path) -> None:
    prom = tmp_path / "d.prom"
    prom.write_text(
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n1"} 97 1700000000000\n'
    )
    telemetry = parse_dcgm(prom, "d")
    assert len(telemetry) == 1
    sample = telemetry.sample(0)
    assert (sample.metric, sample.gpu, sample.host, sample.value, sample.time_ms, sample.line) == (
        "DCGM_FI_DEV_GPU_UTIL",
        "0",
        "n1",
        97.0,
        1700000000000,
        3,
    )
    assert detect_format(prom) == "dcgm"
    prom.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 97\n')
    with pytest.raises(EvidenceError, match="d line 1 field 'timestamp'"):
        parse_dcgm(prom, "d")
    dmon = tmp_path / "dmon.txt"
    dmon.write_text(
        "#Entity   GPUTL  POWER\nID\nGPU 0     10     63.5\nGPU 1     N/A    61.0\nGPU 0     20     64.0\n"
    )
    start = datetime(2025, 1, 1, tzinfo=UTC)
    result = parse_dcgm(dmon, "dmon", start_time=start, interval_s=2.0)
    assert [(s.metric, s.gpu, s.value, s.time_ms - 1735689600000) for s in result.head(len(result))] == [
        ("GPUTL", "0", 10.0, 0),
        ("POWER", "0", 63.5, 0),
        ("GPUTL", "1", None, 0),
        ("POWER", "1", 61.0, 0),
        ("GPUTL", "0", 20.0, 2000),
        ("POWER", "0", 64.0, 2000),
    ]
    with pytest.raises(EvidenceError, match="field 'start_time'"):
        parse_dcgm(dmon, "dmon")


def test_nemo_resilience_lines(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    path.write_text(
        "p [default0]:Training epoch 0, iteration 0/9 | global_step: 0 | train_step_timing in s: 1.0\n"
        "p [default0]:Training epoch 0, iteration 1/9 | global_step: 1 | train_step_timing in s: 1.0\n"
        "p [2025-03-07 22:39:36,177] [INFO] [ft_launcher@h] [default] Worker group FAILED. 3/3 attempts left; "
        "will restart worker group\n"
        "p [default0]:Restored all states from the checkpoint at /c/model-step=0-last/weights\n"
        "p [default0]:Training epoch 0, iteration 1/9 | global_step: 1 | train_step_timing in s: 1.0\n"
        "p [default0]:[NeMo I 2025-03-07 22:43:58 straggler_det_callback:144] \n"
        "p [default0]:    GPU relative performance:\n"
        "p [default0]:      Rank=1 Node=h Score=0.50\n"
        "p [default0]:      Rank=0 Node=h Score=1.00\n"
        "p [default0]:    \n"
        "p [default0]:[NeMo W 2025-03-07 22:43:58 straggler_det_callback:106] STRAGGLER DETECTION WARNING: Some GPUs "
        "have worse relative performance. Affected ranks: {StragglerId(rank=1, node='h')}\n"
        "p [default0]:[NeMo E 2025-03-07 22:43:58 straggler_det_callback:239] Detected stragglers. Terminating training...\n"
    )
    log = parse_nemo_resilience(path, "n")
    assert [(e.kind, e.line, e.step) for e in log.events] == [
        (LogEventKind.WORKER_GROUP_FAILED, 3, 1),
        (LogEventKind.CHECKPOINT_LOADED, 4, 0),
        (LogEventKind.RESTART, 5, 1),
        (LogEventKind.STRAGGLER_WARNING, 11, 1),
        (LogEventKind.STRAGGLER_TERMINATION, 12, 1),
    ]
    assert log.events[3].ranks == [1] and log.events[3].nodes == ["h"]
    (report,) = log.straggler_reports
    assert (report.kind, report.line, [(s.rank, s.score, s.line) for s in report.scores]) == (
        "relative",
        7,
        [(1, 0.5, 8), (0, 1.0, 9)],
    )
    out = inspect_evidence(path, "nemo", display="n")
    assert len(out["events"]) == 5 and not math.isnan(out["steps"][0]["step_time_s"])  # type: ignore[index,arg-type]


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02binary", b"   \n"])
def test_every_text_parser_refuses_empty_and_binary(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad"
    path.write_bytes(content)
    for fmt in (
        "nemo",
        "megatron",
        "megatron-deepspeed",
        "dllogger",
        "nccl-tests",
        "sacct",
        "events",
        "dcgm",
    ):
        with pytest.raises(EvidenceError, match=r"^bad: expected"):
            inspect_evidence(path, fmt, display="bad", **({"fields": ["State"]} if fmt == "sacct" else {}))


def test_an_empty_file_is_said_to_be_empty(tmp_path: Path) -> None:
    """An empty log (a job that died before it wrote, a copy that failed) was "could not detect one. Pass
    --format", and no format makes it readable."""
    from tests.conftest import run_cli

    empty = tmp_path / "r1.log"
    empty.write_bytes(b"")
    with pytest.raises(EvidenceError) as exc:
        detect_format(empty, "training/r1.log")
    assert str(exc.value) == "training/r1.log: expected a known evidence format, got an empty file"
    proc = run_cli("evidence", "parse", str(empty))
    assert (proc.returncode, proc.stdout) == (3, "")
    assert proc.stderr == f"error: {empty}: expected a known evidence format, got an empty file\n"
