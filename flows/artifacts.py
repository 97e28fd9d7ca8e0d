"""Prefect artifacts of a run: the outcome table, a markdown summary and a link to the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from flows.caching import UNCACHED

__all__ = ["ARTIFACT_KEYS", "publish_artifacts_task"]

# Artifact keys group a cluster's runs in the Prefect UI (lower-case letters, digits and dashes only).
ARTIFACT_KEYS = ("outcome-table", "summary", "report")


def _key(cluster: str, kind: str) -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in cluster.lower()).strip("-")
    return f"clustercert-{safe}-{kind}"


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def summary_markdown(results: dict[str, Any], paths: dict[str, str]) -> str:
    """The markdown summary: outcome, per-workload headline figures, the change since the previous run."""
    lines = [f"# {results['cluster']['name']}: {results['outcome']}", "",
             f"Run `{results['run_id']}` started {results['started_at']}, catalog {results['catalog']['id']} "
             f"{results['catalog']['version']}."]
    if results.get("valid_until"):
        lines.append(f"Valid until {results['valid_until']}.")
    lines += ["", "| workload | precision | delta vs baseline | MFU | status |", "|---|---|---|---|---|"]
    for w in results["workloads"]:
        lines.append(f"| {w['workload']} | {w['precision']} | {_fmt(w.get('delta_pct'), '+.2f')} % | "
                     f"{_fmt(w.get('mfu'), '.3f')} | {w['status']} |")
    previous = results.get("previous_run")
    if previous:
        lines += ["", f"Since run `{previous['run_id']}` ({previous['outcome']}):", ""]
        for c in previous["changes"]:
            mark = " **regressed**" if c["regressed"] else ""
            lines.append(f"- {c['workload']} {c['figure']}: {c['previous']:.4g} -> {c['current']:.4g}{mark}")
    lines += ["", f"Report: `{paths.get('report.pdf', '')}`"]
    return "\n".join(lines) + "\n"


@task(name="publish-artifacts", **UNCACHED)
def publish_artifacts_task(results: dict[str, Any], paths: dict[str, str]) -> list[str]:
    """Create the three artifacts in the current run; returns their keys."""
    cluster = results["cluster"]["name"]
    rows = [{"check": c["id"], "status": c["status"], "measured": c["measured"], "target": c["target"],
             "unit": c["unit"], "delta_pct": c["delta_pct"]} for c in results["checks"]]
    keys = [_key(cluster, kind) for kind in ARTIFACT_KEYS]
    create_table_artifact(rows, key=keys[0], description=f"{cluster}: {results['outcome']} ({results['run_id']})")
    create_markdown_artifact(summary_markdown(results, paths), key=keys[1],
                             description=f"{cluster}: certification summary")
    report = Path(paths["report.pdf"]).resolve().as_uri()
    create_link_artifact(report, link_text=f"report.pdf of {results['run_id']}", key=keys[2],
                         description=f"{cluster}: the signed report")
    return keys
