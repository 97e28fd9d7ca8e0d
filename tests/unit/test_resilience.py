"""Resilience analysis against hand-built event logs."""

from __future__ import annotations

import pytest

from clustercert.metrics.goodput import StepCompletion
from clustercert.metrics.resilience import Actor, Event, EventType, ResilienceRules, analyze_resilience

NODES = ("n1", "n2", "n3", "n4")


def _steps(first: int, last: int, t0: float, dt: float = 10.0) -> list[StepCompletion]:
    return [StepCompletion(n, t0 + dt * (n - first)) for n in range(first, last + 1)]


# Steps 1-12 every 10 s (10 ... 120), saves of steps 5 and 10; n3 faults at 130 and the job hangs;
# detected at 170, stopped at 180, n3 excluded, restarted at 400 on n1 n2 n4 n5 from step 10:
# steps 11-15 at 460 ... 500; stopped at 505.
HANG = (
    [*_steps(1, 12, 10.0), *_steps(11, 15, 460.0)],
    [
        Event(0.0, EventType.JOB_STARTED, nodes=NODES),
        Event(50.0, EventType.CHECKPOINT_SAVED, step=5),
        Event(100.0, EventType.CHECKPOINT_SAVED, step=10),
        Event(130.0, EventType.FAULT, node="n3", detail="Xid 79"),
        Event(170.0, EventType.DETECTED, node="n3", detail="hang"),
        Event(180.0, EventType.JOB_STOPPED),
        Event(185.0, EventType.NODE_EXCLUDED, node="n3"),
        Event(400.0, EventType.JOB_STARTED, nodes=("n1", "n2", "n4", "n5")),
        Event(505.0, EventType.JOB_STOPPED),
    ],
)


def test_hang_fault_and_automatic_restart() -> None:
    steps, events = HANG
    report = analyze_resilience(steps, events, 510.0, ResilienceRules(stall_factor=3.0, warmup_steps=2))
    # mean over steps 3-12 and 13-15 (warm-up 2 per segment): 11 gaps of 10 s
    assert report.mean_step_s == pytest.approx(10.0)
    assert report.stall_threshold_s == pytest.approx(30.0)
    assert report.restarts == 1 and report.admin_actions == ()
    assert report.checkpoint_interval_steps == 5
    (stall,) = report.stalls  # 120 (step 12) to 180 (stopped)
    assert (stall.start_s, stall.end_s, stall.duration_s) == (120.0, 180.0, 60.0)
    assert stall.detected_s == 170.0 and stall.acted_s == 180.0 and stall.handled
    (f,) = report.faults
    assert f.fault.node == "n3"
    assert f.time_to_detect_s == 40.0  # 170 - 130
    assert f.time_to_restart_s == 270.0  # 400 - 130
    assert f.restarted_in_time is True
    assert f.excludes_faulty_node is True and f.automatic is True
    assert (f.last_step_before, f.resumed_from_step, f.lost_steps) == (12, 10, 2)
    assert f.lost_work_s == 30.0  # 130 - 100 (end of step 10)
    assert f.within_checkpoint_interval is True


def test_administrator_restart_on_the_faulty_node() -> None:
    steps = [*_steps(1, 20, 10.0), *_steps(1, 5, 2100.0)]  # no checkpoint: restarts from scratch
    events = [
        Event(0.0, EventType.JOB_STARTED, nodes=NODES),
        Event(205.0, EventType.FAULT, node="n2"),
        Event(300.0, EventType.ADMIN_ACTION, node="n2", detail="reset GPU", by=Actor.ADMINISTRATOR),
        Event(2000.0, EventType.JOB_STARTED, nodes=NODES, by=Actor.ADMINISTRATOR),
    ]
    report = analyze_resilience(steps, events, 2200.0, ResilienceRules(checkpoint_interval_steps=10, restart_max_s=900))
    (f,) = report.faults
    assert f.detected_s is None and f.time_to_detect_s is None
    assert f.time_to_restart_s == 1795.0 and f.restarted_in_time is False
    assert f.automatic is False and f.excludes_faulty_node is False
    assert (f.last_step_before, f.resumed_from_step, f.lost_steps) == (20, 0, 20)
    assert f.lost_work_s is None  # step 0 was never logged
    assert f.within_checkpoint_interval is False  # 20 steps lost > interval of 10
    assert [e.detail for e in report.admin_actions] == ["reset GPU", ""]


def test_unhandled_stall_within_a_segment() -> None:
    # steps every 10 s to step 5 (50 s), then step 6 at 120: a 70 s gap over 3 x 10 s, nobody reacts
    steps = [*_steps(1, 5, 10.0), StepCompletion(6, 120.0), *_steps(7, 12, 130.0)]
    events = [Event(0.0, EventType.JOB_STARTED, nodes=NODES), Event(190.0, EventType.JOB_STOPPED)]
    report = analyze_resilience(steps, events, 200.0, ResilienceRules(warmup_steps=0))
    # gaps: 4 x 10 + 70 + 6 x 10 = 170 over 11 -> mean 15.4545, threshold 46.36
    assert report.mean_step_s == pytest.approx(170 / 11)
    (stall,) = report.stalls
    assert (stall.start_s, stall.end_s) == (50.0, 120.0)
    assert stall.detected_s is None and not stall.handled
    assert report.faults == () and report.restarts == 0


def test_no_fault_no_restart() -> None:
    report = analyze_resilience(_steps(1, 10, 10.0), [], 100.0)
    assert report.stalls == () and report.faults == () and report.restarts == 0
    assert report.checkpoint_interval_steps is None


def test_stall_factor_must_exceed_one() -> None:
    with pytest.raises(ValueError, match="stall_factor must exceed 1, got 1"):
        analyze_resilience([], [], 0.0, ResilienceRules(stall_factor=1))


def test_a_gap_within_the_timestamps_resolution_is_no_stall() -> None:
    # steps every 0.3 s (mean 0.3 s, threshold 0.9 s); the last step is placed 1.2 s before the stop because the
    # log's timestamps print whole seconds: 1.2 s exceeds 0.9 s, but not 0.9 s + the 1 s resolution
    steps = _steps(1, 10, 0.3, dt=0.3)
    events = [Event(0.0, EventType.JOB_STARTED, nodes=NODES), Event(4.2, EventType.JOB_STOPPED)]
    coarse = analyze_resilience(steps, events, 5.0, ResilienceRules(warmup_steps=0))
    assert [(s.start_s, s.end_s) for s in coarse.stalls] == [(pytest.approx(3.0), 4.2)]  # read as exact: a stall
    assert analyze_resilience(steps, events, 5.0, ResilienceRules(warmup_steps=0, time_resolution_s=1.0)).stalls == ()
    # a real hang (8 s without a step) is a stall at either resolution
    hung = [*steps, StepCompletion(11, 11.0)]
    later = [events[0], Event(12.0, EventType.JOB_STOPPED)]
    (stall,) = analyze_resilience(hung, later, 12.0, ResilienceRules(warmup_steps=0, time_resolution_s=1.0)).stalls
    assert (stall.start_s, stall.end_s) == (pytest.approx(3.0), 11.0)
