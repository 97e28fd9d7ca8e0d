"""The health phase: each node's health verdicts (references/health-rules.yaml) judged into one check per node,
with the section the report shows; decisive only where the catalog's rules require the phase."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from clustercert.catalog import LoadedCatalog
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, Phase, RunKind
from clustercert.evidence.provenance import Span
from clustercert.health import HealthRules, HealthVerdict, Unit, judge_health, worst
from clustercert.phases import PhaseResult
from clustercert.verdicts import Check, DeclaredCheck, Severity, Status

__all__ = ["PHASE", "judge_health_phase", "phase_asked"]

PHASE = "health"
# findings a node's check names in its message, and keeps in the section (all are counted)
_NAMED = 5
_KEPT = 50
_RANK = {Status.FAIL: 0, Status.ERROR: 1, Status.WARN: 2, Status.SKIPPED: 3, Status.PASS: 4}


@dataclass
class _Node:
    """What one node's health files gave: every verdict, and the files read."""

    verdicts: list[HealthVerdict] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)


def phase_asked(bundle: LoadedBundle, catalog: LoadedCatalog) -> bool:
    """Whether the health phase has anything to judge: a health run in the bundle, or a profile of the catalog in
    which node health missing is a FAIL (the shipped profiles judge it when it is submitted)."""
    if any(r.phase is Phase.HEALTH for r in bundle.spec.runs):
        return True
    return any(Phase.HEALTH.value in p.phases and p.missing == "fail" and Phase.HEALTH.value not in p.when_present
               for p in catalog.spec.profiles.values())


def judge_health_phase(bundle: LoadedBundle, catalog: LoadedCatalog, parsed: Mapping[str, object | EvidenceError],
                       rules: HealthRules) -> PhaseResult:
    """One check per node from its health runs' verdicts (the worst decides: a skipped test leaves the node
    SKIPPED, an unreadable file ERROR, never a pass), whether every node of the bundle was examined, and the
    section; no check and an empty section for a bundle without health runs whose catalog does not ask for them."""
    required = catalog.spec.judges(Phase.HEALTH)
    severity = Severity.REQUIRED if required else Severity.ADVISORY
    runs = [r for r in bundle.spec.runs if r.kind is RunKind.HEALTH]
    checks: list[Check] = []
    if required:
        checks.append(_declared(f"{PHASE}.evidence_present", "The bundle holds node-health evidence",
                                Severity.REQUIRED).judged(
            Status.PASS if runs else Status.FAIL,
            f"{len(runs)} health run(s)" if runs else "the bundle has no run of phase health: the cluster did not "
            "show its nodes' health. Add each node's nvidia-smi -q, dcgmi diag, ibstat, kernel log or the Exemplar "
            "prescreen (kind health)"))
    if not runs and not required:
        return PhaseResult(checks=[], section={})
    nodes: dict[str, _Node] = {}
    for run in runs:
        node = (run.nodes or ["?"])[0]
        held = nodes.setdefault(node, _Node())
        held.files += [bundle.shown(rel) for rel in run.files]
        held.formats.append(run.format)
        held.verdicts += _verdicts_of(parsed.get(run.id), node, bundle.shown(run.files[0]), rules)
    rows = []
    for node in sorted(nodes, key=lambda n: (_RANK[worst([v.status for v in nodes[n].verdicts])], n)):
        check, row = _node_check(node, nodes[node], severity)
        checks.append(check)
        rows.append(row)
    unexamined = [n for n in bundle.spec.system.nodes if n not in nodes]
    checks.append(_examined_check(len(bundle.spec.system.nodes), unexamined, severity))
    return PhaseResult(checks=checks, section={"nodes": rows, "unexamined": unexamined,
                                               "required": required})


def _declared(check_id: str, title: str, severity: Severity) -> DeclaredCheck:
    return DeclaredCheck(check_id, title, PHASE, severity)


