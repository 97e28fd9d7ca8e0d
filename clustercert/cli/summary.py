"""The terminal summary of a certification, for a person at an 80-column terminal: the outcome and why first, one
line per workload, one line per phase with its counts, the failing checks with their findings, the notices; the full
check table only on request. Every line fits the width it is given."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["check_table_rows", "notices", "reasons", "summary_lines"]

_ORDER = ("FAIL", "ERROR", "PASS", "SKIPPED")
_BAD = ("FAIL", "ERROR")


def _fit(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters (cut with an ellipsis)."""
    flat = " ".join(part.strip() if i else part.rstrip() for i, part in enumerate(text.splitlines())).rstrip()
    return flat if len(flat) <= width else flat[: max(1, width - 1)] + "…"


def _where(check: dict[str, Any]) -> str:
    evidence = check.get("evidence") or []
    if not evidence:
        return ""
    first = evidence[0]
    line = first.get("line")
    return f"{first.get('file', '')}" + (f":{line}" if line is not None else "")


def reasons(results: dict[str, Any]) -> list[str]:
    """Why the outcome is what it is: one line per failing or erroring check, the required ones first, each naming
    where its evidence is. Uses results.json's own `reasons` list when it has one."""
    given = results.get("reasons")
    if isinstance(given, list) and all(isinstance(r, str) for r in given):
        return list(given)
    bad = [c for c in results.get("checks", []) if c["status"] in _BAD]
    bad.sort(key=lambda c: (c["severity"] != "required", _ORDER.index(c["status"])))
    out = []
    for c in bad:
        where = _where(c)
        message = str(c.get("message") or c.get("title") or "")
        located = "" if not where or message.startswith(where.split(":")[0]) else f" [{where}]"
        out.append(f"{c['status']} {c['id']}: {message}{located}")
    return out


def notices(results: dict[str, Any], *, dev_key: bool, redacted: bool) -> list[str]:
    """The cover's notices: synthetic evidence, illustrative (derived) baselines, a development key, a customer
    copy."""
    out = []
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


def _why(results: dict[str, Any]) -> str:
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


def _workload_line(w: dict[str, Any]) -> str:
    step = (w.get("step_time_s") or {}).get("mean")
    base = (w.get("baseline") or {}).get("step_time_s")
    delta = w.get("delta_pct")
    interval = "" if w.get("ci_low_pct") is None else \
        f" ({_num(w.get('ci_low_pct'), '+.1f')}..{_num(w.get('ci_high_pct'), '+.1f')})"
    name = f"{w['workload']} {w['precision'].upper()} {w.get('gpus', '')}".strip()
    return (f"{name:<22}{_num(step, '7.2f')} s vs {_num(base, '7.2f')} s  "
            f"{_num(delta, '+.1f')} %{interval}  {w.get('status', '')}")


def _phase_line(phase: str, checks: list[dict[str, Any]]) -> str:
    counts = Counter(c["status"] for c in checks)
    text = ", ".join(f"{counts[s]} {s.lower()}" for s in _ORDER if counts[s])
    return f"{phase:<12} {text}"


def summary_lines(results: dict[str, Any], paths: dict[str, str], *, dev_key: bool, redacted: bool,
                  width: int = 80) -> list[str]:
    """The summary as lines of at most `width` characters."""
    width = max(40, width)
    cluster = results.get("cluster", {}).get("name", "")
    head = f"Outcome: {results['outcome']}"
    if results.get("valid_until"):
        head += f" (valid until {results['valid_until']})"
    lines = [_fit(f"{head}: {cluster}", width), _fit(f"  why: {_why(results)}", width)]
    lines += [_fit(f"  {r}", width) for r in reasons(results)]
    workloads = results.get("workloads", [])
    if workloads:
        lines.append("Workloads (step time measured vs reference, delta and 95% interval, status)")
        lines += [_fit(f"  {_workload_line(w)}", width) for w in workloads]
    phases: dict[str, list[dict[str, Any]]] = {}
    for c in results.get("checks", []):
        phases.setdefault(c["phase"], []).append(c)
    if phases:
        lines.append("Phases (checks by status)")
        lines += [_fit(f"  {_phase_line(p, cs)}", width) for p, cs in phases.items()]
    found = notices(results, dev_key=dev_key, redacted=redacted)
    if found:
        lines.append("Notices")
        lines += [_fit(f"  - {n}", width) for n in found]
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
