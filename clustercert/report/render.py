"""Render results into a self-contained HTML report and its PDF; nothing but the run's own files is fetched."""

from __future__ import annotations

import io
import logging
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from clustercert.errors import RenderError
from clustercert.heap import keep, paused
from clustercert.report.sources import dotted, rule_rows, system_rows

__all__ = [
    "APPENDIX_CAP",
    "REPEAT_WORDS",
    "SPANS_PER_ITEM",
    "ReportInput",
    "breakable",
    "breakable_words",
    "build_context",
    "font_versions",
    "local_only_fetcher",
    "render_html",
    "render_pdf",
    "sentences",
]

APPENDIX_CAP = 200
SPANS_PER_ITEM = 3
TABLE_CAP = 60
BUSBW_CHART_CAP = 12
TEMPLATE = "report.html.j2"
CSS = "report.css"
PHASES = ("efficiency", "scaling", "resilience", "health")
# phases a report shows only where the run judged them (a bundle without node-health evidence has no health phase)
_SHOWN_WHEN_JUDGED = frozenset({"health"})


def _shown_phases(results: dict[str, Any]) -> list[str]:
    """The phases the report of `results` has a section for."""
    judged = {c["phase"] for c in results["checks"]} | set(results.get("phases") or {})
    return [name for name in PHASES if name not in _SHOWN_WHEN_JUDGED or name in judged]


def _appendix(groups: list[tuple[str, str, list[dict[str, Any]]]]) -> tuple[list[dict[str, Any]], int]:
    """Evidence spans grouped by what used them: every group keeps its anchor (so every link lands), at most
    SPANS_PER_ITEM spans each and APPENDIX_CAP rows in all; returns the groups and how many spans were left out."""
    out: list[dict[str, Any]] = []
    rows, omitted = 0, 0
    for anchor, used_by, spans in groups:
        room = max(0, min(SPANS_PER_ITEM, APPENDIX_CAP - rows))
        kept = spans[:room]
        rows += len(kept)
        omitted += len(spans) - len(kept)
        out.append({"anchor": anchor, "used_by": used_by, "spans": kept, "omitted": len(spans) - len(kept)})
    return out, omitted


def _check_anchor(check_id: str) -> str:
    return "ev-check-" + check_id


