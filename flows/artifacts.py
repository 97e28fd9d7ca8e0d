"""Prefect artifacts of a run: the summary, the failed checks and the report's address, each the cluster's latest, and
the summary again under the run's own key; what they say is `flows.digest`'s."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from clustercert.settings import load_settings
from flows.caching import UNCACHED
from flows.digest import ReportPlace, escape, failed_check_rows, summary_markdown

__all__ = ["ARTIFACT_KEYS", "artifact_key", "publish_artifacts_task", "report_place", "run_key"]

# The cluster's latest of each, by key (the Artifacts page shows a key's newest; its history lists the others)
ARTIFACT_KEYS = ("summary", "failed-checks", "report")


def _slug(text: str) -> str:
    """`text` as an artifact key may hold it: lower-case letters, digits and dashes only."""
    return "-".join("".join(ch if ch.isascii() and ch.isalnum() else " " for ch in text.lower()).split())


def artifact_key(cluster: str, kind: str) -> str:
    """The key of the cluster's latest artifact of `kind`: clustercert-<cluster>-<kind>."""
    return f"clustercert-{_slug(cluster)}-{kind}"


def run_key(cluster: str, run_id: str) -> str:
    """The key of one run's summary, so that each run has its own entry on the Artifacts page."""
    return f"clustercert-{_slug(cluster)}-run-{_slug(run_id)}"


def report_place(results: dict[str, Any], paths: dict[str, str]) -> ReportPlace:
    """Where this run's files are for the operator: under CLUSTERCERT_REPORTS_URL when set, else their folder on
    this machine."""
    folder = str(Path(paths["report.pdf"]).resolve().parent)
    return ReportPlace(run_id=results["run_id"], folder=folder, host=socket.gethostname(),
                       base_url=load_settings().reports_url)


@task(name="publish-artifacts", **UNCACHED)
def publish_artifacts_task(results: dict[str, Any], paths: dict[str, str]) -> list[str]:
    """Create the run's artifacts in the current flow run; returns their keys."""
    cluster, run_id, outcome = results["cluster"]["name"], results["run_id"], results["outcome"]
    shown = escape(cluster)  # descriptions are markdown too
    place = report_place(results, paths)
    summary = summary_markdown(results, place)
    keys = [artifact_key(cluster, kind) for kind in ARTIFACT_KEYS] + [run_key(cluster, run_id)]
    create_markdown_artifact(summary, key=keys[0], description=f"{shown}: {outcome} (run {run_id})")
    rows = failed_check_rows(results)
    create_table_artifact(rows, key=keys[1], description=f"{shown}: the checks that failed in run {run_id}"
                          if rows else f"{shown}: no check failed in run {run_id}")
    url = place.url("report.pdf")
    if url is not None:
        create_link_artifact(url, link_text=f"report.pdf of {run_id}", key=keys[2],
                             description=f"{shown}: the signed report")
    else:
        create_markdown_artifact(f"report.pdf of {run_id}: {place.report_line()}\n", key=keys[2],
                                 description=f"{shown}: where the signed report is")
    create_markdown_artifact(summary, key=keys[3], description=f"{shown}: {outcome} (run {run_id})")
    return keys
