"""Checks, their statuses and the certification outcome (DESIGN.md 'Outcomes and exit codes')."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from clustercert.evidence.provenance import Span

__all__ = ["Check", "Outcome", "Severity", "Status", "decide_outcome", "exit_code_for"]


class Status(StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"


class Severity(StrEnum):
    REQUIRED = "required"
    ADVISORY = "advisory"


class Outcome(StrEnum):
    CERTIFIED = "CERTIFIED"
    NOT_CERTIFIED = "NOT CERTIFIED"
    INCOMPLETE = "INCOMPLETE"


@dataclass(frozen=True)
class Check:
    """One judged check; `id` is `<phase>.<subject>_<predicate>` and stable across runs."""

    id: str
    title: str
    phase: str
    severity: Severity
    status: Status
    measured: float | None
    target: float | None
    unit: str
    message: str
    delta_pct: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    evidence: tuple[Span, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "title": self.title,
            "phase": self.phase,
            "severity": self.severity.value,
            "status": self.status.value,
            "measured": self.measured,
            "target": self.target,
            "unit": self.unit,
            "delta_pct": self.delta_pct,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "message": self.message,
            "evidence": [s.to_dict() for s in self.evidence],
        }


def decide_outcome(checks: Iterable[Check]) -> Outcome:
    """Any required FAIL -> NOT CERTIFIED; else any required ERROR -> INCOMPLETE; else CERTIFIED."""
    required = [c for c in checks if c.severity is Severity.REQUIRED]
    if not required:
        return Outcome.INCOMPLETE
    if any(c.status is Status.FAIL for c in required):
        return Outcome.NOT_CERTIFIED
    if any(c.status is Status.ERROR for c in required):
        return Outcome.INCOMPLETE
    return Outcome.CERTIFIED


def exit_code_for(outcome: Outcome) -> int:
    return {Outcome.CERTIFIED: 0, Outcome.NOT_CERTIFIED: 1, Outcome.INCOMPLETE: 3}[outcome]
