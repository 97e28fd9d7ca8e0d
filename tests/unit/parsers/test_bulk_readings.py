# ruff: noqa: E501  (log lines as the tools print them)
"""The bulk readings of issue 13 (a record template over the whole text, numbers converted column by column)
read what the line-by-line reading reads: values and lines counted by hand, and every file the template cannot
read alike (a bad number in the middle, a record of another shape, a wrapped record) still read by the
line-by-line steps, with their warnings and their located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import megatron
from clustercert.parsers.megatron import MEGATRON_FIELDS, parse_megatron
from clustercert.parsers.megatron_deepspeed import parse_megatron_deepspeed
from clustercert.parsers.training import read_text


def megatron_record(i: int) -> str:
    """Megatron-LM's record line for iteration i: step time (750 + i) ms, loss 2 + i/10, grad norm i, 8 * i samples."""
    return (
        f" [2025-08-29 17:02:{i:02d}] iteration {i:8d}/     100 | consumed samples: {8 * i:12d} | elapsed time per "
        f"iteration (ms): {750 + i}.0 | learning rate: 5.000000E-05 | global batch size:     8 | lm loss: "
        f"{2 + i / 10:E} | loss scale: 1.0 | grad norm: {i}.000 | number of skipped iterations:   0 | number of nan "
        "iterations:   0 |\n"
    )


def megatron_log(records: int = 30) -> str:
    """A header line, then per record: its line, a Step Time line (TFLOP/s 600 + i); a save-checkpoint pause
    after record 10 and an evaluation after record 20 (both counted against the record after them)."""
    out = ["> building GPT model ... (mentions no record: iteration counts as prose here)\n"]
    for i in range(1, records + 1):
        out.append(megatron_record(i))
        out.append(f"Step Time : 0.{750 + i}s GPU utilization: {600 + i}.5MODEL_TFLOP/s/GPU\n")
        if i == 10:
            out.append("    save-checkpoint ................................: (1200.0, 1500.0)\n")
        if i == 20:
            out.append(" validation loss at iteration 20 | lm loss value: 2.0 | lm loss PPL: 7.4 |\n")
    return "".join(out)


def write(tmp_path: Path, text: str, name: str = "m.log") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def test_megatron_template_reads_every_record_with_its_values_and_line(tmp_path: Path) -> None:
    text = megatron_log()
    path = write(tmp_path, text)
    assert megatron._pipe_log_fast(read_text(path, "m.log", limit=1 << 30), "m.log", fmt="megatron",
                                   fields=MEGATRON_FIELDS, wrapped=False) is not None  # the template applies
    log = parse_megatron(path, "m.log")
    assert len(log.steps) == 30 and log.warnings == [] and log.nan_marks == []
    line = 2  # the header is line 1; each record is followed by its Step Time line, 10 and 20 by one more
    for i, step in enumerate(log.steps, start=1):
        assert (step.iteration, step.max_iteration, step.line) == (i, 100, line)
        assert step.step_time_s == pytest.approx((750 + i) / 1000)
        assert step.loss == pytest.approx(2 + i / 10) and step.grad_norm == float(i)
        assert step.consumed_samples == 8 * i and isinstance(step.consumed_samples, int)
        assert step.global_batch_size == 8 and isinstance(step.global_batch_size, int)
        assert step.tflops_per_gpu == 600 + i + 0.5  # from the Step Time line after it
        assert step.timestamp_s == 1756486920 + i  # 2025-08-29T17:02:00Z + i s
        assert step.pause_s == (1.5 if i == 11 else 0.0)  # the max of (min, max) ms, before record 11
        assert step.untimed_pause is (i == 21)
        line += 2 + (i in (10, 20))


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
def test_a_bad_number_in_the_middle_of_a_good_file_is_named_with_its_line(tmp_path: Path, crlf: bool) -> None:
    text = megatron_log().replace("lm loss: 3.500000E+00", "lm loss: 3.5.0")  # record 15, on line 2 + 14 * 2 + 1
    with pytest.raises(EvidenceError) as caught:
        parse_megatron(write(tmp_path, text.replace("\n", "\r\n") if crlf else text), "m.log")
    assert (caught.value.line, caught.value.field) == (31, "lm loss")
    assert "'3.5.0'" in str(caught.value)