def _phase_context(name: str, results: dict[str, Any], checks: list[dict[str, Any]]) -> dict[str, Any]:
    import clustercert.report.charts as charts

    section = results.get("phases", {}).get(name)
    phase: dict[str, Any] = {"name": name, "checks": checks, "present": section is not None, "charts": [],
                             "notes": []}
    if section is None:
        return phase
    if name == "efficiency":
        phase["charts"] = charts.step_time_charts(section.get("step_series", []))
    elif name == "scaling":
        weak = section.get("weak_scaling", [])
        # Pairwise runs are many and alike: the pairs table (worst first) stands for them.
        every = section.get("collectives", [])
        collectives = [c for c in every if c.get("scope") != "pair"]
        if len(collectives) < len(every):
            phase["notes"].append(f"{len(every) - len(collectives)} pairwise collective tests are summarised in the "
                                  "pairs table; each is in results.json.")
        # failed pairs (no busbw) first, then degraded ones, slowest first; a failed pair has no number to sort by
        pairs = sorted(section.get("pairs", []), key=lambda p: (
            not p["degraded"], p["busbw_gbps"] is not None, p["busbw_gbps"] or 0.0))
        chart = charts.scaling_chart(weak, target=results.get("rules", {}).get("scaling_efficiency_min"))
        phase["charts"] = [c for c in [chart] if c is not None]
        # One chart per (scope, collective): its weakest run, the one an auditor needs to see.
        weakest: dict[tuple[str, str], dict[str, Any]] = {}
        for c in collectives:
            key = (str(c.get("scope")), str(c.get("collective")))
            value = c.get("large_busbw_gbps")
            held = weakest.get(key)
            if held is None or (value if value is not None else -1.0) < (
                    held["large_busbw_gbps"] if held.get("large_busbw_gbps") is not None else -1.0):
                weakest[key] = c
        # every failing (scope, collective) is drawn, then the others while the cap allows
        failing = [c for c in weakest.values() if c.get("status") == "FAIL"]
        drawn = failing + [c for c in weakest.values() if c.get("status") != "FAIL"][
            :max(0, BUSBW_CHART_CAP - len(failing))]
        phase["charts"] += charts.bus_bandwidth_charts(drawn)
        if len(collectives) > len(drawn):
            phase["notes"].append(f"Bus bandwidth is drawn for the weakest run of each scope and collective "
                                  f"({len(drawn)} charts); all {len(collectives)} tests are in the table.")
        phase["weak_scaling"] = weak
        phase["collectives"] = collectives
        phase["pairs"] = pairs[:TABLE_CAP]
        phase["pairs_total"] = len(pairs)
        phase["pairs_degraded"] = sum(1 for p in pairs if p["degraded"])
        phase["pairs_failed"] = sum(1 for p in pairs if p["busbw_gbps"] is None)
        phase["public_gates"] = section.get("public_gates", [])
        phase["reference_fit"] = section.get("reference_fit", [])
        phase["peer_targets"] = sum(1 for c in every if "peer median" in str(c.get("target_source", "")))
        phase["own_model"] = [c for c in collectives if "no published figure" in str(c.get("target_source", ""))]
        phase["pair_nodes"] = [n for n in section.get("pair_nodes", []) if n["bad_pairs"]][:TABLE_CAP]
        heatmap = charts.pair_heatmap_chart(section.get("pairs", []))
        if heatmap is not None:
            phase["charts"].append(heatmap)
        # A pair of nodes is tested by several collectives: count pairs, not tests.
        node_pairs = {tuple(sorted(p["nodes"])) for p in pairs}
        phase["pair_count"] = len(node_pairs)
        phase["pair_count_degraded"] = len({tuple(sorted(p["nodes"])) for p in pairs if p["degraded"]})
        phase["pair_collectives"] = sorted({str(p.get("collective") or "unnamed") for p in pairs})
    elif name == "health":
        nodes = section.get("nodes", [])
        phase["health_nodes"] = nodes[:TABLE_CAP]
        phase["health_nodes_total"] = len(nodes)
        phase["unexamined"] = section.get("unexamined", [])
    elif name == "resilience":
        goodput = section.get("goodput")
        stragglers = section.get("stragglers", [])
        events = sorted(section.get("events", []), key=lambda e: float(e["time_s"]))
        made = [charts.goodput_chart(goodput) if goodput else None,
                charts.straggler_map_chart(stragglers, results.get("rules", {}).get("straggler_score_min")),
                charts.event_timeline_chart(events)]
        phase["charts"] = [c for c in made if c is not None]
        phase["goodput"] = goodput
        phase["goodput_ml"] = section.get("goodput_ml")
        phase["stragglers"] = [{**s, "judged_score": charts.judged_score(s)} for s in stragglers
                               if s["flagged"]][:TABLE_CAP]
        phase["stragglers_total"] = len(stragglers)
        phase["events"] = events[:TABLE_CAP]
        phase["events_total"] = len(events)
        phase["records"] = {k: _records(section.get(k, [])) for k in ("stalls", "faults")}
    return phase


