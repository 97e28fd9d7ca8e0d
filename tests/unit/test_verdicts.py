"""Outcome precedence exactly as DESIGN.md 'Outcomes and exit codes'."""

from __future__ import annotations

import pytest

from clustercert.verdicts import Check, Outcome, Severity, Status, decide_outcome, exit_code_for


def _c(status: Status, severity: Severity = Severity.REQUIRED) -> Check:
    return Check(id=f"efficiency.x_{status.value.lower()}", title="t", phase="efficiency", severity=severity,
                 status=status, measured=None, target=None, unit="", message="")


@pytest.mark.parametrize(
    ("statuses", "outcome"),
    [
        ([Status.PASS, Status.PASS], Outcome.CERTIFIED),
        ([Status.PASS, Status.WARN], Outcome.CERTIFIED),
        ([Status.PASS, Status.ERROR], Outcome.INCOMPLETE),
        ([Status.ERROR, Status.FAIL], Outcome.NOT_CERTIFIED),
        ([Status.FAIL, Status.PASS], Outcome.NOT_CERTIFIED),
    ],
)
def test_precedence(statuses: list[Status], outcome: Outcome) -> None:
    assert decide_outcome([_c(s) for s in statuses]) is outcome


def test_advisory_findings_never_decide() -> None:
    checks = [_c(Status.PASS), _c(Status.FAIL, Severity.ADVISORY), _c(Status.ERROR, Severity.ADVISORY)]
    assert decide_outcome(checks) is Outcome.CERTIFIED


def test_nothing_required_is_not_a_certification() -> None:
    assert decide_outcome([]) is Outcome.INCOMPLETE


def test_exit_codes() -> None:
    assert [exit_code_for(o) for o in Outcome] == [0, 1, 3]
