"""Long hostile lines against the patterns the text parsers run over a file's whole text (issue 13): each stays
linear in the line (the case bound of tests/hostile/conftest.py fails a superlinear one)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import FORMATS

LONG = 1024**2
FORMATS_SCANNED = ["nemo", "megatron", "megatron-deepspeed", "dllogger", "mlperf", "events", "nccl-tests", "sacct",
                   "dcgm"]
LINES = [
    ":" + " " * LONG + "nan",                                    # a nan value's whitespace, scanned from each ':'
    ": " * (LONG // 2),
    "| lm loss " * (LONG // 10),                                 # a record field's key without its ':'
    " iteration 1/ 2 |" + "| grad norm  \t" * (LONG // 14),
    " iteration 1/ 2 | elapsed time per iteration (ms): 1 |" + " |" * (LONG // 2),
    "iteration " * (LONG // 10),
    "xiteration 1/ 2 |" * (LONG // 17),                          # no word boundary before each
    "Training epoch 0, iteration 1/2 |" + "a:" * (LONG // 2),
    "DLLL " * (LONG // 5),
    ":::MLLOG " * (LONG // 9),
    "DLLL {" + '"a": [' * 50 + " " * LONG,
    "Step Time : " + "1" * LONG,
]


@pytest.mark.parametrize("fmt", FORMATS_SCANNED)
@pytest.mark.parametrize("line", LINES, ids=range(len(LINES)))
def test_whole_text_patterns_are_linear(tmp_path: Path, fmt: str, line: str,
                                        hostile: Callable[[int], None]) -> None:
    path = tmp_path / "long.log"
    path.write_text("Training epoch 0, iteration 1/2 | train_step_timing in s: 1.0\n" + line + "\n" + line)
    hostile(1)
    try:
        FORMATS[fmt](path, path.name)
    except EvidenceError as exc:
        assert str(exc).startswith("long.log")
