"""What an operator reads of a certification in Prefect's UI, made from results.json without Prefect: the run's state
(named by its outcome) and tags, the summary, the failed checks, the report's address and the scheduled run's log.

Text from the evidence (a cluster's name, a finding that quotes a file) is escaped before it goes into markdown:
Prefect's UI renders it, and a bundle is not trusted to write links or markup into the operator's page."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from clustercert.cli.summary import PER_PHASE, check_table_rows, reasons, why

__all__ = ["FAILED_ROWS", "LOGGED_REASONS", "ReportPlace", "escape", "failed_check_rows", "log_lines", "run_tags",
           "state_message", "summary_markdown"]

# The failed-check table stays short enough to read in the UI; results.json (linked or named) has every check
FAILED_ROWS = 25
# Reasons the scheduled run's log names; the summary lists up to PER_PHASE of each phase, as the terminal does
LOGGED_REASONS = 3
_FAILED = ("FAIL", "ERROR")
# Characters that make markdown's emphasis, code, links and table cells (`<` and `>`, HTML's, become entities)
_MARKDOWN = re.compile(r"([\\`*_\[\]|~])")
# The order checks are counted in
_STATUSES = ("FAIL", "ERROR", "WARN", "PASS", "SKIPPED")


@dataclass(frozen=True)
class ReportPlace:
    """Where a run's files are for the operator: `base_url` (CLUSTERCERT_REPORTS_URL, where the run folders are
    published over http(s)) when set, else only `folder` (the run folder's path) on `host`."""

    run_id: str
    folder: str
    host: str
    base_url: str | None = None

    def url(self, name: str) -> str | None:
        """The http(s) address of the run folder's file `name`, or None when no reports URL is configured."""
        if not self.base_url:
            return None
        return f"{self.base_url.rstrip('/')}/{quote(self.run_id)}/{quote(name)}"

    def shown(self, name: str) -> str:
        """Markdown for the run folder's file `name`: a link when the folder is published, else its path as text
        (never a file:// link, which a browser does not open from an http page)."""
        url = self.url(name)
        if url is not None:
            return f"[{escape(name)}]({url})"
        return f"`{self.folder}/{name}` on {escape(self.host)}"

    def report_line(self) -> str:
        """Where report.pdf is, in a line of markdown; how to have it linked when it is not."""
        hint = "" if self.url("report.pdf") else " (set CLUSTERCERT_REPORTS_URL to link it)"
        return f"{self.shown('report.pdf')}{hint}"


def escape(text: str) -> str:
    """`text` as literal markdown: its markup characters backslash-escaped, `<` and `>` as HTML entities."""
    return _MARKDOWN.sub(r"\\\1", str(text)).replace("<", "&lt;").replace(">", "&gt;")


def _fixed(value: float | None, unit: str = "", signed: bool = False) -> str:
    """`value` to three significant digits without an exponent (`7.32`, `0.0512`, `1234`), with `unit`."""
    if value is None or not math.isfinite(value):
        return "–"
    places = 0 if value == 0 else max(0, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:+.{places}f}" if signed else f"{value:.{places}f}"
    return f"{text} {unit}".rstrip()


def _percent(value: float | None, signed: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:+.1f} %" if signed else f"{value:.1f} %"


def _profile(results: dict[str, Any]) -> str | None:
    """The certification profile's name when results.json names one (a string, or an object with a title or id)."""
    profile = results.get("profile")
    if isinstance(profile, dict):
        profile = profile.get("title") or profile.get("id") or profile.get("name")
    return str(profile) if profile else None


def run_tags(results: dict[str, Any]) -> list[str]:
    """The tags a run is marked with, to filter by in the UI: `clustercert`, `outcome:<outcome>`, `cluster:<name>`."""
    def slug(text: str) -> str:
        return re.sub(r"[^a-z0-9.-]+", "-", str(text).lower()).strip("-")

    return ["clustercert", f"outcome:{slug(results['outcome'])}", f"cluster:{slug(results['cluster']['name'])}"]


def state_message(results: dict[str, Any]) -> str:
    """The final state's message: the cluster, the outcome, why, and the first reason with a count of the rest."""
    found = reasons(results)
    text = f"{results['cluster']['name']}: {results['outcome']} ({why(results)})"
    if found:
        first = found[0]
        text += f"; {first['status']} {first['phase']}: {first['summary']}"
        if len(found) > 1:
            text += f" (and {len(found) - 1} more)"
    return text


def log_lines(results: dict[str, Any], run_dir: str) -> list[str]:
    """What the scheduled run logs when its certification ends: the outcome and why, the run folder, the first
    reasons."""
    found = reasons(results)
    lines = [f"{results['cluster']['name']}: {results['outcome']} ({why(results)})", f"run folder: {run_dir}"]
    for r in found[:LOGGED_REASONS]:
        where = f" [{r['where'][0]}]" if r["where"] else ""
        lines.append(f"{r['status']} {r['phase']}: {r['summary']}{where}")
    if len(found) > LOGGED_REASONS:
        lines.append(f"and {len(found) - LOGGED_REASONS} more reasons in {run_dir}/results.json")
    return lines


def _workload_rows(results: dict[str, Any]) -> list[str]:
    rows = ["| workload | GPUs | step time | reference | delta (95 % interval) | MFU | status |",
            "|---|---:|---:|---:|---|---:|---|"]
    for w in results.get("workloads") or []:
        delta = _percent(w.get("delta_pct"), signed=True)
        if w.get("ci_low_pct") is not None and w.get("ci_high_pct") is not None:
            delta += f" ({_percent(w['ci_low_pct'], True)} to {_percent(w['ci_high_pct'], True)})"
        mfu = w.get("mfu")
        rows.append(f"| {escape(w['workload'])} {escape(str(w['precision']).upper())} | {w.get('gpus', '')} | "
                    f"{_fixed((w.get('step_time_s') or {}).get('mean'), 's')} | "
                    f"{_fixed((w.get('baseline') or {}).get('step_time_s'), 's')} | {delta} | "
                    f"{_percent(None if mfu is None else 100 * mfu)} | {escape(w.get('status', ''))} |")
    return rows


def _previous(results: dict[str, Any]) -> list[str]:
    previous = results.get("previous_run")
    if not previous:
        return []
    lines = ["", f"**Since run {escape(previous['run_id'])}** ({escape(previous['outcome'])}):", ""]
    for c in previous.get("changes") or []:
        if c["figure"] == "mfu":
            before, after = _percent(100 * c["previous"]), _percent(100 * c["current"])
        else:
            before, after = _percent(c["previous"], True), _percent(c["current"], True)
        mark = " **regressed**" if c["regressed"] else ""
        lines.append(f"- {escape(c['workload'])} {escape(c['figure'])}: {before} → {after}{mark}")
    return lines


def _reason_items(results: dict[str, Any]) -> list[str]:
    """The reasons as a markdown list: at most PER_PHASE of each phase (one fault fails many checks of a phase, and
    the next phase's findings must not drown behind them), then a line that counts the rest by phase."""
    shown: Counter[str] = Counter()
    hidden: Counter[str] = Counter()
    items = []
    for r in reasons(results):
        if shown[r["phase"]] >= PER_PHASE:
            hidden[r["phase"]] += 1
            continue
        shown[r["phase"]] += 1
        where = f" ({escape(r['where'][0])})" if r["where"] else ""
        advisory = " (advisory)" if r["severity"] != "required" else ""
        items.append(f"- {escape(r['status'])} {escape(r['phase'])}{advisory}: {escape(r['summary'])}{where}")
    if hidden:
        counts = ", ".join(f"{escape(phase)} {n}" for phase, n in hidden.items())
        items.append(f"- and {sum(hidden.values())} more ({counts}): the failed checks and the report list each")
    return items


def summary_markdown(results: dict[str, Any], place: ReportPlace) -> str:
    """The summary an operator reads first: the outcome and why, the reasons, one row per workload (figures rounded,
    with units), the change since the previous run, the checks counted by status, and where the report and every
    check are."""
    lines = [f"# {escape(results['outcome'])}: {escape(results['cluster']['name'])}", "",
             f"**Why:** {escape(why(results))}"]
    items = _reason_items(results)
    if items:
        lines += ["", *items]
    facts = [f"Run {escape(results['run_id'])}, started {escape(results['started_at'])}",
             f"catalog {escape(results['catalog']['id'])} {escape(results['catalog']['version'])}"]
    if (profile := _profile(results)) is not None:
        facts.append(f"profile {escape(profile)}")
    if results.get("valid_until"):
        facts.append(f"valid until {escape(results['valid_until'])}")
    lines += ["", "; ".join(facts) + "."]
    if results.get("workloads"):
        lines += ["", *_workload_rows(results)]
    lines += _previous(results)
    counts = Counter(c["status"] for c in results.get("checks") or [])
    tally = ", ".join(f"{counts[status]} {status}" for status in _STATUSES if counts[status])
    lines += ["", f"**Report:** {place.report_line()}", "",
              f"**Checks:** {tally or 'none'}; every check in {place.shown('results.json')}"]
    return "\n".join(lines) + "\n"


def failed_check_rows(results: dict[str, Any], limit: int = FAILED_ROWS) -> list[dict[str, str]]:
    """The failed and erroring checks (required first, as the reasons are ordered), their figures rounded with units
    and their finding: at most `limit` rows, and a last row that counts the rest. Empty when none failed."""
    figures = {row[0]: row for row in check_table_rows(results) if row[1] in _FAILED}
    rows = [{"check": r["check"], "status": r["status"], "severity": r["severity"],
             "measured / target": figures.get(r["check"], ("", "", "", ""))[2],
             "delta": figures.get(r["check"], ("", "", "", ""))[3], "finding": r["summary"]}
            for r in reasons(results) if r["status"] in _FAILED]
    if len(rows) > limit:
        rest = len(rows) - limit
        rows = [*rows[:limit], {"check": f"and {rest} more", "status": "", "severity": "", "measured / target": "",
                                "delta": "", "finding": "every check is in results.json and the report"}]
    return rows
