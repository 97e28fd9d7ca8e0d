# ruff: noqa: E501  (result rows and log lines as the tools print them)
"""The text parsers scan a file's whole text (issue 13): line ends of every kind, a last line without a newline,
and a bad line in the middle of a good file still give the lines and fields a line-by-line reading gives."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import FORMATS, detect_format
from clustercert.parsers.dcgm import parse_dcgm
from clustercert.parsers.dllogger import parse_dllogger
from clustercert.parsers.nccl_tests import _checked_row, _row
from clustercert.parsers.training import TrainingStep, line_total, make_step, read_text, read_text_lines

# Good files of six lines each; LINES[fmt] is the line each record sits on (counted by hand)
NEMO = (
    "[NeMo I 2025-03-07 22:38:36 nemo_logging:381] start\n"
    "Training epoch 0, iteration 1/9 | global_step: 1 | reduced_train_loss: 11.03 | train_step_timing in s: 7.61\n"
    "noise | train_step_timing in s: 99\n"
    "Training epoch 0, iteration 2/9 | grad_norm: nan | train_step_timing in s: 7.62 | consumed_samples: 1024\n"
    "\n"
    "Training epoch 0, iteration 3/9 | train_step_timing in s: 7.63\n"
)
MEGATRON = (
    "prose\n"
    " [2025-08-29 17:02:51] iteration        1/      20 | elapsed time per iteration (ms): 750.0 | lm loss: 9.5 |\n"
    "Step Time : 0.75s GPU utilization: 663.5MODEL_TFLOP/s/GPU\n"
    " [2025-08-29 17:02:52] iteration        2/      20 | elapsed time per iteration (ms): 751.0 | grad norm: nan |\n"
    "Step Time : 0.76s GPU utilization: 660.0MODEL_TFLOP/s/GPU\n"
    "preiteration 3/ 20 | elapsed time per iteration (ms): 1.0 | (no word boundary: not a record)\n"
)
DEEPSPEED = (
    " iteration        1/      20 | elapsed time per iteration (s): 1.25 | lm loss: 7.5 |\n"
    "prose\n"
    " iteration        2/      20 | elapsed time per iteration (s): 1.5 | lm loss: 7.4 | grad norm: 2.0\n"
    "| TFLOPs: 150.25 |\n"
    "prose\n"
    " iteration        3/      20 | elapsed time per iteration (s): 1.75 | lm loss: 7.3 |\n"
)
DLLOGGER = (
    'DLLL {"timestamp": "1.0", "type": "PARAMETER", "data": {"num_layers": 2}}\n'
    'DLLL {"step": 1, "data": {"train_step_timing in s": 1.5, "reduced_train_loss": 2.0}}\n'
    "other text\n"
    'prefix DLLL {"step": [0, 2], "data": {"train_step_timing in s": 1.25, "grad_norm": NaN}}  \n'
    'DLLL {"step": 3, "data": {"reduced_train_loss": 2.0}}\n'
    'DLLL {"step": 4, "data": {"train_step_timing in s": 1}}\n'
)
EVENTS = (
    '{"ts": "2025-03-07T22:39:36+00:00", "type": "job_started", "node": "n1"}\n'
    "# a comment\n"
    '  {"ts": "2025-03-07T22:40:36Z", "type": "fault_injected", "gpu": 3, "by": "injector", "x": 1}  \n'
    "\n"
    '{"ts": "2025-03-07T22:41:36+00:00", "type": "checkpoint_saved", "step": 40}\n'
    '{"ts": "2025-03-07T22:42:36+00:00", "type": "job_finished"}\n'
)
SACCT = (
    "State|JobID|Submit|Start|Elapsed|End\n"
    "COMPLETED|845|2024-01-02T03:04:05|2024-01-02T03:04:05|00:05:01|2024-01-02T03:09:06\n"
    "COMPLETED|845.batch|2024-01-02T03:04:05|2024-01-02T03:04:05|00:05:00|2024-01-02T03:09:05\n"
    "# a comment\n"
    "CANCELLED by 0|846|2024-01-02T03:04:05|2024-01-02T03:04:05|1-00:00:00|2024-01-03T03:04:05\n"
    "FAILED|846.0|2024-01-02T03:04:05|2024-01-02T03:04:05|00:00:10|2024-01-02T03:04:15\n"
)
DCGM = (
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} 97 1700000000000\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",Hostname="n 1",modelName="NVIDIA H100 80GB HBM3"} 95 1700000000000\n'
    "\n"
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} NaN 1700000001000\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",Hostname="n 1",modelName="NVIDIA H100 80GB HBM3"} 96 1700000001000\n'
)
MLPERF = (
    ':::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "INTERVAL_START", "key": "run_start", "value": null}\n'
    ':::MLLOG {"namespace": "", "time_ms": 1500, "key": "seed", "value": 7}\n'
    "plain output\n"
    ':::MLLOG {"namespace": "", "time_ms": 2000, "key": "train_loss", "value": 0.5}\n'
    "[0] :::MLLOG {\"namespace\": \"\", \"time_ms\": 61000, \"key\": \"run_stop\", \"metadata\": {\"status\": \"success\"}}\n"
    "trailing output\n"
)
NCCL_ROW = "    33554432       4194304    double     sum      -1   182.87  183.49  321.10       0   182.88  183.48  321.08       0"
NCCL = (
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor)\n"
    "#  Rank  0 Group  0 Pid   6899 on host-a device  0 [0000:04:00] NVIDIA H100 80GB HBM3\n"
    f"{NCCL_ROW}\n"
    "host-a:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] via NET/IB\n"
    f"{NCCL_ROW.replace('33554432', '67108864')}\n"
    "# Avg bus bandwidth    : 321.09 \n"
)

GOOD: dict[str, str] = {
    "nemo": NEMO, "megatron": MEGATRON, "megatron-deepspeed": DEEPSPEED, "dllogger": DLLOGGER, "events": EVENTS,
    "sacct": SACCT, "dcgm": DCGM, "mlperf": MLPERF, "nccl-tests": NCCL,
}


def lines_of(fmt: str, result: Any) -> list[int]:
    """The line of each record a parser read, as its table keeps it."""
    if fmt in ("nemo", "megatron", "megatron-deepspeed", "dllogger"):
        return [s.line for s in result.steps]
    if fmt == "events":
        return [e.line for e in result.events]
    if fmt == "sacct":
        return [r.line for j in result.jobs for r in (j, *j.steps)]
    if fmt == "dcgm":
        return [int(n) for n in result.line]
    if fmt == "mlperf":
        return [result.runs[0].start_line, result.runs[0].stop_line]
    return [r.line for t in result.tests for r in t.rows]


# counted by hand in the files above
LINES = {
    "nemo": [2, 4, 6], "megatron": [2, 4], "megatron-deepspeed": [1, 3, 6], "dllogger": [2, 4, 6],
    "events": [1, 3, 5, 6], "sacct": [2, 3, 5, 6], "dcgm": [2, 3, 5, 6], "mlperf": [1, 5], "nccl-tests": [3, 5],
}


def parse(tmp_path: Path, fmt: str, data: bytes) -> Any:
    path = tmp_path / f"{fmt}.log"
    path.write_bytes(data)
    return FORMATS[fmt](path, path.name)


@pytest.mark.parametrize("fmt", sorted(GOOD))
def test_records_sit_on_their_lines(tmp_path: Path, fmt: str) -> None:
    assert lines_of(fmt, parse(tmp_path, fmt, GOOD[fmt].encode())) == LINES[fmt]


@pytest.mark.parametrize("fmt", sorted(GOOD))
@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda text: text.replace("\n", "\r\n"), id="crlf"),
        pytest.param(lambda text: text.rstrip("\n"), id="no-final-newline"),
        pytest.param(lambda text: text.replace("\n", "\r"), id="old-mac-cr"),
        # a terminal's colours (a log captured from a terminal, a logger that colours its records): each line in
        # green, reset with `tput sgr0`'s pair, and a cursor move before the line break
        pytest.param(lambda text: "".join(f"\x1b[32m{ln}\x1b(B\x1b[m\x1b[K\n" if ln else "\n"
                                          for ln in text.split("\n")[:-1]), id="coloured"),
        pytest.param(lambda text: "\ufeff" + text, id="byte-order-mark"),  # a file saved by a Windows editor
    ],
)
def test_line_ends_of_any_kind_read_alike(tmp_path: Path, fmt: str, variant: Callable[[str], str]) -> None:
    plain = parse(tmp_path, fmt, GOOD[fmt].encode()).to_json()
    assert parse(tmp_path, fmt, variant(GOOD[fmt]).encode()).to_json() == plain
    assert detect_format(tmp_path / f"{fmt}.log") == fmt  # the file just written: its format told as the plain one's


@pytest.mark.parametrize("fmt", sorted(GOOD))
@pytest.mark.parametrize("mark", ["\x0c", "\x1e", "\u2028"])
def test_a_line_break_of_another_kind_counts_as_one(tmp_path: Path, fmt: str, mark: str) -> None:
    # str.splitlines() breaks a line at a form feed, a record separator, U+2028: one more line before the records
    shifted = parse(tmp_path, fmt, (f"# preamble{mark}" + GOOD[fmt]).encode())
    assert lines_of(fmt, shifted) == [n + 1 for n in LINES[fmt]]


# (line that replaces line 4 of the good file, the field the error names); None: the line only
BAD_LINE_4: dict[str, tuple[str, str | None]] = {
    "nemo": ("Training epoch 0, iteration 2/9 | train_step_timing in s: 7.6x", "train_step_timing in s"),
    "megatron": (" iteration 2/ 20 | elapsed time per iteration (ms): fast |", "elapsed time per iteration (ms)"),
    "megatron-deepspeed": (" iteration 2/ 20 | lm loss: 7 |", "elapsed time per iteration"),
    "dllogger": ('DLLL {"step": 2, "data": {"train_step_timing in s": 1.2}', "DLLL"),
    "events": ('{"ts": "2025-03-07T22:41:36+00:00", "type": "checkpoint_saved", "step": -1}', "step"),
    "sacct": ("DONE|846|2024-01-02T03:04:05|2024-01-02T03:04:05|00:00:01|2024-01-02T03:04:06", "State"),
    "dcgm": ('DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} 97 1700000000000.5', "timestamp"),
    "mlperf": (':::MLLOG {"time_ms": 2000, "key": "train_loss", "value": 0.5', "MLLOG"),
    "nccl-tests": (NCCL_ROW.replace("321.10", "-321.10"), "busbw"),
}


@pytest.mark.parametrize("fmt", sorted(GOOD))
@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
def test_a_bad_line_in_the_middle_is_named(tmp_path: Path, fmt: str, crlf: bool) -> None:
    lines = GOOD[fmt].split("\n")
    bad, field = BAD_LINE_4[fmt]
    lines[3] = bad
    text = "\n".join(lines)
    with pytest.raises(EvidenceError) as caught:
        parse(tmp_path, fmt, (text.replace("\n", "\r\n") if crlf else text).encode())
    assert (caught.value.file, caught.value.line, caught.value.field) == (f"{fmt}.log", 4, field)
    assert "line 4" in str(caught.value)


def test_a_json_record_never_runs_on_into_the_next_line(tmp_path: Path) -> None:
    # json.loads of the line refuses a record cut after its first line, even when the next line would complete it
    path = tmp_path / "d.log"
    path.write_text(DLLOGGER + 'DLLL {"step": 5, "data":\n{"train_step_timing in s": 1.0}}\n')
    with pytest.raises(EvidenceError) as caught:
        parse_dllogger(path, "d.log")
    assert (caught.value.line, caught.value.field) == (7, "DLLL")


@pytest.mark.parametrize(
    "text",
    ["a\nb\n", "a\nb", "a\r\nb\r\n", "a\r\r\nb", "a\r\nb\rc", "a\rb", "a\n\nb\n\n", "x\x0cy\x1cz\x85w\u2029v", "a\r\n\r\n", "\x1c\x1c", "é\n"],
)
def test_read_text_holds_the_lines_read_text_lines_gives(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.log"
    path.write_bytes(text.encode())
    whole = read_text(path, "t.log", limit=1 << 20)
    lines = read_text_lines(path, "t.log", limit=1 << 20)
    assert whole.split("\n")[: line_total(whole)] == lines
    assert line_total(whole) == len(lines)


def test_make_step_is_the_step_the_constructor_makes() -> None:
    values: dict[str, object] = {"iteration": 7, "step_time_s": 1.5, "line": 12, "loss": 2.0, "global_step": 7}
    built, made = TrainingStep(**values), make_step(dict(values))  # type: ignore[arg-type]
    assert built == made and repr(built) == repr(made) and hash(built) == hash(made)
    assert made.pause_s == 0.0 and made.untimed_pause is False and made.tflops_per_gpu is None
    with pytest.raises(AttributeError):
        made.line = 3  # type: ignore[misc]  # still frozen


@pytest.mark.parametrize(
    "row",
    [
        NCCL_ROW,
        "        1024           256     float     sum      -1    25.10    0.04    0.07     N/A    24.90    0.04    0.07     N/A",
        "           8             2     float     none    0.0    1e3    1.0   2.5e-1       0    1.0    0.5    0.25       0",
    ],
)
def test_nccl_rows_read_directly_match_the_checked_reading(row: str) -> None:
    tokens = row.split()
    assert _row(tokens, 9, "n.log") == _checked_row(tokens, 9, "n.log")


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [(7, "inf", "busbw"), (5, "nan", "time"), (10, "-0.5", "algbw"), (8, "1e999", "#wrong"), (0, "8.5", "size")],
)
def test_nccl_rows_the_direct_reading_refuses_are_named(column: int, value: str, field: str) -> None:
    tokens = NCCL_ROW.split()
    tokens[column] = value
    with pytest.raises(EvidenceError) as caught:
        _row(tokens, 9, "n.log")
    assert (caught.value.line, caught.value.field) == (9, field)


def test_dcgm_series_heads_are_read_once_and_alike(tmp_path: Path) -> None:
    path = tmp_path / "t.prom"
    path.write_text(DCGM + 'DCGM_FI_DEV_GPU_UTIL{gpu="1",Hostname="n 1",modelName="NVIDIA H100 80GB HBM3"} 94\n')
    with pytest.raises(EvidenceError) as caught:  # the same head, without its timestamp: that line is refused
        parse_dcgm(path, "t.prom")
    assert (caught.value.line, caught.value.field) == (7, "timestamp")
    path.write_text(DCGM)
    telemetry = parse_dcgm(path, "t.prom")
    samples = telemetry.head(len(telemetry))
    assert [(s.gpu, s.host, s.value, s.time_ms) for s in samples] == [
        ("0", "n1", 97.0, 1700000000000), ("1", "n 1", 95.0, 1700000000000), ("0", "n1", None, 1700000001000),
        ("1", "n 1", 96.0, 1700000001000),
    ]
    assert not any(isinstance(s.value, float) and math.isnan(s.value) for s in samples)
