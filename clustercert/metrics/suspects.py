"""One ranked list of suspect nodes across the layers of evidence: the pairwise sweep's degraded pairs, the
straggler detector's slow ranks, the node-health findings and the resilience run's excluded or replaced nodes,
merged per node with each finding's evidence (file:line); the bundle's nodes no evidence covers are unexamined."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LAYERS", "SuspectInputs", "rank_suspects"]

# the layers in the order a node's findings are listed
LAYERS = ("network", "straggler", "health", "resilience")
_HEALTH_RANK = {"FAIL": 3, "ERROR": 2, "WARN": 1}
# how strongly a finding of each layer points at the node: a measured fault (a degraded pair, a slow GPU) as strongly
# as a failed health unit; the resilience run's exclusion least, as the cluster has acted on that node already
_WEIGHT = {"network": 3, "straggler": 3, "resilience": 1}
_PAIR_CHECK = "scaling.pairs_no_degraded_link"
_STRAGGLER_CHECK = "resilience.stragglers_detected_and_handled"


@dataclass(frozen=True)
class SuspectInputs:
    """What the list is drawn from: the bundle's nodes, the nodes some run lists (bundle.yaml `nodes`), each run's
    first file by run id (as the checks name files), the phases' sections and every check as results.json holds
    them."""

    nodes: Sequence[str]
    covered: frozenset[str]
    run_files: Mapping[str, str]
    sections: Mapping[str, Mapping[str, Any] | None]
    checks: Sequence[Mapping[str, Any]]


@dataclass
class _Suspect:
    findings: list[dict[str, Any]] = field(default_factory=list)
    weight: int = 0  # the strongest finding's (_WEIGHT, _HEALTH_RANK)

    def add(self, layer: str, finding: str, where: Iterable[str], weight: int | None = None) -> None:
        self.findings.append({"layer": layer, "finding": finding, "where": list(where)})
        self.weight = max(self.weight, _WEIGHT[layer] if weight is None else weight)


def _where(span: Mapping[str, Any]) -> str:
    first, last = int(span.get("line") or 0), int(span.get("last") or 0)
    if first <= 0:
        return str(span["file"])
    return f"{span['file']}:{first}" + (f"-{last}" if last > first else "")


def rank_suspects(given: SuspectInputs) -> dict[str, Any]:
    """The suspect nodes, most layers first (then the strongest finding, the most findings, the name), each
    with its findings by layer and where each is; and the unexamined nodes (no run lists them, no finding
    names them)."""
    found: dict[str, _Suspect] = {}
    spans = {c["id"]: list(c.get("evidence") or []) for c in given.checks}
    _network(given.sections.get("scaling") or {}, given.run_files, spans.get(_PAIR_CHECK, []), found)
    _stragglers(given.sections.get("resilience") or {}, spans.get(_STRAGGLER_CHECK, []), found)
    _health(given.sections.get("health") or {}, found)
    _excluded(given.sections.get("resilience") or {}, found)
    keyed: list[tuple[tuple[int, int, int, str], str, list[str], list[dict[str, Any]]]] = []
    for node, s in found.items():
        layers = [layer for layer in LAYERS if any(f["layer"] == layer for f in s.findings)]
        s.findings.sort(key=lambda f: LAYERS.index(f["layer"]))
        keyed.append(((-len(layers), -s.weight, -len(s.findings), node), node, layers, s.findings))
    rows = [{"rank": rank, "node": node, "layers": layers, "findings": findings}
            for rank, (_, node, layers, findings) in enumerate(sorted(keyed), start=1)]
    named = set(found) | _named_in(given.sections)
    unexamined = [n for n in given.nodes if n not in given.covered and n not in named]
    return {"nodes": rows, "unexamined": unexamined}


def _network(scaling: Mapping[str, Any], run_files: Mapping[str, str], pair_spans: list[Mapping[str, Any]],
             found: dict[str, _Suspect]) -> None:
    """Each node of a failed or degraded pair, and the sweep's suspect nodes (in most of their pairs' failures)."""
    for row in scaling.get("pairs") or []:
        if not row.get("degraded"):
            continue
        nodes = list(row.get("nodes") or [])
        file = run_files.get(str(row.get("run")))
        where = [_where(s) for s in pair_spans if s.get("file") == file][:1] or ([file] if file else [])
        busbw, share = row.get("busbw_gbps"), row.get("fraction_of_median")
        measured = ("failed" if busbw is None else f"{busbw:.1f} GB/s" + (
            f", {share:.0%} of the median of its peers" if share is not None else ""))
        for node in nodes:
            others = [n for n in nodes if n != node]
            found.setdefault(node, _Suspect()).add(
                "network", f"{row.get('collective') or 'pair'} test with {', '.join(others) or 'itself'}: {measured}",
                where)
    for row in scaling.get("pair_nodes") or []:
        if row.get("suspect"):
            found.setdefault(str(row["node"]), _Suspect()).add(
                "network", f"in {row['bad_pairs']} of its {row['pairs']} pairs' failures (the node, not a link)", [])


def _stragglers(resilience: Mapping[str, Any], straggler_spans: list[Mapping[str, Any]],
                found: dict[str, _Suspect]) -> None:
    """Each flagged rank's node, with its GPU, rank and relative score."""
    where = [_where(s) for s in straggler_spans[:1]]
    for row in resilience.get("stragglers") or []:
        if not row.get("flagged") or row.get("node") is None:
            continue
        score = row.get("relative_score")
        shown = "" if score is None else f", relative score {score:.3f}"
        found.setdefault(str(row["node"]), _Suspect()).add(
            "straggler", f"GPU {row.get('gpu')} (rank {row.get('rank')}) slow{shown}", where)


