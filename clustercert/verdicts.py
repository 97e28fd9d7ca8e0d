"""Checks, their statuses and the certification outcome (DESIGN.md 'Outcomes and exit codes')."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from clustercert.evidence.provenance import Span

__all__ = ["Check", "DeclaredCheck", "Outcome", "Reason", "Severity", "Status", "decide_outcome", "exit_code_for",
           "lacking", "outcome_reasons"]


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
    # one line saying what was judged and where (page one, the terminal); None: the message's first clause
    summary: str | None = None
    # the evidence this check needs is not in the bundle (what that means is the profile's: phases.profile)
    absent: bool = False
    # the configuration the check read (a recipe's values), key -> value with its origin: the report shows it as a
    # key/value table instead of the message's list
    settings: tuple[tuple[str, str], ...] = ()

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
            "summary": self.summary,
            "evidence": [s.to_dict() for s in self.evidence],
            **({"absent": True} if self.absent else {}),
            **({"settings": dict(self.settings)} if self.settings else {}),
        }


@dataclass(frozen=True)
class DeclaredCheck:
    """A check as declared before it is judged: its stable id, title, phase and severity; judged() adds what the
    evidence showed."""

    id: str
    title: str
    phase: str
    severity: Severity

    def judged(
        self, status: Status, message: str, *, measured: float | None = None, target: float | None = None,
        unit: str = "", evidence: Sequence[Span] = (), summary: str | None = None,
    ) -> Check:
        return Check(id=self.id, title=self.title, phase=self.phase, severity=self.severity, status=status,
                     measured=measured, target=target, unit=unit, message=message, evidence=tuple(evidence),
                     summary=summary)


def lacking(check: Check) -> Check:
    """`check`, marked as judged without the evidence it needs: the bundle holds none."""
    return replace(check, absent=True)


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


@dataclass(frozen=True)
class Reason:
    """Why the outcome is what it is: one failing or erroring check in one line, with where it is."""

    check: str
    status: Status
    severity: Severity
    phase: str
    title: str
    summary: str
    where: tuple[str, ...]  # evidence as `file:line` (or `file:first-last`)

    @property
    def line(self) -> str:
        return f"{self.status.value} {self.phase}: {self.summary}"

    def to_json(self) -> dict[str, object]:
        return {"check": self.check, "status": self.status.value, "severity": self.severity.value,
                "phase": self.phase, "title": self.title, "summary": self.summary, "where": list(self.where),
                "line": self.line}


_SUMMARY_MAX = 200


def _first_clause(message: str) -> str:
    """The message up to its first '; ' or '. ' (a message states the finding first), at most 200 characters."""
    cut = len(message)
    for sep in ("; ", ". "):
        at = message.find(sep)
        if 0 < at < cut:
            cut = at
    text = message[:cut].rstrip(".")
    return text if len(text) <= _SUMMARY_MAX else text[: _SUMMARY_MAX - 3].rstrip() + "..."


def _where(span: Span) -> str:
    if span.first <= 0:
        return span.file
    return f"{span.file}:{span.first}" + (f"-{span.last}" if span.last > span.first else "")


def outcome_reasons(checks: Iterable[Check]) -> list[Reason]:
    """Every FAIL or ERROR check, required ones first (FAILs, then ERRORs), then advisory ones, in check order.

    These are the reasons for an outcome other than CERTIFIED (an advisory one never decides it); a
    CERTIFIED run has none unless an advisory check failed. Evidence is named as the checks name it (in a
    certification, by its path in the bundle: `LoadedBundle.shown`).
    """
    def rank(c: Check) -> int:
        return (0 if c.severity is Severity.REQUIRED else 2) + (0 if c.status is Status.FAIL else 1)

    bad = [c for c in checks if c.status in (Status.FAIL, Status.ERROR)]
    ordered = sorted(enumerate(bad), key=lambda ic: (rank(ic[1]), ic[0]))
    return [Reason(check=c.id, status=c.status, severity=c.severity, phase=c.phase, title=c.title,
                   summary=_first_clause(c.summary or c.message),
                   where=tuple(_where(s) for s in c.evidence[:3]))
            for _, c in ordered]
