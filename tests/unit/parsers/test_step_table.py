"""A bulk reading's steps kept as columns (StepTable): the same steps as a list, read column by column by the
validation table, the window's measurement and the loss verdict, with the same results as from a list."""

from __future__ import annotations

import dataclasses
import math
import pickle
import random
from pathlib import Path
from typing import Any

import pytest

from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import RunKind, RunSpec
from clustercert.evidence.facts import run_facts
from clustercert.evidence.parse import ParsedFile
from clustercert.metrics.convergence import judge_loss
from clustercert.metrics.throughput import measure_window
from clustercert.parsers.nemo import parse_nemo
from clustercert.parsers.training import (
    NanMark,
    StepTable,
    TrainingLog,
    TrainingStep,
    make_steps,
    step_column,
)
from clustercert.validation.tables import training_table

ROOT = Path(__file__).resolve().parents[3]
FIELDS = [f.name for f in dataclasses.fields(TrainingStep)]


def _table(steps: list[TrainingStep], names: list[str] | None = None) -> StepTable:
    """The StepTable of `steps`, given the fields `names` (the required three and the others steps set)."""
    names = names or ["iteration", "step_time_s", "line", *(
        name for name in FIELDS[3:] if any(getattr(s, name) != getattr(TrainingStep(0, 0.0, 0), name) for s in steps))]
    return make_steps(names, [[getattr(s, name) for s in steps] for name in names])


def _random_steps(rng: random.Random, n: int) -> list[TrainingStep]:
    steps = []
    iteration = rng.randint(0, 3)
    for line in range(1, n + 1):
        iteration += rng.choice([1, 1, 1, 1, 0, 2, -5])  # repeats, gaps and restarts
        steps.append(TrainingStep(
            iteration=max(iteration, 0), line=line * 2,
            step_time_s=rng.choice([None, -1.0, 0.0, math.nan, *[rng.uniform(0.5, 9.0)] * 8]),
            tflops_per_gpu=rng.choice([None, rng.uniform(100, 900)]),
            loss=rng.choice([None, math.inf, *[rng.uniform(1.0, 12.0)] * 10]),
            grad_norm=rng.choice([None, rng.uniform(0.1, 3.0)]),
            global_step=rng.choice([None, iteration, iteration + 1]),
            max_iteration=rng.choice([None, 40, 10_000]),
            timestamp_s=rng.choice([None, 1.7e9 + line * 7.6]),
            pause_s=rng.choice([0.0, 0.0, 3.5]),
            untimed_pause=rng.random() < 0.1,
        ))
    return steps


def test_a_step_table_is_the_sequence_of_the_steps_its_columns_hold() -> None:
    steps = [TrainingStep(1, 0.5, 3), TrainingStep(2, 0.25, 4, loss=2.0), TrainingStep(3, 0.75, 9, loss=1.5)]
    table = make_steps(["iteration", "step_time_s", "line", "loss"], [[1, 2, 3], [0.5, 0.25, 0.75], [3, 4, 9],
                                                                      [None, 2.0, 1.5]])
    assert isinstance(table, StepTable) and len(table) == 3
    assert table == steps and steps == table and list(table) == steps and list(reversed(table)) == steps[::-1]
    assert table[0] == steps[0] and table[-1] == steps[-1] and table[1:] == steps[1:] and table[::-1] == steps[::-1]
    with pytest.raises(IndexError):
        table[3]
    assert steps[1] in table and TrainingStep(2, 0.25, 4) not in table and table.index(steps[2]) == 2
    assert table.column("loss") == [None, 2.0, 1.5] and table.column("pause_s") == [0.0] * 3
    assert table.column("epoch") == [None] * 3
    with pytest.raises(KeyError):
        table.column("lr")
    assert step_column(table, "line") == [3, 4, 9] == step_column(steps, "line")
    # one step different, one step fewer: not equal, to a list or a table
    assert table != [*steps[:2], TrainingStep(3, 0.75, 9, loss=1.25)] and table != steps[:2]
    assert table != make_steps(["iteration", "step_time_s", "line"], [[1, 2, 3], [0.5, 0.25, 0.75], [3, 4, 9]])
    assert table != "abc" and table != 3
    # the log that holds it is equal to the log that holds the list
    assert TrainingLog("nemo", "x", table) == TrainingLog("nemo", "x", steps)
    assert TrainingLog("nemo", "x", table).to_json() == TrainingLog("nemo", "x", steps).to_json()


