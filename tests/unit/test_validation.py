"""Every expectation of checks/ on one table that passes it and one that fails it; loading, batching, gating."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from clustercert.catalog import LoadedCatalog, load_catalog
from clustercert.errors import ChecksError
from clustercert.evidence.bundle import LoadedBundle, RunKind, RunSpec, load_bundle
from clustercert.evidence.facts import RunFacts, bundle_facts, run_facts
from clustercert.evidence.parse import ParsedFile
from clustercert.evidence.provenance import Span
from clustercert.parsers.dcgm import DcgmSample, Telemetry
from clustercert.parsers.events import Event, EventLog, EventType
from clustercert.parsers.health.common import Reading
from clustercert.parsers.health.gpus import GpuRecord, GpuReport
from clustercert.parsers.mlperf import MlperfResult, MlperfRun
from clustercert.parsers.nccl_tests import CollectiveTest, NcclRow, NcclTestsResult
from clustercert.parsers.nemo_resilience import LogEvent, LogEventKind, ResilienceLog
from clustercert.parsers.rank_timings import RankTimings
from clustercert.parsers.sacct import SacctJob, SacctResult, SacctStep
from clustercert.parsers.training import TrainingLog, TrainingStep
from clustercert.validation.suites import (
    ResultStatus,
    SuiteSpec,
    ValidationReport,
    apply_gating,
    load_suites,
    run_tables,
)
from clustercert.validation.tables import (
    TableInput,
    collective_table,
    events_table,
    gpu_counts_table,
    gpu_health_table,
    hosts_table,
    mlperf_table,
    rank_timings_table,
    scheduler_span_table,
    scheduler_table,
    telemetry_table,
    training_files_table,
    training_table,
)
from clustercert.verdicts import Check, Outcome, Severity, Status, decide_outcome

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ROOT / "checks"
T0 = dt.datetime(2026, 11, 2, 3, 0, tzinfo=dt.UTC)
SPAN = (T0.timestamp(), T0.timestamp() + 3600.0)


@pytest.fixture(scope="module")
def suites() -> dict[str, SuiteSpec]:
    return load_suites(CHECKS)


@pytest.fixture(scope="module")
def catalog() -> LoadedCatalog:
    return load_catalog("exemplar-gb200", ROOT / "references")


# ---- good tables, built from the parsers' own typed results -------------------------------------------------

RUN = RunSpec(id="llama3-70b-fp8-512-r1", phase="efficiency", kind="training", format="nemo", workload="llama3-70b",
              precision="fp8", gpus=512, gbs=2048, seq_len=8192, files=["t.log"])  # type: ignore[arg-type]


def _steps(change: dict[int, dict[str, Any]] | None = None) -> list[TrainingStep]:
    # 7.6 s per step at 1848 TFLOPS/GPU: the seed sample's llama3-70b (MFU about 0.39, 512 GPUs implied)
    steps = [TrainingStep(iteration=i, step_time_s=7.6, line=100 + i, tflops_per_gpu=1848.0, loss=5.0,
                          global_step=i) for i in range(50)]
    return [dataclasses.replace(s, **(change or {}).get(s.iteration, {})) for s in steps]


def _stamped(printed_s: float) -> list[TrainingStep]:
    """The 50 steps with whole-second stamps of a clock that ran 7.6 s per step, and `printed_s` as their time."""
    start = T0.timestamp()
    return [dataclasses.replace(s, step_time_s=printed_s, timestamp_s=float(math.floor(start + 7.6 * s.iteration)))
            for s in _steps()]


def training(steps: list[TrainingStep] | None = None, resilience: ResilienceLog | None = None,
             catalog: LoadedCatalog | None = None) -> TableInput:
    log = TrainingLog(format="nemo", file="t.log", steps=_steps() if steps is None else steps)
    parsed = ParsedFile(RUN.id, RunKind.TRAINING, "t.log", "t.log", log, None, resilience)
    return training_table(parsed, RUN, run_facts(RUN, catalog or load_catalog("exemplar-gb200", ROOT / "references")))


def _nccl_row(size: int, line: int, **change: Any) -> NcclRow:
    row = NcclRow(size_bytes=size, time_us_oop=100.0, algbw_oop=300.0, busbw_oop=500.0, time_us_ip=100.0,
                  algbw_ip=300.0, busbw_ip=500.0, wrong_oop=0, wrong_ip=0, line=line)
    return row._replace(**change)


def collective(change: dict[str, Any] | None = None, ranks: int | None = 8) -> TableInput:
    rows = [_nccl_row(1 << (20 + i), 20 + i) for i in range(5)]
    if change:
        rows[3] = rows[3]._replace(**change)
    test = CollectiveTest("all_reduce", ranks, rows, 500.0, None, 2, 30)
    parsed = ParsedFile("nccl", RunKind.COLLECTIVE, "n.log", "n.log", NcclTestsResult("n.log", [test]))
    return collective_table(parsed, 1800.0)


def rank_timings(change: Callable[[dict[str, list[Any]]], None] | None = None) -> TableInput:
    columns: dict[str, list[Any]] = {
        "rank": [r for _ in range(10) for r in range(8)],
        "node": [f"n{r // 4}" for _ in range(10) for r in range(8)],
        "gpu": [r % 4 for _ in range(10) for r in range(8)],
        "step": [s for s in range(10) for _ in range(8)],
        "compute_s": [1.0] * 80,
        "comm_s": [0.2] * 80,
        "timestamp": [T0 + dt.timedelta(seconds=10 + s) for s in range(10) for _ in range(8)],
    }
    if change:
        change(columns)
    table = pa.table({**columns, "timestamp": pa.array(columns["timestamp"], pa.timestamp("us", "UTC"))})
    result = RankTimings.from_table("r.parquet", table, 8, 2, 0, 9)
    return rank_timings_table(ParsedFile("ranks", RunKind.RANK_TIMINGS, "r.parquet", "r.parquet", result), 4, SPAN)


def telemetry(extra: DcgmSample | None = None) -> TableInput:
    base = int(T0.timestamp() * 1000) + 60_000
    metrics = [("DCGM_FI_DEV_GPU_TEMP", 65.0), ("DCGM_FI_DEV_POWER_USAGE", 1050.0), ("DCGM_FI_DEV_GPU_UTIL", 98.0),
               ("DCGM_FI_PROF_SM_ACTIVE", 0.9), ("DCGM_FI_DEV_SM_CLOCK", 1965.0), ("POWER", 700.0)]
    samples = [DcgmSample(m, str(g), "n1", v, base + 1000 * k, 1 + k * 12 + g * 6 + i)
               for k in range(3) for g in range(2) for i, (m, v) in enumerate(metrics)]
    if extra is not None:
        samples.append(extra)
    return telemetry_table(ParsedFile("tel", RunKind.TELEMETRY, "d.prom", "d.prom",
                                      Telemetry.from_samples("d.prom", "prometheus", samples)), SPAN)


def _iso(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat()


def scheduler(**change: Any) -> TableInput:
    step = SacctStep("845.0", "COMPLETED", "COMPLETED", 290.0, _iso(5), _iso(295), 3)
    job = SacctJob("845", "COMPLETED", "COMPLETED", 301.0, _iso(0), _iso(301), _iso(0), 2, [step])
    job = job._replace(**change)
    return scheduler_table(ParsedFile("sched", RunKind.SCHEDULER, "s.txt", "s.txt",
                                      SacctResult("s.txt", ["JobID"], "UTC", [job])))


def events(**change: Any) -> TableInput:
    evs = [Event(T0 + dt.timedelta(seconds=60), EventType.JOB_STARTED, 1, node="n1"),
           Event(T0 + dt.timedelta(seconds=120), EventType.FAULT_INJECTED, 2, node="n2", by="injector"),
           Event(T0 + dt.timedelta(seconds=130), EventType.FAULT_DETECTED, 3, node="n2", by="watchdog")]
    evs[2] = evs[2]._replace(**change)
    return events_table(ParsedFile("ev", RunKind.EVENTS, "e.jsonl", "e.jsonl", EventLog("e.jsonl", evs)),
                        ["n1", "n2"], SPAN)


def mlperf(runs: list[MlperfRun] | None = None) -> TableInput:
    good = [MlperfRun(f"result_{i}.txt", "success", 1000, 1000 + 60_000 * (30 + i), 3, 90) for i in range(5)]
    result = MlperfResult("mlperf", "llama2_70b_lora", "4.0.0", good if runs is None else runs, None, None, 31.0,
                          None)
    return mlperf_table(ParsedFile("ml", RunKind.MLPERF, "mlperf", "mlperf", result))


def gpu_health(change: dict[int, dict[str, Any]] | None = None, *, attached: int = 8, gpus: int = 8) -> TableInput:
    """An 8-GPU H100 `nvidia-smi -q` report as the tool prints it idle: GPU i's section at line 10 + 180 i;
    `change` sets readings of GPU i (a bus id, or a reading's printed value)."""
    records = []
    for i in range(gpus):
        line = 10 + 180 * i
        values: dict[str, Any] = {"bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                                  "uuid": f"GPU-{i:08x}-1c2d-4e5f-8a9b-0123456789ab", "power.draw": 69.2,
                                  "utilization.gpu": 0.0, "pcie.replays": 0, "remap.uncorrectable": 0}
        values.update((change or {}).get(i, {}))
        readings = {key: Reading(value, line + 40, str(value)) for key, value in values.items() if key != "bus_id"}
        records.append(GpuRecord(i, values["bus_id"], line, readings, processes=0, processes_line=line + 170))
    report = GpuReport("nvidia-smi-q.txt", "nvidia-smi -q", 1, 10 + 180 * gpus, attached, records)
    table = gpu_health_table(ParsedFile("node1-smi", RunKind.HEALTH, "nvidia-smi-q.txt", "nvidia-smi-q.txt", report))
    assert table is not None
    return table


def frame_change(table: TableInput, change: Callable[[pd.DataFrame], pd.DataFrame]) -> TableInput:
    source = table.batches

    def batches() -> Iterator[pd.DataFrame]:
        for frame in source():
            yield change(frame.copy())

    return dataclasses.replace(table, batches=batches, columns=None)  # its columns are no longer the frame's


def _set(column: str, index: int, value: Any, dtype: str | None = None) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        if dtype:
            frame[column] = frame[column].astype(dtype)
        frame.loc[index, column] = value
        return frame

    return change


def _drop(column: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    return lambda frame: frame.drop(columns=[column])


def _cast(column: str, dtype: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame[column] = frame[column].astype(dtype)
        return frame

    return change


def _rank_dup(c: dict[str, list[Any]]) -> None:
    for key in c:
        c[key].append(c[key][5])


def _rank_set(column: str, value: Any) -> Callable[[dict[str, list[Any]]], None]:
    def change(c: dict[str, list[Any]]) -> None:
        c[column][17] = value

    return change


BASE = int(T0.timestamp() * 1000)

# (suite, expectation id) -> (good table, bad table, line of the first offending row or None)
CASES: dict[tuple[str, str], tuple[Callable[[], TableInput], Callable[[], TableInput], int | None]] = {
    ("training_steps", "columns_present"): (training, lambda: frame_change(training(), _drop("mfu")), None),
    ("training_steps", "has_steps"): (training, lambda: training([]), None),
    ("training_steps", "iteration_is_integer"): (
        training, lambda: frame_change(training(), _cast("iteration", "float64")), None),
    ("training_steps", "step_time_is_float"): (
        training, lambda: frame_change(training(), _cast("step_time_s", "str")), None),
    ("training_steps", "iteration_not_null"): (
        training, lambda: frame_change(training(), _set("iteration", 7, None, "object")), 107),
    ("training_steps", "step_time_not_null"): (training, lambda: training(_steps({12: {"step_time_s": None}})), 112),
    ("training_steps", "step_time_positive"): (training, lambda: training(_steps({12: {"step_time_s": 0.0}})), 112),
    ("training_steps", "window_step_time_positive"): (
        training, lambda: training(_steps({40: {"step_time_s": -12.71}})), 140),
    ("training_steps", "window_step_time_plausible"): (  # hostile corpus: a step time of 1e308 in one repeat
        training, lambda: training(_steps({40: {"step_time_s": 1e308}})), 140),
    ("training_steps", "iterations_strictly_increasing"): (
        training, lambda: training(_steps({21: {"iteration": 20, "global_step": 20}})), 121),
    ("training_steps", "window_complete"): (
        training, lambda: training([s for s in _steps() if s.iteration != 40]), None),
    ("training_steps", "mfu_plausible"): (training, lambda: training(_steps({30: {"step_time_s": 0.76}})), 130),
    # hostile corpus: step times edited faster (halved) or slower (doubled) than the log's own whole-second stamps
    ("training_steps", "step_times_match_clock"): (
        lambda: training(_stamped(7.6)), lambda: training(_stamped(3.8)), 101),
    ("training_steps", "clock_covers_step_times"): (
        lambda: training(_stamped(7.6)), lambda: training(_stamped(15.2)), 101),
    ("collective_results", "columns_present"): (collective, lambda: frame_change(collective(), _drop("busbw_ip")),
                                                None),
    ("collective_results", "size_is_integer"): (
        collective, lambda: frame_change(collective(), _cast("size_bytes", "float64")), None),
    ("collective_results", "busbw_oop_not_null"): (collective, lambda: collective({"busbw_oop": float("nan")}), 23),
    ("collective_results", "busbw_ip_not_null"): (collective, lambda: collective({"busbw_ip": float("nan")}), 23),
    ("collective_results", "size_not_negative"): (collective, lambda: collective({"size_bytes": -8}), 23),
    ("collective_results", "time_oop_positive"): (collective, lambda: collective({"time_us_oop": 0.0}), 23),
    ("collective_results", "time_ip_positive"): (collective, lambda: collective({"time_us_ip": 0.0}), 23),
    ("collective_results", "busbw_oop_below_ceiling"): (collective, lambda: collective({"busbw_oop": 1800.5}), 23),
    ("collective_results", "busbw_ip_below_ceiling"): (collective, lambda: collective({"busbw_ip": 4000.0}), 23),
    ("collective_results", "no_wrong_results_oop"): (collective, lambda: collective({"wrong_oop": 3}), 23),
    ("collective_results", "no_wrong_results_ip"): (collective, lambda: collective({"wrong_ip": 1}), 23),
    ("collective_results", "ranks_listed"): (collective, lambda: collective(ranks=None), 20),
    ("rank_timings", "columns_present"): (rank_timings, lambda: frame_change(rank_timings(), _drop("key_count")),
                                          None),
    ("rank_timings", "rank_is_integer"): (
        rank_timings, lambda: frame_change(rank_timings(), _cast("rank", "float64")), None),
    ("rank_timings", "compute_is_float"): (
        rank_timings, lambda: frame_change(rank_timings(), _cast("compute_s", "str")), None),
    ("rank_timings", "timestamp_not_null"): (rank_timings, lambda: rank_timings(_rank_set("timestamp", None)), 18),
    ("rank_timings", "rank_step_unique"): (rank_timings, lambda: rank_timings(_rank_dup), 6),
    ("rank_timings", "compute_time_positive"): (rank_timings, lambda: rank_timings(_rank_set("compute_s", 0.0)), 18),
    ("rank_timings", "comm_time_not_negative"): (rank_timings, lambda: rank_timings(_rank_set("comm_s", -0.1)), 18),
    ("rank_timings", "gpu_index_on_node"): (rank_timings, lambda: rank_timings(_rank_set("gpu", 4)), 18),
    ("rank_timings", "timestamps_in_run_span"): (
        rank_timings, lambda: rank_timings(_rank_set("timestamp", T0 - dt.timedelta(days=1))), 18),
    ("telemetry", "columns_present"): (telemetry, lambda: frame_change(telemetry(), _drop("time_s")), None),
    ("telemetry", "time_not_null"): (telemetry, lambda: frame_change(telemetry(), _set("time_s", 3, None)), 4),
    ("telemetry", "gpu_not_null"): (telemetry, lambda: frame_change(telemetry(), _set("gpu", 3, None)), 4),
    ("telemetry", "temperature_physical"): (
        telemetry, lambda: telemetry(DcgmSample("DCGM_FI_DEV_GPU_TEMP", "0", None, 340.0, BASE + 90_000, 99)), 99),
    ("telemetry", "power_physical"): (
        telemetry, lambda: telemetry(DcgmSample("DCGM_FI_DEV_POWER_USAGE", "0", None, 1.05e6, BASE + 90_000, 99)),
        99),
    ("telemetry", "utilisation_percent"): (
        telemetry, lambda: telemetry(DcgmSample("GPUTL", "0", None, 180.0, BASE + 90_000, 99)), 99),
    ("telemetry", "profiling_ratio"): (
        telemetry, lambda: telemetry(DcgmSample("DCGM_FI_PROF_SM_ACTIVE", "0", None, 90.0, BASE + 90_000, 99)), 99),
    ("telemetry", "sm_clock_physical"): (
        telemetry, lambda: telemetry(DcgmSample("DCGM_FI_DEV_SM_CLOCK", "0", None, 1.9e9, BASE + 90_000, 99)), 99),
    ("telemetry", "timestamps_in_run_span"): (
        telemetry, lambda: telemetry(DcgmSample("POWER", "0", None, 700.0, BASE + 7_200_000, 99)), 99),
    ("scheduler_records", "columns_present"): (scheduler, lambda: frame_change(scheduler(), _drop("end_s")), None),
    ("scheduler_records", "job_id_not_null"): (
        scheduler, lambda: frame_change(scheduler(), _set("job_id", 1, None, "object")), 3),
    ("scheduler_records", "state_known"): (scheduler, lambda: frame_change(scheduler(), _set("state", 0, "BOGUS")), 2),
    ("scheduler_records", "elapsed_not_negative"): (scheduler, lambda: scheduler(elapsed_s=-5.0), 2),
    ("scheduler_records", "end_not_before_start"): (scheduler, lambda: scheduler(end=_iso(-60), elapsed_s=None), 2),
    ("scheduler_records", "elapsed_matches_times"): (scheduler, lambda: scheduler(elapsed_s=1000.0), 2),
    ("job_events", "columns_present"): (events, lambda: frame_change(events(), _drop("node")), None),
    ("job_events", "time_not_null"): (events, lambda: frame_change(events(), _set("ts_s", 1, None)), 2),
    ("job_events", "type_known"): (events, lambda: frame_change(events(), _set("type", 1, "reboot")), 2),
    ("job_events", "events_in_time_order"): (events, lambda: events(ts=T0 + dt.timedelta(seconds=100)), 3),
    ("job_events", "node_in_system"): (events, lambda: events(node="n99"), 3),
    ("job_events", "timestamps_in_run_span"): (events, lambda: events(ts=T0 + dt.timedelta(hours=3)), 3),
    ("mlperf_runs", "columns_present"): (mlperf, lambda: frame_change(mlperf(), _drop("minutes")), None),
    ("mlperf_runs", "enough_runs"): (
        mlperf, lambda: mlperf([MlperfRun(f"result_{i}.txt", "success", 0, 60_000, 3, 90) for i in range(2)]), None),
    ("mlperf_runs", "run_start_present"): (
        mlperf, lambda: mlperf([MlperfRun(f"result_{i}.txt", "missing" if i == 1 else "success",
                                          None if i == 1 else 0, 60_000, 3, 90) for i in range(3)]), 90),
    ("mlperf_runs", "duration_positive"): (
        mlperf, lambda: mlperf([MlperfRun("result_0.txt", "success", 60_000, 0, 3, 90)]
                               + [MlperfRun(f"result_{i}.txt", "success", 0, 60_000, 3, 90) for i in (1, 2)]), 90),
    ("mlperf_runs", "stop_after_start"): (
        mlperf, lambda: mlperf([MlperfRun("result_0.txt", "aborted", 60_000, 0, 3, 90)]
                               + [MlperfRun(f"result_{i}.txt", "success", 0, 60_000, 3, 90) for i in (1, 2)]), 90),
    ("mlperf_runs", "runs_succeeded"): (
        mlperf, lambda: mlperf([MlperfRun("result_0.txt", "aborted", 0, 60_000, 3, 90)]
                               + [MlperfRun(f"result_{i}.txt", "success", 0, 60_000, 3, 90) for i in (1, 2)]), 90),
    ("gpu_health", "columns_present"): (gpu_health, lambda: frame_change(gpu_health(), _drop("power_w")), None),
    ("gpu_health", "has_gpus"): (gpu_health, lambda: gpu_health(attached=0, gpus=0), None),
    ("gpu_health", "every_attached_gpu_listed"): (gpu_health, lambda: gpu_health(gpus=7), None),
    ("gpu_health", "bus_id_not_null"): (
        gpu_health, lambda: frame_change(gpu_health(), _set("bus_id", 2, None, "object")), 370),
    ("gpu_health", "bus_id_unique"): (gpu_health, lambda: gpu_health({5: {"bus_id": "00000000:28:00.0"}}), 190),
    ("gpu_health", "uuid_format"): (gpu_health, lambda: gpu_health({3: {"uuid": "GPU-3"}}), 550),
    # mW read as W: 69,200 where nvidia-smi printed 69.20 W
    ("gpu_health", "power_physical"): (gpu_health, lambda: gpu_health({6: {"power.draw": 69200.0}}), 1090),
    ("gpu_health", "utilization_percent"): (gpu_health, lambda: gpu_health({1: {"utilization.gpu": 250.0}}), 190),
    ("gpu_health", "pcie_replays_not_negative"): (gpu_health, lambda: gpu_health({4: {"pcie.replays": -3}}), 730),
    ("gpu_health", "remap_count_not_negative"): (
        gpu_health, lambda: gpu_health({7: {"remap.uncorrectable": -1}}), 1270),
}


def _result(report: ValidationReport, expectation: str) -> Any:
    found = [r for r in report.all_results() if r.expectation == expectation]
    assert len(found) == 1, [r.expectation for r in report.all_results()]
    return found[0]


@pytest.fixture(scope="module")
def good_reports(suites: dict[str, SuiteSpec]) -> dict[str, ValidationReport]:
    """The good table of each suite validated once (every case's passing half)."""
    builders = {suite: good for (suite, _), (good, _, _) in CASES.items()}
    return {suite: run_tables([build()], suites) for suite, build in builders.items()}


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda c: f"{c[0]}.{c[1]}")
def test_each_expectation_passes_a_good_table_and_fails_a_bad_one(
    case: tuple[str, str], suites: dict[str, SuiteSpec], good_reports: dict[str, ValidationReport]
) -> None:
    suite, expectation = case
    _, bad, line = CASES[case]
    passed = _result(good_reports[suite], expectation)
    assert passed.status is ResultStatus.PASS, passed.message
    failed_report = run_tables([bad()], suites)
    failed = _result(failed_report, expectation)
    assert failed.status is ResultStatus.FAIL, failed.message
    if line is not None:
        assert failed.sample[0].line == line
        assert failed.unexpected_count is not None and failed.unexpected_count >= 1
        assert failed.unexpected_percent is not None and failed.unexpected_percent > 0


# ---- cross-source tables: they need a bundle.yaml ----------------------------------------------------------


def _bundle(tmp_path: Path, runs: str) -> LoadedBundle:
    (tmp_path / "t.log").write_text("x\n")
    (tmp_path / "n.log").write_text("x\n")
    (tmp_path / "s.txt").write_text("x\n")
    (tmp_path / "bundle.yaml").write_text(
        "schema_version: 1\ncluster: {name: c, provider: p}\n"
        # 128 nodes x 4 GPUs: the system holds the 512 GPUs the training run declares
        "system: {gpu: gb200-nvl72, gpus_per_node: 4, nodes: [" + ", ".join(f"n{i}" for i in range(1, 129)) + "]}\n"
        "catalog: exemplar-gb200\nrecipe_version: '25.05.05'\nruns:\n" + runs
    )
    return load_bundle(tmp_path)


TRAIN_RUN = ("  - {id: llama3-70b-fp8-512-r1, phase: efficiency, kind: training, format: nemo, workload: llama3-70b,"
             " precision: fp8, gpus: 512, gbs: 2048, seq_len: 8192, files: [t.log]}\n")
NCCL_RUN = "  - {id: nccl-8, phase: efficiency, kind: collective, format: nccl-tests, gpus: 8, files: [n.log]}\n"
SCHED_RUN = "  - {id: sched, phase: efficiency, kind: scheduler, format: sacct, files: [s.txt]}\n"


def _parsed(bundle: LoadedBundle, steps: list[TrainingStep], ranks: int, elapsed: float) -> dict[str, Any]:
    root = bundle.root
    log = TrainingLog("nemo", str(root / "t.log"), steps)
    test = CollectiveTest("all_reduce", ranks, [_nccl_row(1 << 30, 20)], 500.0, None, 7, 30)
    job = SacctJob("845", "COMPLETED", "COMPLETED", elapsed, _iso(0), _iso(elapsed), None, 2)
    return {
        "llama3-70b-fp8-512-r1": [ParsedFile("llama3-70b-fp8-512-r1", RunKind.TRAINING, "t.log", str(root / "t.log"),
                                             log)],
        "nccl-8": [ParsedFile("nccl-8", RunKind.COLLECTIVE, "n.log", str(root / "n.log"),
                              NcclTestsResult(str(root / "n.log"), [test]))],
        "sched": [ParsedFile("sched", RunKind.SCHEDULER, "s.txt", str(root / "s.txt"),
                             SacctResult("s.txt", ["JobID"], "UTC", [job]))],
    }


@pytest.mark.parametrize(
    ("expectation", "bad", "file", "line"),
    [
        ("gpu_counts_agree", {"ranks": 16}, "n.log", 7),
        ("gpu_count_implied_by_log", {"steps": _steps({i: {"tflops_per_gpu": 924.0} for i in range(50)})},
         "t.log", 100),
        ("scheduler_covers_training", {"elapsed": 200.0}, "t.log", 100),
    ],
)
def test_cross_source_expectations(
    tmp_path: Path, suites: dict[str, SuiteSpec], catalog: LoadedCatalog, expectation: str, bad: dict[str, Any],
    file: str, line: int,
) -> None:
    bundle = _bundle(tmp_path, TRAIN_RUN + NCCL_RUN + SCHED_RUN)
    good = _parsed(bundle, _steps(), 8, 3600.0)
    tables = [gpu_counts_table(bundle, bundle_facts(bundle, catalog), good), scheduler_span_table(bundle, good)]
    assert _result(run_tables(tables, suites), expectation).status is ResultStatus.PASS
    args = {"steps": _steps(), "ranks": 8, "elapsed": 3600.0, **bad}
    parsed = _parsed(bundle, args["steps"], args["ranks"], args["elapsed"])
    tables = [gpu_counts_table(bundle, bundle_facts(bundle, catalog), parsed), scheduler_span_table(bundle, parsed)]
    report = run_tables(tables, suites)
    failed = _result(report, expectation)
    assert failed.status is ResultStatus.FAIL
    assert failed.sample[0].file == str(tmp_path / file) and failed.sample[0].line == line
    run = "nccl-8" if file == "n.log" else "llama3-70b-fp8-512-r1"
    assert [c.id for c in apply_gating([], report)] == [f"validation.{run}_{expectation}"]


def test_gpu_count_observed_fails_on_a_missing_count(tmp_path: Path, suites: dict[str, SuiteSpec],
                                                     catalog: LoadedCatalog) -> None:
    bundle = _bundle(tmp_path, TRAIN_RUN + NCCL_RUN)
    table = gpu_counts_table(bundle, bundle_facts(bundle, catalog), _parsed(bundle, _steps(), 8, 3600.0))
    assert _result(run_tables([table], suites), "gpu_count_observed").status is ResultStatus.PASS
    bad = frame_change(table, _set("observed", 0, None))
    assert _result(run_tables([bad], suites), "gpu_count_observed").status is ResultStatus.FAIL


def test_gpu_count_fits_nodes(tmp_path: Path, suites: dict[str, SuiteSpec], catalog: LoadedCatalog) -> None:
    """Two nodes of 4 GPUs hold a pairwise test of 2 ranks (one GPU each); one node cannot hold 8 ranks."""
    pair = NCCL_RUN.replace("gpus: 8,", "gpus: 2, nodes: [n1, n2],")
    bundle = _bundle(tmp_path, TRAIN_RUN + pair)
    table = gpu_counts_table(bundle, bundle_facts(bundle, catalog), _parsed(bundle, _steps(), 2, 3600.0))
    assert _result(run_tables([table], suites), "gpu_count_fits_nodes").status is ResultStatus.PASS
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    bundle = _bundle(crowded, TRAIN_RUN + NCCL_RUN.replace("gpus: 8,", "gpus: 8, nodes: [n1],"))
    table = gpu_counts_table(bundle, bundle_facts(bundle, catalog), _parsed(bundle, _steps(), 8, 3600.0))
    failed = _result(run_tables([table], suites), "gpu_count_fits_nodes")
    assert failed.status is ResultStatus.FAIL and failed.sample[0].file == str(crowded / "bundle.yaml")


def test_a_run_that_shrinks_mid_run_is_a_gpu_count_finding(tmp_path: Path, suites: dict[str, SuiteSpec],
                                                             catalog: LoadedCatalog) -> None:
    """Hostile corpus: per-rank timings of a run declared at 8 GPUs whose last 5 steps ran on 4 ranks still show
    8 distinct ranks over the table; the fewest ranks of any step (4, from step 5 at row 41) is a finding."""
    ranks_run = ("  - {id: ranks, phase: resilience, kind: rank-timings, format: rank-timings, gpus: 8,"
                 " files: [n.log]}\n")
    bundle = _bundle(tmp_path, ranks_run)

    def parsed(table: pa.Table) -> dict[str, Any]:
        result = RankTimings.from_table("r.parquet", table, 8, 2, 0, 9)
        return {"ranks": [ParsedFile("ranks", RunKind.RANK_TIMINGS, "n.log", "n.log", result)]}

    whole = pa.table({"rank": [r for _ in range(10) for r in range(8)],
                      "step": [st for st in range(10) for _ in range(8)]})
    good = gpu_counts_table(bundle, bundle_facts(bundle, catalog), parsed(whole))
    assert _result(run_tables([good], suites), "gpu_counts_agree").status is ResultStatus.PASS
    shrunk = whole.filter(pc.or_(pc.less(whole.column("step"), 5), pc.less(whole.column("rank"), 4)))
    bad = gpu_counts_table(bundle, bundle_facts(bundle, catalog), parsed(shrunk))
    failed = _result(run_tables([bad], suites), "gpu_counts_agree")
    assert failed.status is ResultStatus.FAIL
    assert (failed.sample[0].value, failed.sample[0].file, failed.sample[0].line) == (0.5, "n.log", 41)


def test_training_files_distinct(tmp_path: Path, suites: dict[str, SuiteSpec]) -> None:
    """Two repeats with their own logs pass; the same log listed as both repeats, or a byte-identical copy of it
    under another name, fails at the second run's line of bundle.yaml (hostile corpus: repeats must be distinct)."""
    second = TRAIN_RUN.replace("-r1,", "-r2,").replace("[t.log]", "[t2.log]")
    (tmp_path / "t2.log").write_text("x\n")
    bundle = _bundle(tmp_path, TRAIN_RUN + second)
    (tmp_path / "t.log").write_text("first repeat\n")
    (tmp_path / "t2.log").write_text("other repeat\n")  # same size, other bytes: hashed and distinct
    passed = _result(run_tables([training_files_table(bundle)], suites), "training_files_distinct")
    assert passed.status is ResultStatus.PASS
    (tmp_path / "t2.log").write_text("first repeat\n")  # a copy under another name
    copied = _result(run_tables([training_files_table(bundle)], suites), "training_files_distinct")
    assert copied.status is ResultStatus.FAIL
    (tmp_path / "same").mkdir()
    same = _bundle(tmp_path / "same", TRAIN_RUN + second.replace("[t2.log]", "[t.log]"))
    failed = _result(run_tables([training_files_table(same)], suites), "training_files_distinct")
    assert failed.status is ResultStatus.FAIL and failed.sample[0].file == str(same.root / "bundle.yaml")
    assert {x.run for x in failed.sample} == {"llama3-70b-fp8-512-r1", "llama3-70b-fp8-512-r2"}

def test_gpu_count_fits_system(tmp_path: Path, suites: dict[str, SuiteSpec], catalog: LoadedCatalog) -> None:
    """512 GPUs fit 128 nodes of 4; a system of 54 nodes of 4 (216 GPUs) cannot have run them."""
    bundle = _bundle(tmp_path, TRAIN_RUN)
    table = gpu_counts_table(bundle, bundle_facts(bundle, catalog), {})
    assert _result(run_tables([table], suites), "gpu_count_fits_system").status is ResultStatus.PASS
    text = (tmp_path / "bundle.yaml").read_text()
    small = ", ".join(f"n{i}" for i in range(1, 55))
    (tmp_path / "bundle.yaml").write_text(text.replace(text[text.index("nodes: [") + 8:text.index("]}")], small))
    bundle = load_bundle(tmp_path)
    report = run_tables([gpu_counts_table(bundle, bundle_facts(bundle, catalog), {})], suites)
    failed = _result(report, "gpu_count_fits_system")
    assert failed.status is ResultStatus.FAIL
    assert (failed.sample[0].file, failed.sample[0].line) == (str(tmp_path / "bundle.yaml"), 7)  # the run's line
    (check,) = apply_gating([], report)
    assert check.id == "validation.llama3-70b-fp8-512-r1_gpu_count_fits_system" and check.status is Status.ERROR
    assert check.message.startswith(f"{tmp_path / 'bundle.yaml'} line 7: required expectation "
                                    "'gpu_count_fits_system' failed")


def test_host_in_system(tmp_path: Path, suites: dict[str, SuiteSpec], catalog: LoadedCatalog) -> None:
    """A host in an nccl-tests rank line that bundle.yaml's node list lacks is named with its file and line."""
    bundle = _bundle(tmp_path, TRAIN_RUN + NCCL_RUN)
    rank = "#  Rank  {r} Group  0 Pid 440010 on {h} device  0 [0000:1b:00] NVIDIA H100 80GB HBM3\n"
    (tmp_path / "n.log").write_text("# Using devices\n" + rank.format(r=0, h="n1") + rank.format(r=1, h="n2"))
    parsed = _parsed(bundle, _steps(), 8, 3600.0)
    assert _result(run_tables([hosts_table(bundle, parsed)], suites), "host_in_system").status is ResultStatus.PASS
    (tmp_path / "n.log").write_text("# Using devices\n" + rank.format(r=0, h="n1") + rank.format(r=1, h="cnode2-001"))
    report = run_tables([hosts_table(bundle, parsed)], suites)
    failed = _result(report, "host_in_system")
    assert failed.status is ResultStatus.FAIL
    assert (failed.sample[0].file, failed.sample[0].line, failed.sample[0].value) == (
        str(tmp_path / "n.log"), 3, "cnode2-001")
    assert [c.id for c in apply_gating([], report)] == ["validation.nccl-8_host_in_system"]


def test_every_expectation_in_checks_has_a_case(suites: dict[str, SuiteSpec]) -> None:
    covered = set(CASES) | {("cross_source", e) for e in (
        "gpu_counts_agree", "gpu_count_implied_by_log", "scheduler_covers_training", "gpu_count_observed",
        "gpu_count_fits_nodes", "training_files_distinct", "gpu_count_fits_system", "host_in_system")}
    declared = {(s.name, e.id) for s in suites.values() for e in s.expectations}
    assert declared == covered


# ---- behaviour of the runner -------------------------------------------------------------------------------


def test_restart_after_a_checkpoint_load_starts_a_new_segment(suites: dict[str, SuiteSpec]) -> None:
    steps = _steps() + [dataclasses.replace(s, line=s.line + 200) for s in _steps()[40:]]
    marks = ResilienceLog("t.log", [LogEvent(LogEventKind.CHECKPOINT_LOADED, 200, step=39)], [])
    restarted = _result(run_tables([training(steps, marks)], suites), "iterations_strictly_increasing")
    assert restarted.status is ResultStatus.PASS
    spliced = _result(run_tables([training(steps)], suites), "iterations_strictly_increasing")
    assert spliced.status is ResultStatus.FAIL and spliced.sample[0].line == 340


def test_duplicates_are_found_across_row_group_batches(monkeypatch: pytest.MonkeyPatch,
                                                       suites: dict[str, SuiteSpec]) -> None:
    monkeypatch.setattr("clustercert.validation.tables.BATCH_ROWS", 16)
    table = rank_timings(_rank_dup)
    assert len(list(table.batches())) == 6
    result = _result(run_tables([table], suites), "rank_step_unique")
    assert result.status is ResultStatus.FAIL
    assert result.unexpected_count == 2 and [s.line for s in result.sample] == [6, 81]
    assert result.unexpected_percent == pytest.approx(100 * 2 / 81)


def test_an_expectation_that_cannot_run_is_error_not_fail(tmp_path: Path, suites: dict[str, SuiteSpec]) -> None:
    broken = frame_change(training(), _drop("counter_increase"))
    result = _result(run_tables([broken], suites), "iterations_strictly_increasing")
    assert result.status is ResultStatus.ERROR
    assert result.message.startswith("could not run:") and "counter_increase" in result.message
    report = run_tables([broken], suites)
    assert report.summary()["errors"] >= 1


def test_expectations_without_their_parameter_are_not_applicable(suites: dict[str, SuiteSpec]) -> None:
    table = dataclasses.replace(training(), parameters={})
    report = run_tables([table], suites)
    assert report.tables[0].not_applicable == ("window_step_time_positive", "window_step_time_plausible",
                                                "window_complete")
    assert all(r.expectation != "window_complete" for r in report.tables[0].results)


def test_validation_json_shape(suites: dict[str, SuiteSpec]) -> None:
    report = run_tables([training(_steps({21: {"iteration": 20, "global_step": 20}}))], suites)
    doc = json.loads(report.dumps())
    assert doc["schema_version"] == 1 and doc["cross_source"] == []
    table = doc["tables"][0]
    assert {k: table[k] for k in ("suite", "table", "run", "file", "rows")} == {
        "suite": "training_steps", "table": "training_steps", "run": RUN.id, "file": "t.log", "rows": 50}
    bad = next(r for r in table["results"] if r["expectation"] == "iterations_strictly_increasing")
    assert bad == {
        "expectation": "iterations_strictly_increasing", "type": "expect_column_values_to_be_between",
        "kwargs": {"column": "counter_increase", "min_value": 1}, "required": True, "status": "FAIL",
        "unexpected_count": 1, "unexpected_percent": pytest.approx(100 / 49),
        "sample": [{"file": "t.log", "line": 121, "value": 0.0}],
        "message": bad["message"],
    }
    assert bad["message"].startswith("1 of 49 rows outside the expectation (within a run")
    assert doc["summary"] == {"required_failed": 1, "errors": 0, "passed": 13}


def _check(file: str, check_id: str = "efficiency.x_meets_baseline") -> Check:
    return Check(id=check_id, title="t", phase="efficiency", severity=Severity.REQUIRED, status=Status.PASS,
                 measured=1.0, target=1.0, unit="s", message="ok", evidence=(Span(file, 1, 50, 50),))


def test_gating_turns_checks_on_a_failed_table_into_errors(suites: dict[str, SuiteSpec]) -> None:
    report = run_tables([training(_steps({21: {"iteration": 20, "global_step": 20}})), collective()], suites)
    checks = [_check("t.log"), _check("other.log", "efficiency.y_meets_baseline")]
    gated = apply_gating(checks, report)
    assert [c.status for c in gated] == [Status.ERROR, Status.PASS, Status.ERROR]
    expected = "t.log line 121: required expectation 'iterations_strictly_increasing' failed: 1 of 49 rows"
    assert gated[0].message.startswith(expected)
    assert gated[2].id == f"validation.{RUN.id}_iterations_strictly_increasing"
    assert gated[2].severity is Severity.REQUIRED and gated[2].evidence[0].first == 121
    assert decide_outcome(gated) is Outcome.INCOMPLETE


def test_gating_without_a_checked_table_still_makes_the_outcome_incomplete(suites: dict[str, SuiteSpec]) -> None:
    report = run_tables([collective({"busbw_oop": 2500.0})], suites)
    gated = apply_gating([_check("t.log")], report)
    assert gated[0].status is Status.PASS
    assert [c.id for c in gated[1:]] == ["validation.nccl_busbw_oop_below_ceiling"]
    assert gated[1].message.startswith("n.log line 23: required expectation 'busbw_oop_below_ceiling' failed")
    assert decide_outcome(gated) is Outcome.INCOMPLETE


def test_a_bad_step_time_outside_the_window_is_advisory(suites: dict[str, SuiteSpec]) -> None:
    report = run_tables([training(_steps({9: {"step_time_s": -12.71}}))], suites)
    assert _result(report, "step_time_positive").status is ResultStatus.FAIL
    assert _result(report, "window_step_time_positive").status is ResultStatus.PASS
    assert report.blocking == []


def test_advisory_failures_do_not_gate(suites: dict[str, SuiteSpec]) -> None:
    report = run_tables([collective(ranks=None)], suites)
    assert _result(report, "ranks_listed").status is ResultStatus.FAIL
    assert apply_gating([_check("n.log")], report) == [_check("n.log")]


def test_suites_load_from_checks_dir_and_bad_ones_are_refused(tmp_path: Path) -> None:
    for path in CHECKS.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    assert set(load_suites(tmp_path)) == {p.stem for p in CHECKS.glob("*.json")}
    doc = json.loads((CHECKS / "telemetry.json").read_text())
    doc["expectations"].append({"type": "expect_column_mean_to_be_between", "kwargs": {"column": "value"},
                                "meta": {"id": "mean_value", "required": True, "rationale": "r"}})
    (tmp_path / "telemetry.json").write_text(json.dumps(doc))
    with pytest.raises(ChecksError, match="a batched suite takes row-wise expectations only"):
        load_suites(tmp_path)
    doc["expectations"].pop()
    doc["expectations"][0]["meta"].pop("required")
    (tmp_path / "telemetry.json").write_text(json.dumps(doc))
    with pytest.raises(ChecksError, match=r"telemetry.json expectations\[0\] \(columns_present\): expected meta"):
        load_suites(tmp_path)
    (tmp_path / "telemetry.json").write_text((CHECKS / "telemetry.json").read_text())
    (tmp_path / "mlperf_runs.json").unlink()
    with pytest.raises(ChecksError, match="expected the expectation suite 'mlperf_runs'"):
        load_suites(tmp_path)


def test_every_expectation_has_a_one_line_rationale_and_stable_id(suites: dict[str, SuiteSpec]) -> None:
    for suite in suites.values():
        for e in suite.expectations:
            assert e.rationale and "\n" not in e.rationale
            assert e.id.islower()


def test_duplicates_are_found_with_sparse_keys(suites: dict[str, SuiteSpec]) -> None:
    def sparse(c: dict[str, list[Any]]) -> None:
        c["rank"] = [r * 100_000 for r in c["rank"]]
        _rank_dup(c)

    result = _result(run_tables([rank_timings(sparse)], suites), "rank_step_unique")
    assert result.status is ResultStatus.FAIL and [s.line for s in result.sample] == [6, 81]


def test_a_step_re_run_after_a_restart_is_not_a_duplicate(suites: dict[str, SuiteSpec]) -> None:
    """After a restart from a checkpoint the same (rank, step) runs again later: a new execution, not a copy."""
    def rerun(c: dict[str, list[Any]]) -> None:
        _rank_dup(c)
        c["timestamp"][-1] = c["timestamp"][-1] + dt.timedelta(minutes=7)

    assert _result(run_tables([rank_timings(rerun)], suites), "rank_step_unique").status is ResultStatus.PASS
    copied = _result(run_tables([rank_timings(_rank_dup)], suites), "rank_step_unique")
    assert copied.status is ResultStatus.FAIL and copied.unexpected_count == 2


def test_parse_warnings_become_one_advisory_warn_check_per_run() -> None:
    report = ValidationReport((), (), parse_warnings=(
        ("sched", "s.txt", "s.txt lines 4-5: expected 26 fields as the field list names, got 25; the last 1 "
                           "(Partition) read as empty"),
        ("sched", "s.txt", "s.txt line 9: another caveat"),
    ))
    (check,) = apply_gating([], report)
    assert (check.id, check.status, check.severity, check.measured) == (
        "validation.sched_read_with_warnings", Status.WARN, Severity.ADVISORY, 2.0)
    assert check.message == ("s.txt lines 4-5: expected 26 fields as the field list names, got 25; the last 1 "
                             "(Partition) read as empty; s.txt line 9: another caveat")
    assert report.to_json()["parse_warnings"][0]["run"] == "sched"


def _validations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts Great Expectations validations (one per batch validated) made while the test runs."""
    from great_expectations.datasource.fluent.interfaces import Batch

    made = [0]
    validate = Batch.validate

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return validate(self, *args, **kwargs)

    monkeypatch.setattr(Batch, "validate", counted)
    return made


def test_stacked_tables_get_the_reports_they_get_on_their_own(monkeypatch: pytest.MonkeyPatch,
                                                             suites: dict[str, SuiteSpec]) -> None:
    """Tables of one kind are validated stacked; every case's good and bad table (failures, nulls, changed and
    missing columns, an ERROR, an empty table), with two tables whose ceiling differs, reports exactly as when
    each table is validated on its own, and each bad table still fails its own expectation."""
    cases = [(key, good, bad) for key, (good, bad, _) in sorted(CASES.items()) if not suites[key[0]].batched]
    tables = [t for _, good, bad in cases for t in (good(), bad())]
    tables += [frame_change(training(), _drop("counter_increase")),
               dataclasses.replace(collective({"busbw_oop": 1700.0}), parameters={"busbw_ceiling_gbps": 1600.0}),
               dataclasses.replace(collective(), parameters={"busbw_ceiling_gbps": 1600.0})]
    made = _validations(monkeypatch)
    own = run_tables(tables, suites, stack=False)
    alone = made[0]
    stacked = run_tables(tables, suites)
    assert made[0] - alone < alone  # stacking validated fewer batches than one per table
    assert stacked.to_json() == own.to_json()
    for index, ((suite, expectation), _, _) in enumerate(cases):
        bad = stacked.tables[2 * index + 1]
        assert bad.suite == suite
        assert next(r for r in bad.results if r.expectation == expectation).status is not ResultStatus.PASS
    ceiling = stacked.tables[-2]
    assert [r.status for r in ceiling.results if r.expectation == "busbw_oop_below_ceiling"] == [ResultStatus.FAIL]


def test_a_sweep_of_good_collective_tables_is_one_validation(monkeypatch: pytest.MonkeyPatch,
                                                             suites: dict[str, SuiteSpec]) -> None:
    """Forty collective tables that pass: one validation of their stack decides every expectation of each."""
    tables = [collective() for _ in range(40)]
    made = _validations(monkeypatch)
    report = run_tables(tables, suites)
    assert made[0] == 1
    assert len(report.tables) == 40
    assert all(r.status is ResultStatus.PASS for t in report.tables for r in t.results)
    assert [len(t.results) for t in report.tables] == [len(suites["collective_results"].expectations)] * 40
    counted = [r for r in report.tables[7].results if r.expectation == "busbw_oop_below_ceiling"]
    assert counted[0].unexpected_count == 0 and counted[0].unexpected_percent == 0.0
    typed = [r for r in report.tables[7].results if r.expectation == "size_is_integer"]
    assert typed[0].unexpected_count is None


def _null_rank(c: dict[str, list[Any]]) -> None:
    c["gpu"][40] = None  # an int column with a null in one batch: that batch's frame has it as float64


def test_large_tables_get_on_their_witness_rows_the_reports_they_get_batch_by_batch(
        monkeypatch: pytest.MonkeyPatch, suites: dict[str, SuiteSpec]) -> None:
    """Batched tables are first validated on their batches' witness rows; every case's bad table (each case's good
    table is its suite's good table, validated both ways in the test below), a null that changes a batch's dtype,
    a metric missing under a row condition, a range over text and a NaN, in batches of 16 rows, reports exactly
    as when each batch is validated, and each bad table still fails its own expectation."""
    monkeypatch.setattr("clustercert.validation.tables.BATCH_ROWS", 16)
    cases = [(key, bad) for key, (_, bad, _) in sorted(CASES.items()) if suites[key[0]].batched]
    tables = [bad() for _, bad in cases]
    tables += [rank_timings(_null_rank),
               frame_change(telemetry(), _set("metric", 5, None)),
               frame_change(telemetry(), _set("value", 2, "n/a", "object")),
               telemetry(DcgmSample("DCGM_FI_DEV_GPU_TEMP", "0", None, float("nan"), BASE + 90_000, 99))]
    whole = run_tables(tables, suites, stack=False)
    witnessed = run_tables(tables, suites)
    assert witnessed.to_json() == whole.to_json()
    for index, ((suite, expectation), _) in enumerate(cases):
        bad = witnessed.tables[index]
        assert bad.suite == suite
        assert next(r for r in bad.results if r.expectation == expectation).status is not ResultStatus.PASS
    # the batch with the null GPU index has the column as floats (validated apart): a null index is missing, not out
    # of range
    assert all(r.status is ResultStatus.PASS for r in witnessed.tables[-4].results)
    assert all(r.status is ResultStatus.PASS for r in witnessed.tables[-1].results)


def test_a_passing_telemetry_table_is_one_validation(monkeypatch: pytest.MonkeyPatch,
                                                     suites: dict[str, SuiteSpec]) -> None:
    """Telemetry in six batches that passes: one validation of its witness rows decides every expectation, with
    the row counts of a pass (no unexpected row) where the expectation counts rows; so do the rank timings."""
    monkeypatch.setattr("clustercert.validation.tables.BATCH_ROWS", 7)
    table, ranks = telemetry(), rank_timings()
    assert len(list(table.batches())) == 6
    made = _validations(monkeypatch)
    report = run_tables([table, ranks], suites)
    assert made[0] == 2
    assert report.to_json() == run_tables([table, ranks], suites, stack=False).to_json()
    results = {r.expectation: r for r in report.tables[0].results}
    assert all(r.status is ResultStatus.PASS for r in results.values())
    assert results["temperature_physical"].unexpected_count == 0
    assert results["columns_present"].unexpected_count is None


def test_validated_batches_are_not_kept(monkeypatch: pytest.MonkeyPatch, suites: dict[str, SuiteSpec]) -> None:
    """Great Expectations keeps each loaded batch's data for its context's life; the validation drops them, so a
    cluster's telemetry in 44 row-group batches is never resident at once."""
    from clustercert.validation import suites as validation_suites

    kept: list[int] = []
    context = validation_suites._context

    def watched(data_docs: Path | None = None) -> tuple[Any, Any, Any]:
        gx, ctx, batch_definition = context(data_docs)
        manager = batch_definition.data_asset.datasource.get_execution_engine().batch_manager
        original = type(manager).save_batch_data

        def save(self: Any, batch_id: str, batch_data: Any) -> None:
            kept.append(len(self.batch_data_cache))
            original(self, batch_id=batch_id, batch_data=batch_data)

        monkeypatch.setattr(type(manager), "save_batch_data", save)
        return gx, ctx, batch_definition

    monkeypatch.setattr(validation_suites, "_context", watched)
    monkeypatch.setattr("clustercert.validation.tables.BATCH_ROWS", 16)
    # the failing rank timings are validated batch by batch after their witness rows; the telemetry passes on its
    # witness rows; the collectives are stacked
    tables = [rank_timings(_rank_set("compute_s", 0.0)), telemetry(), training(), collective(), collective()]
    assert len(list(tables[0].batches())) == 5
    report = run_tables(tables, suites)
    assert len(kept) == 1 + 5 + 1 + 2 and set(kept) == {0}  # every batch loaded into an empty cache
    assert [r.expectation for t in report.tables for r in t.results
            if r.status is not ResultStatus.PASS] == ["compute_time_positive"]


def test_each_batch_of_a_large_table_leaves_no_garbage(monkeypatch: pytest.MonkeyPatch,
                                                     suites: dict[str, SuiteSpec]) -> None:
    """The heap that exists before validation is frozen and each row-group batch's cyclic garbage collected
    after it (Python's own full collections are rare beside a cluster's parsed evidence: 44 telemetry batches
    grew a 512-GPU certification by 1.8 GB); the heap is unfrozen after, also when a table cannot be validated."""
    import gc

    from clustercert.validation import suites as validation_suites

    monkeypatch.setattr("clustercert.validation.tables.BATCH_ROWS", 16)
    frozen: list[int] = []
    collect = gc.collect

    def counted(generation: int = 2) -> int:
        frozen.append(gc.get_freeze_count())
        return collect(generation)

    monkeypatch.setattr(validation_suites.gc, "collect", counted)
    tables = [rank_timings(), rank_timings(_rank_set("compute_s", 0.0)), training(),
              frame_change(training(), _drop("counter_increase"))]
    before = gc.get_freeze_count()
    run_tables(tables, suites)
    # once after each batched table's witness rows, and after each batch of the one validated batch by batch
    assert len(frozen) == 2 + len(list(tables[1].batches())) == 2 + 5
    assert all(n > before for n in frozen) and gc.get_freeze_count() == before


@pytest.mark.parametrize("batch_rows", [2, 3, 1000])
def test_rank_timings_hosts_are_read_batch_by_batch(tmp_path: Path, batch_rows: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Each node of a Parquet rank-timings table once, in the order it first appears; a node bundle.yaml lacks
    named at its first row, whichever batch of the file's rows it first appears in."""
    import pyarrow.parquet as pq

    import clustercert.validation.tables as tables
    from clustercert.parsers.rank_timings import parse_rank_timings

    monkeypatch.setattr(tables, "BATCH_ROWS", batch_rows)
    bundle = _bundle(tmp_path, TRAIN_RUN)
    nodes = ["n2", "n1", "n2", "n1", "x9", "n3", "x9", "x7"]
    table = pa.table({"rank": list(range(8)), "node": nodes, "gpu": [0] * 8, "step": [1] * 8,
                      "compute_s": [0.5] * 8, "comm_s": [0.1] * 8,
                      "timestamp": pa.array([T0] * 8, pa.timestamp("us", "UTC"))})
    pq.write_table(table, tmp_path / "r.parquet", row_group_size=3)
    timings = parse_rank_timings(tmp_path / "r.parquet", "r.parquet")
    parsed = {"llama3-70b-fp8-512-r1": [ParsedFile("llama3-70b-fp8-512-r1", RunKind.RANK_TIMINGS, "r.parquet",
                                                   "r.parquet", timings)]}
    (frame,) = hosts_table(bundle, parsed).batches()
    rows = frame[frame["source"] == "rank-timings"]
    assert rows["host"].tolist() == ["n2", "n1", "x9", "n3", "x7"]
    assert [None if math.isnan(v) else int(v) for v in rows["_line"]] == [None, None, 5, None, 8]


def test_the_training_table_mfu_is_the_domain_formula_per_step() -> None:
    """Per step: FLOPs per sequence x GBS / step time / GPUs / peak (DOMAIN.md sections 1, 2 and 4: Llama 3 70B,
    causal attention, 3.68003e15 per sequence; GB200 FP8 peak 4900 TFLOP/s), and the log's own TFLOP/s over the
    peak where the catalog gives no FLOPs; no MFU for a step time that is not positive."""
    frame = next(training(_steps({3: {"step_time_s": 0.0}, 4: {"step_time_s": None}})).batches())
    expected = 3.68003e15 * 2048 / 7.6 / 512 / 4.9e15  # 0.39528
    mfu = frame["mfu"].tolist()
    assert all(v == pytest.approx(expected, rel=1e-5) for i, v in enumerate(mfu) if i not in (3, 4))
    assert math.isnan(mfu[3]) and math.isnan(mfu[4])
    log = TrainingLog(format="nemo", file="t.log", steps=_steps({5: {"tflops_per_gpu": None}}))
    parsed = ParsedFile(RUN.id, RunKind.TRAINING, "t.log", "t.log", log)
    logged = next(training_table(parsed, RUN, RunFacts(peak_tflops=4900.0)).batches())["mfu"].tolist()
    assert logged[0] == pytest.approx(1848.0 / 4900.0) and math.isnan(logged[5])
    none = next(training_table(parsed, RUN, RunFacts()).batches())["mfu"]
    assert none.isna().all()


def test_validation_inside_a_run_leaves_the_runs_frozen_objects_frozen(tmp_path: Path, suites: dict[str, SuiteSpec],
                                                                      catalog: LoadedCatalog) -> None:
    """run_tables freezes what exists while it validates (its own collections then traverse only its batches); in a
    certification (settling) it must not give back what the run froze before it (clustercert/heap.py `frozen`)."""
    import gc

    from clustercert.heap import settle, settling

    bundle = _bundle(tmp_path, TRAIN_RUN + NCCL_RUN)
    table = gpu_counts_table(bundle, bundle_facts(bundle, catalog), _parsed(bundle, _steps(), 8, 3600.0))
    with settling():
        settle()
        before = gc.get_freeze_count()
        assert before > 0
        assert _result(run_tables([table], suites), "gpu_count_observed").status is ResultStatus.PASS
        assert gc.get_freeze_count() >= before
    assert gc.get_freeze_count() == 0
    run_tables([table], suites)
    assert gc.get_freeze_count() == 0  # on its own, it gives back what it froze


def test_the_validation_tells_what_it_validates(monkeypatch: pytest.MonkeyPatch,
                                                suites: dict[str, SuiteSpec]) -> None:
    """A cluster's validation is a minute: it tells its steps, the witness rows of each batch of a large table, and
    each table validated on its own with each of its batches (their rows as the table's own batches have them);
    what is told changes nothing of the report."""
    monkeypatch.setattr("clustercert.validation.tables.BATCH_ROWS", 7)
    good, bad = telemetry(), rank_timings(_rank_set("compute_s", 0.0))
    told: list[str] = []
    report = run_tables([good, bad], suites, told=told.append)
    assert report.to_json() == run_tables([good, bad], suites).to_json()
    assert told[:2] == ["start Great Expectations", "2 tables, small ones stacked by kind"]
    witnessed = [f"{t.run} ({t.table}, {t.rows:,} rows): the witness rows of batch {part} ({len(frame):,} rows)"
                 for t in (good, bad) for part, frame in enumerate(t.batches(), start=1)]
    own = f"{bad.run} ({bad.table}, {bad.rows:,} rows), table 2 of 2"
    alone = [own] + [f"{own}: batch {part} ({len(frame):,} rows)" for part, frame in enumerate(bad.batches(), start=1)]
    assert told[2:] == witnessed + alone
    assert len(list(good.batches())) == 6 and len(alone) > 2


def test_validating_a_bundle_tells_the_tables_building_before_it_builds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables are built before any is validated (a list: seconds at cluster scale): the line that says so comes
    before the building, then Great Expectations' start; the seed's report is the same with and without a
    listener."""
    import clustercert.validation.suites as suites_module
    from clustercert.evidence.parse import parse_bundle
    from clustercert.validation.suites import validate_bundle

    root = Path(__file__).resolve().parents[2]
    bundle = load_bundle(root / "evidence" / "gb200-seed")
    catalog = load_catalog(bundle.spec.catalog, root / "references")
    facts, parsed = bundle_facts(bundle, catalog), parse_bundle(bundle)
    told: list[str] = []
    real = suites_module.build_tables

    def building(*args: Any) -> list[TableInput]:
        told.append("(built)")
        return real(*args)

    monkeypatch.setattr(suites_module, "build_tables", building)
    report = validate_bundle(bundle, facts, parsed, checks_dir=root / "checks", told=told.append)
    assert told[:4] == ["build the tables from the parsed evidence", "(built)", "start Great Expectations",
                        f"{len(real(bundle, facts, parsed)):,} tables, small ones stacked by kind"]
    assert report.to_json() == validate_bundle(bundle, facts, parsed, checks_dir=root / "checks").to_json()


def test_building_a_clusters_tables_says_how_far_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's tables take seconds to build (thousands of runs, each nccl-tests log's rank lines read again for
    the hosts): the building says which run it is at, every two seconds (here every call, the interval set to 0),
    and builds the same tables as without a listener."""
    import clustercert.validation.tables as tables_module
    from clustercert.evidence.parse import parse_bundle

    root = Path(__file__).resolve().parents[2]
    bundle = load_bundle(root / "evidence" / "gb200-seed")
    facts, parsed = bundle_facts(bundle, load_catalog(bundle.spec.catalog, root / "references")), parse_bundle(bundle)
    quiet = tables_module.build_tables(bundle, facts, parsed)
    monkeypatch.setattr(tables_module, "_TELL_EVERY_S", 0.0)
    told: list[str] = []
    built = tables_module.build_tables(bundle, facts, parsed, told.append)
    runs = list(enumerate((run.id for run in bundle.spec.runs), 1))
    assert told == [
        *(f"build the tables from the parsed evidence: run {i:,} of {len(runs):,} ({r})" for i, r in runs),
        *(f"build the table of hosts: run {i:,} of {len(runs):,} ({r})" for i, r in runs),
    ]
    assert [(t.suite, t.table, t.run, t.rows) for t in built] == [(t.suite, t.table, t.run, t.rows) for t in quiet]