def test_a_negative_step_time_in_the_middle_is_named_with_its_line(tmp_path: Path) -> None:
    text = megatron_log().replace("(ms): 755.0", "(ms): -755.0")
    with pytest.raises(EvidenceError) as caught:
        parse_megatron(write(tmp_path, text), "m.log")
    assert (caught.value.line, caught.value.field) == (10, "elapsed time per iteration")  # record 5: line 2 * 5


def test_a_record_of_another_shape_in_the_middle_keeps_its_own_values(tmp_path: Path) -> None:
    # record 12 lacks the grad norm and carries a throughput: the template does not fit it, all records still read
    text = megatron_log().replace(
        megatron_record(12), megatron_record(12).replace("grad norm: 12.000", "throughput per GPU (TFLOP/s/GPU): 410.5")
    )
    log = parse_megatron(write(tmp_path, text), "m.log")
    assert [s.iteration for s in log.steps] == list(range(1, 31))
    assert log.steps[11].grad_norm is None and log.steps[11].tflops_per_gpu == 612.5  # its Step Time line wins
    assert log.steps[12].grad_norm == 13.0


def test_a_record_after_a_word_character_is_no_record(tmp_path: Path) -> None:
    record = " iteration        1/     100 | elapsed time per iteration (s): 1.5 | lm loss: 2.0 |\n"
    text = record + record.replace(" iteration", "preiteration").replace("1.5", "9.5") + record.replace("1/", "2/")
    log = parse_megatron_deepspeed(write(tmp_path, text), "d.log")
    assert [(s.iteration, s.step_time_s, s.line) for s in log.steps] == [(1, 1.5, 1), (2, 1.5, 3)]


def test_a_wrapped_record_in_the_middle_is_joined_with_its_warning(tmp_path: Path) -> None:
    lines = [f" iteration {i:8d}/ 100 | elapsed time per iteration (s): 1.{i} | lm loss: 7.{i} | TFLOPs: 15{i}.0 |\n"
             for i in range(1, 8)]
    lines[3] = lines[3].replace(" TFLOPs", "\n TFLOPs")  # record 4 wrapped at the terminal's width: lines 4-5
    log = parse_megatron_deepspeed(write(tmp_path, "".join(lines), "d.log"), "d.log")
    assert [s.line for s in log.steps] == [1, 2, 3, 4, 6, 7, 8]
    assert log.steps[3].tflops_per_gpu == 154.0
    assert log.warnings == ["d.log lines 4-5: one iteration record wrapped over two lines; read joined"]


def test_the_text_after_the_last_record_is_not_searched_again_and_again(tmp_path: Path) -> None:
    # 200,000 lines of brackets after the records: a pattern searched to the end of the text from each offset
    # would take hours (quadratic); the template is searched to the last record head's line
    text = megatron_log(3) + "[" * 40 + "\n" + ("[x] iteration of the data loader [y]\n" * 200_000)
    log = parse_megatron(write(tmp_path, text), "m.log")
    assert [s.iteration for s in log.steps] == [1, 2, 3] and log.line_count == 200_008


def test_throughput_lines_read_all_at_once_keep_the_line_by_line_rules(tmp_path: Path) -> None:
    # of two on one line the first counts; the last of two after one record wins (a Step Time line before the
    # first record is Megatron-Bridge's order, where each belongs to the record after it: test_window_throughput)
    text = megatron_log(4).replace(
        "Step Time : 0.752s GPU utilization: 602.5MODEL_TFLOP/s/GPU\n",
        "Step Time : 0.752s GPU utilization: 602.5MODEL_TFLOP/s/GPU Step Time : 1s GPU utilization: 1MODEL_TFLOP/s/GPU\n",
    ).replace(
        "Step Time : 0.753s GPU utilization: 603.5MODEL_TFLOP/s/GPU\n",
        "Step Time : 0.753s GPU utilization: 603.5MODEL_TFLOP/s/GPU\nStep Time : 0.7s GPU utilization: 333.0MODEL_TFLOP/s/GPU\n",
    )
    log = parse_megatron(write(tmp_path, text), "m.log")
    assert [s.tflops_per_gpu for s in log.steps] == [601.5, 602.5, 333.0, 604.5]
    assert [s.line for s in log.steps] == [2, 4, 6, 9]


