"""Judging under a certification profile: which checks decide the outcome, and which evidence was not submitted."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import Any

from clustercert.catalog import PHASE_NAMES, LoadedCatalog, Profile
from clustercert.errors import UsageError
from clustercert.evidence.bundle import LoadedBundle
from clustercert.verdicts import Check, Outcome, Severity, Status, decide_outcome

__all__ = ["DEFAULT_PROFILE", "apply_profile", "choose_profile", "decides", "profile_outcome", "profile_section"]

DEFAULT_PROFILE = "full"
# where a message that lacks its evidence turns from what is missing to what that means under `missing: fail`
_CLUSTER_DID_NOT = re.compile(r"[:,;] the cluster did not show")


def choose_profile(asked: str | None, bundle: LoadedBundle, catalog: LoadedCatalog) -> str:
    """The profile a run certifies: `--profile` when given, else bundle.yaml's `profile`, else `full`; one the
    catalog does not define is a usage error naming those it does."""
    chosen = asked or bundle.spec.profile or DEFAULT_PROFILE
    if chosen not in catalog.spec.profiles:
        where = "--profile" if asked else f"{bundle.shown('bundle.yaml')} field 'profile'"
        raise UsageError(f"{where}: expected one of the profiles of catalog {catalog.spec.id} "
                         f"({', '.join(catalog.spec.profiles)}), got {chosen!r}")
    return chosen


def decides(profile: Profile, check: Check) -> bool:
    """Whether `check` decides the outcome under `profile`: of one of its phases and, where it names checks, one
    of them. The evidence validation decides under every profile, for the runs of the profile's phases."""
    if check.phase == "validation":
        return True
    if check.phase not in profile.phases:
        return False
    return not profile.checks or any(fnmatchcase(check.id, pattern) for pattern in profile.checks)


def apply_profile(checks: list[Check], profile_id: str, profile: Profile) -> list[Check]:
    """The checks as `profile` judges them. A check outside it is advisory, and one that lacks its evidence is
    SKIPPED as not submitted (never "the cluster did not show it"); inside it, evidence the bundle lacks is a FAIL
    under `missing: fail` and not submitted under `missing: not-submitted`."""
    out: list[Check] = []
    for c in checks:
        inside = decides(profile, c)
        optional = profile.missing == "not-submitted" or c.phase in profile.when_present
        if c.absent and c.status is Status.FAIL and (not inside or optional):
            why = f"outside the {profile_id} profile" if not inside else \
                f"the {profile_id} profile judges what was submitted"
            # what is missing, without the claim that the cluster failed to show it: it was not asked for
            missing = _CLUSTER_DID_NOT.split(c.message, maxsplit=1)[0].rstrip(". ")
            out.append(replace(c, status=Status.SKIPPED, severity=Severity.ADVISORY, summary=None,
                               message=f"not submitted ({why}): {missing}"))
        elif not inside and c.severity is Severity.REQUIRED:
            out.append(replace(c, severity=Severity.ADVISORY,
                               message=f"{c.message} (advisory: outside the {profile_id} profile)"))
        else:
            out.append(c)
    return out


def profile_outcome(checks: list[Check], profile: Profile) -> Outcome:
    """The outcome of checks judged under `profile` (`decide_outcome`), INCOMPLETE where no check of the
    profile's phases decided anything: a bundle that submitted none of what the profile judges is never certified
    on its evidence validation alone."""
    outcome = decide_outcome(checks)
    judged = any(c.severity is Severity.REQUIRED and c.phase in profile.phases for c in checks)
    return outcome if judged or outcome is not Outcome.CERTIFIED else Outcome.INCOMPLETE


def profile_section(profile_id: str, catalog: LoadedCatalog, bundle: LoadedBundle,
                    checks: list[Check]) -> dict[str, Any]:
    """results.json's `profile`: its id, title, the phases that decide, what it does not cover, and one line per
    phase whose evidence was not submitted (the bundle has no run of it; or, for a phase the profile decides, no
    check of it was judged)."""
    profile = catalog.spec.profiles[profile_id]
    submitted = {run.phase.value for run in bundle.spec.runs}
    judged = Counter(c.phase for c in checks if not c.absent)
    lacking = Counter(c.phase for c in checks if c.absent)
    not_submitted = []
    for phase in PHASE_NAMES:
        if phase in submitted and judged[phase]:
            if lacking[phase]:  # part of a phase: the scopes a network acceptance sweep did not run
                first = next(c for c in checks if c.phase == phase and c.absent)
                not_submitted.append({
                    "phase": phase, "decisive": phase in profile.phases, "checks": lacking[phase],
                    "line": f"{phase}: {lacking[phase]} check{'s' if lacking[phase] != 1 else ''} without evidence "
                            f"(first: {first.title})"})
            continue
        decisive = phase in profile.phases
        not_submitted.append({
            "phase": phase, "decisive": decisive, "checks": lacking[phase],
            "line": (f"{phase}: not submitted"
                     + (f" ({lacking[phase]} check{'s' if lacking[phase] != 1 else ''} without evidence)"
                        if lacking[phase] else "")
                     + (f"; outside the {profile_id} profile, not judged" if not decisive else
                        f"; the {profile_id} profile decides on it when submitted" if phase in profile.when_present
                        else f"; the {profile_id} profile decides on it")),
        })
    return {"id": profile_id, "title": profile.title, "phases": list(profile.phases), "checks": list(profile.checks),
            "missing": profile.missing, "when_present": list(profile.when_present),
            "not_covered": profile.not_covered or _not_covered(profile), "not_submitted": not_submitted}


def _not_covered(profile: Profile) -> str:
    """What a profile without its own words leaves out: the phases it does not decide on."""
    left = [p for p in PHASE_NAMES if p not in profile.phases]
    if left:
        return "the " + ", ".join(left) + (" phases" if len(left) > 1 else " phase")
    if profile.checks:
        return "the checks of its phases it does not name"
    return "nothing: every phase decides"