def _validation_rows(validation: dict[str, Any] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of the validation table: every table, up to APPENDIX_CAP of them. Beyond (a cluster's pairwise
    sweep is a table per file, thousands), the first APPENDIX_CAP tables with an expectation that did not pass,
    and one row per suite counting the others (each is in validation.json; every finding is in the table of
    expectations that did not pass)."""
    tables = [] if validation is None else list(validation.get("tables", []))
    if len(tables) <= APPENDIX_CAP:
        return tables, []
    listed = [t for t in tables if any(r["status"] != "PASS" for r in t["results"])][:APPENDIX_CAP]
    shown = {id(t) for t in listed}
    folded: dict[str, dict[str, Any]] = {}
    for t in tables:
        if id(t) in shown:
            continue
        row = folded.setdefault(t["suite"], {"suite": t["suite"], "tables": 0, "rows": 0, "results": 0,
                                             "passed": 0})
        row["tables"] += 1
        row["rows"] += int(t["rows"])
        row["results"] += len(t["results"])
        row["passed"] += sum(1 for r in t["results"] if r["status"] == "PASS")
    return listed, list(folded.values())


def _records(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A list of flat records as a table: columns in first-seen order with readable headings, values as text."""
    keys: list[str] = []
    for row in rows:
        for key in row:
            if key not in keys:
                keys.append(key)
    body = [[_cell(row.get(c)) for c in keys] for row in rows[:TABLE_CAP]]
    return {"columns": [heading(k) for k in keys], "rows": body, "total": len(rows)}


def heading(key: str) -> str:
    """A results.json key as a column heading: `time_to_restart_s` -> `Time to restart (s)`."""
    unit = ""
    for suffix, shown in (("_s", "s"), ("_gbps", "GB/s"), ("_pct", "%"), ("_bytes", "bytes")):
        if key.endswith(suffix):
            key, unit = key[: -len(suffix)], shown
            break
    words = key.replace("_", " ").strip()
    text = words[:1].upper() + words[1:]
    return f"{text} ({unit})" if unit else text


_LIST_SHOWN = 4


_ARGUMENT_ITEMS = 12  # a longer list in an expectation's arguments is shortened in the report


def _arguments(kwargs: Any) -> markupsafe.Markup:
    """An expectation's arguments as JSON (as Jinja's `tojson` writes it), each list longer than a cell holds (the
    value set of every host of a cluster, hundreds of names) shortened to its first and last items and a count:
    every argument is in validation.json."""
    def short(value: Any) -> Any:
        if isinstance(value, list) and len(value) > _ARGUMENT_ITEMS:
            return [*map(short, value[:_ARGUMENT_ITEMS - 2]),
                    f"... {len(value) - _ARGUMENT_ITEMS + 1} more in validation.json ...", short(value[-1])]
        if isinstance(value, dict):
            return {key: short(item) for key, item in value.items()}
        return value

    return jinja2.utils.htmlsafe_json_dumps(short(kwargs), sort_keys=True)


# What the report says once (and bench/check_render.py fails on when said more than twice): a sentence is a piece
# of prose ended by . ; : ! or ? and a space outside brackets (a formula's "domain: min(...)" is one piece), of
# REPEAT_WORDS words or more; shorter ones ("Fix bundle.yaml.") cost less to read again than a reference would.
REPEAT_WORDS = 8
_ENDS = frozenset(".;:!?")
_OPEN, _CLOSE = frozenset("([{"), frozenset(")]}")


def sentences(text: str) -> list[str]:
    """`text` cut into sentences as the report and its render check count them: after . ; : ! or ? and white space,
    outside brackets; each piece with its white space collapsed."""
    pieces: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(text):
        char = text[i]
        depth += (char in _OPEN) - (char in _CLOSE and depth > 0)
        if char in _ENDS and depth == 0 and i + 1 < len(text) and text[i + 1].isspace():
            pieces.append(text[start:i + 1])
            start = i + 1
        i += 1
    pieces.append(text[start:])
    return [" ".join(p.split()) for p in pieces if p.strip()]


def _say_once(items: list[tuple[str, str]], refer: Callable[[str], str]) -> list[str]:
    """The texts of `items` ((owner, text) in reading order), each sentence of REPEAT_WORDS words or more that an
    earlier owner's text already said replaced by `refer(that owner)`, once for a run of such sentences."""
    first: dict[str, str] = {}
    out: list[str] = []
    for owner, text in items:
        parts: list[str] = []
        for sentence in sentences(text):
            long = len(sentence.split()) >= REPEAT_WORDS
            said = first.get(sentence) if long else None
            if said is not None and said != owner:
                reference = refer(said)
                if not parts or parts[-1] != reference:
                    parts.append(reference)
            else:
                parts.append(sentence)
                if long:
                    first.setdefault(sentence, owner)
        out.append(" ".join(parts))
    return out


def _said_once(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Checks as the report prints them, in its order (phase by phase, then validation): a sentence of REPEAT_WORDS
    words or more that an earlier check's message already said (a remedy, a formula, a target's source) is replaced
    by a reference to that check. results.json keeps every message whole."""
    order = {name: i for i, name in enumerate(PHASES)}
    ordered = sorted(range(len(checks)), key=lambda i: order.get(str(checks[i]["phase"]), len(order)))
    said = _say_once([(str(checks[i]["id"]), str(checks[i]["message"])) for i in ordered],
                     lambda owner: f"(as in {owner}).")
    out = {i: {**checks[i], "message": text} for i, text in zip(ordered, said, strict=True)}
    return [out[i] for i in range(len(checks))]


def _findings_shown(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Page one's findings: findings that say the same of the same evidence are one line counting their checks,
    and a sentence an earlier finding said is "(as above)"."""
    merged: dict[tuple[object, ...], dict[str, Any]] = {}
    for f in findings:
        key = (f["status"], bool(f.get("advisory")), f["phase"], f["line"], tuple(f.get("where") or ()))
        held = merged.get(key)
        if held is None:
            merged[key] = {**f, "checks": list(f.get("checks") or [f["check"]]), "merged": 1}
        else:
            held["checks"] += list(f.get("checks") or [f["check"]])
            held["merged"] += 1
    shown = list(merged.values())
    lines = _say_once([(str(i), str(f["line"])) for i, f in enumerate(shown)], lambda owner: "(as above).")
    return [{**f, "line": line} for f, line in zip(shown, lines, strict=True)]


def _with_settings(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Checks whose configuration (`settings`, a recipe's values) the report shows as a key/value table under their
    one-line summary instead of the message's list; a check whose settings an earlier one showed refers to it."""
    shown: dict[tuple[tuple[str, str], ...], str] = {}
    out = []
    for check in checks:
        settings = check.get("settings")
        if not settings or not check.get("summary"):
            out.append(check)
            continue
        rows = tuple((str(k), str(v)) for k, v in settings.items())
        first = shown.setdefault(rows, str(check["id"]))
        same = f" (values as in {first})" if first != check["id"] else ""
        out.append({**check, "message": f"{check['summary']}{same}", "settings_rows": [] if same else list(rows)})
    return out


def _dotted_cells(value: Any) -> list[tuple[str, str]]:
    """`dotted` rows with each value as `_cell` writes it (an empty mapping: "none")."""
    return [(key, "none" if item == {} else _cell(item)) for key, item in dotted(value)]


def _cell(value: Any) -> str:
    """A value as a reader reads it: yes/no, numbers to 4 significant digits, lists as counted items."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        items = [_cell(v) for v in value]
        if len(items) <= _LIST_SHOWN:
            return ", ".join(items) if items else "none"
        return f"{len(items)}: {', '.join(items[:2])}, …, {items[-1]}"
    if isinstance(value, dict):
        return "; ".join(f"{heading(str(k))} {_cell(v)}" for k, v in value.items())
    return str(value)


@dataclass(frozen=True)
class ReportInput:
    """What a report shows (tests/golden/report_input.json holds one): results.json, the run's metadata, the
    system, the catalog's model names, sources and MLP kinds (`mlps`: a model id's `swiglu` or `non-gated`), the
    evidence inventory, the software record and validation.json."""

    results: dict[str, Any]
    meta: dict[str, Any]
    system: dict[str, Any]
    models: dict[str, str]
    sources: dict[str, dict[str, Any]]
    inventory: list[dict[str, Any]]
    software: dict[str, str]
    validation: dict[str, Any] | None = None
    mlps: dict[str, str] | None = None


def build_context(report: ReportInput, *, redacted: bool = False) -> dict[str, Any]:
    """Everything the template shows, from what the report shows (no clock, no I/O); `redacted`: the customers'
    copy. Methodology prints the MLP term of the FLOPs formula that the judged models use."""
    results, meta, validation = report.results, report.meta, report.validation
    notices = []
    catalog = results.get("catalog") or {}
    if catalog.get("shipped") is False:
        notices.append(f"judged by catalog {catalog['id']}, which is not a shipped catalog: its rules and targets are "
                       f"its author's ({catalog.get('chosen')}).")
    if results["synthetic"]:
        notices.append("the evidence is synthetic: written by clustercert's simulator, not by a real cluster.")
    for w in results["workloads"]:
        if w["baseline"]["illustrative"]:
            notices.append(f"the {w['workload']} {w['precision'].upper()} baseline is illustrative "
                           "(derived, not published; see Methodology).")
    if meta["dev_key"]:
        notices.append("signed with a development key created automatically; run `clustercert keys init`.")
    if redacted:
        notices.append("customer copy: hostnames, user names and process ids are replaced by stable pseudonyms; "
                       "the auditor's report keeps them.")
    groups: list[tuple[str, str, list[dict[str, Any]]]] = []
    by_id = {c["id"]: c for c in results["checks"]}
    for w in results["workloads"]:
        valid = by_id.get(f"efficiency.{w['run_used']}_valid")
        groups.append((f"ev-{w['run_used']}", f"{w['workload']} {w['precision'].upper()} (run {w['run_used']})",
                       list(valid["evidence"]) if valid else []))
    for check in results["checks"]:
        groups.append((_check_anchor(check["id"]), check["id"], list(check["evidence"])))
    shown_phases = _shown_phases(results)
    for name in shown_phases:
        spans = [e for c in results["checks"] if c["phase"] == name for e in c["evidence"]]
        groups.append((f"ev-phase-{name}", f"the {name} phase (all its checks)", spans))
    appendix, omitted = _appendix(groups)
    windows = sorted({f"{w['step_time_s']['window'][0]}–{w['step_time_s']['window'][1]}" for w in results["workloads"]})
    checks = _said_once(_with_settings(list(results["checks"])))
    phases = [_phase_context(name, results, [c for c in checks if c["phase"] == name]) for name in shown_phases]
    # what the user typed, so that it runs as printed (a catalog given as a path stays a path)
    command = f"clustercert certify {shlex.quote(str(meta['bundle_path']))}" + (
        "" if meta.get("catalog_arg") is None else f" --catalog {shlex.quote(str(meta['catalog_arg']))}") + (
        "" if meta.get("baselines_arg") is None else f" --baselines {shlex.quote(str(meta['baselines_arg']))}") + (
        "" if meta.get("profile", "full") == "full" else f" --profile {shlex.quote(str(meta['profile']))}")
    reasons = results.get("reasons", [])
    validation_tables, validation_folded = _validation_rows(validation)
    profile = results.get("profile")
    kinds: dict[str, list[dict[str, Any]]] = {"published": [], "supplied": [], "derived": []}
    for w in results["workloads"]:
        base = w["baseline"]
        kinds[base.get("kind") or ("derived" if base["illustrative"] else "published")].append(w)
    return {
        "baseline_kinds": kinds,
        "cover_title": _COVER_TITLES.get(str((profile or {}).get("id")), "GPU cluster certification"),
        "profile": profile,
        "findings": _findings_shown(results.get("findings") or [_finding_of(x) for x in reasons]),
        "signer": meta.get("signer_identity"),
        "mlp_term": _mlp_term(report.mlps, [str(w["workload"]) for w in results["workloads"]]),
        "r": _with_defaults(results),
        "reasons": reasons,
        "meta": meta,
        "system": report.system,
        "models": report.models,
        "sources": report.sources,
        "inventory": report.inventory[:APPENDIX_CAP],  # every file with its sha256 is in the signed manifest.json
        "inventory_total": len(report.inventory),
        "software": report.software,
        "notices": notices,
        "phases": phases,
        "suspects": _suspects_context(results.get("suspects")),
        "validation": validation,
        "validation_tables": validation_tables,
        "validation_folded": validation_folded,
        # the validation's own checks (a failed required expectation, parse warnings), shown in its section: the
        # reasons link to every check that is not PASS
        "validation_checks": [c for c in results["checks"] if c["phase"] == "validation"],
        "window_text": ", ".join(windows) or "of each baseline's window",
        "appendix": appendix,
        "appendix_omitted": omitted,
        "appendix_cap": APPENDIX_CAP,
        "spans_per_item": SPANS_PER_ITEM,
        "table_cap": TABLE_CAP,
        "rule_rows": rule_rows(results.get("rules", {})),
        "unusable_tests": sum(1 for c in (results.get("phases", {}).get("scaling") or {}).get("collectives", [])
                              if c.get("large_busbw_gbps") is None),
        "system_rows": system_rows(results.get("system_under_test") or {}),
        "command": command,
        "redacted": redacted,
    }


def _suspects_context(suspects: dict[str, Any] | None) -> dict[str, Any] | None:
    """The suspect list as the report shows it (the first TABLE_CAP nodes, each finding with its first places);
    None where there is nothing to show (no suspect, no unexamined node, or a run from before the list)."""
    if not suspects or not (suspects.get("nodes") or suspects.get("unexamined")):
        return None
    nodes = suspects.get("nodes") or []
    return {"nodes": nodes[:TABLE_CAP], "total": len(nodes), "unexamined": suspects.get("unexamined") or []}


# A profile that is not the full certification never reads as one: its own title heads the first page.
_COVER_TITLES = {"full": "GPU cluster certification", "network": "GPU cluster network acceptance",
                 "health": "GPU cluster node health"}


def _finding_of(reason: dict[str, Any]) -> dict[str, Any]:
    """One reason as a finding of its own (results.json written before findings were grouped)."""
    return {"status": reason["status"], "advisory": reason.get("severity") == "advisory", "phase": reason["phase"],
            "check": reason["check"], "line": reason["summary"], "where": list(reason.get("where") or [])[:1],
            "checks": [reason["check"]]}


_MLP_TERMS = {"swiglu": "18 L f h k", "non-gated": "12 L f h k"}
_MLP_NAMES = {"swiglu": "gated (SwiGLU) MLP, three h × f matrices", "non-gated": "non-gated MLP, two h × f matrices"}


def _mlp_term(mlps: dict[str, str] | None, workloads: list[str]) -> str:
    """The MLP term of the FLOPs formula for the judged models (both forms, named, when they differ)."""
    kinds = sorted({mlps[w] for w in workloads if mlps is not None and w in mlps})
    if len(kinds) == 1 and kinds[0] in _MLP_TERMS:
        return _MLP_TERMS[kinds[0]] if kinds[0] == "swiglu" else f"{_MLP_TERMS[kinds[0]]} ({_MLP_NAMES[kinds[0]]})"
    return "M L f h k (M = 18 for a gated (SwiGLU) MLP, three h × f matrices; 12 for a non-gated one, two)"

def _with_defaults(results: dict[str, Any]) -> dict[str, Any]:
    """results.json written before a field existed renders with that field empty, not an error."""
    out = dict(results)
    rules = out.get("rules", {})
    out.setdefault("pass_rule", f"every suite workload's step-time ratio t_baseline / t_measured > "
                                f"{rules.get('pass_ratio', 0.95)}, and every other required check passes")
    for key in ("evidence_window", "validity_basis", "system_under_test"):
        out.setdefault(key, None)
    workloads = []
    for w in out.get("workloads", []):
        w = dict(w, baseline={"source_url": None, "source_table": None, **w["baseline"]})
        base = float(w["baseline"]["step_time_s"])
        w["repeats"] = [{"delta_pct": 100.0 * (base / float(r["step_time_s"]) - 1.0),
                         "used": r["run"] == w["run_used"], **r} for r in w["repeats"]]
        workloads.append(w)
    out["workloads"] = workloads
    return out


def breakable(text: object) -> markupsafe.Markup:
    """`text` escaped, with a line-break opportunity after each . _ / , : so long ids and paths wrap in tables."""
    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(re.sub(r"([._/,:])", r"\1<wbr>", escaped))


_LONG_WORD = re.compile(r"\S{25,}")  # a word longer than a narrow cell holds: a path, a joined list of run ids


def breakable_words(text: object) -> markupsafe.Markup:
    """`text` escaped, with `breakable`'s line-break opportunities in its long words only (a message's paths and
    run ids), so that its numbers and prose keep their characters as written ("0.90", not "0.<wbr>90")."""
    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(_LONG_WORD.sub(lambda word: re.sub(r"([._/,:])", r"\1<wbr>", word.group(0)), escaped))


# a check's message in a table cell: past this a cell outgrows its page (a message listing every unusable run)
MESSAGE_CHARS = 800


def message_cell(text: object) -> markupsafe.Markup:
    """A check's message as its table cell shows it: `breakable_words`, cut after MESSAGE_CHARS characters with
    a note that results.json holds it whole, so that no cell runs over a printed page."""
    whole = str(text)
    if len(whole) <= MESSAGE_CHARS:
        return breakable_words(whole)
    cut = whole[:MESSAGE_CHARS].rsplit(" ", 1)[0]
    return breakable_words(f"{cut} … ({len(whole) - len(cut)} more characters: the whole message is in "
                           "results.json)")


def number(value: float | None, fmt: str, scale: float = 1.0) -> str:
    """`fmt % (value * scale)`, or an en dash where the evidence gave no value."""
    return "–" if value is None else fmt % (value * scale)


def render_html(context: dict[str, Any], templates_dir: Path) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["breakable"] = breakable
    env.filters["breakable_words"] = breakable_words
    env.filters["message_cell"] = message_cell
    env.filters["num"] = number
    env.filters["cell"] = _cell
    env.filters["dotted"] = _dotted_cells
    env.filters["arguments"] = _arguments
    try:
        css = (templates_dir / CSS).read_text(encoding="utf-8")
        return env.get_template(TEMPLATE).render(css=css, **context)
    except (OSError, jinja2.TemplateError) as exc:
        raise RenderError(f"{templates_dir / TEMPLATE}: cannot render the report ({exc})") from None


def local_only_fetcher(base_dir: Path) -> Any:
    """A WeasyPrint URL fetcher that serves data: URLs and files under `base_dir`, and refuses everything else."""
    from weasyprint.urls import URLFetcher

    root = base_dir.resolve()

    class LocalOnly(URLFetcher):  # type: ignore[misc]
        def fetch(self, url: str, headers: Any = None) -> Any:
            if url.startswith("data:"):
                return super().fetch(url, headers)
            if url.startswith("file://"):
                path = Path(url[len("file://"):].split("?")[0]).resolve()
                if path == root or root in path.parents:
                    return super().fetch(url, headers)
            raise ValueError(f"clustercert blocks fetching {url[:80]}")

    return LocalOnly()


def render_pdf(html: str, base_dir: Path, progress: Callable[[str], None] | None = None) -> bytes:
    """The unsigned PDF of `html`; only data: URLs and files under `base_dir` may be fetched. `progress` is told
    each of WeasyPrint's two steps as it starts: the layout ("lay out the pages", most of a report's seconds), then
    the drawing of the pages it made ("write N pages").

    Its bytes depend only on `html` and the software image: WeasyPrint takes the dates from the document's
    dcterms.created meta (the run's start) and derives the file identifier from the content.
    """
    from weasyprint import HTML

    root = base_dir.resolve()
    # Each <wbr> (a line-break opportunity: `breakable`) becomes the zero-width space that WeasyPrint's own style
    # sheet draws for it (`wbr::before { content: "\200B" }`), so the PDF holds the same characters. Written as the
    # character, it is a break opportunity in the text itself instead of an inline box of its own: thousands of
    # such boxes made a large part of the layout's work, and WeasyPrint missed some of those breaks, cutting words
    # where it could not find one ("recipe_conf" / "orms" instead of "recipe_" / "conforms"). A literal "<wbr>" is
    # always the element: text and attribute values carry "<" escaped.
    html = html.replace("<wbr>", "\u200b")
    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    buffer = io.BytesIO()
    # No cyclic garbage collection while WeasyPrint lays the document out: the layout tree it builds (millions of
    # objects, alive until the PDF is written) sets off full collections that traverse it and every other object
    # of the run, again and again, and find nothing to free; the peak memory of a render is about the same without
    # them. Inside a certification (`heap.settling`), what the layout leaves in cycles once the PDF is written is
    # left frozen to the run's end (`keep`) instead of collected when the collector resumes, a collection that would
    # traverse the whole run. It holds what the layout held, no more (the report stage's peak memory stays below the
    # run's), is given back when the run ends, and a command's exit frees it without a collection
    # (`cli.app.entry`).
    tell = progress or (lambda what: None)
    try:
        with paused():
            tell("lay out the pages")
            # HTML.write_pdf() is render() then Document.write_pdf() with the same (default) options: the same bytes
            document = HTML(string=html, base_url=str(root) + "/", url_fetcher=local_only_fetcher(root)).render()
            tell(f"write {len(document.pages)} pages")
            document.write_pdf(buffer)
            del document
            keep()
    except Exception as exc:  # WeasyPrint raises many kinds; the user needs one line
        raise RenderError(f"{base_dir}: cannot write the PDF ({exc.__class__.__name__}: {exc})") from None
    return buffer.getvalue()


def font_versions() -> dict[str, str]:
    """The fonts the report uses and their versions (HTML/PDF text through fontconfig; charts through matplotlib)."""
    import shutil
    import subprocess

    from fontTools.ttLib import TTFont
    from matplotlib import font_manager

    def version(path: str) -> str:
        try:
            with TTFont(path, lazy=True) as font:
                name = font["name"].getDebugName(5) or "unknown version"
        except Exception:  # an unreadable font file is recorded as such
            name = "unreadable"
        return f"{name} ({Path(path).name})"

    out: dict[str, str] = {}
    fc_match = shutil.which("fc-match")
    for family in ("DejaVu Sans", "DejaVu Sans Mono"):
        path = ""
        if fc_match:
            done = subprocess.run([fc_match, "-f", "%{file}", family], capture_output=True, text=True, check=False)
            path = done.stdout.strip()
        out[f"font {family} (report)"] = version(path) if path else "not found by fontconfig"
    out["font DejaVu Sans (charts)"] = version(font_manager.findfont("DejaVu Sans", fallback_to_default=False))
    from weasyprint.text import ffi

    # Without libharfbuzz-subset, WeasyPrint subsets fonts another way and PDFs are not byte-identical.
    out["libharfbuzz-subset"] = "present" if getattr(ffi, "harfbuzz_subset", None) is not None else "absent"
    return out
