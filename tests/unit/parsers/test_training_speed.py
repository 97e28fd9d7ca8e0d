# ruff: noqa: E501  (log lines as the tools print them)
"""The bulk readings of NeMo, Megatron and Megatron-DeepSpeed logs (a template split over the whole text, values
converted column by column) read what the line-by-line readings read: on generated logs with random variations
(odd spacing, CRLF, non-ASCII text, missing fields, nan values, records of other shapes, bad numbers) both give
the same steps (float bits and types included), lines, warnings, nan marks and located errors; and on small
logs the values and lines counted by hand."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import megatron, nemo
from clustercert.parsers.megatron import MEGATRON_FIELDS, parse_megatron
from clustercert.parsers.megatron_deepspeed import parse_megatron_deepspeed
from clustercert.parsers.nemo import parse_nemo
from clustercert.parsers.training import (
    TrainingLog,
    TrainingStep,
    column_floats,
    column_ints,
    make_step,
    make_steps,
    pieces_hold_nan_value,
    read_text,
)


def exact(value: object) -> object:
    """A value with its type, floats by their bits (nan equals nan here, -0.0 differs from 0.0)."""
    return (type(value).__name__, value.hex() if isinstance(value, float) else value)


def outcome(read: Callable[[Path, str], TrainingLog], path: Path) -> object:
    """Everything a reading gives, comparable exactly: each step's attributes in order, or the error's place."""
    try:
        log = read(path, "x.log")
    except EvidenceError as error:
        return ("error", str(error), error.line, error.field)
    return (
        [[(key, exact(value)) for key, value in vars(step).items()] for step in log.steps],
        log.nan_marks, log.line_count, log.warnings, log.format, log.file,
    )


def both(monkeypatch: pytest.MonkeyPatch, read: Callable[[Path, str], TrainingLog], path: Path) -> tuple[object, object]:
    """(the reading as it runs, the line-by-line reading with the bulk reading turned off)."""
    fast = outcome(read, path)
    with monkeypatch.context() as patch:
        patch.setattr(megatron, "_pipe_log_fast", lambda *args, **kwargs: None)
        patch.setattr(nemo, "_nemo_fast", lambda *args, **kwargs: None)
        slow = outcome(read, path)
    return fast, slow


def number(rng: random.Random) -> str:
    return rng.choice([f"{rng.uniform(0, 900):.3f}", f"{rng.uniform(0, 9):E}", str(rng.randint(0, 99999)),
                       f"{rng.random():.17g}", "1e-07", "0.1"])


def odd_space(rng: random.Random) -> str:
    return rng.choice([" ", " ", " ", "", "  ", "\t", " \x1f", "\u00a0"])


def mutate(rng: random.Random, line: str) -> str:
    """One record line changed in a way that may change what is read (or not)."""
    kind = rng.randrange(12)
    if kind == 0:
        return line.replace(": ", ":" + odd_space(rng), 1)
    if kind == 1:
        return line.replace("|", " |" + odd_space(rng), 2)
    if kind == 2:
        at = rng.randrange(len(line) + 1)
        return line[:at] + rng.choice(["nan", "-inf", "5.0.1", "x", "é", ":", "|", "\u2028"]) + line[at:]
    if kind == 3:
        return line.replace(rng.choice([": 1", ": 2", ": 7", ": 0"]), rng.choice([": nan", ": -inf", ": inf", ": 1_0", ": ½"]), 1)
    if kind == 4:
        parts = line.rstrip("\n").split("|")
        if len(parts) > 1:
            del parts[rng.randrange(1, len(parts))]
        return "|".join(parts) + "\n"
    if kind == 5:
        return rng.choice(["pre", "x", " ", "é"]) + line
    if kind == 6:
        return line.rstrip("\n") + rng.choice([" |", " extra", "| lm loss: 3.0 |", " Training epoch 1, iteration 2/3 | train_step_timing in s: 9"]) + "\n"
    if kind == 7:
        return line.replace("\n", "\r\n")
    if kind == 8:
        return line + rng.choice(["Step Time : 0.5s GPU utilization: 99.5MODEL_TFLOP/s/GPU\n", "    save-checkpoint ..........: (10.0, 20.0)\n",
                                  " validation loss at iteration 5 | lm loss value: 2.0 |\n", "grad norm: nan\n", "lm loss : -inf |\n"])
    if kind == 9:
        return line.replace("1", "\u0661", 1)  # an Arabic-Indic digit: a number for int() and float()
    if kind == 10:
        cut = rng.randrange(len(line) // 2, len(line))
        return line[:cut] + "\n" + line[cut:]  # a record wrapped over two lines
    return line.replace(" ", "  ", rng.randrange(1, 4))


def megatron_line(rng: random.Random, i: int, stamped: bool) -> str:
    stamp = f" [2025-08-29 17:{i // 60 % 60:02d}:{i % 60:02d}]" if stamped else ""
    return (
        f"{stamp} iteration {i:8d}/ 9999999 | consumed samples: {i * 8:12d} | elapsed time per iteration (ms): {number(rng)} | "
        f"learning rate: 5.000000E-05 | global batch size:     8 | lm loss: {number(rng)} | loss scale: 1.0 | grad norm: {number(rng)} | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )


def deepspeed_line(rng: random.Random, i: int, stamped: bool) -> str:
    return (
        f" iteration {i:8d}/ 9999999 | consumed samples: {i * 8} | elapsed time per iteration (s): {number(rng)} | "
        f"learning rate: 1.0E-04 | global batch size: 8 | lm loss: {number(rng)} | grad norm: {number(rng)} | samples per second: "
        f"{number(rng)} | TFLOPs: {number(rng)} |\n"
    )


def nemo_line(rng: random.Random, i: int, stamped: bool) -> str:
    prefix = "ining-demo/0 [default0]:" if stamped else ""
    return (
        f"{prefix}Training epoch 0, iteration {i}/999 | lr: {number(rng)} | global_batch_size: 512 | global_step: {i} | "
        f"reduced_train_loss: {number(rng)} | train_step_timing in s: {number(rng)} | consumed_samples: {i * 512}\n"
    )


def log_text(rng: random.Random, make: Callable[[random.Random, int, bool], str], mutations: int) -> str:
    stamped = rng.random() < 0.5
    out = ["> header line: nothing read here\n"]
    for i in range(rng.randint(1, 40)):
        out.append(make(rng, i, stamped))
        if make is megatron_line and rng.random() < 0.7:
            out.append(f"Step Time : 0.{rng.randint(100, 999)}s GPU utilization: {number(rng)}MODEL_TFLOP/s/GPU\n")
        if rng.random() < 0.2:
            out.append(rng.choice(["[NeMo I 2025-03-07 22:38:36 nemo_logging:381] other line\n", "\n", "iteration of the data loader\n",
                                   "    save-checkpoint ......: (1200.0, 1500.0)\n", " validation loss at iteration 20 | lm loss value: 2.0 |\n"]))
    for _ in range(mutations):
        at = rng.randrange(1, len(out))
        out[at] = mutate(rng, out[at])
    text = "".join(out)
    if rng.random() < 0.15:
        text = text.replace("\n", "\r\n")
    if rng.random() < 0.1:
        text = text.rstrip("\n")
    return text


READERS: dict[str, tuple[Callable[[Path, str], TrainingLog], Callable[[random.Random, int, bool], str]]] = {
    "megatron": (parse_megatron, megatron_line),
    "megatron-deepspeed": (parse_megatron_deepspeed, deepspeed_line),
    "nemo": (parse_nemo, nemo_line),
}


@pytest.mark.parametrize("fmt", sorted(READERS))
@pytest.mark.parametrize("mutations", [0, 1, 3])
@pytest.mark.parametrize("seed", range(40))
def test_the_bulk_reading_reads_what_the_line_by_line_reading_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, mutations: int, seed: int
) -> None:
    read, make = READERS[fmt]
    rng = random.Random(f"{fmt}-{mutations}-{seed}")
    path = tmp_path / "x.log"
    path.write_bytes(log_text(rng, make, mutations).encode())
    fast, slow = both(monkeypatch, read, path)
    assert fast == slow


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_clean_generated_logs_take_the_bulk_reading(tmp_path: Path, fmt: str) -> None:
    # the comparison above proves something only where the bulk reading is used: without mutations it is
    make = READERS[fmt][1]
    rng = random.Random(fmt)
    text = "".join(make(rng, i, True) for i in range(30))
    path = tmp_path / "x.log"
    path.write_bytes(text.encode())
    as_read = read_text(path, "x.log", limit=1 << 30)
    if fmt == "nemo":
        assert nemo._nemo_fast(as_read, "x.log") is not None
    else:
        assert megatron._pipe_log_fast(as_read, "x.log", fmt=fmt, fields=MEGATRON_FIELDS,
                                       wrapped=fmt == "megatron-deepspeed") is not None


NEMO = (
    "[NeMo I 2025-03-07 22:38:36 nemo_logging:381] start\n"
    "ining-demo/0 [default0]:Training epoch 0, iteration 0/2 | lr: 1e-05 | global_batch_size: 512 | global_step: 0 | reduced_train_loss: 11.03 | train_step_timing in s: 7.5 | consumed_samples: 512\n"
    "some other line\n"
    "\n"
    "ining-demo/0 [default0]:Training epoch 0, iteration 1/2 | lr: 2e-05 | global_batch_size: 512 | global_step: 1 | reduced_train_loss: 10.5 | train_step_timing in s: 7.25 | consumed_samples: 1024\n"
    "ining-demo/0 [default0]:Training epoch 1, iteration 2/2 | lr: 3e-05 | global_batch_size: 512 | global_step: 2 | reduced_train_loss: 10.25 | train_step_timing in s: 7.125 | consumed_samples: 1536.5\n"
    "done"
)


def test_nemo_bulk_reading_values_and_lines_counted_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    path.write_bytes(NEMO.encode())
    assert nemo._nemo_fast(read_text(path, "n.log", limit=1 << 30), "n.log") is not None
    log = parse_nemo(path, "n.log")
    assert [(s.epoch, s.iteration, s.max_iteration, s.line) for s in log.steps] == [(0, 0, 2, 2), (0, 1, 2, 5), (1, 2, 2, 6)]
    assert [s.step_time_s for s in log.steps] == [7.5, 7.25, 7.125]
    assert [s.loss for s in log.steps] == [11.03, 10.5, 10.25]
    assert [s.global_step for s in log.steps] == [0, 1, 2] and all(type(s.global_step) is int for s in log.steps)
    assert [s.consumed_samples for s in log.steps] == [512, 1024, 1536.5]  # an integer is an int, 1536.5 stays
    assert [type(s.consumed_samples) for s in log.steps] == [int, int, float]
    assert log.steps[0] == TrainingStep(iteration=0, step_time_s=7.5, line=2, loss=11.03, global_step=0, epoch=0,
                                        max_iteration=2, global_batch_size=512, consumed_samples=512)
    assert log.line_count == 7 and log.nan_marks == [] and log.warnings == []


def test_nemo_bulk_reading_marks_a_nan_loss_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    path.write_bytes(NEMO.replace("reduced_train_loss: 10.5", "reduced_train_loss: nan").encode())
    log = parse_nemo(path, "n.log")
    assert math.isnan(log.steps[1].loss or 0.0)
    assert [(m.line, m.field) for m in log.nan_marks] == [(5, "reduced_train_loss")]


def test_nemo_nan_marks_between_steps_are_found(tmp_path: Path) -> None:
    # a nan on a line no step is on, and one in a part the reading skips, are marked; a step's values unchanged
    text = NEMO.replace("some other line", "grad_norm: nan").replace("lr: 3e-05", "lr: nan | grad_norm : -inf")
    path = tmp_path / "n.log"
    path.write_bytes(text.encode())
    log = parse_nemo(path, "n.log")
    assert [(m.line, m.field) for m in log.nan_marks] == [(3, "grad_norm"), (6, "grad_norm")]
    assert [s.line for s in log.steps] == [2, 5, 6]


def test_nemo_bad_number_in_the_middle_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "n.log"
    path.write_bytes(NEMO.replace("train_step_timing in s: 7.25", "train_step_timing in s: 7.2.5").encode())
    with pytest.raises(EvidenceError) as caught:
        parse_nemo(path, "n.log")
    assert (caught.value.line, caught.value.field) == (5, "train_step_timing in s")


def test_nemo_step_of_another_shape_keeps_its_own_values(tmp_path: Path) -> None:
    text = NEMO.replace("| consumed_samples: 1024", "| TFLOPS_per_GPU: 410.5 | consumed_samples: 1024")
    path = tmp_path / "n.log"
    path.write_bytes(text.encode())
    log = parse_nemo(path, "n.log")
    assert [s.tflops_per_gpu for s in log.steps] == [None, 410.5, None]


def test_a_word_running_into_iteration_and_a_nan_between_records_read_alike(tmp_path: Path) -> None:
    rng = random.Random(7)
    lines = [deepspeed_line(rng, i, False) for i in range(6)]
    path = tmp_path / "d.log"
    path.write_bytes(("".join(lines[:3]) + "lm loss: nan\n" + "".join(lines[3:])).encode())
    log = parse_megatron_deepspeed(path, "d.log")
    assert [(m.line, m.field) for m in log.nan_marks] == [(4, "lm loss")]
    assert [s.line for s in log.steps] == [1, 2, 3, 5, 6, 7]


@pytest.mark.parametrize("gap", [
    "\n", "\n\n", "\n \n ", "\nlm loss: nan\n", "\n [2025-08-29 17:02:51] ", "\n [2025-08-29 17:02:51]\n",
    "\n    save-checkpoint ..........: (10.0, 20.0)\n", "\n validation loss at iteration 2 | lm loss value: 2.0 |\n",
    "\nStep Time : 0.5s GPU utilization: 9.5MODEL_TFLOP/s/GPU\n", "\npre", "\n\u00e9 ",
])
@pytest.mark.parametrize("fmt", ["megatron", "megatron-deepspeed"])
def test_the_same_text_between_every_two_records_reads_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             fmt: str, gap: str) -> None:
    """Records on consecutive lines, or the same text between every two (the bulk reading then reads that text
    once, not once per record): each kind of text there reads as the line-by-line reading reads it."""
    read, make = READERS[fmt]
    rng = random.Random(f"{fmt}{gap}")
    records = [make(rng, i, False).strip() for i in range(5)]  # each starts with "iteration", ends with "|"
    text = "> header" + "".join(gap + record for record in records) + "\n"
    path = tmp_path / "x.log"
    path.write_bytes(text.encode())
    fast, slow = both(monkeypatch, read, path)
    assert fast == slow
    if gap in ("\n", "\n\n"):  # read in bulk, each record on its line (counted by hand)
        assert megatron._pipe_log_fast(text, "x.log", fmt=fmt, fields=MEGATRON_FIELDS,
                                       wrapped=fmt == "megatron-deepspeed") is not None
        assert [s.line for s in read(path, "x.log").steps] == ([2, 3, 4, 5, 6] if gap == "\n" else [3, 5, 7, 9, 11])
        assert read(path, "x.log").line_count == (6 if gap == "\n" else 11)


@pytest.mark.parametrize("stamp", ["2025-13-29 17:02:51", "2025-08-29 25:02:51", "\u0662\u0660\u0662\u0665-08-29 17:02:51"])
def test_a_print_time_that_is_no_calendar_time_reads_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           stamp: str) -> None:
    """A print time the pattern takes (four digits, ...) that is no calendar time (month 13, hour 25, digits of
    another script) puts its step on no clock, in the bulk reading as line by line; the others keep theirs."""
    rng = random.Random(stamp)
    records = [megatron_line(rng, i, True) for i in range(4)]
    records[2] = records[2].replace(records[2][2:21], stamp, 1)
    text = "".join(records)
    path = tmp_path / "x.log"
    path.write_bytes(text.encode())
    fast, slow = both(monkeypatch, parse_megatron, path)
    assert fast == slow
    assert megatron._pipe_log_fast(text, "x.log", fmt="megatron", fields=MEGATRON_FIELDS, wrapped=False) is not None
    stamps = [s.timestamp_s for s in parse_megatron(path, "x.log").steps]
    assert stamps[2] is None and None not in stamps[:2] + stamps[3:], stamps
    assert stamps[1] - stamps[0] == 1.0  # 17:00:00 and 17:00:01 (megatron_line's)


DEEPSPEED_CLEAN = (
    "> header\n"
    " iteration        1/      20 | consumed samples: 8 | elapsed time per iteration (s): 1.25 | learning rate: 1.0E-04 | lm loss: 7.5 |\n"
    "    save-checkpoint ..........: (10.0, 20.0)\n"
    " iteration        2/      20 | consumed samples: 16 | elapsed time per iteration (s): 1.5 | learning rate: 1.0E-04 | lm loss: 7.25 |\n"
    " validation loss at iteration 2 | lm loss value: 2.0 |\n"
    " iteration        3/      20 | consumed samples: 24 | elapsed time per iteration (s): 1.75 | learning rate: 1.0E-04 | lm loss: 7.0 |\n"
)


@pytest.mark.parametrize(("old", "new"), [
    ("", ""),  # the clean log: a pause and an evaluation between records
    # a pause's, an evaluation's or a throughput line's text in a value no field reads
    ("learning rate: 1.0E-04 | lm loss: 7.25", "learning rate: save-checkpoint ..: (1.0, 2.0) | lm loss: 7.25"),
    ("learning rate: 1.0E-04 | lm loss: 7.25", "learning rate: validation loss at x | lm loss: 7.25"),
    ("learning rate: 1.0E-04 | lm loss: 7.25", "learning rate: Step Time : 0.5s GPU utilization: 9.5MODEL_TFLOP/s/GPU | lm loss: 7.25"),
    # ... before a record on its line
    (" iteration        2/", "    save-checkpoint ..........: (10.0, 20.0) iteration        2/"),
    (" iteration        2/", "validation loss at 1 iteration        2/"),
    (" iteration        2/", "Step Time : 0.5s GPU utilization: 9.5MODEL_TFLOP/s/GPU iteration        2/"),
    # ... in a key (every record's)
    ("learning rate:", "validation loss at:"),
    ("learning rate:", "save-checkpoint:"),
    ("learning rate:", "Step Time x:"),
    # a print time before a record of a log whose first record has none: on its line, the line before, in a key,
    # in a value, after "iteration" outside the records
    (" iteration        3/", " [2025-08-29 17:02:51] iteration        3/"),
    (" iteration        3/", " [2025-08-29 17:02:51]\n iteration        3/"),
    ("learning rate:", "[2025-08-29 17:02:51] iteration x:"),
    ("learning rate: 1.0E-04 | lm loss: 7.25", "learning rate: [2025-08-29 17:02:51] iteration | lm loss: 7.25"),
    ("> header", "> [2025-08-29 17:02:51] iteration of the data loader"),
    ("> header\n iteration        1/", "> iteration of the data loader [2025-08-29 17:02:51] iteration        1/"),
])
def test_texts_outside_and_inside_records_read_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     old: str, new: str) -> None:
    """The bulk reading looks for pauses, evaluations, throughput lines and print times in the text between
    records and in the values no field reads, not in the whole text: each place such a text can be gives what the
    line-by-line reading gives (a record's line or a key holding one is read line by line)."""
    text = DEEPSPEED_CLEAN.replace(old, new, -1 if old.endswith(":") else 1)
    assert old in DEEPSPEED_CLEAN and (text != DEEPSPEED_CLEAN or not old)
    path = tmp_path / "d.log"
    path.write_bytes(text.encode())
    fast, slow = both(monkeypatch, parse_megatron_deepspeed, path)
    assert fast == slow
    if not old:  # the clean log is read in bulk, its pause and evaluation on the records after them
        assert megatron._pipe_log_fast(text, "d.log", fmt="megatron-deepspeed", fields=MEGATRON_FIELDS,
                                       wrapped=True) is not None
        log = parse_megatron_deepspeed(path, "d.log")
        assert [(s.line, s.pause_s, s.untimed_pause) for s in log.steps] == [(2, 0.0, False), (4, 0.02, False),
                                                                              (6, 0.0, True)]


def test_column_helpers_convert_each_text_as_float_and_int_do() -> None:
    repeated = ["8"] * 3000 + [" 7.5 ", "1e3"]
    assert column_floats(repeated) == [8.0] * 3000 + [7.5, 1000.0]
    assert column_floats(["1.0", "x"]) is None
    assert column_ints(["12"] * 2000 + ["3"]) == [12] * 2000 + [3]
    assert pieces_hold_nan_value(["a", " nan"], ":") and not pieces_hold_nan_value(["a", " nanx", "b: 1"], ":")
    assert not pieces_hold_nan_value([": inf"[:2] + "x"]) and pieces_hold_nan_value(["x: INF"])
    steps = make_steps(["iteration", "step_time_s", "line", "loss"], [[1, 2], [0.5, 0.25], [3, 4], [None, 2.0]])
    assert steps == [TrainingStep(1, 0.5, 3), TrainingStep(2, 0.25, 4, loss=2.0)]


def test_make_steps_builds_what_the_dataclass_and_make_step_build_field_for_field_and_in_order() -> None:
    rng = random.Random(13)
    fields = [f.name for f in dataclasses.fields(TrainingStep)]
    optional = [f for f in fields if f not in ("iteration", "step_time_s", "line")]
    values = {"tflops_per_gpu": 1.5, "loss": None, "grad_norm": 0.25, "global_step": 7, "epoch": 0,
              "max_iteration": 90, "global_batch_size": 1024, "consumed_samples": 512, "samples_per_s": 3.0,
              "timestamp_s": 1.7e9, "pause_s": 2.5, "untimed_pause": True}
    for _ in range(200):
        names = ["iteration", "step_time_s", "line", *rng.sample(optional, rng.randint(0, len(optional)))]
        rng.shuffle(names)
        n = rng.randint(0, 5)
        columns: list[Any] = [[i if name in ("iteration", "line") else (0.5 * i if name == "step_time_s"
                                                                        else values[name]) for i in range(n)]
                              for name in names]
        if rng.random() < 0.3:
            columns = [iter(c) for c in columns]  # any iterables, not only lists
        steps = make_steps(names, columns)
        expected = [TrainingStep(**{name: (i if name in ("iteration", "line") else
                                           0.5 * i if name == "step_time_s" else values[name]) for name in names})
                    for i in range(n)]
        assert steps == expected
        one_by_one = [make_step(dict(zip(names, row, strict=True))) for row in zip(
            *[[i if name in ("iteration", "line") else (0.5 * i if name == "step_time_s" else values[name])
               for i in range(n)] for name in names], strict=True)]
        assert [list(vars(s).items()) for s in steps] == [list(vars(e).items()) for e in one_by_one]  # order too
    # a name twice: the later column's value, as make_step's update gives
    twice = make_steps(["iteration", "step_time_s", "line", "loss", "loss"], [[1], [0.5], [2], [1.0], [3.0]])
    assert twice == [TrainingStep(1, 0.5, 2, loss=3.0)]
    with pytest.raises(ValueError, match="different lengths"):
        make_steps(["iteration", "step_time_s", "line"], [[1, 2], [0.5], [3, 4]])
