"""Megatron, Megatron-DeepSpeed, DLLogger and golden-values parsers on small hand-written inputs."""


from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import inspect_evidence
from clustercert.parsers.dllogger import parse_dllogger
from clustercert.parsers.megatron import parse_megatron
from clustercert.parsers.megatron_deepspeed import parse_megatron_deepspeed
from clustercert.parsers.megatron_golden import parse_megatron_golden

MEGATRON = """\
some prose before
ining-demo/0 [default0]: [2025-08-29 17:02:50] iteration        1/      20 | consumed samples:   8 | \
elapsed time per iteration (ms): 12953.0 | learning rate: 2.5E-05 | global batch size:     8 | lm loss: 1.056832E+01 \
| grad norm: 20.435 | number of nan iterations:   0 | > padded vocab (size: 32000)
Step Time : 9.09s GPU utilization: 663.5MODEL_TFLOP/s/GPU
 [2025-08-29 17:02:51] iteration        2/      20 | elapsed time per iteration (ms): 751.4 | lm loss: 9.5 | \
grad norm: nan | [t] iteration        3/      20 | elapsed time per iteration (ms): 450.0 | lm loss: 9.1 |
"""


def write(tmp_path: Path, text: str, name: str = "x.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_megatron_steps_prefixes_step_time_and_run_in_lines(tmp_path: Path) -> None:
    log = parse_megatron(write(tmp_path, MEGATRON), "x.log")
    assert [s.iteration for s in log.steps] == [1, 2, 3]
    first, second, third = log.steps
    assert (first.step_time_s, first.tflops_per_gpu, first.loss, first.grad_norm) == (
        12.953,
        663.5,
        10.56832,
        20.435,
    )
    assert (first.line, first.max_iteration, first.global_batch_size, first.consumed_samples) == (2, 20, 8, 8)
    assert second.step_time_s == pytest.approx(0.7514) and second.line == 4
    assert third.step_time_s == 0.45 and third.line == 4
    assert [(m.line, m.field) for m in log.nan_marks] == [(4, "grad norm")]
    out = log.to_json()
    assert out["steps"][1]["grad_norm"] is None  # type: ignore[index]


def test_megatron_deepspeed_seconds_and_tflops(tmp_path: Path) -> None:
    text = (
        " iteration       10/     100 | consumed samples: 80 | elapsed time per iteration (s): 1.25 | "
        "learning rate: 1.0E-04 | global batch size: 8 | lm loss: 7.5E+00 | grad norm: 2.0 | "
        "samples per second: 6.4 | TFLOPs: 150.25 |\n"
    )
    log = parse_megatron_deepspeed(write(tmp_path, text), "x.log")
    step = log.steps[0]
    assert (step.iteration, step.step_time_s, step.samples_per_s, step.tflops_per_gpu) == (
        10,
        1.25,
        6.4,
        150.25,
    )
    assert log.format == "megatron-deepspeed"


def test_megatron_bad_number_names_line_and_field(tmp_path: Path) -> None:
    text = " iteration 1/ 2 | elapsed time per iteration (ms): 4.2e+ |\n"
    with pytest.raises(EvidenceError) as info:
        parse_megatron(write(tmp_path, text), "x.log")
    assert str(info.value).startswith(
        "x.log line 1 field 'elapsed time per iteration (ms)': expected a number"
    )


def test_megatron_missing_step_time_and_no_steps(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="line 1 field 'elapsed time per iteration'"):
        parse_megatron(write(tmp_path, " iteration 1/ 2 | lm loss: 3.0 |\n"), "x.log")
    with pytest.raises(EvidenceError, match="found none"):
        parse_megatron(write(tmp_path, "hello\n"), "x.log")


def test_dllogger_parameter_then_steps(tmp_path: Path) -> None:
    lines = [
        'DLLL {"timestamp": "1", "type": "PARAMETER", "step": "PARAMETER", "data": {"gbs": 8}}',
        "noise",
        'DLLL {"type": "LOG", "step": 5, "data": {"train_step_timing in s": 1.5, "reduced_train_loss": 2.0, '
        '"grad_norm": 0.5, "TFLOPS_per_GPU": 400.0}}',
        '[rank0] DLLL {"type": "LOG", "step": [0, 6], "data": {"train_step_timing in s": 1.25, "grad_norm": "nan"}}',
    ]
    log = parse_dllogger(write(tmp_path, "\n".join(lines)), "d.json")
    assert [(s.iteration, s.step_time_s, s.line) for s in log.steps] == [(5, 1.5, 3), (6, 1.25, 4)]
    assert (log.steps[0].loss, log.steps[0].grad_norm, log.steps[0].tflops_per_gpu) == (2.0, 0.5, 400.0)
    assert [(m.line, m.field) for m in log.nan_marks] == [(4, "grad_norm")]


def test_dllogger_bad_json(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="d line 1 field 'DLLL'"):
        parse_dllogger(write(tmp_path, 'DLLL {"type": \n'), "d")


def test_dllogger_record_srun_ran_into_is_not_read_and_said_so(tmp_path: Path) -> None:
    step = 'DLLL {{"type": "LOG", "step": {n}, "data": {{"train_step_timing in s": 1.5, "reduced_train_loss": 2.0}}}}'
    lines = [step.format(n=1), step.format(n=2)[:-30] + "srun: error: n1: task 0: Terminated",
             "slurmstepd: error: *** STEP 5.0 ON n1 CANCELLED AT 2025-01-01T10:00:00 ***", step.format(n=3)]
    log = parse_dllogger(write(tmp_path, "\n".join(lines)), "d")
    assert [(s.iteration, s.line) for s in log.steps] == [(1, 1), (3, 4)]
    assert log.warnings == ["d line 2: the job ended while this DLLogger record was printed ('srun: error: n1: task 0: "
                            "Terminated' ran into it): it is not read, its JSON cut short"]
    # cut short without Slurm's words: nothing says why, the located error as before
    with pytest.raises(EvidenceError, match="d line 2 field 'DLLL'"):
        parse_dllogger(write(tmp_path, "\n".join([lines[0], step.format(n=2)[:-30], lines[3]])), "d")


def test_golden_values_skip_nan(tmp_path: Path) -> None:
    doc = {
        "lm loss": {
            "start_step": 1,
            "end_step": 3,
            "step_interval": 1,
            "values": {"1": 10.0, "2": 9.5, "3": 9.0},
        },
        "iteration-time": {
            "start_step": 1,
            "end_step": 3,
            "step_interval": 1,
            "values": {"1": "nan", "2": 1.5, "3": 1.25},
        },
    }
    log = parse_megatron_golden(write(tmp_path, json.dumps(doc), "g.json"), "g.json")
    assert [(s.iteration, s.step_time_s, s.loss) for s in log.steps] == [(2, 1.5, 9.5), (3, 1.25, 9.0)]


def test_golden_values_missing_metric(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="field 'iteration-time'"):
        parse_megatron_golden(write(tmp_path, '{"lm loss": {}}', "g.json"), "g.json")


def test_inspect_training_contract(tmp_path: Path) -> None:
    out = inspect_evidence(write(tmp_path, MEGATRON), None, display="x.log")
    assert out["format"] == "megatron"
    step = out["steps"][0]  # type: ignore[index]
    assert {
        k: step[k] for k in ("iteration", "step_time_s", "tflops_per_gpu", "loss", "grad_norm", "line")
    } == {
        "iteration": 1,
        "step_time_s": 12.953,
        "tflops_per_gpu": 663.5,
        "loss": 10.56832,
        "grad_norm": 20.435,
        "line": 2,
    }


DS_RECORD = (
    " iteration       10/     100 | consumed samples: 80 | elapsed time per iteration (s): 1.25 | "
    "learning rate: 1.0E-04 | global batch size: 8 | lm loss: 7.5E+00 | grad norm: 2.0 | "
    "samples per second: 6.4 | TFLOPs: 150.25 |"
)


@pytest.mark.parametrize("cut", [DS_RECORD.index("lm loss") + 4, DS_RECORD.index("lm loss")])
def test_megatron_deepspeed_record_wrapped_over_two_lines_is_rejoined(tmp_path: Path, cut: int) -> None:
    # a terminal wrap in the middle of a key, or at a field boundary
    second = DS_RECORD.replace("10/", "11/").replace("1.25", "1.5")
    text = f"{DS_RECORD[:cut]}\n{DS_RECORD[cut:]}\n{second}\n"
    log = parse_megatron_deepspeed(write(tmp_path, text), "x.log")
    assert [(s.iteration, s.step_time_s, s.loss, s.tflops_per_gpu, s.line) for s in log.steps] == [
        (10, 1.25, 7.5, 150.25, 1), (11, 1.5, 7.5, 150.25, 3)]
    assert log.warnings == ["x.log lines 1-2: one iteration record wrapped over two lines; read joined"]


def test_megatron_deepspeed_record_cut_short_warns_naming_the_line(tmp_path: Path) -> None:
    cut = DS_RECORD.index("lm loss") + 4
    text = f"{DS_RECORD}\n{DS_RECORD[:cut].replace('10/', '11/')}\n[rank0] saving checkpoint\n"
    log = parse_megatron_deepspeed(write(tmp_path, text), "x.log")
    assert [(s.iteration, s.step_time_s, s.loss, s.tflops_per_gpu) for s in log.steps] == [
        (10, 1.25, 7.5, 150.25), (11, 1.25, None, None)]
    assert log.warnings == ["x.log line 2: expected the iteration record to end with '|', got a line cut short; "
                            "the values after the cut (TFLOPs, loss, ...) are not read"]


@pytest.mark.parametrize("parse", [parse_megatron, parse_megatron_deepspeed])
def test_a_record_srun_ran_into_is_read_up_to_its_last_value(tmp_path: Path, parse: Any) -> None:
    """A task killed while printing an iteration record (its line end never written), srun's message right after
    it, as a Slurm job's output holds it: the record is read without its last value (perhaps cut), a warning names
    the line; cut before the step time, it is not read; srun's line after a whole record changes nothing."""
    killed = "srun: error: cc-n1: task 0: Terminated"
    text = (f"{DS_RECORD}{killed}\n{DS_RECORD.replace('10/', '11/').replace('TFLOPs: 150.25 |', 'TFLOPs: 150')}"
            f"{killed}\n{DS_RECORD.replace('10/', '12/')[:DS_RECORD.index('elapsed') + 36]}{killed}\n"
            f"srun: launch/slurm: _step_signal: Terminating StepId=14.0\n{DS_RECORD.replace('10/', '13/')}\n")
    log = parse(write(tmp_path, text), "x.log")
    assert [(s.iteration, s.line, s.loss, s.tflops_per_gpu) for s in log.steps] == [
        (10, 1, 7.5, 150.25), (11, 2, 7.5, None), (13, 5, 7.5, 150.25)]
    said = "x.log line {}: the job ended while this iteration record was printed ('srun: error: cc-n1: task 0: " \
           "Terminated' ran into it): "
    assert log.warnings == [said.format(2) + "its last value is not read, it may be cut short",
                            said.format(3) + "the record is not read, its step time cut off"]


REQUEUED = """\
 [2025-01-01 10:00:00] iteration       40/     100 | elapsed time per iteration (ms): 500.0 | lm loss: 2.0 |
saving checkpoint at iteration      40 to /ckpt
  successfully saved checkpoint from iteration      40 to /ckpt [ t 1/2, p 1/1 ]
 [2025-01-01 10:00:05] iteration       50/     100 | elapsed time per iteration (ms): 500.0 | lm loss: 1.9 |
srun: error: n7: task 3: Killed
  loading checkpoint from /ckpt at iteration 40
  successfully loaded checkpoint from /ckpt [ t 1/2, p 1/1 ] at iteration 40
 [2025-01-01 10:09:00] iteration       50/     100 | elapsed time per iteration (ms): 510.0 | lm loss: 1.9 |
  successfully saved checkpoint at iteration      60 to /old/format
  successfully loaded checkpoint from /a path/with spaces at iteration 60
"""


@pytest.mark.parametrize("fmt", ["megatron", "megatron-deepspeed"])
def test_megatron_checkpoint_lines_are_read_with_their_lines(tmp_path: Path, fmt: str) -> None:
    out = inspect_evidence(write(tmp_path, REQUEUED), fmt, display="x.log")
    assert [(e["kind"], e["line"], e["step"], e["detail"]) for e in out["events"]] == [  # type: ignore[union-attr]
        ("checkpoint_saved", 3, 40, "/ckpt"),
        ("checkpoint_loaded", 7, 40, "/ckpt [ t 1/2, p 1/1 ]"),
        ("checkpoint_saved", 9, 60, "/old/format"),
        ("checkpoint_loaded", 10, 60, "/a path/with spaces"),
    ]
    # "loading checkpoint from ... at iteration 40" (line 6) says it starts loading, not that it loaded
    assert out["straggler_reports"] == []
    assert [s["iteration"] for s in out["steps"]] == [40, 50, 50]  # type: ignore[index]


def test_megatron_log_without_checkpoint_lines_has_no_events(tmp_path: Path) -> None:
    assert inspect_evidence(write(tmp_path, MEGATRON), "megatron", display="x.log")["events"] == []
