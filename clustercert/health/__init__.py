"""Node health: verdicts per GPU, NVLink, port and node from the parsed health tables, by the rules in
references/health-rules.yaml."""

from __future__ import annotations

from clustercert.health.judge import judge_health, judge_prescreen
from clustercert.health.rules import RULES_FILE, HealthRules, load_health_rules
from clustercert.health.verdicts import HealthVerdict, Unit, UnitKind, worst

__all__ = ["RULES_FILE", "HealthRules", "HealthVerdict", "Unit", "UnitKind", "judge_health", "judge_prescreen",
           "load_health_rules", "worst"]
