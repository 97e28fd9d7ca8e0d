"""Goodput under both definitions against hand-computed timelines, and its invariants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clustercert.metrics.goodput import (
    BadputKind,
    CheckpointSave,
    GoodputDefinition,
    Interruption,
    Interval,
    StepCompletion,
    Timeline,
    compute_ml_goodput,
    compute_readiness_goodput,
)


def _steps(*pairs: tuple[int, float]) -> tuple[StepCompletion, ...]:
    return tuple(StepCompletion(n, t) for n, t in pairs)


# Job starts at 0; steps 1-4 end at 10, 12, 14, 16; a blocking save of step 2 runs 12-13; crash.
# The job restarts at 20, resumes from step 2 and logs steps 3, 4, 5 at 30, 32, 34; the run ends at 35.
CRASH = Timeline(
    job_starts=(0.0, 20.0),
    end_s=35.0,
    steps=_steps((1, 10.0), (2, 12.0), (3, 14.0), (4, 16.0), (3, 30.0), (4, 32.0), (5, 34.0)),
    checkpoints=(CheckpointSave(12.0, 13.0, 2),),
    interruptions=(Interruption(interrupted_s=16.0, scheduled_s=20.0, resumed_s=30.0),),
)


def test_ml_goodput_without_disruption() -> None:
    # startup 0-10; steps 2-5 span 10-18 = 8 s of which a save 14-14.5 and data wait 16-16.25; other 18-20.
    timeline = Timeline(
        job_starts=(0.0,),
        end_s=20.0,
        steps=_steps((1, 10.0), (2, 12.0), (3, 14.0), (4, 16.0), (5, 18.0)),
        checkpoints=(CheckpointSave(14.0, 14.5, 3),),
        data_loading=(Interval(16.0, 16.25),),
    )
    result = compute_ml_goodput(timeline)
    assert result.definition is GoodputDefinition.ML_GOODPUT
    assert result.productive_s == pytest.approx(7.25)
    assert result.goodput == pytest.approx(7.25 / 20)
    assert result.badput_s == pytest.approx(
        {
            BadputKind.STARTUP: 10.0,
            BadputKind.CHECKPOINT_SAVE: 0.5,
            BadputKind.DATA_LOADING: 0.25,
            BadputKind.WASTED_PROGRESS: 0.0,
            BadputKind.INFRASTRUCTURE_RECOVERY: 0.0,
            BadputKind.OTHER: 2.0,
        }
    )
    assert result.disruptions == 0 and result.wasted_steps == ()


def test_ml_goodput_with_crash_and_redone_steps() -> None:
    # First segment: startup 10, step 2 productive 2, step 3 (12-14) save 1 + wasted 1, step 4 wasted 2,
    # recovery 16-20 = 4. Second: startup 20-30 = 10, steps 4, 5 productive 2 + 2, other 34-35 = 1.
    result = compute_ml_goodput(CRASH)
    assert result.productive_s == pytest.approx(6.0)
    assert result.goodput == pytest.approx(6 / 35)
    assert result.badput_s == pytest.approx(
        {
            BadputKind.STARTUP: 20.0,
            BadputKind.CHECKPOINT_SAVE: 1.0,
            BadputKind.DATA_LOADING: 0.0,
            BadputKind.WASTED_PROGRESS: 3.0,
            BadputKind.INFRASTRUCTURE_RECOVERY: 4.0,
            BadputKind.OTHER: 1.0,
        }
    )
    assert result.disruptions == 1
    assert result.wasted_steps == (3, 4)


def test_save_takes_precedence_over_overlapping_data_wait() -> None:
    # Step 2 spans 10-14: save 11-12, data wait 11.5-12.5 -> save 1, data 0.5, productive 2.5.
    timeline = Timeline(
        job_starts=(0.0,),
        end_s=14.0,
        steps=_steps((1, 10.0), (2, 14.0)),
        checkpoints=(CheckpointSave(11.0, 12.0, 1),),
        data_loading=(Interval(11.5, 12.5),),
    )
    result = compute_ml_goodput(timeline)
    assert result.productive_s == pytest.approx(2.5)
    assert result.badput_s[BadputKind.CHECKPOINT_SAVE] == pytest.approx(1.0)
    assert result.badput_s[BadputKind.DATA_LOADING] == pytest.approx(0.5)


def test_segment_without_steps_is_recovery() -> None:
    # Start 0, a start at 5 that fails before any step, a start at 8; step 1 ends 10, step 2 at 12.
    timeline = Timeline(job_starts=(0.0, 5.0, 8.0), end_s=12.0, steps=_steps((1, 10.0), (2, 12.0)))
    result = compute_ml_goodput(timeline)
    assert result.badput_s[BadputKind.INFRASTRUCTURE_RECOVERY] == pytest.approx(8.0)
    assert result.badput_s[BadputKind.STARTUP] == pytest.approx(2.0)
    assert result.productive_s == pytest.approx(2.0)


def test_readiness_goodput_single_interruption() -> None:
    # t_ch = 16 - 13 = 3, t_re = 20 - 16 = 4, t_rm = 30 - 20 = 10, T_save = 1, t_wall = 35:
    # (35 - (3 + 10) - 4 - 1) / (35 - 4) = 17 / 31
    result = compute_readiness_goodput(CRASH)
    assert result.definition is GoodputDefinition.READINESS_ENGINE
    assert result.goodput == pytest.approx(17 / 31)
    assert (result.lost_work_s, result.reschedule_s, result.resume_s, result.save_s) == pytest.approx(
        (3.0, 4.0, 10.0, 1.0)
    )
    assert result.interruptions[0].last_checkpoint_s == 13.0


def test_readiness_goodput_two_interruptions_one_checkpoint() -> None:
    # Save 5-6. First: t_ch 10 - 6 = 4, t_re 2, t_rm 3. Second: no save since the resume at 15, so
    # t_ch = 20 - 15 = 5, t_re 1, t_rm 4. (40 - (9 + 7) - 3 - 1) / (40 - 3) = 20 / 37
    timeline = Timeline(
        job_starts=(0.0, 12.0, 21.0),
        end_s=40.0,
        steps=(),
        checkpoints=(CheckpointSave(5.0, 6.0, 10),),
        interruptions=(Interruption(10.0, 12.0, 15.0), Interruption(20.0, 21.0, 25.0)),
    )
    result = compute_readiness_goodput(timeline)
    assert [c.lost_work_s for c in result.interruptions] == [4.0, 5.0]
    assert result.goodput == pytest.approx(20 / 37)


def test_readiness_goodput_last_checkpoint_override() -> None:
    # Checkpoint at 10 given explicitly: t_ch = 16 - 10 = 6 -> (35 - 16 - 4 - 1) / 31 = 14 / 31
    crash = Interruption(interrupted_s=16.0, scheduled_s=20.0, resumed_s=30.0, last_checkpoint_s=10.0)
    timeline = Timeline(CRASH.job_starts, CRASH.end_s, CRASH.steps, CRASH.checkpoints, (crash,))
    assert compute_readiness_goodput(timeline).goodput == pytest.approx(14 / 31)


def test_inconsistent_inputs_raise() -> None:
    with pytest.raises(ValueError, match="expected at least one job start, got none"):
        compute_ml_goodput(Timeline((), 1.0, ()))
    bad = Timeline((0.0,), 10.0, (), interruptions=(Interruption(5.0, 4.0, 6.0),))
    with pytest.raises(ValueError, match="interruption 0: expected previous resume <= interrupted"):
        compute_readiness_goodput(bad)


@st.composite
def _timelines(draw: st.DrawFn) -> Timeline:
    t, step = 0.0, 0
    starts: list[float] = []
    steps: list[StepCompletion] = []
    saves: list[CheckpointSave] = []
    interruptions: list[Interruption] = []
    for k in range(draw(st.integers(1, 4))):
        if k:
            interrupted = t + draw(st.floats(0, 5))
            t = interrupted + draw(st.floats(0, 20))
        starts.append(t)
        if k:
            step = draw(st.integers(0, step))  # resume at or before the last step reached
        first = None
        for _ in range(draw(st.integers(0, 8))):
            t += draw(st.floats(0.01, 10))
            step += 1
            steps.append(StepCompletion(step, t))
            first = t if first is None else first
            if draw(st.booleans()):
                saves.append(CheckpointSave(t, t + draw(st.floats(0, 2)), step))
        if k:
            interruptions.append(
                Interruption(interrupted, starts[-1], first if first is not None else starts[-1])
            )
        t += draw(st.floats(0, 3))
    end = max([t, *(c.end_s for c in saves)]) + draw(st.floats(0.01, 5))
    return Timeline(tuple(starts), end, tuple(steps), tuple(saves), tuple(interruptions))


@given(_timelines())
def test_goodput_within_unit_interval(timeline: Timeline) -> None:
    ml = compute_ml_goodput(timeline)
    assert 0.0 <= ml.goodput <= 1.0
    assert 0.0 <= compute_readiness_goodput(timeline).goodput <= 1.0
    # the ml-goodput breakdown partitions the wall time
    assert ml.productive_s + sum(ml.badput_s.values()) == pytest.approx(ml.wall_s)
    assert min(ml.badput_s.values()) >= -1e-9