def _verdicts_of(table: object | EvidenceError, node: str, shown: str, rules: HealthRules) -> list[HealthVerdict]:
    """A run's verdicts on `node`; a file that cannot be read is one ERROR, and an output that names another host
    than bundle.yaml gives it is one ERROR (its verdicts would be put on the wrong node)."""
    here = Unit.node("evidence file")
    if table is None:
        return [HealthVerdict(here, "evidence.missing", Status.ERROR, "the run was not parsed", shown, 0,
                              "clustercert", node)]
    if isinstance(table, EvidenceError):
        return [HealthVerdict(here, "evidence.unreadable", Status.ERROR, f"cannot be read: {table.message}",
                              table.file or shown, table.line or 0, "clustercert", node)]
    verdicts = judge_health(table, rules)
    named = sorted({v.node for v in verdicts if v.node is not None and v.node != node})
    out = [HealthVerdict(v.unit, v.check, v.status, v.reason, v.file, v.line, v.source, node) for v in verdicts]
    if named:
        out.append(HealthVerdict(here, "evidence.host", Status.ERROR, f"the output names host {', '.join(named)}, "
                                 f"bundle.yaml says node {node}: fix the run's nodes", shown, 1, "clustercert", node))
    return out


def _where(v: HealthVerdict) -> str:
    return f"{v.file}:{v.line}" if v.line > 0 else v.file


def _node_check(node: str, held: _Node, severity: Severity) -> tuple[Check, dict[str, object]]:
    """The node's check (its worst verdict's status) and its section row."""
    status = worst([v.status for v in held.verdicts]) if held.verdicts else Status.ERROR
    # what is wrong with the evidence itself (unreadable, another host's) first: it qualifies every other finding
    found = sorted((v for v in held.verdicts if v.status is not Status.PASS),
                   key=lambda v: (not v.check.startswith("evidence."), _RANK[v.status]))
    title = (f"Node {node}: every GPU, NVLink and port its health outputs show is healthy by the health rules "
             "(a skipped or unrun test is never a pass)")
    if not held.verdicts:
        message = f"{', '.join(held.files)}: no unit judged, so the node's health is not shown"
    elif found:
        named = "; ".join(f"{v.status.value} {v.unit.name} {v.check}: {v.reason} ({_where(v)})"
                          for v in found[:_NAMED])
        more = f"; and {len(found) - _NAMED} more" if len(found) > _NAMED else ""
        message = f"{len(found)} of {len(held.verdicts)} unit verdict(s) not healthy: {named}{more}"
    else:
        message = f"{len(held.verdicts)} unit verdict(s), all healthy ({', '.join(sorted(set(held.formats)))})"
    evidence = ([Span(v.file, v.line, v.line, 1) for v in found[:_KEPT] if v.line > 0]
                or [Span(f, 0, 0, 0) for f in held.files])
    summary = f"{node}: {found[0].unit.name} {found[0].reason}" if found else None
    check = _declared(f"{PHASE}.{node}_healthy", title, severity).judged(
        status, message, measured=float(len(found)), target=0.0, unit="findings", evidence=evidence,
        summary=summary)
    row: dict[str, object] = {
        "node": node, "status": status.value, "units": len(held.verdicts), "files": held.files,
        "formats": sorted(set(held.formats)), "findings": [v.to_json() for v in found[:_KEPT]],
        "findings_total": len(found),
    }
    return check, row


def _examined_check(total: int, unexamined: Sequence[str], severity: Severity) -> Check:
    """Every node of bundle.yaml has health evidence: a node without any was not shown healthy."""
    declared = _declared(f"{PHASE}.every_node_examined", "Every node of bundle.yaml has node-health evidence",
                         severity)
    if not unexamined:
        return declared.judged(Status.PASS, f"all {total} node(s) have health evidence", measured=0.0, target=0.0,
                               unit="nodes")
    shown = ", ".join(unexamined[:10]) + (f" and {len(unexamined) - 10} more" if len(unexamined) > 10 else "")
    status = Status.FAIL if severity is Severity.REQUIRED else Status.WARN
    return declared.judged(status, f"{len(unexamined)} of {total} node(s) have no health evidence: {shown}. Add "
                           "their health outputs (or the prescreen) to the bundle", measured=float(len(unexamined)),
                           target=0.0, unit="nodes", summary=f"{len(unexamined)} node(s) without health evidence")