def _health(health: Mapping[str, Any], found: dict[str, _Suspect]) -> None:
    """Each node's health findings that are a fault (FAIL, ERROR, WARN; a skipped test is not examined, no fault)."""
    for row in health.get("nodes") or []:
        bad = [f for f in row.get("findings") or [] if f.get("status") in _HEALTH_RANK]
        if not bad:
            continue
        suspect = found.setdefault(str(row["node"]), _Suspect())
        for f in bad:
            line = int(f.get("line") or 0)
            suspect.add("health", f"{f['status']} {f['unit']['name']} {f['check']}: {f['reason']}",
                        [f"{f['file']}:{line}" if line > 0 else str(f["file"])], _HEALTH_RANK[str(f["status"])])


def _excluded(resilience: Mapping[str, Any], found: dict[str, _Suspect]) -> None:
    """The nodes the resilience run's job excluded or replaced (the cluster's own finding)."""
    for event in resilience.get("events") or []:
        if event.get("type") in ("node-excluded", "node-replaced") and event.get("node"):
            line = int(event.get("line") or 0)
            where = [f"{event['file']}:{line}" if event.get("file") and line > 0 else str(event.get("file") or "")]
            found.setdefault(str(event["node"]), _Suspect()).add(
                "resilience", f"{str(event['type']).replace('-', ' ')} at {float(event['time_s']):.0f} s"
                + (f" ({event['detail']})" if event.get("detail") else ""), [w for w in where if w])


def _named_in(sections: Mapping[str, Mapping[str, Any] | None]) -> set[str]:
    """Every node a phase's section names (a pair, a ranked GPU, a health file, an event)."""
    scaling = sections.get("scaling") or {}
    resilience = sections.get("resilience") or {}
    health = sections.get("health") or {}
    named = {str(n) for row in scaling.get("pairs") or [] for n in row.get("nodes") or []}
    named |= {str(row["node"]) for row in resilience.get("stragglers") or [] if row.get("node")}
    named |= {str(e["node"]) for e in resilience.get("events") or [] if e.get("node")}
    named |= {str(row["node"]) for row in health.get("nodes") or []}
    return named
