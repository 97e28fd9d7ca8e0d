"""The resilience judge on a hand-written long run: a slow GPU, a node fault, an automatic restart.

Timeline (seconds from the first job start, 2026-01-01T00:00:00Z), every step 10 s unless said:
steps 0-15 end at 20, 30, ..., 170 (a timestamped log line at 170 anchors them); checkpoints of steps
4, 9, 14 at 60, 110, 160; n3 faults at 175 (detected 180, excluded 185); restart requested at 190, the job
starts again at 200 on n1 n4 n5 n6 and resumes from step 14: steps 15-29 end at 230, ..., 370 (anchored);
the job finishes at 380. Rank 1 runs on n2's GPU 0, 25 % slow from step 5 on, reported at 150.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from clustercert.phases.resilience import judge_resilience
from clustercert.verdicts import Severity, Status
from tests.unit.phase_bundles import by_id, gb200, parse_all, write_bundle

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _iso(t: float) -> str:
    return (T0 + dt.timedelta(seconds=t)).isoformat()


def _nemo_stamp(t: float) -> str:
    return (T0 + dt.timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")


def _step_line(i: int, t: float) -> str:
    return (f"[default0]:Training epoch 0, iteration {i}/29 | lr: 1e-05 | global_batch_size: 512 | global_step: {i} "
            f"| reduced_train_loss: 11.03 | train_step_timing in s: {t}\n")


def scenario(
    tmp_path: Path, *, resume_from: int = 14, hang_s: float = 0.0, stall_detected: bool = False,
    straggler_reported: bool = True, admin: bool = False, restart_nodes: tuple[str, ...] = ("n1", "n4", "n5", "n6"),
    events: bool = True, rules: dict[str, Any] | None = None, tail_s: float = 10.0,
) -> dict[str, Any]:
    seg1 = {i: 20.0 + 10 * i for i in range(16)}
    seg2_times = {i: 10.0 + (hang_s if i == 25 else 0.0) for i in range(resume_from + 1, 30)}
    seg2: dict[int, float] = {}
    end = 220.0
    for i, t in seg2_times.items():
        end += t
        seg2[i] = end
    finish = end + tail_s
    log = ["[2026-01-01 00:00:00,000] [INFO] [ft_launcher] launching\n"]
    log += [_step_line(i, 10.0) for i in seg1]
    log.append(f"[default0]:[NeMo I {_nemo_stamp(170)} model_checkpoint:497] after step 15\n")
    log += [_step_line(i, t) for i, t in seg2_times.items()]
    log.append(f"[default0]:[NeMo I {_nemo_stamp(end)} model_checkpoint:497] after step 29\n")
    ev: list[dict[str, Any]] = [{"ts": _iso(0), "type": "job_started", "by": "scheduler",
                                 "nodes": ["n1", "n2", "n3", "n4"]}]
    ev += [{"ts": _iso(20 + 10 * s), "type": "checkpoint_saved", "step": s, "by": "trainer"}
           for s in (4, 9, 14) if s <= resume_from]
    if straggler_reported:
        ev.append({"ts": _iso(150), "type": "straggler_detected", "node": "n2", "gpu": 0, "rank": 1,
                   "by": "straggler-detector"})
    ev += [
        {"ts": _iso(175), "type": "fault_injected", "node": "n3", "by": "injector", "detail": "Xid 79"},
        {"ts": _iso(180), "type": "fault_detected", "node": "n3", "by": "watchdog"},
        {"ts": _iso(185), "type": "node_excluded", "node": "n3", "by": "scheduler"},
        {"ts": _iso(186), "type": "node_excluded", "node": "n2", "by": "scheduler"},
        {"ts": _iso(190), "type": "restart_started", "by": "scheduler"},
        {"ts": _iso(200), "type": "job_started", "by": "scheduler", "nodes": list(restart_nodes)},
        {"ts": _iso(210), "type": "checkpoint_loaded", "step": resume_from, "by": "trainer"},
    ]
    if admin:
        ev.append({"ts": _iso(195), "type": "admin_action", "node": "n3", "by": "operator", "detail": "rebooted n3"})
    if stall_detected:
        ev.append({"ts": _iso(seg2[24] + 40), "type": "stall_detected", "by": "watchdog"})
    ev.append({"ts": _iso(finish), "type": "job_finished", "by": "scheduler"})
    ev.sort(key=lambda e: str(e["ts"]))
    rows = ["rank,node,gpu,step,compute_s,comm_s,timestamp"]
    first_nodes, later_nodes = ["n1", "n2", "n3", "n4"], ["n1", "n5", "n6", "n4"]
    for step, t in seg1.items():
        for r, node in enumerate(first_nodes):
            slow = node == "n2" and step >= 5
            rows.append(f"{r},{node},0,{step},{1.25 if slow else 1.0},0.5,{_iso(t)}")
    for step, t in seg2.items():
        for r, node in enumerate(later_nodes):
            rows.append(f"{r},{node},0,{step},1.0,0.5,{_iso(t)}")
    runs: list[dict[str, Any]] = [
        {"id": "long-run", "phase": "resilience", "kind": "resilience", "format": "nemo", "files": ["log.txt"]},
        {"id": "timings", "phase": "resilience", "kind": "rank-timings", "format": "rank-timings",
         "files": ["timings.csv"]},
    ]
    files: dict[str, str | bytes] = {"log.txt": "".join(log), "timings.csv": "\n".join(rows) + "\n"}
    if events:
        runs.append({"id": "events", "phase": "resilience", "kind": "events", "format": "events",
                     "files": ["events.jsonl"]})
        files["events.jsonl"] = "".join(json.dumps(e) + "\n" for e in ev)
    bundle = write_bundle(tmp_path / "b", runs, files)
    result = judge_resilience(bundle, gb200(**(rules or {})), parse_all(bundle))
    return {"checks": by_id(result.checks), "section": result.section, "root": bundle.root}


def test_goodput_both_definitions_by_hand(tmp_path: Path) -> None:
    out = scenario(tmp_path)
    check = out["checks"]["resilience.goodput_meets_min"]
    # Readiness Engine: t_ch = 175 - 160, t_re = 200 - 175, t_rm = 220 - 200 (step 15 ran 220-230), no blocking save
    assert check.status is Status.PASS and check.severity is Severity.REQUIRED
    assert check.measured == pytest.approx((380 - (15 + 20) - 25) / (380 - 25), rel=1e-9)
    goodput = out["section"]["goodput"]
    assert goodput["badput"] == pytest.approx({"lost_work": 15, "reschedule": 25, "resume": 20,
                                               "checkpoint_save": 0})
    assert goodput["wall_s"] == pytest.approx(380)
    # ml-goodput: startup 20 + 30, step 15's first run (160-170) wasted, recovery 170-200, other 370-380
    ml = out["section"]["goodput_ml"]
    assert ml["goodput"] == pytest.approx(280 / 380, rel=1e-9)
    assert ml["wasted_steps"] == [15]
    assert ml["badput"] == pytest.approx({"startup": 50, "data_loading": 0, "checkpoint_save": 0,
                                          "wasted_progress": 10, "infrastructure_recovery": 30, "other": 10})
    assert [i["kind"] for i in ml["intervals"]] == ["startup", "productive", "wasted_progress",
                                                     "infrastructure_recovery", "startup", "productive", "other"]
    assert [i["start_s"] for i in ml["intervals"]] == pytest.approx([0, 20, 160, 170, 200, 230, 370])
    assert ml["intervals"][-1]["end_s"] == pytest.approx(380)


def test_goodput_below_the_minimum_fails(tmp_path: Path) -> None:
    check = scenario(tmp_path, rules={"goodput_min": 0.95})["checks"]["resilience.goodput_meets_min"]
    assert check.status is Status.FAIL and check.measured == pytest.approx(320 / 355, rel=1e-9)


def test_reported_and_replaced_straggler_passes(tmp_path: Path) -> None:
    out = scenario(tmp_path)
    check = out["checks"]["resilience.stragglers_detected_and_handled"]
    assert check.status is Status.PASS
    (slow,) = [s for s in out["section"]["stragglers"] if s["flagged"]]
    # n2's GPU: 11 of its 16 steps at 1.25 s -> median 1.25; fastest median 1.0
    assert slow["relative_score"] == pytest.approx(0.8) and (slow["rank"], slow["node"], slow["gpu"]) == (1, "n2", 0)
    assert slow["domain"] == "rack1"
    # windows of 3 sampled steps: 3-5 has one slow step (median 1.0); 6-8 is all slow (0.8): visible at step 8, 100 s
    assert slow["first_visible_s"] == pytest.approx(100) and slow["detected_s"] == pytest.approx(150)
    assert slow["lowest_window_score"] == pytest.approx(0.8)
    # the check reports what it judges: stragglers found, handled, and the detection time against the limit
    assert (check.measured, check.target, check.unit) == (1.0, 1.0, "stragglers handled")
    assert check.message.startswith("1 straggler(s) found (judged score, the lower of the relative score over the run "
                                    "and over its worst window, < 0.90), 1 detected by the "
                                    "cluster within 600 s (slowest detection 50 s after first visible)")


def test_unreported_straggler_fails_naming_rank_node_gpu_and_domain(tmp_path: Path) -> None:
    check = scenario(tmp_path, straggler_reported=False)["checks"]["resilience.stragglers_detected_and_handled"]
    assert check.status is Status.FAIL
    assert "rank 1 (node n2, GPU 0, NVLink domain rack1), relative score 0.800" in check.message
    assert "never reported by the cluster's monitoring" in check.message
    assert (check.measured, check.target) == (0.0, 1.0)
    assert check.summary == ("unreported straggler on n2 GPU 0 (relative score 0.800); 0 of 1 straggler(s) detected "
                             "within 600 s")


def test_automatic_restart_on_healthy_nodes_passes(tmp_path: Path) -> None:
    out = scenario(tmp_path)
    check = out["checks"]["resilience.restarts_automatic_on_healthy_nodes"]
    assert check.status is Status.PASS and check.measured == pytest.approx(25)
    (fault,) = out["section"]["faults"]
    assert fault["node"] == "n3" and fault["excludes_faulty_node"] is True and fault["automatic"] is True
    assert (fault["resumed_from_step"], fault["last_checkpoint_step"], fault["lost_steps"]) == (14, 14, 1)
    # issue 58: the check cites the event lines its figure and its exclusion were read from before the whole log
    events = (out["root"] / "events.jsonl").read_text().splitlines()
    cited = [json.loads(events[s.first - 1]) for s in check.evidence[:3]]
    assert [(e["type"], e.get("node")) for e in cited] == [
        ("fault_injected", "n3"), ("node_excluded", "n3"), ("job_started", None)]
    assert check.measured == pytest.approx((dt.datetime.fromisoformat(cited[2]["ts"])
                                            - dt.datetime.fromisoformat(cited[0]["ts"])).total_seconds())


def test_restart_on_the_faulty_node_fails(tmp_path: Path) -> None:
    check = scenario(tmp_path, restart_nodes=("n1", "n3", "n4", "n5"))["checks"][
        "resilience.restarts_automatic_on_healthy_nodes"]
    assert check.status is Status.FAIL and "fault at 175 s on n3: the restart ran on the faulty node again" in (
        check.message)


def test_lost_work_within_the_checkpoint_interval(tmp_path: Path) -> None:
    check = scenario(tmp_path)["checks"]["resilience.lost_work_within_checkpoint_interval"]
    assert check.status is Status.PASS and (check.measured, check.target) == (1.0, 5.0)


def test_lost_work_beyond_the_checkpoint_interval_fails(tmp_path: Path) -> None:
    # checkpoints of steps 4 and 9 only: resumed from 9 after reaching 15 -> 6 steps lost, interval 5
    check = scenario(tmp_path, resume_from=9)["checks"]["resilience.lost_work_within_checkpoint_interval"]
    assert check.status is Status.FAIL and (check.measured, check.target) == (6.0, 5.0)
    assert "fault at 175 s on n3 lost 6 steps" in check.message


def test_no_stall_passes_and_an_undetected_hang_fails(tmp_path: Path) -> None:
    assert scenario(tmp_path / "a")["checks"]["resilience.stalls_detected"].status is Status.PASS
    out = scenario(tmp_path / "b", hang_s=60.0)
    check = out["checks"]["resilience.stalls_detected"]
    # step 25 took 70 s (step 24 ended at 320): mean of kept intervals (13 x 10 + 11 x 10 + 70) / 25 = 12.4 s,
    # threshold 37.2 s
    assert check.status is Status.FAIL and "(70 s): never detected" in check.message
    (stall,) = out["section"]["stalls"]
    assert stall["duration_s"] == pytest.approx(70) and stall["start_s"] == pytest.approx(320)
    # issue 58: the check cites the step lines the gap lies between, then the whole log
    log = (out["root"] / "log.txt").read_text().splitlines()
    before, after = (log[s.first - 1] for s in check.evidence[:2])
    assert "iteration 24/29" in before and "iteration 25/29" in after and "train_step_timing in s: 70.0" in after
    assert check.evidence[2].count > 2
    detected = scenario(tmp_path / "c", hang_s=60.0, stall_detected=True)["checks"]["resilience.stalls_detected"]
    assert detected.status is Status.PASS


def test_administrator_action_fails_two_checks(tmp_path: Path) -> None:
    out = scenario(tmp_path, admin=True)
    admin = out["checks"]["resilience.no_admin_action"]
    assert admin.status is Status.FAIL and "195 s rebooted n3 on n3" in admin.message
    assert admin.evidence[0].file.endswith("events.jsonl")
    restart = out["checks"]["resilience.restarts_automatic_on_healthy_nodes"]
    assert restart.status is Status.FAIL and "an administrator acted before the restart" in restart.message
    assert scenario(tmp_path / "ok")["checks"]["resilience.no_admin_action"].status is Status.PASS


def test_missing_event_log_is_absent_evidence(tmp_path: Path) -> None:
    check = scenario(tmp_path, events=False)["checks"]["resilience.no_admin_action"]
    assert check.status is Status.FAIL and "the cluster did not show" in check.message


def test_an_unreadable_event_log_leaves_what_it_would_show_unjudged(tmp_path: Path) -> None:
    """A healthy run (its straggler reported and its node excluded, no administrator) whose event log cannot be read
    was NOT CERTIFIED: 'the bundle has no job event log' and 'unreported straggler'. What the log would show cannot
    be told: both checks are ERRORs naming the file (the run is INCOMPLETE), never a finding about the cluster."""
    out = scenario(tmp_path)
    events = out["root"] / "events.jsonl"
    events.write_bytes(b"")
    from clustercert.evidence.bundle import load_bundle

    bundle = load_bundle(out["root"])
    checks = by_id(judge_resilience(bundle, gb200(), parse_all(bundle)).checks)
    unread = f"{events}: expected log text, got an empty file"
    admin = checks["resilience.no_admin_action"]
    assert admin.status is Status.ERROR and admin.message.startswith(f"{unread}: the job event log cannot be read")
    straggler = checks["resilience.stragglers_detected_and_handled"]
    assert straggler.status is Status.ERROR
    assert straggler.summary == f"whether the straggler on n2 GPU 0 was handled cannot be told: {unread}"
    assert "rank 1 (node n2, GPU 0, NVLink domain rack1)" in straggler.message
    assert not [c for c in checks.values() if c.status is Status.FAIL]  # nothing said of the cluster itself


def test_unusable_rank_timings_are_an_error_naming_file_and_line(tmp_path: Path) -> None:
    out = scenario(tmp_path)
    timings = out["root"] / "timings.csv"
    lines = timings.read_text().splitlines()
    lines[3] = lines[3].replace(",1.0,0.5,", ",-1.0,0.5,")
    timings.write_text("\n".join(lines) + "\n")
    from clustercert.evidence.bundle import load_bundle

    bundle = load_bundle(out["root"])
    checks = by_id(judge_resilience(bundle, gb200(), parse_all(bundle)).checks)
    assert checks["resilience.timings_valid"].status is Status.ERROR
    assert f"{timings} line 3 field 'compute_s': expected values >= 0, got -1.0" in checks[
        "resilience.timings_valid"].message
    assert checks["resilience.stragglers_detected_and_handled"].status is Status.ERROR


def test_wind_down_after_the_final_iteration_is_no_stall(tmp_path: Path) -> None:
    # 60 s from the last step (29 of 29) to job_finished would exceed 3 x 10 s mid-run; after the end it is teardown
    check = scenario(tmp_path, tail_s=60.0)["checks"]["resilience.stalls_detected"]
    assert check.status is Status.PASS and check.measured == 0.0


def _sample(tmp_path: Path, drop_kind: str | None = None, emptied: str | None = None) -> tuple[Any, Any, Any]:
    """The shipped sample (unsealed), without its runs of `drop_kind`, the file `emptied` emptied: its bundle, its
    parsed runs and its catalog."""
    import shutil

    import yaml

    from clustercert.catalog import load_catalog
    from clustercert.evidence.bundle import load_bundle
    from clustercert.settings import PROJECT_ROOT

    root = tmp_path / "bundle"
    shutil.copytree(PROJECT_ROOT / "evidence" / "gb200-seed", root)
    (root / "MANIFEST.sha256").unlink()
    if drop_kind:
        spec = yaml.safe_load((root / "bundle.yaml").read_text())
        spec["runs"] = [r for r in spec["runs"] if r["kind"] != drop_kind]
        (root / "bundle.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    if emptied:
        (root / emptied).write_bytes(b"")
    bundle = load_bundle(root)
    return bundle, parse_all(bundle), load_catalog(bundle.spec.catalog, PROJECT_ROOT / "references",
                                                   relative_to=root)


def test_without_an_event_log_the_job_starts_are_sacct_s_sruns(tmp_path: Path) -> None:
    """The shipped sample's long run without its event log (most clusters keep none in our format): the job starts
    came from every sacct row (job, batch, extern, srun: four per job at one moment), so the second start was the
    first one again, and the certification crashed ('interruption 1: expected previous resume <= interrupted <=
    scheduled', internal error). Each job's srun step is one start; the reschedules are sacct's own gaps."""
    from clustercert.parsers.sacct import parse_sacct
    from clustercert.phases.resilience import build_job_timeline

    bundle, parsed, catalog = _sample(tmp_path, drop_kind="events")
    root = bundle.root
    [long_run] = [parsed[r.id] for r in bundle.spec.runs if r.kind.value == "resilience"]
    sacct = parse_sacct(root / "resilience" / "sacct.txt", "sacct.txt")
    job = build_job_timeline(long_run, [], [sacct])  # type: ignore[arg-type]
    assert not isinstance(job, str), job
    # the file's srun rows: 48213.0 at 09:00:00, 48214.0 at 09:56:00, 48215.0 at 11:02:20
    sruns = [ln.split("|") for ln in (root / "resilience" / "sacct.txt").read_text().splitlines()
             if ln.split("|")[0].endswith(".0")]
    assert [row[8][11:] for row in sruns] == ["09:00:00", "09:56:00", "11:02:20"]
    assert list(job.timeline.job_starts) == [0.0, 56 * 60.0, 2 * 3600 + 2 * 60 + 20.0]
    assert [i.scheduled_s for i in job.interruptions] == [56 * 60.0, 2 * 3600 + 2 * 60 + 20.0]
    checks = by_id(judge_resilience(bundle, catalog, parsed).checks)  # no crash: every check judged
    assert checks["resilience.goodput_meets_min"].status is Status.PASS
    assert "2 interruption(s)" in checks["resilience.goodput_meets_min"].message
    assert checks["resilience.no_admin_action"].status is Status.FAIL  # absent, not unreadable: not shown


@pytest.mark.parametrize("emptied", ["resilience/events.jsonl", "resilience/training.log"])
def test_the_sample_with_a_log_it_cannot_read_is_unjudged_not_failed(tmp_path: Path, emptied: str) -> None:
    """The sample's healthy long run with its event log emptied read 'no step ... never detected', restarts and lost
    work failed (their events unread); with its training log emptied, 'the bundle has no resilience training log:
    the cluster did not show a long run'. Each is an ERROR naming the file: nothing is said of the cluster."""
    bundle, parsed, catalog = _sample(tmp_path, emptied=emptied)
    checks = judge_resilience(bundle, catalog, parsed).checks
    assert [c.id for c in checks if c.status is Status.FAIL] == []
    unread = f"{bundle.root / emptied}: expected log text, got an empty file"
    stalls = by_id(checks)["resilience.stalls_detected"]
    assert stalls.status is Status.ERROR and unread in stalls.message
    if emptied.endswith("training.log"):  # no timeline at all: goodput too (from sacct's starts it still holds)
        goodput = by_id(checks)["resilience.goodput_meets_min"]
        assert goodput.status is Status.ERROR and goodput.message.startswith(unread)


def test_the_judge_tells_its_long_steps_and_what_they_work_on(tmp_path: Path) -> None:
    """A 4,096-GPU run's judge is 25 s (stragglers from 46 M per-rank rows): it says each step as it starts, with
    the rows it works on (the sample's: the Parquet file's own row count, the telemetry file's sample lines); what
    is told changes no check."""
    import pyarrow.parquet as pq

    bundle, parsed, catalog = _sample(tmp_path)
    told: list[str] = []
    checks = judge_resilience(bundle, catalog, parsed, told.append).checks
    rows = pq.ParquetFile(bundle.root / "resilience" / "rank-timings.parquet").metadata.num_rows
    samples = sum(1 for line in (bundle.root / "resilience" / "dcgm.prom").read_text().splitlines()
                  if line and not line.startswith("#"))
    table = pq.read_table(bundle.root / "resilience" / "rank-timings.parquet", columns=["rank", "node", "gpu"])
    places: dict[tuple[str, int], set[int]] = {}  # each GPU's ranks, each rank's GPUs
    ranks: dict[int, set[tuple[str, int]]] = {}
    for rank, node, gpu in zip(*table.to_pydict().values(), strict=True):
        places.setdefault((node, gpu), set()).add(rank)
        ranks.setdefault(rank, set()).add((node, gpu))
    gpus = len(places)
    # a GPU that ran one rank all along, a rank no other GPU ran, is scored from the file's layout first (one
    # group, the sample is small); the replaced nodes' GPUs from their own rows after
    steady = sum(1 for ran in places.values() if len(ran) == 1 and len(ranks[next(iter(ran))]) == 1)
    assert told == ["judge goodput, stalls and restarts on the long run's timeline",
                    f"judge stragglers from {rows:,} per-rank timings",
                    f"judge stragglers: {steady:,} of {gpus:,} ranks scored",
                    f"judge stragglers: {gpus:,} of {gpus:,} ranks scored",
                    f"count the GPUs and metrics of {samples:,} telemetry samples"]
    assert samples == 22_528 and rows > 0 and gpus == 136 and steady == 120
    assert checks == judge_resilience(bundle, catalog, parsed).checks


def test_no_straggler_reported_is_said_only_where_a_detection_was_watching(tmp_path: Path) -> None:
    # issue 56: without an event log or a straggler-detection report in a log, the bundle shows no detection at all:
    # "the cluster's own detection reported no straggler" would claim what nobody saw
    unwatched = scenario(tmp_path / "a", straggler_reported=False, events=False)
    check = unwatched["checks"]["resilience.stragglers_detected_and_handled"]
    assert check.status is Status.FAIL
    assert "reported no straggler" not in check.message
    assert ("the bundle holds no evidence of the cluster's own straggler detection (no event log, no "
            "straggler-detection report in a training log)") in check.message
    watched = scenario(tmp_path / "b", straggler_reported=False)
    check = watched["checks"]["resilience.stragglers_detected_and_handled"]
    assert f"the cluster's own detection ({watched['root'] / 'events.jsonl'}) reported no straggler" in check.message
