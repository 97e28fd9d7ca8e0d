"""Findings by root cause: the failing checks that one shared path, node or file explains, as one line each."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from clustercert.evidence.bundle import LoadedBundle
from clustercert.verdicts import Check, Severity, Status, outcome_reasons

__all__ = ["group_findings"]


@dataclass(frozen=True)
class _Run:
    """A collective or pair run as the scaling section measured it: bad when it failed its target or its peers."""

    run: str
    label: str
    nodes: frozenset[str]
    domains: frozenset[str]
    where: str  # `file:line` of its own measurement
    bad: bool


def _where(file: object, line: object) -> str:
    return f"{file}:{line}" if isinstance(line, int) and line > 0 else str(file)


def _runs(bundle: LoadedBundle, sections: Mapping[str, Any]) -> dict[str, _Run]:
    """Every measured collective and pair run by run id, bad when any of its tests failed, errored or was
    degraded against its peers."""
    scaling = sections.get("scaling") or {}
    domain_of = {n: d.name for d in bundle.spec.system.nvlink_domains for n in d.nodes}
    files = {r.id: r.files[0] for r in bundle.spec.runs}
    out: dict[str, _Run] = {}
    for entry in scaling.get("collectives", []):
        nodes = frozenset(entry.get("nodes") or [])
        held = out.get(entry["run"])
        this_bad = entry.get("status") in ("FAIL", "ERROR")
        if held is not None and (held.bad or not this_bad):
            continue  # a run's first bad test is where its finding points
        label = f"{entry.get('scope')} run {entry['run']}" if entry.get("scope") != "pair" else \
            "pair " + " – ".join(sorted(nodes))
        out[entry["run"]] = _Run(entry["run"], label, nodes, frozenset(domain_of.get(n, n) for n in nodes),
                                 _where(entry.get("file") or files.get(entry["run"], ""), entry.get("line")), this_bad)
    for pair in scaling.get("pairs", []):
        held = out.get(pair["run"])
        nodes = frozenset(pair["nodes"])
        bad = bool(pair.get("degraded") or pair.get("failed")) or (held is not None and held.bad)
        out[pair["run"]] = _Run(pair["run"], "pair " + " – ".join(pair["nodes"]), nodes,
                                frozenset(pair.get("domains") or []),
                                held.where if held else files.get(pair["run"], ""), bad)
    return out


def _cited(check: Check, run_of_file: Mapping[str, str], runs: Mapping[str, _Run]) -> list[_Run]:
    """The measured runs a failing check is about: those whose file its message names, else the bad ones among
    those its evidence cites (all it cites when none of them is bad), in the order cited."""
    cited: list[_Run] = []
    named: list[_Run] = []
    for span in check.evidence:
        run = runs.get(run_of_file.get(span.file, ""))
        if run is not None and run not in cited:
            cited.append(run)
            if span.file in check.message:
                named.append(run)
    bad = [r for r in cited if r.bad]
    return named or bad or cited


@dataclass(frozen=True)
class _Cause:
    kind: str  # "path" (between two NVLink domains) or "node"
    name: str
    explains: tuple[str, ...]  # check ids
    passing: int  # passing runs that also cross it


def _best_cause(about: Mapping[str, list[_Run]], runs: Iterable[_Run]) -> _Cause | None:
    """The path between two NVLink domains, or the node, that every bad run of the most failing checks crosses
    (at least two checks), the fewest passing runs crossing it breaking ties; a path before a node."""
    everything = list(runs)
    domains = sorted({d for rs in about.values() for r in rs for d in r.domains})
    nodes = sorted({n for rs in about.values() for r in rs for n in r.nodes})
    found: list[_Cause] = []
    for a, b in combinations(domains, 2):
        explains = tuple(c for c, rs in about.items() if rs and all({a, b} <= r.domains for r in rs))
        passing = sum(1 for r in everything if not r.bad and {a, b} <= r.domains)
        found.append(_Cause("path", f"{a}–{b}", explains, passing))
    for n in nodes:
        explains = tuple(c for c, rs in about.items() if rs and all(n in r.nodes for r in rs))
        passing = sum(1 for r in everything if not r.bad and n in r.nodes)
        found.append(_Cause("node", n, explains, passing))
    found = [c for c in found if len(c.explains) >= 2]
    if not found:
        return None
    return min(found, key=lambda c: (-len(c.explains), c.passing, c.kind != "path", c.name))


def _line(status: str, advisory: bool, phase: str, check: str, text: str, where: list[str],
          checks: list[str]) -> dict[str, Any]:
    return {"status": status, "advisory": advisory, "phase": phase, "check": check, "line": text,
            "where": where, "checks": checks, "count": len(checks)}


def group_findings(checks: list[Check], bundle: LoadedBundle, sections: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The outcome's reasons (`outcome_reasons`, in their order) grouped by what explains them: a path between
    two NVLink domains or a node that every bad run of several failing checks crosses, named with the count of
    checks and the file and line of the narrowest bad run; then the checks that lack their evidence, one line
    per phase; each other reason on its own line, citing the file of the run it is about."""
    reasons = outcome_reasons(checks)
    by_id = {c.id: c for c in checks}
    runs = _runs(bundle, sections)
    run_of_file = {f: r.id for r in bundle.spec.runs for f in r.files}
    about = {x.check: _cited(by_id[x.check], run_of_file, runs) for x in reasons
             if x.severity is Severity.REQUIRED and x.status is Status.FAIL}
    groups: dict[str, dict[str, Any]] = {}  # by the first check each explains
    taken: dict[str, str] = {}
    while (cause := _best_cause({c: rs for c, rs in about.items() if c not in taken}, runs.values())) is not None:
        bad = sorted({r for c in cause.explains for r in about[c]}, key=lambda r: (len(r.nodes), r.run))
        shown = ", ".join(r.label for r in bad[:4]) + (f" and {len(bad) - 4} more runs" if len(bad) > 4 else "")
        where, many = ("crosses", "cross") if cause.kind == "path" else ("includes", "include")
        name = f"the {cause.name} path between NVLink domains" if cause.kind == "path" else f"node {cause.name}"
        passing = f"no passing run {where} it" if not cause.passing else \
            f"{cause.passing} passing run{f's {many}' if cause.passing != 1 else f' {where}'} it too"
        first = cause.explains[0]
        groups[first] = _line("FAIL", False, by_id[first].phase, first,
                              f"{name} explains {len(cause.explains)} failing checks: every bad run they judge "
                              f"{where} it ({shown}); {passing}", [r.where for r in bad[:2]], list(cause.explains))
        taken.update({c: first for c in cause.explains})
    out: list[dict[str, Any]] = []
    lacking: dict[str, dict[str, Any]] = {}
    for x in reasons:
        check = by_id[x.check]
        advisory = x.severity is not Severity.REQUIRED
        if x.check in taken:
            if taken[x.check] == x.check:
                out.append(groups[x.check])
            continue
        if check.absent:
            held = lacking.get(x.phase)
            if held is None:
                lacking[x.phase] = held = _line(x.status.value, advisory, x.phase, x.check, "", [], [])
                out.append(held)
            held["checks"].append(x.check)
            held["count"] = len(held["checks"])
            held["line"] = (f"{held['count']} check{'s' if held['count'] != 1 else ''} without evidence: the bundle "
                            f"holds none of what they judge (the cluster did not show it); first: {x.summary}"
                            if held["count"] > 1 else x.summary)
            continue
        own = about.get(x.check) or _cited(check, run_of_file, runs)
        cited = [r.where for r in own[:2]] if own else list(x.where[:1])
        out.append(_line(x.status.value, advisory, x.phase, x.check, x.summary, cited, [x.check]))
    return out
