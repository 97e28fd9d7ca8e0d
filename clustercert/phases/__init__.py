"""Per-phase judging: parsed tables + catalog -> measurements and checks (pure; flows call these)."""

from __future__ import annotations

from dataclasses import dataclass, field

from clustercert.verdicts import Check

__all__ = ["PhaseResult"]


@dataclass(frozen=True)
class PhaseResult:
    """A phase's checks and its part of results.json (`section`, chart data included)."""

    checks: list[Check]
    section: dict[str, object] = field(default_factory=dict)
