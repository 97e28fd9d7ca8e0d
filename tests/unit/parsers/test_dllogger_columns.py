"""DLLogger read column by column (`_columns`, blocks of records decoded by orjson) reads what the record-by-record
reading reads: values and lines counted by hand, the same steps as `_records` on random logs (PARAMETER records,
records without a step time, marks after a prefix, fields missing from some records, blocks of any size), and every
log it cannot read alike (a text, null, nan or boolean value, a list or float step, a negative step time, a line that
is not an object) left to `_records`, with its nan marks and its located errors."""

from __future__ import annotations

import json
import random
from dataclasses import astuple
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import dllogger
from clustercert.parsers.dllogger import parse_dllogger
from clustercert.parsers.training import StepTable, read_text


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "d.log"
    path.write_bytes(text.encode())
    return path


def dlll(record: dict[str, object], prefix: str = "") -> str:
    return f"{prefix}DLLL {json.dumps(record)}\n"


def hand_log() -> str:
    """Line 1 a PARAMETER record, line 2 prose, then per step i (1..10) its record on line 2 + i: step time 1 + i/10,
    loss 3 - i/10, grad norm i, TFLOP/s 400 + i, batch 2048, 2048 * i samples; step 5 also has train_loss 9.5, which
    is its loss (the later key); step 7's mark follows a rank prefix; a record without a step time closes it."""
    out = [dlll({"type": "PARAMETER", "step": "PARAMETER", "data": {"gbs": 2048}}), "some prose the parser skips\n"]
    for i in range(1, 11):
        data: dict[str, object] = {"train_step_timing in s": 1 + i / 10, "reduced_train_loss": 3 - i / 10,
                                   "grad_norm": i, "TFLOPS_per_GPU": 400.0 + i, "global_batch_size": 2048,
                                   "consumed_samples": 2048 * i}
        if i == 5:
            data["train_loss"] = 9.5
        out.append(dlll({"timestamp": f"1700000000.{i}", "type": "LOG", "step": i, "data": data},
                        prefix="[rank0]: " if i == 7 else ""))
    out.append(dlll({"type": "LOG", "step": 11, "data": {"validation_loss": 2.0}}))
    return "".join(out)


def test_a_log_is_read_by_columns_with_its_values_and_lines(tmp_path: Path) -> None:
    text = hand_log()
    assert isinstance(dllogger._columns(text), StepTable)  # the column reading applies
    log = parse_dllogger(write(tmp_path, text), "d.log")
    assert len(log.steps) == 10 and log.nan_marks == [] and log.line_count == 13
    for i, step in enumerate(log.steps, start=1):
        assert (step.iteration, step.line) == (i, 2 + i)
        assert step.step_time_s == 1 + i / 10
        assert step.loss == (9.5 if i == 5 else 3 - i / 10)
        assert step.grad_norm == float(i) and isinstance(step.grad_norm, float)
        assert step.tflops_per_gpu == 400.0 + i
        assert step.global_batch_size == 2048 and isinstance(step.global_batch_size, int)
        assert step.consumed_samples == 2048 * i and isinstance(step.consumed_samples, int)


def random_log(rng: random.Random) -> str:
    keys = ["train_step_timing in s", "reduced_train_loss", "train_loss", "grad_norm", "TFLOPS_per_GPU",
            "global_batch_size", "consumed_samples", "other"]
    out = []
    for step in range(rng.randint(1, 40)):
        roll = rng.random()
        if roll < 0.05:
            out.append(dlll({"type": "PARAMETER", "data": {"x": 1}}))
        elif roll < 0.1:
            out.append("prose between records\n")
        elif roll < 0.15:
            out.append(dlll({"type": "LOG", "step": step, "data": {"eval_loss": 1.0}}))
        else:
            data = {key: rng.choice([rng.randint(0, 5000), rng.uniform(0, 50), 2.0 ** 60])
                    for key in keys if rng.random() < 0.7}
            data["train_step_timing in s"] = rng.choice([rng.randint(0, 9), rng.uniform(0, 9)])
            out.append(dlll({"type": "LOG", "step": step, "data": data},
                            prefix=rng.choice(["", "", "[default0]: "])))
    if not any("train_step_timing" in line for line in out):
        out.append(dlll({"step": 0, "data": {"train_step_timing in s": 1.0}}))
    return "".join(out)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("block", [2, 4096])
