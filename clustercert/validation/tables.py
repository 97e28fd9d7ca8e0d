"""The tables the expectation suites run on: one per evidence file, plus joined and reduced cross-source tables."""

from __future__ import annotations

import functools
import itertools
import math
import re
import statistics
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, RunKind, RunSpec
from clustercert.evidence.facts import BundleFacts, RunFacts
from clustercert.evidence.guards import MAX_YAML_BYTES, read_regular
from clustercert.evidence.hashing import sha256_file
from clustercert.evidence.parse import ParsedBundle, ParsedFile
from clustercert.parsers.dcgm import Telemetry
from clustercert.parsers.events import EventLog
from clustercert.parsers.health import GpuReport, Prescreen
from clustercert.parsers.mlperf import MlperfResult
from clustercert.parsers.nccl_ranks import read_rank_lines
from clustercert.parsers.nccl_tests import NcclTestsResult
from clustercert.parsers.nemo_resilience import LogEventKind, ResilienceLog
from clustercert.parsers.rank_timings import RankTimings
from clustercert.parsers.sacct import SacctJob, SacctResult, SacctStep
from clustercert.parsers.training import TrainingLog, step_column

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "BATCH_ROWS",
    "CROSS_SOURCE",
    "TableInput",
    "build_tables",
    "collective_table",
    "events_table",
    "gpu_counts_table",
    "gpu_health_table",
    "mlperf_table",
    "phase_span",
    "rank_timings_table",
    "scheduler_span_table",
    "scheduler_table",
    "telemetry_table",
    "training_files_table",
    "training_table",
]

BATCH_ROWS = 1_000_000
CROSS_SOURCE = "cross_source"
# a restart from a checkpoint is only accepted as a new segment where the log shows the job restarting
_RESTART_MARKS = {LogEventKind.CHECKPOINT_LOADED, LogEventKind.WORKER_GROUP_FAILED}
# a second launch of the program in the same output is a new segment only where its counter starts afresh (from the
# first iteration, NeMo's 0 or Megatron's 1): one that goes back to the middle without a checkpoint load is a splice
_FRESH_START = 1


@dataclass(frozen=True)
class TableInput:
    """A table to validate: its rows come as pandas batches (one for small tables, row groups for large ones)."""

    suite: str
    table: str
    run: str
    file: str
    rows: int
    batches: Callable[[], Iterator[pd.DataFrame]]
    parameters: dict[str, Any] = field(default_factory=dict)
    batched: bool = False
    # A small table's columns as typed arrays, in its frame's order: tables of one kind are stacked from these
    # for their validation (`clustercert.validation.suites`) without a frame built for each (a sweep has a table
    # per file: thousands on a cluster); `batches` builds the frame only when it is asked for
    columns: Callable[[], dict[str, np.ndarray]] | None = None


