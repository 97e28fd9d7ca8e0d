"""The table every training-log parser returns: one row per printed step, each with its line."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import read_regular

__all__ = ["TrainingLog", "TrainingStep", "parse_number", "read_text_lines"]


@dataclass(frozen=True)
class TrainingStep:
    """One step as the log printed it; None where the log has no such value. Step time is in seconds."""

    iteration: int
    step_time_s: float | None
    line: int
    tflops_per_gpu: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    global_step: int | None = None
    epoch: int | None = None
    max_iteration: int | None = None
    global_batch_size: int | None = None
    consumed_samples: int | None = None
    samples_per_s: float | None = None
    # the time printed on the step's line (epoch seconds, whole seconds; None when the line has none), the time the
    # log reports spent outside steps since the previous step (a save-checkpoint timer), and whether an untimed
    # pause (an evaluation) came in between: the clock check (checks/training_steps.json) restarts there
    timestamp_s: float | None = None
    pause_s: float = 0.0
    untimed_pause: bool = False


@dataclass(frozen=True)
class NanMark:
    """A line where the log printed a nan loss or grad norm."""

    line: int
    field: str


@dataclass(frozen=True)
class TrainingLog:
    """What a training-log parser read from one file."""

    format: str
    file: str
    steps: list[TrainingStep]
    nan_marks: list[NanMark] = field(default_factory=list)
    line_count: int = 0
    warnings: list[str] = field(default_factory=list)  # what was read with a caveat, each naming its lines

    def to_json(self) -> dict[str, object]:
        return {
            "format": self.format,
            "file": self.file,
            "steps": [_clean(asdict(s)) for s in self.steps],
            "nan": [asdict(m) for m in self.nan_marks],
            "lines": self.line_count,
            "warnings": self.warnings,
        }


def _clean(row: dict[str, object]) -> dict[str, object]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def parse_number(text: str, *, file: str, line: int, field: str, hint: str) -> float:
    """A float from a log field, or an EvidenceError naming the file, line and field."""
    try:
        return float(text.strip())
    except ValueError:
        message = f"expected a number, got {text.strip()[:40]!r}. {hint}"
        raise EvidenceError(file, message, line=line, field=field) from None


def read_text_lines(path: Path, display: str, *, limit: int) -> list[str]:
    """The file's lines as text; refuses empty, binary or oversized files with a located error."""
    data = read_regular(path, display, limit=limit)
    if not data.strip():
        raise EvidenceError(display, "expected log text, got an empty file")
    if b"\x00" in data[:65536]:
        raise EvidenceError(display, "expected text, got binary data (NUL bytes)")
    text = data.decode("utf-8", errors="replace")
    return text.splitlines()