def test_an_item_asked_for_alone_is_the_step_and_many_items_are_the_same_steps() -> None:
    steps = [TrainingStep(i, 0.5 + i, 10 + i, loss=float(i)) for i in range(200)]
    table = _table(steps)
    assert [table[i] for i in range(200)] == steps  # past the first 64, all steps are built and kept
    assert [table[-i] for i in range(1, 201)] == steps[::-1]


def test_a_pickled_table_holds_the_columns_and_no_step_object() -> None:
    steps = [TrainingStep(i, 0.5, i + 1, loss=1.0 / (i + 1)) for i in range(500)]
    table = _table(steps)
    assert list(table) == steps  # built: the pickle still holds only the columns
    data = pickle.dumps(TrainingLog("nemo", "x", table))
    assert b"TrainingStep" not in data
    back = pickle.loads(data)
    assert back.steps == steps and isinstance(back.steps, StepTable)
    assert back.steps.column("loss") == table.column("loss")


@pytest.mark.parametrize(("names", "columns", "message"), [
    (["iteration", "step_time_s", "line"], [[1, 2], [0.5], [3, 4]], "different lengths"),
    (["iteration", "step_time_s"], [[1], [0.5]], "required fields"),
    (["iteration", "step_time_s", "line", "lr"], [[1], [0.5], [2], [0.1]], "no TrainingStep field"),
    (["iteration", "step_time_s", "line"], [[1], [0.5]], "2 columns"),
])
def test_columns_that_make_no_steps_are_refused(names: list[str], columns: list[list[Any]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_steps(names, columns)


def test_the_window_the_loss_and_the_validation_table_read_from_columns_what_they_read_from_steps() -> None:
    rng = random.Random(29)
    catalog = load_catalog("exemplar-gb200", ROOT / "references")
    run = RunSpec(id="llama3-70b-fp8-512-r1", phase="efficiency", kind="training", format="nemo",  # type: ignore[arg-type]
                  workload="llama3-70b", precision="fp8", gpus=512, gbs=2048, seq_len=8192, files=["t.log"])
    facts = run_facts(run, catalog)
    judged = 0
    for trial in range(60):
        steps = _random_steps(rng, rng.randint(1, 60))
        table = _table(steps)
        marks = [NanMark(steps[0].line, "loss")] if trial % 7 == 0 else []
        window = (rng.randint(0, 5), rng.randint(5, 30))
        assert measure_window(table, marks, window, resamples=50, seed=trial) == measure_window(
            steps, marks, window, resamples=50, seed=trial)
        assert judge_loss(table, marks, 4.0) == judge_loss(steps, marks, 4.0)
        from_table = training_table(ParsedFile(run.id, RunKind.TRAINING, "t.log", "t.log",
                                               TrainingLog("nemo", "t.log", table)), run, facts)
        from_list = training_table(ParsedFile(run.id, RunKind.TRAINING, "t.log", "t.log",
                                              TrainingLog("nemo", "t.log", steps)), run, facts)
        frame_table, frame_list = next(from_table.batches()), next(from_list.batches())
        assert frame_table.equals(frame_list) and list(frame_table.dtypes) == list(frame_list.dtypes)
        assert from_table.parameters == from_list.parameters and from_table.rows == from_list.rows
        judged += frame_table["mfu"].notna().sum() > 0
    assert judged > 10  # the MFU column was computed, not only left empty


def test_a_parsed_log_keeps_its_columns_and_judges_as_its_steps(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    path.write_text("".join(
        f"Training epoch 0, iteration {i}/99 | lr: 1e-4 | global_batch_size: 512 | global_step: {i} | "
        f"reduced_train_loss: {11 - i / 10:.2f} | train_step_timing in s: 7.6{i % 10} | consumed_samples: {i * 512}\n"
        for i in range(100)))
    log = parse_nemo(path, "n.log")
    assert isinstance(log.steps, StepTable)
    assert log.steps.column("step_time_s")[:3] == [7.60, 7.61, 7.62] and log.steps.column("line")[-1] == 100
    steps = list(log.steps)
    assert steps[5] == TrainingStep(iteration=5, step_time_s=7.65, line=6, loss=10.5, global_step=5, epoch=0,
                                    max_iteration=99, global_batch_size=512, consumed_samples=2560)
    measured = measure_window(log.steps, log.nan_marks, (10, 59), resamples=100, seed=1)
    assert not isinstance(measured, list)
    assert measured.mean_s == pytest.approx(sum(7.6 + (i % 10) / 100 for i in range(10, 60)) / 50)
    assert measured.lines == tuple(range(11, 61))
