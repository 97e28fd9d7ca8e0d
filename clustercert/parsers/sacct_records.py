"""The records a Slurm accounting dump is read into (jobs, their steps, the dump), shared by the `--parsable2`
reading (sacct.py) and the `--json` reading (sacct_json.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["FORMAT", "STATES", "SacctJob", "SacctResult", "SacctStep", "base_state"]

FORMAT = "sacct"
STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PENDING",
        "PREEMPTED",
        "RUNNING",
        "REQUEUED",
        "RESIZING",
        "REVOKED",
        "SUSPENDED",
        "TIMEOUT",
    }
)


def base_state(text: str) -> str:
    """The state a printed one names (`CANCELLED by 1234`, `CANCELLED+`: CANCELLED); ValueError when none."""
    state_raw = text.strip()
    state = state_raw.split(" ")[0].rstrip("+").upper() if state_raw else ""
    if state not in STATES:
        raise ValueError(state_raw)
    return state


def _values(names: tuple[str, ...], row: tuple[Any, ...], named: dict[str, Any]) -> dict[str, Any]:
    """A record's fields by name, from its positional values `row` (in field order) and its keyword values."""
    values = dict(zip(names, row, strict=False))
    if len(row) > len(names) or values.keys() & named.keys():
        raise TypeError(f"expected each of the fields {', '.join(names)} at most once")
    values.update(named)
    return values


class _StepRow(NamedTuple):
    step_id: str
    state: str
    state_raw: str
    elapsed_s: float | None
    start: str | None
    end: str | None
    line: int


class SacctStep(_StepRow):
    """A step row (`JobID` with a `.`) with its line: the fields read, not the row's other cells (kept as a
    dict of texts per row, a large dump's rows held many times the dump's size). A named tuple: a dump's hundreds of
    thousands of rows are made in C (`tuple.__new__`, as `_Rows.add` makes them), immutable as a frozen dataclass
    is."""

    __slots__ = ()

    def to_json(self) -> dict[str, object]:
        return {
            "step_id": self.step_id,
            "state": self.state,
            "state_raw": self.state_raw,
            "elapsed_s": self.elapsed_s,
            "start": self.start,
            "end": self.end,
            "line": self.line,
        }


class _JobRow(NamedTuple):
    job_id: str
    state: str
    state_raw: str
    elapsed_s: float | None
    start: str | None
    end: str | None
    submit: str | None
    line: int
    steps: list[SacctStep]
    incarnation: int  # `sacct --duplicates` repeats a requeued job's id: 2 is its first requeue


class SacctJob(_JobRow):
    """A job row and the step rows that follow it (a named tuple, as SacctStep is)."""

    __slots__ = ()

    def __new__(cls, *row: Any, **named: Any) -> SacctJob:
        """_JobRow's fields, in order or by name; `steps` left out is a list of this job's own (a default given
        once would be one list that every job shares), `incarnation` left out is 1."""
        values = _values(cls._fields, row, named)
        values.setdefault("steps", [])
        values.setdefault("incarnation", 1)
        return super().__new__(cls, **values)

    def to_json(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "incarnation": self.incarnation,
            "state": self.state,
            "state_raw": self.state_raw,
            "elapsed_s": self.elapsed_s,
            "start": self.start,
            "end": self.end,
            "submit": self.submit,
            "line": self.line,
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass(frozen=True)
class SacctResult:
    """Every job of one dump, with the field list used."""

    file: str
    fields: list[str]
    timezone: str
    jobs: list[SacctJob]
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "file": self.file,
            "fields": self.fields,
            "timezone": self.timezone,
            "jobs": [j.to_json() for j in self.jobs],
            "warnings": self.warnings,
        }
