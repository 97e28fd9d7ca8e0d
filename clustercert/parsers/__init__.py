"""One module per evidence format; each turns a file into a typed table that keeps file and line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.nemo import parse_nemo
from clustercert.parsers.training import TrainingLog, TrainingStep

__all__ = ["TRAINING_FORMATS", "TrainingLog", "TrainingStep", "parse_training_log"]

TrainingParser = Callable[..., TrainingLog]

TRAINING_FORMATS: dict[str, TrainingParser] = {
    "nemo": parse_nemo,
}


def parse_training_log(path: Path, display: str, fmt: str, *, limit: int = 2 * 1024**3) -> TrainingLog:
    """Parse a training log with the parser `fmt`; an unknown format is an EvidenceError."""
    parser = TRAINING_FORMATS.get(fmt)
    if parser is None:
        raise EvidenceError(display, f"expected a training format ({', '.join(sorted(TRAINING_FORMATS))}), got '{fmt}'")
    return parser(path, display, limit=limit)