def test_the_column_reading_reads_what_the_record_reading_reads(seed: int, block: int, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dllogger, "_BLOCK", block)
    text = random_log(random.Random(seed))
    assert dllogger._columns(text) is not None
    fast = parse_dllogger(write(tmp_path, text), "d.log")
    slow = dllogger._records(read_text(tmp_path / "d.log", "d.log", limit=1 << 30), "d.log")
    assert [astuple(s) for s in fast.steps] == [astuple(s) for s in slow.steps]
    assert [[type(v) for v in astuple(s)] for s in fast.steps] == [[type(v) for v in astuple(s)] for s in slow.steps]
    assert (fast.nan_marks, fast.line_count, fast.warnings) == (slow.nan_marks, slow.line_count, slow.warnings)


@pytest.mark.parametrize("value", ['"2.5"', "null", "true", '"nan"', "NaN"], ids=["text", "null", "bool", "nan-text",
                                                                                   "NaN"])
def test_a_value_that_is_not_a_json_number_is_left_to_the_record_reading(value: str, tmp_path: Path) -> None:
    text = hand_log() + f'DLLL {{"step": 12, "data": {{"train_step_timing in s": 1.0, "grad_norm": {value}}}}}\n'
    assert dllogger._columns(text) is None
    path = write(tmp_path, text)
    if value in ("null", "true"):  # not numbers: named with their line and field
        with pytest.raises(EvidenceError) as caught:
            parse_dllogger(path, "d.log")
        assert (caught.value.line, caught.value.field) == (14, "grad_norm")
        return
    log = parse_dllogger(path, "d.log")  # a number in a text is read, a nan grad norm is marked on its line
    assert len(log.steps) == 11 and log.steps[-1].line == 14
    if value == '"2.5"':
        assert log.steps[-1].grad_norm == 2.5 and log.nan_marks == []
    else:
        assert log.steps[-1].grad_norm != log.steps[-1].grad_norm  # nan
        assert [(m.line, m.field) for m in log.nan_marks] == [(14, "grad_norm")]


@pytest.mark.parametrize(("record", "field"), [
    ('{"step": 12, "data": {"train_step_timing in s": -1.0}}', "train_step_timing in s"),
    ('{"step": "twelve", "data": {"train_step_timing in s": 1.0}}', "step"),
    ("[1, 2]", "DLLL"),
    ('{"step": 12, "data": {"train_step_timing in s": 1.0}', "DLLL"),
], ids=["negative-step-time", "text-step", "not-an-object", "cut-short"])
def test_a_record_the_columns_cannot_read_is_named_with_its_line(record: str, field: str, tmp_path: Path) -> None:
    text = hand_log() + f"DLLL {record}\n" + dlll({"step": 13, "data": {"train_step_timing in s": 1.0}})
    assert dllogger._columns(text) is None
    with pytest.raises(EvidenceError) as caught:
        parse_dllogger(write(tmp_path, text), "d.log")
    assert (caught.value.line, caught.value.field) == (14, field)


@pytest.mark.parametrize("parameter", [True, False], ids=["with-a-parameter-record", "step-records-only"])
def test_a_step_record_without_a_step_is_named_with_its_line(parameter: bool, tmp_path: Path) -> None:
    first = dlll({"type": "PARAMETER", "data": {"x": 1}}) if parameter else dlll(
        {"step": 0, "data": {"train_step_timing in s": 1.0}})
    text = first + dlll({"step": 1, "data": {"train_step_timing in s": 1.0}}) + dlll(
        {"type": "LOG", "data": {"train_step_timing in s": 1.0}})
    assert dllogger._columns(text) is None
    with pytest.raises(EvidenceError) as caught:
        parse_dllogger(write(tmp_path, text), "d.log")
    assert (caught.value.line, caught.value.field) == (3, "step")


@pytest.mark.parametrize("step", ["[3, 12]", "12.0"], ids=["list", "float"])
def test_a_list_or_float_step_is_read_by_the_record_reading(step: str, tmp_path: Path) -> None:
    text = hand_log() + f'DLLL {{"step": {step}, "data": {{"train_step_timing in s": 1.0}}}}\n'
    assert dllogger._columns(text) is None
    log = parse_dllogger(write(tmp_path, text), "d.log")
    assert (log.steps[-1].iteration, log.steps[-1].line) == (12, 14)
