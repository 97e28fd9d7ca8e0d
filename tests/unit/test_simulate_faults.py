"""Injected faults are found where they were put: straggler scores, degraded pairs, restarts, stalls, lost steps."""

from __future__ import annotations

import itertools
import json
import re
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from clustercert.errors import UsageError
from clustercert.metrics.stragglers import RankTimings, score_stragglers
from clustercert.parsers.events import EventType, parse_events
from clustercert.parsers.nccl_tests import parse_nccl_tests
from clustercert.parsers.nemo_resilience import LogEventKind, parse_nemo_resilience
from clustercert.parsers.rank_timings import parse_rank_timings
from clustercert.parsers.sacct import parse_sacct
from clustercert.settings import PROJECT_ROOT
from clustercert.simulate.faults import FaultKind, parse_fault
from clustercert.simulate.resilience import ResilienceFiles, ResilienceJob, fixed_start, simulate_resilience
from clustercert.simulate.scenario import SCENARIOS, ScenarioName
from clustercert.simulate.topology import System, build_topology

EVIDENCE = PROJECT_ROOT / "evidence"


def _scores(bundle: Path) -> dict[int, float]:
    timings = parse_rank_timings(bundle / "resilience" / "rank-timings.parquet", "rt")
    t = timings.table
    stamps = pc.cast(t.column("timestamp"), "int64").to_numpy() / 1e6
    report = score_stragglers(
        RankTimings.from_columns(t.column("rank"), t.column("step"), t.column("compute_s"), stamps), {}
    )
    return {r.rank: r.relative_score for r in report.ranks}


def _events(bundle: Path) -> list[tuple[EventType, str | None, int | None]]:
    log = parse_events(bundle / "resilience" / "events.jsonl", "events")
    return [(e.type, e.node, e.step) for e in log.events]


def _large_busbw(path: Path, collective: str) -> float:
    tests = [t for t in parse_nccl_tests(path, path.name).tests if t.collective == collective]
    return max(max(r.busbw_oop, r.busbw_ip) for t in tests for r in t.rows if r.size_bytes >= 1 << 30)


def test_unreported_slow_gpu_scores_one_over_one_plus_x() -> None:
    fault = next(f for f in SCENARIOS[ScenarioName.DEGRADED].faults if f.kind is FaultKind.SLOW_GPU)
    assert not fault.reported
    bundle = EVIDENCE / "gb200-degraded"
    rank = 4 * (16 + 4) + 1  # gb-r2-n05 is the 21st tray of the job (racks 1-2), GPU 1
    scores = _scores(bundle)
    assert scores[rank] == pytest.approx(1 / fault.slowdown, abs=0.015)
    assert sorted(scores, key=scores.__getitem__)[0] == rank
    assert min(s for r, s in scores.items() if r != rank) > 0.97
    events = _events(bundle)
    assert not any(t is EventType.STRAGGLER_DETECTED for t, _, _ in events)


def test_reported_slow_gpu_is_detected_within_minutes_and_its_tray_replaced() -> None:
    fault = next(f for f in SCENARIOS[ScenarioName.SEED].faults if f.kind is FaultKind.SLOW_GPU)
    log = parse_events(EVIDENCE / "gb200-seed" / "resilience" / "events.jsonl", "events")
    start = log.events[0].ts
    detected = next(e for e in log.events if e.type is EventType.STRAGGLER_DETECTED)
    assert (detected.node, detected.gpu) == (fault.node, fault.gpu)
    assert 0 < (detected.ts - start).total_seconds() - fault.at_s <= 600
    excluded = next(e for e in log.events if e.type is EventType.NODE_EXCLUDED)
    added = next(e for e in log.events if e.type is EventType.NODE_ADDED)
    assert excluded.node == fault.node and added.node == "gb-r1-n17"
    assert excluded.ts >= detected.ts
    assert min(_scores(EVIDENCE / "gb200-seed").values()) > 0.95  # replaced before it dominates the medians


@pytest.mark.parametrize("sample", ["gb200-seed", "gb200-degraded", "h100-1024"])
def test_node_failure_restarts_on_a_spare_from_the_last_checkpoint(sample: str) -> None:
    scenario = {"gb200-seed": ScenarioName.SEED, "gb200-degraded": ScenarioName.DEGRADED,
                "h100-1024": ScenarioName.H100}[sample]
    fault = next(f for f in SCENARIOS[scenario].faults if f.kind is FaultKind.NODE_FAIL)
    bundle = EVIDENCE / sample
    log = parse_events(bundle / "resilience" / "events.jsonl", "events")
    events = log.events
    assert not any(e.type is EventType.ADMIN_ACTION for e in events)
    i = next(i for i, e in enumerate(events) if e.type is EventType.FAULT_INJECTED)
    assert events[i].node == fault.node
    after = events[i:]
    assert next(e for e in after if e.type is EventType.FAULT_DETECTED).node == fault.node
    assert next(e for e in after if e.type is EventType.NODE_EXCLUDED).node == fault.node
    restart = next(e for e in after if e.type is EventType.JOB_STARTED)
    nodes = restart.extra["nodes"]
    assert isinstance(nodes, list) and fault.node not in nodes
    assert (restart.ts - events[i].ts).total_seconds() < 900
    saved = [e.step for e in events[:i] if e.type is EventType.CHECKPOINT_SAVED and e.step is not None]
    loaded = next(e for e in after if e.type is EventType.CHECKPOINT_LOADED)
    assert loaded.step == saved[-1]
    # the scheduler shows the failed job and its requeue on other nodes
    sacct = parse_sacct(bundle / "resilience" / "sacct.txt", "sacct")
    states = [j.state for j in sacct.jobs]
    failed = states.index("NODE_FAIL")
    assert states[-1] == "COMPLETED" and failed < len(states) - 1
    rows = [line.split("|") for line in (bundle / "resilience" / "sacct.txt").read_text().splitlines()]
    nodes_at = rows[0].index("NodeList")
    assert rows[sacct.jobs[failed + 1].line - 1][nodes_at] != rows[sacct.jobs[failed].line - 1][nodes_at]
    # the training log restarts from that checkpoint as the real crash-and-restart sample does
    nemo = parse_nemo_resilience(bundle / "resilience" / "training.log", "log")
    restarts = [e for e in nemo.events if e.kind is LogEventKind.RESTART]
    assert saved[-1] + 1 in [e.step for e in restarts]


