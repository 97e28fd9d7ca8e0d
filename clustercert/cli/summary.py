"""The terminal summary of a certification, for a person at an 80-column terminal: the outcome and why first, one
line per workload, one line per phase with its counts, the failing checks with their findings, the notices; the full
check table only on request.

Every line fits the width it is given: wrapped, never cut."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["PER_PHASE", "check_list_lines", "check_table_rows", "counted", "notices", "profile_lines",
           "reason_lines", "reasons", "summary_lines", "suspect_lines", "why", "wrap"]

_ORDER = ("FAIL", "ERROR", "PASS", "SKIPPED")
# Failing checks shown per phase without --verbose: one fault often fails many checks of a phase (a slow link, every
# collective that crosses it), and the next phase's findings must not scroll out of sight behind them
PER_PHASE = 3


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """'1 step', '1,347 steps', '2 stretches' (with `plural`)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def wrap(text: str, width: int, indent: int = 2, hang: int = 5) -> list[str]:
    """`text` wrapped to `width`, indented by `indent` and its continuation lines by `hang` more; words whole, and a
    word longer than a line (a deep path) kept whole on a line of its own, as a path is copied."""
    import textwrap

    return textwrap.wrap(text, width, initial_indent=" " * indent, subsequent_indent=" " * (indent + hang),
                         break_long_words=False, break_on_hyphens=False) or [" " * indent]


