"""The resilience judge on NVIDIA's real NeMo resiliency logs: a crash with in-job restart, a straggler stop."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from clustercert.phases.resilience import judge_resilience
from tests.unit.phase_bundles import by_id, gb200, parse_all, write_bundle

LOGS = "training-logs"
CRASH = "nemo2-nemorun-llama-54m-8gpu-crash-and-in-job-restart.log"
STRAGGLER = "nemo2-nemorun-llama-54m-8gpu-straggler-terminated.log"
_STAMP = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3})\]")
_STEP = re.compile(r"iteration (\d+)/\d+ .*train_step_timing in s: ([0-9.]+)")


def _judge(real_samples: Path, name: str, tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "bundle"
    root.mkdir()
    shutil.copyfile(real_samples / LOGS / name, root / "run.log")
    bundle = write_bundle(root, [{"id": "long-run", "phase": "resilience", "kind": "resilience", "format": "nemo",
                                  "files": ["run.log"]}], {})
    result = judge_resilience(bundle, gb200(), parse_all(bundle))
    return {"checks": by_id(result.checks), "section": result.section}


def _time(line: str) -> float:
    match = _STAMP.search(line)
    assert match is not None, line
    return dt.datetime.fromisoformat(f"{match.group(1)}.{match.group(2)}+00:00").timestamp()


def test_crash_restart_checkpoint_and_redone_steps(real_samples: Path, tmp_path: Path) -> None:
    lines = (real_samples / LOGS / CRASH).read_text().splitlines()
    starts = [_time(x) for x in lines if "Starting worker group" in x]
    failed = next(_time(x) for x in lines if "Worker group FAILED" in x)
    restored = next(x for x in lines if "Restored all states from the checkpoint" in x)
    resumed_step = int(re.search(r"step=(\d+)", restored).group(1))  # type: ignore[union-attr]
    first_run: dict[int, float] = {}
    redone: list[int] = []
    for x in lines:
        m = _STEP.search(x)
        if m:
            step, t = int(m.group(1)), float(m.group(2))
            if step in first_run:
                redone.append(step)
            else:
                first_run[step] = t
    # what the file shows: two worker-group starts, one failure, resumption from step 9, steps 10-15 printed twice
    assert len(starts) == 2 and resumed_step == 9 and redone == [10, 11, 12, 13, 14, 15]

    out = _judge(real_samples, CRASH, tmp_path)
    (fault,) = out["section"]["faults"]
    assert fault["time_s"] == pytest.approx(failed - starts[0], abs=1e-3)  # the crash, 167.05 s in
    assert fault["restarted_s"] == pytest.approx(starts[1] - starts[0], abs=1e-3)  # the in-job restart
    assert fault["automatic"] is True
    assert fault["resumed_from_step"] == resumed_step == fault["last_checkpoint_step"]
    assert fault["last_step_before"] == 15 and fault["lost_steps"] == 6
    ml = out["section"]["goodput_ml"]
    assert ml["wasted_steps"] == redone and ml["disruptions"] == 1
    # wasted progress: the first run of steps 10-15, as the log timed them (7.589 + 7.59 + ... = 45.575 s)
    assert ml["badput"]["wasted_progress"] == pytest.approx(sum(first_run[s] for s in redone), abs=1e-6)
    ready = out["section"]["goodput"]
    assert ready["interruptions"] == 1
    assert ready["badput"]["reschedule"] == pytest.approx(starts[1] - min(failed, _time(
        next(x for x in lines if "failed (exitcode" in x))), abs=1e-3)
    check = out["checks"]["resilience.goodput_meets_min"]
    assert check.measured == pytest.approx(ready["goodput"]) and "re-done steps [10, 11, 12, 13, 14, 15]" in (
        check.message)
    assert out["checks"]["resilience.restarts_automatic_on_healthy_nodes"].status.value == "PASS"
    # issue 58: each fault check's first spans are the lines its figure was read from, not the whole log. The
    # oracle opens those lines: the restart time is the gap between the two stamps cited, the steps lost the
    # iteration printed before the crash less the one resumed from (the first printed after the restart, less one)
    restart = out["checks"]["resilience.restarts_automatic_on_healthy_nodes"]
    failed_line, started_line = (lines[s.first - 1] for s in restart.evidence[:2])
    assert all(s.first == s.last for s in restart.evidence[:2])
    assert "Worker group FAILED" in failed_line and "Starting worker group" in started_line
    assert restart.measured == pytest.approx(_time(started_line) - _time(failed_line), abs=1e-3)
    lost = out["checks"]["resilience.lost_work_within_checkpoint_interval"]
    assert [s.first for s in lost.evidence[:2]] == [s.first for s in restart.evidence[:2]]
    last, resumed_next = (int(_STEP.search(lines[s.first - 1]).group(1))  # type: ignore[union-attr]
                          for s in lost.evidence[2:4])
    assert lost.measured == last - (resumed_next - 1) == 6


def test_straggler_check_names_what_the_cluster_reported(real_samples: Path, tmp_path: Path) -> None:
    text = (real_samples / LOGS / STRAGGLER).read_text()
    warning = next(x for x in text.splitlines() if "STRAGGLER DETECTION WARNING" in x)
    pairs = re.findall(r"StragglerId\(rank=(\d+), node='([^']*)'\)", warning)
    ranks = sorted(int(r) for r, _ in pairs)
    nodes = sorted({n for _, n in pairs})
    assert ranks == [0, 1, 2, 4, 5, 6] and nodes == ["4809917ea058"]

    out = _judge(real_samples, STRAGGLER, tmp_path)
    check = out["checks"]["resilience.stragglers_detected_and_handled"]
    assert f"the cluster's own detection reported ranks {ranks} on node(s) {nodes}" in check.message
    # no per-rank timings in the bundle: clustercert cannot score ranks itself, so the check fails as absent
    assert check.status.value == "FAIL" and "no per-rank step timings" in check.message
    flagged = sorted({int(str(s["rank"])) for s in out["section"]["stragglers"] if s["flagged"]})
    assert flagged == ranks
    assert {s["node"] for s in out["section"]["stragglers"]} == set(nodes)
    assert check.evidence and check.evidence[0].first == text.splitlines().index(warning) + 1
