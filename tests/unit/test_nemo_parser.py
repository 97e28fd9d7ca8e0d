# ruff: noqa: E501
"""NeMo 2 step lines are found wherever they sit, with their line numbers; bad fields are located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers.nemo import parse_nemo

LOG = """\
some preamble
ining-demo/0 [default0]:Training epoch 0, iteration 0/2 | lr: 1.499e-07 | global_batch_size: 512 | global_step: 0 | reduced_train_loss: 11.03 | train_step_timing in s: 10.31
NCCL INFO something in between
ining-demo/0 [default0]:Training epoch 0, iteration 1/2 | lr: 2.999e-07 | global_batch_size: 512 | global_step: 1 | reduced_train_loss: 11.03 | train_step_timing in s: 7.549 | consumed_samples: 1024 | TFLOPS_per_GPU: 1160.25
Training epoch 0, iteration 2/2 | lr: 4.5e-07 | global_step: 2 | reduced_train_loss: 10.9 | grad_norm: nan | train_step_timing in s: 7.5
"""


def test_steps_with_lines_and_values(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_text(LOG)
    log = parse_nemo(path, "a.log")
    assert [(s.iteration, s.step_time_s, s.line) for s in log.steps] == [(0, 10.31, 2), (1, 7.549, 4), (2, 7.5, 5)]
    assert log.steps[1].tflops_per_gpu == 1160.25 and log.steps[1].consumed_samples == 1024
    assert log.steps[0].tflops_per_gpu is None and log.steps[0].max_iteration == 2
    assert [(m.line, m.field) for m in log.nan_marks] == [(5, "grad_norm")]


def test_non_number_is_located(tmp_path: Path) -> None:
    path = tmp_path / "b.log"
    path.write_text(LOG.replace("train_step_timing in s: 7.549", "train_step_timing in s: 7.5x"))
    with pytest.raises(EvidenceError) as exc:
        parse_nemo(path, "b.log")
    assert str(exc.value).startswith("b.log line 4 field 'train_step_timing in s': expected a number, got '7.5x'")


@pytest.mark.parametrize(("data", "why"), [(b"", "empty"), (b"\x00\x01\x02binary", "binary"), (b"hello\n", "found none")])
def test_unusable_files(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "c.log"
    path.write_bytes(data)
    with pytest.raises(EvidenceError, match=why):
        parse_nemo(path, "c.log")


def test_a_step_line_srun_ran_into_is_read_up_to_its_last_value(tmp_path: Path) -> None:
    """A task killed while printing a step line (its line end never written), srun's message right after it on the
    same line, as a Slurm job's output holds it: the step is read, its last value (perhaps cut) is not, and a
    warning names the line; cut before the step time, the step is not read; a value that is no number is still
    the located error it was."""
    cut = LOG.replace("consumed_samples: 1024 | TFLOPS_per_GPU: 1160.25",
                      "consumed_samples: 1024 | TFLOPS_per_GPU: 1160srun: error: cc-n1: task 0: Terminated")
    path = tmp_path / "c.log"
    path.write_text(cut + "srun: launch/slurm: _step_signal: Terminating StepId=14.0\n" + LOG.splitlines()[-1] + "\n")
    log = parse_nemo(path, "c.log")
    assert [(s.iteration, s.step_time_s, s.line) for s in log.steps] == [(0, 10.31, 2), (1, 7.549, 4), (2, 7.5, 5),
                                                                        (2, 7.5, 7)]
    assert log.steps[1].consumed_samples == 1024 and log.steps[1].tflops_per_gpu is None
    assert log.warnings == ["c.log line 4: the job ended while this step line was printed ('srun: error: cc-n1: task "
                            "0: Terminated' ran into it): its last value is not read, it may be cut short"]
    path.write_text(LOG.replace("train_step_timing in s: 10.31", "train_step_timing in s: 10.3slurmstepd-cc-n1: "
                                "error: *** STEP 14.0 ON cc-n1 CANCELLED AT 2026-12-06T09:22:59 ***"))
    log = parse_nemo(path, "c.log")
    assert [s.iteration for s in log.steps] == [1, 2]
    assert log.warnings == ["c.log line 2: the job ended while this step line was printed ('slurmstepd-cc-n1: error: "
                            "*** STEP 14.0 ON cc-n1 CANCELLED AT' ran into it): the step is not read, its step time cut "
                            "off"]
    path.write_text(cut.replace("train_step_timing in s: 7.549", "train_step_timing in s: 7.5x"))
    with pytest.raises(EvidenceError, match=r"^c.log line 4 field 'train_step_timing in s': expected a number"):
        parse_nemo(path, "c.log")