def reasons(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Why the outcome is what it is: results.json's `reasons` (written by `clustercert.verdicts.outcome_reasons`:
    every failing or erroring check, the required ones first, each with the judge's one-clause summary of its
    finding and its evidence relative to the bundle), as {status, severity, phase, check, summary, where}."""
    # a finding of one check names the file and line of the run it is about (`clustercert.runs.findings`), where the
    # check's first evidence span may be another run's file (a sweep's first, healthy log)
    own = {str(f["check"]): [str(w) for w in f.get("where") or []] for f in results.get("findings") or []
           if isinstance(f, dict) and f.get("count") == 1 and f.get("where")}
    return [{"status": str(r.get("status", "")), "severity": str(r.get("severity", "required")),
             "phase": str(r.get("phase", "")), "check": str(r.get("check", "")), "summary": str(r.get("summary", "")),
             "where": own.get(str(r.get("check", ""))) or [str(w) for w in r.get("where") or []]}
            for r in results.get("reasons") or [] if isinstance(r, dict)]


def reason_lines(found: list[dict[str, Any]], width: int, per_phase: int | None = None) -> list[str]:
    """The reasons as a person reads them: `STATUS phase: finding [where it is]`, wrapped (never cut) to `width`
    under a hanging indent (`wrap`). With `per_phase`, a phase shows at most that many, each on a file none of the
    phase's reasons before it named first (one bad file fails many checks: a collapsed run, every collective it
    ran), and a finding on no file that the phase shows word for word (absent evidence: every check that needed
    it) is shown once with its count; a last line counts the rest."""
    import re

    shown: dict[str, set[str]] = {}
    hidden: Counter[str] = Counter()
    again = 0  # hidden reasons on a file shown above
    others: set[str] = set()  # the files of the other hidden reasons
    unfiled = 0  # hidden reasons on no file
    lines: list[str] = []
    # the same finding on no file, by phase: shown once, "(4 checks)"
    alike = Counter((r["phase"], r["status"], r["severity"], r["summary"]) for r in found if not r["where"])
    for r in found:
        phase = r["phase"]
        same = (phase, r["status"], r["severity"], r["summary"])
        # the file the finding is on, without its lines; a reason that names none is its finding's
        on = re.sub(r":\d+(-\d+)?$", "", r["where"][0]) if r["where"] else f"finding {same}"
        seen = shown.setdefault(phase, set())
        if per_phase is not None and not r["where"] and on in seen:
            continue  # counted on its line, shown or hidden
        if per_phase is not None and (len(seen) >= per_phase or on in seen):
            if not r["where"]:
                hidden[phase] += alike[same]
                unfiled += alike[same]
                seen.add(on)  # its like are counted here
                continue
            hidden[phase] += 1
            if on in seen:
                again += 1
            else:
                others.add(on)
            continue
        seen.add(on)
        advisory = " (advisory)" if r["severity"] != "required" else ""
        counted = f" ({alike[same]} checks)" if per_phase is not None and not r["where"] and alike[same] > 1 else ""
        text = f"{r['status']} {phase}{advisory}: {r['summary']}{counted}"
        where = r["where"][0] if r["where"] else ""
        if where and not r["summary"].startswith(where.split(":")[0]) and where not in r["summary"]:
            text += f" [{where}]"  # unless the finding names it already
        lines += wrap(text, width)
    if hidden:
        total = sum(hidden.values())
        places = [f"{again} on the files above"] if again else []
        if total > again + unfiled:
            places.append(f"{total - again - unfiled} on {len(others)} other file{'s' if len(others) != 1 else ''}")
        if unfiled:
            places.append(f"{unfiled} on no file")
        counts = ", ".join(f"{phase} {n}" for phase, n in hidden.items())
        lines += wrap(f"and {total} more, {' and '.join(places)} ({counts}): --verbose lists every one, report.html "
                      "explains each", width)
    return lines


def notices(results: dict[str, Any], *, dev_key: bool, redacted: bool) -> list[str]:
    """The cover's notices: synthetic evidence, illustrative (derived) baselines, a development key, a customer
    copy."""
    out = []
    cat = results.get("catalog") or {}
    if cat.get("shipped") is False:
        out.append(f"judged by catalog {cat.get('id')}, which is not a shipped catalog: {cat.get('chosen')}")
    if results.get("synthetic"):
        out.append("synthetic evidence: written by clustercert's simulator, not a real cluster")
    for w in results.get("workloads", []):
        if (w.get("baseline") or {}).get("illustrative"):
            out.append(f"{w['workload']} {w['precision'].upper()}: the baseline is derived (illustrative, not "
                       "published)")
    if dev_key:
        out.append("signed with a development key: run `clustercert keys init` for a real one")
    if redacted:
        out.append("customer copy (report.redacted.*): hostnames, users and pids pseudonymised")
    return out


def catalog_line(results: dict[str, Any]) -> str | None:
    """Which catalog judged, whether it is shipped, who chose it, and the baselines file given (None for a run that
    does not record it)."""
    cat = results.get("catalog") or {}
    if "shipped" not in cat:
        return None
    shipped = "a shipped catalog" if cat["shipped"] else "NOT a shipped catalog (its rules are its author's)"
    line = f"catalog: {cat['id']} {cat['version']}, {shipped}; {cat.get('chosen') or ''}".rstrip("; ")
    given = cat.get("baselines")
    if given:
        line += (f"; baselines: {given['file']} (sha256 {str(given['sha256'])[:16]}...), supplied by "
                 f"{given['supplied_by']} on {given['date']}")
    return line


def profile_lines(results: dict[str, Any], width: int) -> list[str]:
    """The profile judged and what it does not cover, so that no acceptance reads as a full certification (none for
    results.json written before profiles)."""
    profile = results.get("profile")
    if not profile:
        return []
    return wrap(f"Profile: {profile['title']} ({profile['id']}); not covered: {profile['not_covered']}", width,
                indent=0, hang=2)


def why(results: dict[str, Any]) -> str:
    """Why the outcome is what it is, in a few words: how many required checks pass, fail or could not be judged."""
    checks = results.get("checks", [])
    required = [c for c in checks if c["severity"] == "required"]
    failed = [c for c in required if c["status"] == "FAIL"]
    errors = [c for c in required if c["status"] == "ERROR"]
    outcome = results["outcome"]
    if outcome == "CERTIFIED":
        passed = sum(1 for c in required if c["status"] == "PASS")
        return f"all {passed} required checks pass"
    parts = []
    if failed:
        parts.append(f"{len(failed)} required check" + (" fails" if len(failed) == 1 else "s fail"))
    if errors:
        parts.append(f"{len(errors)} required check{'s' if len(errors) != 1 else ''} could not be judged "
                     "(ERROR)")
    return ", ".join(parts) or f"{outcome.lower()}"


def _num(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _workload_lines(w: dict[str, Any], width: int) -> list[str]:
    """One line: name, step time measured vs reference, delta and interval, status, in columns. Narrower than that
    line, the name and status first and the figures wrapped under them (the status is never cut off)."""
    step = (w.get("step_time_s") or {}).get("mean")
    base = (w.get("baseline") or {}).get("step_time_s")
    delta = w.get("delta_pct")
    interval = "" if w.get("ci_low_pct") is None else \
        f" ({_num(w.get('ci_low_pct'), '+.1f')}..{_num(w.get('ci_high_pct'), '+.1f')})"
    name = f"{w['workload']} {w['precision'].upper()} {w.get('gpus', '')}".strip()
    status = w.get("status", "")
    line = (f"  {name:<22}{_num(step, '7.2f')} s vs {_num(base, '7.2f')} s  "
            f"{_num(delta, '+.1f')} %{interval}  {status}")
    if len(line) <= width:
        return [line]
    return wrap(f"{name}  {status}: {_num(step, '.2f')} s vs {_num(base, '.2f')} s, {_num(delta, '+.1f')} %"
                f"{interval}", width)


def _phase_line(phase: str, checks: list[dict[str, Any]]) -> str:
    counts = Counter(c["status"] for c in checks)
    text = ", ".join(f"{counts[s]} {s.lower()}" for s in _ORDER if counts[s])
    return f"{phase:<12} {text}"


def summary_lines(results: dict[str, Any], paths: dict[str, str], *, dev_key: bool, redacted: bool,
                  width: int = 80, verbose: bool = False) -> list[str]:
    """The summary as lines of at most `width` characters, wrapped, never cut (but a run folder's path or a word
    longer than a line, printed whole). The failing checks: at most `PER_PHASE` of each phase, every one when
    `verbose`."""
    width = max(40, width)
    cluster = results.get("cluster", {}).get("name", "")
    head = f"Outcome: {results['outcome']}"
    if results.get("valid_until"):
        head += f" (valid until {results['valid_until']})"
    # a profile other than the full one heads the outcome: a network acceptance never reads as a full certification
    partial = (results.get("profile") or {}).get("id", "full") != "full"
    lines = [*(profile_lines(results, width) if partial else []), *wrap(f"{head}: {cluster}", width, indent=0, hang=2),
             *wrap(f"why: {why(results)}", width)]
    lines += reason_lines(reasons(results), width, None if verbose else PER_PHASE)
    workloads = results.get("workloads", [])
    if workloads:
        lines += wrap("Workloads (step time measured vs reference, delta and 95% interval, status)", width, indent=0,
                      hang=2)
        for w in workloads:
            lines += _workload_lines(w, width)
    # what judged: the full profile (named here, after the findings) and the catalog, shipped or not
    lines += [] if partial else profile_lines(results, width)
    if (judged := catalog_line(results)) is not None:
        lines += wrap(judged, width, indent=0, hang=2)
    phases: dict[str, list[dict[str, Any]]] = {}
    for c in results.get("checks", []):
        phases.setdefault(c["phase"], []).append(c)
    if phases:
        lines.append("Phases (checks by status)")
        for p, cs in phases.items():
            lines += wrap(_phase_line(p, cs), width)
    lines += suspect_lines(results, width, None if verbose else PER_PHASE)
    gaps = (results.get("profile") or {}).get("not_submitted", [])
    if gaps:
        lines.append("Not submitted (one line per phase)")
        lines += [line for gap in gaps for line in wrap(gap["line"], width)]
    found = notices(results, dev_key=dev_key, redacted=redacted)
    if found:
        lines.append("Notices")
        for n in found:
            lines += wrap(f"- {n}", width, hang=2)
    if paths:
        folders = {str(Path(p).parent) for p in paths.values()}
        current = "Written:"
        for name in (Path(p).name for p in paths.values()):
            if len(current) + 1 + len(name) + 1 > width:
                lines.append(current + ",")
                current = "  " + name
            else:
                current += (" " if current.endswith(":") else ", ") + name
        lines.append(current)
        lines += [f"  in {folder}" for folder in sorted(folders)]  # a path is printed whole, however long
    return lines


def suspect_lines(results: dict[str, Any], width: int, most: int | None = None) -> list[str]:
    """The suspect nodes (results.json `suspects`), one line each with its layers and first finding and where, at
    most `most` of them (all when None), and how many nodes no evidence covers; nothing when both are empty."""
    suspects = results.get("suspects") or {}
    nodes: list[dict[str, Any]] = suspects.get("nodes") or []
    unexamined: list[str] = suspects.get("unexamined") or []
    if not nodes and not unexamined:
        return []
    lines = wrap(f"Suspect nodes ({len(nodes)}, most layers of evidence first)", width, indent=0, hang=2) \
        if nodes else []
    for n in nodes[:most]:
        first = n["findings"][0]
        # where it is, when that fits on a line of its own under the hanging indent (the report names every one)
        where = f" ({first['where'][0]})" if first.get("where") and len(first["where"][0]) + 10 <= width else ""
        lines += wrap(f"{n['rank']}. {n['node']} [{', '.join(n['layers'])}]: {first['finding']}{where}"
                      + (f"; {counted(len(n['findings']) - 1, 'more finding')}" if len(n["findings"]) > 1 else ""),
                      width)
    if most is not None and len(nodes) > most:
        lines += wrap(f"and {counted(len(nodes) - most, 'more node')} (--verbose, or the report)", width)
    if unexamined:
        lines += wrap(f"Unexamined: {counted(len(unexamined), 'node')} of bundle.yaml no run lists and no finding "
                      f"names: {', '.join(unexamined[:most] if most is not None else unexamined)}"
                      + ("..." if most is not None and len(unexamined) > most else ""), width, indent=0, hang=2)
    return lines


def check_table_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(check, status, measured / target, delta) for every check: the --verbose table."""
    rows = []
    for c in results.get("checks", []):
        unit = c.get("unit") or ""
        measured = "–" if c["measured"] is None else f"{c['measured']:.4g}"
        target = "–" if c["target"] is None else f"{c['target']:.4g}"
        delta = "" if c["delta_pct"] is None else f"{c['delta_pct']:+.1f} %"
        if c.get("ci_low") is not None and c.get("ci_high") is not None:
            delta += f" ({c['ci_low']:+.1f}..{c['ci_high']:+.1f})"
        rows.append((c["id"], c["status"], f"{measured} / {target} {unit}".strip(), delta))
    return rows


def check_list_lines(results: dict[str, Any], width: int) -> list[str]:
    """The --verbose table narrower than 80 columns, where its columns would break words: each check's id on a line
    and its status, measured / target and delta under it, wrapped (an id longer than a line printed whole)."""
    width = max(40, width)
    lines = wrap(f"{results['cluster']['name']}: {results['outcome']} (status, measured / target, delta with its "
                 "95% interval)", width, indent=0, hang=2)
    for check, status, figures, delta in check_table_rows(results):
        lines.append(check)
        lines += wrap("  ".join(part for part in (status, figures, delta) if part), width, indent=2, hang=2)
    return lines