def test_a_bad_throughput_number_after_a_record_is_named_with_its_line(tmp_path: Path) -> None:
    text = megatron_log(4).replace("GPU utilization: 603.5MODEL", "GPU utilization: 6o3.5MODEL")
    with pytest.raises(EvidenceError) as caught:
        parse_megatron(write(tmp_path, text), "m.log")
    assert (caught.value.line, caught.value.field) == (7, "GPU utilization")


def test_of_two_throughput_lines_after_one_record_the_last_wins(tmp_path: Path) -> None:
    text = megatron_log(4).replace(
        "Step Time : 0.753s GPU utilization: 603.5MODEL_TFLOP/s/GPU\n",
        "Step Time : 0.753s GPU utilization: 603.5MODEL_TFLOP/s/GPU\nStep Time : 0.7s GPU utilization: 333.0MODEL_TFLOP/s/GPU\n",
    )
    path = write(tmp_path, text)
    fast = megatron._pipe_log_fast(read_text(path, "m.log", limit=1 << 30), "m.log", fmt="megatron",
                                   fields=MEGATRON_FIELDS, wrapped=False)
    assert fast is not None and fast == parse_megatron(path, "m.log")
    assert [s.tflops_per_gpu for s in fast.steps] == [601.5, 602.5, 333.0, 604.5]


def template_reading(text: str) -> megatron.TrainingLog | None:
    """What the template reads from a Megatron log `text`; None where it declines (the line-by-line reading
    then reads the file)."""
    return megatron._pipe_log_fast(text, "m.log", fmt="megatron", fields=MEGATRON_FIELDS, wrapped=False)


def test_throughput_lines_are_searched_in_the_text_without_its_records(tmp_path: Path) -> None:
    # The usual log (one Step Time line after each record) reads its column whole: hand-checked values and lines
    text = megatron_log(5)
    fast = template_reading(text)
    assert fast is not None and [s.tflops_per_gpu for s in fast.steps] == [601.5, 602.5, 603.5, 604.5, 605.5]
    assert [s.line for s in fast.steps] == [2, 4, 6, 8, 10]
    # "Step Time" inside a record's value: the template declines, and the line-by-line reading amends the record
    # before it with that line's throughput (as it reads any Step Time line)
    inside = megatron_log(3).replace(
        "| loss scale: 1.0 | grad norm: 2.000",
        "| loss scale: Step Time : 0.9s GPU utilization: 99.0MODEL_TFLOP/s/GPU | grad norm: 2.000",
    )
    assert template_reading(inside) is None
    log = parse_megatron(write(tmp_path, inside), "m.log")
    assert [s.tflops_per_gpu for s in log.steps] == [99.0, 602.5, 603.5]
    # on a record's line, before the record: declined too, and read line by line as before
    before = megatron_log(3).replace(
        megatron_record(2), "Step Time : 0.9s GPU utilization: 98.0MODEL_TFLOP/s/GPU" + megatron_record(2)
    )
    assert template_reading(before) is None
    log = parse_megatron(write(tmp_path, before), "m.log")
    assert [s.tflops_per_gpu for s in log.steps] == [98.0, 602.5, 603.5]
    # a "Step Time" within a record that is no throughput line: declined, and nothing amended
    prose = megatron_log(3).replace("| loss scale: 1.0 |", "| loss scale: Step Time unknown |")
    assert template_reading(prose) is None
    log = parse_megatron(write(tmp_path, prose), "m.log")
    assert [s.tflops_per_gpu for s in log.steps] == [601.5, 602.5, 603.5]
    # no Step Time line at all, one lone "Step Time" inside the only record: nothing to amend either way
    lone = megatron_record(1).replace("| loss scale: 1.0 |", "| loss scale: Step Time : 1s GPU utilization: 2MODEL_TFLOP/s/GPU |")
    assert template_reading(lone) is None
    assert parse_megatron(write(tmp_path, lone), "m.log").steps[0].tflops_per_gpu is None