def _frame(columns: dict[str, list[Any]], dtypes: dict[str, str]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(columns)
    for name, dtype in dtypes.items():
        if name in frame.columns:
            frame[name] = frame[name].astype(dtype)
    return frame


def _single(frame: pd.DataFrame) -> Callable[[], Iterator[pd.DataFrame]]:
    def batches() -> Iterator[pd.DataFrame]:
        yield frame

    return batches


def _segments(log: TrainingLog, resilience: ResilienceLog | None) -> tuple[list[int], list[float | None]]:
    """Restart segment per step and the increase of the step counter over the previous step of its segment."""
    events = resilience.events if resilience else []
    marks = sorted(e.line for e in events if e.kind in _RESTART_MARKS)
    launches = sorted(e.line for e in events if e.kind is LogEventKind.RELAUNCH)
    segment, segments, deltas = 0, [], []
    previous: tuple[int, int] | None = None  # (counter, line)
    steps = log.steps
    for global_step, iteration, line in zip(step_column(steps, "global_step"), step_column(steps, "iteration"),
                                            step_column(steps, "line"), strict=True):
        counter = global_step if global_step is not None else iteration
        if previous is not None and counter < previous[0] and (
                any(previous[1] < m < line for m in marks)
                or (counter <= _FRESH_START and any(previous[1] < m < line for m in launches))):
            segment += 1
            previous = None
        segments.append(segment)
        deltas.append(None if previous is None else float(counter - previous[0]))
        previous = (counter, line)
    return segments, deltas


_STAMP_RESOLUTION_S = 1.0  # Megatron prints whole seconds (parsers/megatron.py)


def _clock_ratios(log: TrainingLog, segments: list[int]) -> tuple[list[float | None], list[float | None]]:
    """Per step, the wall time its log's own stamps show since the first stamped step of its stretch, over the time
    the log says those steps took ((iteration increase) x the printed mean step time, plus the save-checkpoint time
    it reports), with the stamps' resolution taken against the claim ((wall - 1 s) / logged) and for it
    ((wall + 1 s) / logged). A stretch ends at a restart segment and at an untimed pause (an evaluation)."""
    steps = log.steps
    stamps = step_column(steps, "timestamp_s")
    if all(stamp is None for stamp in stamps):  # a log without print times (NeMo's): no ratio on any step
        return [None] * len(stamps), [None] * len(stamps)
    low: list[float | None] = []
    high: list[float | None] = []
    start: tuple[int, float] | None = None  # (segment, stamp) of the stretch's first step
    logged, previous = 0.0, 0
    for stamp, seconds, untimed, iteration, pause, segment in zip(
            stamps, step_column(steps, "step_time_s"), step_column(steps, "untimed_pause"),
            step_column(steps, "iteration"), step_column(steps, "pause_s"), segments, strict=True):
        value_low = value_high = None
        if stamp is None or seconds is None:
            start = None
        elif start is None or start[0] != segment or untimed:
            start, logged = (segment, stamp), 0.0
        else:
            logged += (iteration - previous) * seconds + pause
            wall = stamp - start[1]
            if logged > 0:
                value_low = (wall - _STAMP_RESOLUTION_S) / logged
                value_high = (wall + _STAMP_RESOLUTION_S) / logged
        previous = iteration
        low.append(value_low)
        high.append(value_high)
    return low, high


def training_table(parsed: ParsedFile, run: RunSpec | None = None, facts: RunFacts | None = None) -> TableInput:
    """training_steps: one row per printed step, with its restart segment, counter increase and MFU (from the
    run's catalog facts: FLOPs per sequence, peak, window). Read column by column from the log's steps (a bulk
    reading's columns as they are)."""
    log = parsed.result
    assert isinstance(log, TrainingLog)
    segments, deltas = _segments(log, parsed.resilience)
    clock_low, clock_high = _clock_ratios(log, segments)
    facts = facts or RunFacts()
    flops, peak = facts.flops_per_sequence, facts.peak_tflops
    steps = log.steps
    step_times, tflops = step_column(steps, "step_time_s"), step_column(steps, "tflops_per_gpu")
    mfu: list[float | None]
    if flops is not None and peak and run is not None and run.gbs and run.gpus:
        # a step time <= 0 has no MFU: the step-time expectations report it (the per-step expression as it was)
        gbs, gpus, flop_peak = run.gbs, run.gpus, peak * 1e12
        mfu = [flops * gbs / seconds / gpus / flop_peak if seconds is not None and seconds > 0 else None
               for seconds in step_times]
    elif peak and flops is None:
        mfu = [value / peak if value is not None else None for value in tflops]
    else:
        mfu = [None] * len(step_times)
    iterations = step_column(steps, "iteration")
    parameters: dict[str, Any] = {}
    if facts.window is not None:
        parameters["window_iterations"] = list(range(facts.window[0], facts.window[1] + 1))
    window = set(parameters.get("window_iterations", []))
    frame = _frame(
        {
            "iteration": iterations,
            "step_time_s": step_times,
            "tflops_per_gpu": tflops,
            "loss": step_column(steps, "loss"),
            "grad_norm": step_column(steps, "grad_norm"),
            "global_step": step_column(steps, "global_step"),
            "segment": segments,
            "counter_increase": deltas,
            "mfu": mfu,
            "in_window": [iteration in window for iteration in iterations],
            "clock_ratio_low": clock_low,
            "clock_ratio_high": clock_high,
            "_line": step_column(steps, "line"),
        },
        {"iteration": "int64", "step_time_s": "float64", "tflops_per_gpu": "float64", "loss": "float64",
         "grad_norm": "float64", "global_step": "float64", "segment": "int64", "counter_increase": "float64",
         "mfu": "float64", "in_window": "bool", "clock_ratio_low": "float64", "clock_ratio_high": "float64",
         "_line": "int64"},
    )
    return TableInput("training_steps", "training_steps", parsed.run, parsed.display, len(frame),
                      _single(frame), parameters)


def collective_table(parsed: ParsedFile, ceiling_gbps: float | None) -> TableInput:
    """collective_results: one row per message size of every test that ran to the end."""
    result = parsed.result
    assert isinstance(result, NcclTestsResult)
    import pandas as pd

    rows = [(t, r) for t in result.tests if t.error is None for r in t.rows]  # a cut capture's rows: not its end
    floats = ("time_us_oop", "time_us_ip", "busbw_oop", "busbw_ip", "wrong_oop", "wrong_ip")
    # built as typed arrays (a sweep has a table per file: thousands on a cluster); None reads as NaN
    columns = {
        "collective": np.array([str(t.collective) for t, _ in rows], dtype=object),
        "ranks": np.array([np.nan if t.ranks is None else t.ranks for t, _ in rows], dtype=np.float64),
        "size_bytes": np.array([r.size_bytes for _, r in rows], dtype=np.int64),
        **{name: np.array([getattr(r, name) for _, r in rows], dtype=np.float64) for name in floats},
        "_line": np.array([r.line for _, r in rows], dtype=np.int64),
    }

    def batches() -> Iterator[pd.DataFrame]:
        yield pd.DataFrame(columns, copy=False)

    parameters = {} if ceiling_gbps is None else {"busbw_ceiling_gbps": ceiling_gbps}
    return TableInput("collective_results", "collective_results", parsed.run, parsed.display, len(rows),
                      batches, parameters, columns=lambda: columns)


def _arrow_batches(table: pa.Table, columns: list[str]) -> Callable[[], Iterator[pd.DataFrame]]:
    def batches() -> Iterator[pd.DataFrame]:
        for batch in table.select(columns).to_batches(max_chunksize=BATCH_ROWS):
            yield batch.to_pandas()

    return batches


def _fewest_ranks_per_step(result: RankTimings) -> tuple[int, int] | None:
    """The fewest distinct ranks any step was timed on, and the first row of the first step (in the order steps
    first appear) timed on that few; None for no rows."""
    return _key_facts(result).fewest


def _pair_counts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each row, how many rows share its (a, b) pair."""
    order = np.lexsort((b, a))
    sa, sb = a[order], b[order]
    starts = np.flatnonzero(np.r_[True, (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])])
    lengths = np.diff(np.r_[starts, len(order)])
    out = np.empty(len(order), dtype=np.int64)
    out[order] = np.repeat(lengths, lengths)
    return out


def rank_timings_table(parsed: ParsedFile, gpus_per_node: int | None, span: tuple[float, float] | None) -> TableInput:
    """rank_timings: the table with column-wise derived columns, validated in batches built as they are validated
    (the file's columns read a batch at a time: a cluster's tens of millions of rows are never held whole).

    `key_count` (how many rows record the same execution of a step on a rank) is computed with numpy over the
    whole columns, so a duplicate shows on each of its rows even when the copies fall in different batches. An
    execution is (rank, step, timestamp): after a restart from a checkpoint the job runs the same steps again
    at later times, which is wasted progress, not a duplicate record; a copied row keeps its timestamp.
    """
    result = parsed.result
    assert isinstance(result, RankTimings)
    key_count = _key_facts(result).key_count
    parameters: dict[str, Any] = {}
    if gpus_per_node is not None:
        parameters["gpu_index_max"] = gpus_per_node - 1
    if span is not None:
        parameters["span_start_s"], parameters["span_end_s"] = span
    return TableInput("rank_timings", "rank_timings", parsed.run, parsed.display, result.rows,
                      _rank_timings_batches(result, key_count), parameters, batched=True)


@dataclass(frozen=True)
class _KeyFacts:
    key_count: np.ndarray | None  # rows recording each row's execution of its step on its rank; None: all 1
    fewest: tuple[int, int] | None  # the fewest ranks any step was timed on, and that step's first row


_KEY_FACTS: weakref.WeakKeyDictionary[RankTimings, _KeyFacts] = weakref.WeakKeyDictionary()


def _key_facts(result: RankTimings) -> _KeyFacts:
    """What the rank_timings and hosts tables need from the rank * (last step + 1) + step key of every row, worked
    out once per table from two columns (a cluster's tens of millions of keys; a few arrays of them at most at
    once)."""
    known = _KEY_FACTS.get(result)
    if known is not None:
        return known
    width = result.last_step + 1
    keys = result.array("rank", np.int64)
    keys *= width
    keys += result.array("step", np.int64)
    key_count: np.ndarray | None = None
    fewest: tuple[int, int] | None = None
    if len(keys) and int(keys.max()) < 4 * len(keys) + 1024:  # dense keys (the usual case): count in O(n)
        counts = np.bincount(keys)
        if int(counts.max()) > 1:
            key_count = counts[keys]
        present = np.zeros(-(-len(counts) // width) * width, dtype=np.int32)
        present[:len(counts)] = counts > 0
        del counts
        per_step = present.reshape(-1, width).sum(axis=0)  # distinct ranks of each step (0: not timed)
        del present
    else:
        distinct, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        if int(counts.max()) > 1:
            key_count = counts[inverse]
        del inverse, counts
        per_step = np.bincount(distinct % width, minlength=width)
        del distinct
    if len(keys):
        least = int(per_step[per_step > 0].min())
        # the first row of a step timed on that few ranks is the first appearance of the first such step
        fewest = (least, int(np.argmax((per_step == least)[keys % width])) + 1)
    if key_count is not None:  # the same step again: tell re-runs from copied rows (a copy keeps its timestamp)
        # (key, timestamp) pairs repeat only among rows whose key repeats: counted there, 1 everywhere else
        repeated = np.flatnonzero(key_count > 1)
        pairs = _pair_counts(keys[repeated], result.array("timestamp", np.int64)[repeated])
        key_count[:] = 1  # in place: an array of its own (counts[keys])
        key_count[repeated] = pairs
        if int(pairs.max()) <= 1:
            key_count = None
        del repeated, pairs
    facts = _KEY_FACTS[result] = _KeyFacts(key_count, fewest)
    return facts


def _rank_timings_batches(result: RankTimings, key_count: np.ndarray | None) -> Callable[[], Iterator[pd.DataFrame]]:
    names = ["rank", "gpu", "step", "compute_s", "comm_s", "timestamp"]

    def batches() -> Iterator[pd.DataFrame]:
        at = 0
        for batch in result.batches(names, BATCH_ROWS):
            rows = batch.num_rows
            seconds = pc.divide(pc.cast(pc.cast(batch.column("timestamp"), pa.timestamp("us", "UTC")), pa.int64()),
                                1e6)
            counts = np.ones(rows, dtype=np.int64) if key_count is None else key_count[at:at + rows]
            yield pa.table({
                "rank": batch.column("rank"),
                "gpu": batch.column("gpu"),
                "step": batch.column("step"),
                "compute_s": batch.column("compute_s"),
                "comm_s": batch.column("comm_s"),
                "timestamp_s": seconds,
                "key_count": pa.array(counts, pa.int64()),
                "_line": pa.array(np.arange(at + 1, at + rows + 1, dtype=np.int64)),
            }).to_pandas()
            at += rows

    return batches


def telemetry_table(parsed: ParsedFile, span: tuple[float, float] | None) -> TableInput:
    """telemetry: one row per sample (long form: metric, gpu, value, time), validated in batches, each batch
    built from the columns when it is validated (strings taken by code, NaN as null): what is resident is one
    batch, never the whole table as strings."""
    result = parsed.result
    assert isinstance(result, Telemetry)
    parameters: dict[str, Any] = {}
    if span is not None:
        parameters["span_start_s"], parameters["span_end_s"] = span
    return TableInput("telemetry", "telemetry", parsed.run, parsed.display, len(result), _telemetry_batches(result),
                      parameters, batched=True)


def _telemetry_batches(result: Telemetry) -> Callable[[], Iterator[pd.DataFrame]]:
    def batches() -> Iterator[pd.DataFrame]:
        metrics, gpus = pa.array(result.metrics, pa.string()), pa.array(result.gpus, pa.string())
        for _, (metric, gpu, value, time_ms, line) in result.blocks("metric", "gpu", "value", "time_ms", "line",
                                                                    rows=BATCH_ROWS):
            yield pa.table(
                {
                    "metric": metrics.take(pa.array(metric)),
                    "gpu": gpus.take(pa.array(gpu)),
                    "value": pa.array(value, pa.float64(), from_pandas=True),
                    "time_s": pa.array(time_ms / 1000.0, pa.float64()),
                    "_line": pa.array(line, pa.int64()),
                }
            ).to_pandas()

    return batches


def _epoch(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def scheduler_table(parsed: ParsedFile) -> TableInput:
    """scheduler_records: one row per job and per step, with times as epoch seconds."""
    result = parsed.result
    assert isinstance(result, SacctResult)
    rows: list[dict[str, Any]] = []
    for job in result.jobs:
        records: list[tuple[SacctJob | SacctStep, str | None]] = [(job, None), *[(s, s.step_id) for s in job.steps]]
        for rec, step_id in records:
            start, end = _epoch(rec.start), _epoch(rec.end)
            span = None if start is None or end is None else end - start
            rows.append({"job_id": job.job_id, "step_id": step_id, "state": rec.state, "elapsed_s": rec.elapsed_s,
                         "start_s": start, "end_s": end,
                         "elapsed_gap_s": None if span is None or rec.elapsed_s is None else
                         abs(rec.elapsed_s - span), "_line": rec.line})
    columns = ["job_id", "step_id", "state", "elapsed_s", "start_s", "end_s", "elapsed_gap_s", "_line"]
    frame = _frame({c: [r[c] for r in rows] for c in columns},
                   {"job_id": "str", "state": "str", "elapsed_s": "float64", "start_s": "float64",
                    "end_s": "float64", "elapsed_gap_s": "float64", "_line": "int64"})
    return TableInput("scheduler_records", "scheduler_records", parsed.run, parsed.display, len(frame),
                      _single(frame))


def events_table(parsed: ParsedFile, nodes: list[str] | None, span: tuple[float, float] | None) -> TableInput:
    """job_events: one row per event, with its time in epoch seconds and the change since the previous event."""
    result = parsed.result
    assert isinstance(result, EventLog)
    events = result.events
    times = [e.ts.timestamp() for e in events]
    frame = _frame(
        {
            "type": [e.type.value for e in events],
            "ts_s": times,
            "ts_increase_s": [None, *[b - a for a, b in itertools.pairwise(times)]],
            "node": [e.node for e in events],
            "by": [e.by for e in events],
            "rank": [e.rank for e in events],
            "step": [e.step for e in events],
            "_line": [e.line for e in events],
        },
        {"type": "str", "ts_s": "float64", "ts_increase_s": "float64", "rank": "float64", "step": "float64",
         "_line": "int64"},
    )
    parameters: dict[str, Any] = {}
    if nodes:
        parameters["bundle_nodes"] = list(nodes)
    if span is not None:
        parameters["span_start_s"], parameters["span_end_s"] = span
    return TableInput("job_events", "job_events", parsed.run, parsed.display, len(frame), _single(frame), parameters)


def mlperf_table(parsed: ParsedFile) -> TableInput:
    """mlperf_runs: one row per result file of the folder."""
    result = parsed.result
    assert isinstance(result, MlperfResult)
    runs = result.runs
    frame = _frame(
        {
            "status": [r.status for r in runs],
            "minutes": [r.minutes for r in runs],
            "start_ms": [r.start_ms for r in runs],
            "stop_ms": [r.stop_ms for r in runs],
            "_file": [r.file for r in runs],
            "_line": [r.stop_line or r.start_line for r in runs],
        },
        {"status": "str", "minutes": "float64", "start_ms": "float64", "stop_ms": "float64", "_file": "str",
         "_line": "float64"},
    )
    return TableInput("mlperf_runs", "mlperf_runs", parsed.run, parsed.display, len(frame), _single(frame))


def gpu_health_table(parsed: ParsedFile) -> TableInput | None:
    """gpu_health: one row per GPU of an `nvidia-smi -q` report (text, XML, or the prescreen's step 8a), with the
    readings the health rules judge by value; None for a prescreen whose step 8a gave no report."""
    result = parsed.result
    report = result.gpus if isinstance(result, Prescreen) else result
    if report is None:
        return None
    assert isinstance(report, GpuReport)
    gpus = report.gpus
    frame = _frame(
        {
            "index": [g.index for g in gpus],
            "bus_id": [g.bus_id for g in gpus],
            "uuid": [g.value("uuid") for g in gpus],
            "power_w": [g.value("power.draw") for g in gpus],
            "utilization_pct": [g.value("utilization.gpu") for g in gpus],
            "pcie_replays": [g.value("pcie.replays") for g in gpus],
            "remap_uncorrectable": [g.value("remap.uncorrectable") for g in gpus],
            "_line": [g.line for g in gpus],
        },
        {"index": "int64", "bus_id": "str", "uuid": "object", "power_w": "float64", "utilization_pct": "float64",
         "pcie_replays": "float64", "remap_uncorrectable": "float64", "_line": "int64"},
    )
    return TableInput("gpu_health", "gpu_health", parsed.run, parsed.display, len(frame), _single(frame),
                      {"attached_gpus": report.attached_gpus})


# A run's `id:` line in bundle.yaml, block style (`- id: x`) or flow style (`- {id: x, ...}`).
_RUN_ID_LINE = re.compile(r"""^\s*(?:-\s*)?\{?\s*id:\s*['"]?([^'",}\s]+)['"]?\s*(?:[,}]|$)""")


@functools.lru_cache(maxsize=8)
def _run_id_lines(path: str, size: int, mtime_ns: int, inode: int) -> dict[str, int]:
    """Each run id's first `id:` line in the bundle.yaml at `path` as it is now (size, mtime and inode name the
    version): one pass over the file for all runs, not one per run."""
    text = read_regular(Path(path), limit=MAX_YAML_BYTES).decode("utf-8", errors="replace")
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _RUN_ID_LINE.match(line)
        if match:
            lines.setdefault(match.group(1), number)
    return lines


def _bundle_line(bundle: LoadedBundle, run_id: str) -> int | None:
    path = bundle.root / "bundle.yaml"
    stat = path.stat()
    return _run_id_lines(str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino).get(run_id)


def gpu_counts_table(bundle: LoadedBundle, facts: BundleFacts | None, parsed: ParsedBundle) -> TableInput:
    """gpu_counts: each GPU count the evidence shows beside the count bundle.yaml declares for the run.

    Sources: the run's node allocation x gpus_per_node (bundle.yaml), the ranks of each nccl-tests test, the
    distinct ranks of a per-rank timing table, and for training logs the count implied by the logged
    TFLOPS per GPU (model FLOPs x GBS / (step time x TFLOPS per GPU), a median over the steps).
    """
    rows: list[dict[str, Any]] = []
    yaml_path = bundle.shown("bundle.yaml")
    specs = {r.id: r for r in bundle.spec.runs}

    def add(run: RunSpec, source: str, observed: float, file: str, line: int | None) -> None:
        assert run.gpus is not None
        rows.append({"run": run.id, "source": source, "declared": float(run.gpus), "observed": float(observed),
                     "ratio": observed / run.gpus, "_file": file, "_line": line, "_run": run.id})

    for run in bundle.spec.runs:
        if run.gpus is None:
            continue
        if run.nodes:
            add(run, "bundle-nodes", len(run.nodes) * bundle.spec.system.gpus_per_node, yaml_path,
                _bundle_line(bundle, run.id))
        # what the declared system holds: a run cannot have used more GPUs than that
        add(run, "system-capacity", len(bundle.spec.system.nodes) * bundle.spec.system.gpus_per_node, yaml_path,
            _bundle_line(bundle, run.id))
        flops = facts.of(run.id).flops_per_sequence if facts is not None else None
        for pf in parsed.get(run.id, []):
            result = pf.result
            if isinstance(result, NcclTestsResult):
                for test in result.tests:
                    if test.ranks is not None:
                        add(run, "nccl-tests", test.ranks, pf.display, test.line)
            elif isinstance(result, RankTimings):
                add(run, "rank-timings", result.ranks, pf.display, 1)
                # The fewest ranks any step was timed on: a run that shrinks (128 -> 64 ranks) mid-run still
                # shows 128 distinct ranks over the whole table, never on every step.
                fewest_row = _fewest_ranks_per_step(result)
                if fewest_row is not None:
                    add(run, "rank-timings-per-step", fewest_row[0], pf.display, fewest_row[1])
            elif isinstance(result, TrainingLog) and flops is not None and run.gbs:
                implied = [(flops * run.gbs / (seconds * tflops * 1e12), line)
                           for seconds, tflops, line in zip(step_column(result.steps, "step_time_s"),
                                                            step_column(result.steps, "tflops_per_gpu"),
                                                            step_column(result.steps, "line"), strict=True)
                           if seconds and tflops]
                implied = [(v, line) for v, line in implied if math.isfinite(v)]
                if implied:
                    value = statistics.median(v for v, _ in implied)
                    add(specs[run.id], "training-log", value, pf.display, implied[0][1])
    columns = ["run", "source", "declared", "observed", "ratio", "_file", "_line", "_run"]
    frame = _frame({c: [r[c] for r in rows] for c in columns},
                   {"run": "str", "source": "str", "declared": "float64", "observed": "float64",
                    "ratio": "float64", "_file": "str", "_line": "float64", "_run": "str"})
    return TableInput(CROSS_SOURCE, "gpu_counts", "bundle", yaml_path, len(frame), _single(frame))


def training_files_table(bundle: LoadedBundle) -> TableInput:
    """training_files: one row per file of a training run, with its content's sha256, so that one log listed
    under two runs (or copied under two names) is seen: repeats must be distinct runs.

    Only files that share their size with another are hashed (a file of unique size cannot be a copy); the
    others get a placeholder digest unique to their path."""
    yaml_path = bundle.shown("bundle.yaml")
    entries = [(run, rel) for run in bundle.spec.runs if run.kind is RunKind.TRAINING for rel in run.files]
    sizes: dict[int, int] = {}
    for _, rel in entries:
        size = (bundle.root / rel).stat().st_size
        sizes[size] = sizes.get(size, 0) + 1
    rows: list[dict[str, Any]] = []
    for run, rel in entries:
        path = bundle.root / rel
        size = path.stat().st_size
        digest = sha256_file(path, str(path)) if sizes[size] > 1 else f"unique-size:{rel}"
        rows.append({"run": run.id, "file": rel, "sha256": digest, "_file": yaml_path,
                     "_line": _bundle_line(bundle, run.id), "_run": run.id})
    columns = ["run", "file", "sha256", "_file", "_line", "_run"]
    frame = _frame({c: [r[c] for r in rows] for c in columns},
                   {"run": "str", "file": "str", "sha256": "str", "_file": "str", "_line": "float64", "_run": "str"})
    return TableInput(CROSS_SOURCE, "training_files", "bundle", yaml_path, len(frame), _single(frame))


_SACCT_RESOLUTION_S = 1.0


def _scheduler_jobs(bundle: LoadedBundle, parsed: ParsedBundle, phase: str) -> list[tuple[float, float, float]]:
    """(start, end, elapsed) of every job of the phase's scheduler records with all three known."""
    out: list[tuple[float, float, float]] = []
    for run in bundle.spec.runs:
        if run.kind is not RunKind.SCHEDULER or run.phase.value != phase:
            continue
        for pf in parsed.get(run.id, []):
            if isinstance(pf.result, SacctResult):
                for job in pf.result.jobs:
                    start, end = _epoch(job.start), _epoch(job.end)
                    if start is not None and end is not None and job.elapsed_s is not None:
                        out.append((start, end, job.elapsed_s))
    return out


def phase_span(bundle: LoadedBundle, parsed: ParsedBundle, phase: str) -> tuple[float, float] | None:
    """The time span of the phase's scheduler jobs (first start, last end), None without scheduler records.

    sacct prints whole seconds, truncated: a job that ended at 12:00:11.081 reads 12:00:11, so the span's end is
    the last End plus one second."""
    jobs = _scheduler_jobs(bundle, parsed, phase)
    return (min(j[0] for j in jobs), max(j[1] for j in jobs) + _SACCT_RESOLUTION_S) if jobs else None


def scheduler_span_table(bundle: LoadedBundle, parsed: ParsedBundle) -> TableInput:
    """scheduler_span: per training log of a phase with scheduler records, its logged time beside the phase's jobs.

    A log that runs across requeues spans several jobs, so the bound is their elapsed times together (each
    rounded up to sacct's whole second)."""
    rows: list[dict[str, Any]] = []
    for run in bundle.spec.runs:
        if run.kind not in (RunKind.TRAINING, RunKind.RESILIENCE):
            continue
        jobs = _scheduler_jobs(bundle, parsed, run.phase.value)
        if not jobs:
            continue
        for pf in parsed.get(run.id, []):
            if isinstance(pf.result, TrainingLog) and pf.result.steps:
                logged = sum(seconds or 0.0 for seconds in step_column(pf.result.steps, "step_time_s"))
                rows.append({"run": run.id, "training_s": logged, "scheduler_elapsed_s": sum(j[2] + _SACCT_RESOLUTION_S for j in jobs),  # noqa: E501
                             "_file": pf.display, "_line": pf.result.steps[0].line, "_run": run.id})
    columns = ["run", "training_s", "scheduler_elapsed_s", "_file", "_line", "_run"]
    frame = _frame({c: [r[c] for r in rows] for c in columns},
                   {"run": "str", "training_s": "float64", "scheduler_elapsed_s": "float64", "_file": "str",
                    "_line": "float64", "_run": "str"})
    return TableInput(CROSS_SOURCE, "scheduler_span", "bundle", bundle.shown("bundle.yaml"), len(frame),
                      _single(frame))


_TELL_EVERY_S = 2.0  # how often the building of a cluster's tables (seconds: thousands of runs) says how far it is


class _Every:
    """Tells `told` what is being built, at most once every _TELL_EVERY_S seconds: nothing for a bundle whose
    tables are built sooner (the sample's), a line every two seconds for a cluster's."""

    def __init__(self, told: Callable[[str], None] | None) -> None:
        self._told, self._last = told, time.monotonic()

    def __call__(self, what: str, *values: object) -> None:
        """`what` with `values` put in (str.format), formatted only when it is told."""
        if self._told is not None and time.monotonic() - self._last >= _TELL_EVERY_S:
            self._told(what.format(*values))
            self._last = time.monotonic()


def build_tables(bundle: LoadedBundle, facts: BundleFacts, parsed: ParsedBundle,
                 told: Callable[[str], None] | None = None) -> list[TableInput]:
    """Every usable file's table, then the cross-source tables (unusable files are findings, not tables); `told`
    is told how far it is every two seconds."""
    tables: list[TableInput] = []
    ceiling = facts.busbw_ceiling_gbps
    spans: dict[str, tuple[float, float] | None] = {}
    every = _Every(told)
    total = len(bundle.spec.runs)
    for index, run in enumerate(bundle.spec.runs):
        every("build the tables from the parsed evidence: run {:,} of {:,} ({})", index + 1, total, run.id)
        if run.phase.value not in spans:  # once per phase, not per run: a sweep is thousands of runs
            spans[run.phase.value] = phase_span(bundle, parsed, run.phase.value)
        span = spans[run.phase.value]
        for pf in parsed.get(run.id, []):
            result = pf.result
            if result is None:
                continue
            if isinstance(result, TrainingLog):
                tables.append(training_table(pf, run, facts.of(run.id)))
            elif isinstance(result, NcclTestsResult):
                tables.append(collective_table(pf, ceiling))
            elif isinstance(result, RankTimings):
                tables.append(rank_timings_table(pf, bundle.spec.system.gpus_per_node, span))
            elif isinstance(result, Telemetry):
                tables.append(telemetry_table(pf, span))
            elif isinstance(result, SacctResult):
                tables.append(scheduler_table(pf))
            elif isinstance(result, EventLog):
                tables.append(events_table(pf, bundle.spec.system.nodes, span))
            elif isinstance(result, MlperfResult):
                tables.append(mlperf_table(pf))
            elif isinstance(result, (GpuReport, Prescreen)) and (gpus := gpu_health_table(pf)) is not None:
                tables.append(gpus)
    tables.append(gpu_counts_table(bundle, facts, parsed))
    tables.append(hosts_table(bundle, parsed, every))
    tables.append(scheduler_span_table(bundle, parsed))
    tables.append(training_files_table(bundle))
    return tables


def hosts_table(bundle: LoadedBundle, parsed: ParsedBundle, every: _Every | None = None) -> TableInput:
    """hosts: each host the evidence names (a run's nodes in bundle.yaml, nccl-tests rank lines, per-rank timings,
    telemetry), once per run, source and file, at its first line; `system_nodes` is bundle.yaml's node list.
    `every` is told how far it is (it reads each nccl-tests log's rank lines again: thousands at scale)."""
    rows: list[dict[str, Any]] = []
    yaml_path = bundle.shown("bundle.yaml")
    known = set(bundle.spec.system.nodes)
    seen: set[tuple[str, str, str]] = set()

    def add(run: str, source: str, host: str, file: str, line: int | None) -> None:
        if (run, host, file) not in seen:
            seen.add((run, host, file))
            rows.append({"run": run, "source": source, "host": host, "_file": file, "_line": line, "_run": run})

    total = len(bundle.spec.runs)
    for index, run in enumerate(bundle.spec.runs):
        if every is not None:
            every("build the table of hosts: run {:,} of {:,} ({})", index + 1, total, run.id)
        for node in run.nodes or []:
            add(run.id, "bundle-nodes", node, yaml_path, _bundle_line(bundle, run.id))
        for pf in parsed.get(run.id, []):
            result = pf.result
            if isinstance(result, NcclTestsResult):
                try:
                    ranks = read_rank_lines(bundle.resolve(pf.rel), pf.display)
                except EvidenceError:
                    ranks = []  # the parser read it; a file that cannot be re-read is named by the parser's table
                for rank in ranks:
                    add(run.id, "nccl-tests", rank.host, pf.display, rank.line)
            elif isinstance(result, RankTimings) and "node" in result.column_names:
                named: set[str] = set()
                at = 0
                for batch in result.batches(["node"], BATCH_ROWS):  # reduced batch by batch, in file order
                    column = batch.column(0)
                    for node in pc.unique(column).to_pylist():
                        if node is not None and node not in named:  # the first row looked up only for a stranger
                            named.add(node)
                            first = None if node in known else at + pc.index(column, node).as_py() + 1
                            add(run.id, "rank-timings", str(node), pf.display, first)
                    at += batch.num_rows
            elif isinstance(result, Telemetry):
                for host, line in result.host_first_lines():  # reduced column-wise: one row per host
                    add(run.id, "telemetry", host, pf.display, line)
    columns = ["run", "source", "host", "_file", "_line", "_run"]
    frame = _frame({c: [r[c] for r in rows] for c in columns},
                   {"run": "str", "source": "str", "host": "str", "_file": "str", "_line": "float64", "_run": "str"})
    return TableInput(CROSS_SOURCE, "hosts", "bundle", yaml_path, len(frame), _single(frame),
                      {"system_nodes": list(bundle.spec.system.nodes)})