def test_bad_link_pair_is_well_below_the_other_pairs() -> None:
    fault = next(f for f in SCENARIOS[ScenarioName.DEGRADED].faults if f.kind is FaultKind.BAD_LINK)
    pairs = sorted((EVIDENCE / "gb200-degraded" / "collectives" / "pair").glob("*.log"))
    busbw = {p.stem: _large_busbw(p, "all_reduce") for p in pairs}
    bad = f"{fault.node}-{fault.peer}"
    others = [v for k, v in busbw.items() if k != bad]
    assert len(others) == 27
    assert busbw[bad] == pytest.approx(np.median(others) * (1 - fault.pct / 100), rel=0.05)
    assert busbw[bad] < 0.5 * min(others)
    cross = {p.stem: _large_busbw(p, "all_reduce")
             for p in (EVIDENCE / "gb200-degraded" / "collectives" / "cross-rack").glob("*.log")}
    assert cross["128gpus-2"] < 0.5 * min(v for k, v in cross.items() if k != "128gpus-2")  # racks 3-4
    seed_pairs = [_large_busbw(p, "all_reduce") for p in (EVIDENCE / "gb200-seed" / "collectives" / "pair").glob("*")]
    assert min(seed_pairs) > 0.9 * max(seed_pairs)


def _job(faults: str, hours: float = 1.0) -> tuple[ResilienceJob, ResilienceFiles]:
    topo = build_topology(System.GB200_NVL72, 512)
    job = ResilienceJob(
        workload="llama3-70b", precision="fp8", gpus=128, gbs=512, mean_step_s=7.5, hours=hours,
        checkpoint_every=50, start=fixed_start("2026-11-02T09:00:00"), job_id=100, seed=5,
        faults=tuple(parse_fault(f) for f in faults.split(";") if f),
    )
    return job, simulate_resilience(job, topo)


def test_reported_hang_is_detected_and_restarted() -> None:
    _, files = _job("hang:at=30m,duration=20m")
    records = [json.loads(line) for line in files.events.splitlines()]
    stall = next(r for r in records if r["type"] == "stall_detected")
    when = datetime.fromisoformat(stall["ts"]) - fixed_start("2026-11-02T09:00:00")
    assert 1800 < when.total_seconds() < 1800 + 3 * 7.5 + 60
    assert [r["type"] for r in records].count("job_started") == 2


def test_unreported_hang_leaves_a_gap_and_no_event(tmp_path: Path) -> None:
    job, files = _job("hang:at=30m,duration=20m,reported=no")
    path = tmp_path / "rt.parquet"
    path.write_bytes(files.rank_timings)
    table = parse_rank_timings(path, "rt").table
    stamps = np.unique(pc.cast(table.column("timestamp"), "int64").to_numpy()) / 1e6
    assert np.max(np.diff(stamps)) > 20 * 60
    assert "stall_detected" not in files.events
    del job


def test_lost_steps_jump_the_printed_step_silently() -> None:
    _, files = _job("lost-steps:at=20m,steps=7")
    text = files.nemo_log
    steps = [int(m) for m in re.findall(r"iteration (\d+)/", text)]
    jumps = [b - a for a, b in itertools.pairwise(steps) if b != a + 1]
    assert jumps == [8]
    assert "lost" not in files.events


def test_same_arguments_give_identical_files() -> None:
    a = _job("slow-gpu:node=gb-r1-n02,gpu=0,pct=20,at=10m;node-fail:node=gb-r2-n03,at=40m")[1]
    b = _job("slow-gpu:node=gb-r1-n02,gpu=0,pct=20,at=10m;node-fail:node=gb-r2-n03,at=40m")[1]
    assert a == b


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("slow-gpu:node=x,gpu=1", "missing keys ['pct']"),
        ("melt:node=x", "expected a kind"),
        ("hang:at=soon,duration=1m", "expected a duration"),
        ("node-fail:node=x,at=1h,reported=maybe", "reported=yes or reported=no"),
    ],
)
def test_bad_fault_specs_are_usage_errors(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_fault(spec)
