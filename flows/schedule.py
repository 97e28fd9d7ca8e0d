"""The scheduled certification: certify the newest sealed bundle, then alert on a bad outcome or a regression."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.client.schemas.objects import State
from prefect.events import emit_event

from clustercert.attest.signing import MANIFEST_KEY, init_keys, load_signing_key
from clustercert.evidence.bundle import load_bundle
from clustercert.runs.alerts import alert_payload, post_webhook
from clustercert.runs.meta import new_run_meta
from clustercert.runs.sources import resolve_source
from clustercert.settings import load_settings
from flows.artifacts import report_place
from flows.caching import UNCACHED
from flows.certify import certify_flow
from flows.digest import escape, log_lines, summary_markdown
from flows.outcome import outcome_state
from flows.request import CertifyRequest
from flows.runners import bulky, received

__all__ = ["ALERT_EVENT", "alert_task", "scheduled_certify_flow", "serve_schedule"]

ALERT_EVENT = "clustercert.run.alert"


@task(name="resolve-source", retries=2, retry_delay_seconds=1, **UNCACHED)
def resolve_source_task(source: str) -> str:
    return str(resolve_source(Path(source)))


@task(name="post-webhook", retries=2, retry_delay_seconds=2, **UNCACHED)
def post_webhook_task(url: str, payload: dict[str, Any]) -> int:
    status = post_webhook(url, payload)
    if status >= 400:
        raise OSError(f"{url}: the alert webhook answered HTTP {status}")
    return status


@task(name="alert", **UNCACHED)
def alert_task(results: dict[str, Any], run_dir: str) -> dict[str, Any] | None:
    """Emit a Prefect event and POST the webhook (CLUSTERCERT_ALERT_WEBHOOK) when an alert is due."""
    payload = alert_payload(results, run_dir)
    if payload is None:
        return None
    emit_event(event=ALERT_EVENT, payload=payload,
               resource={"prefect.resource.id": f"clustercert.cluster.{payload['cluster']}",
                         "prefect.resource.name": payload["cluster"]})
    url = load_settings().alert_webhook
    if url:
        post_webhook_task(url, payload)
    return payload


@task(name="report-outcome", **UNCACHED)
def report_outcome_task(results: dict[str, Any], paths: dict[str, str], run_dir: str) -> None:
    """The outcome where the scheduled run shows it: in its log (the outcome, the run folder, the first reasons) and
    as its own copy of the summary (unkeyed: the Artifacts page lists the certify run's)."""
    logger = get_run_logger()
    for line in log_lines(results, run_dir):
        logger.info(line)
    create_markdown_artifact(summary_markdown(results, report_place(results, paths)),
                             description=f"{escape(results['cluster']['name'])}: {results['outcome']}")


@flow(name="scheduled-certify")
def scheduled_certify_flow(source: str, catalog: str | None = None) -> State[dict[str, Any]]:
    """Certify `source` (a bundle, or the newest sealed bundle in a folder) with this process's settings; the run
    ends in a state named by the outcome (`flows.outcome`)."""
    settings = load_settings()
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)  # the run's one clock reading, as `certify` does
    bundle = load_bundle(Path(resolve_source_task(source)))
    if not (settings.key_dir / MANIFEST_KEY).exists():
        init_keys(settings.key_dir, passphrase=settings.key_passphrase, common_name="clustercert development key",
                  dev=True, now=now)
    key = load_signing_key(settings.key_dir, settings.key_passphrase)
    meta = new_run_meta(bundle, now, key, settings.reports_dir, catalog)
    run_dir = settings.reports_dir / meta["run_id"]
    summary = received(certify_flow(CertifyRequest(
        bundle_path=str(bundle.root), run_dir=str(run_dir), run_meta=meta, key_dir=str(settings.key_dir),
        references_dir=str(settings.references_dir), templates_dir=str(settings.templates_dir), catalog=catalog,
        limit=settings.max_evidence_bytes)))
    report_outcome_task(bulky(summary["results"]), summary["paths"], str(run_dir))
    alert = alert_task(summary["results"], str(run_dir))
    return outcome_state(summary["results"], {"outcome": summary["outcome"], "run_dir": str(run_dir),
                                              "paths": summary["paths"], "alert": alert})


def serve_schedule(source: str, cron: str, name: str, catalog: str | None) -> None:
    """Serve the scheduled deployment `name` against the configured Prefect server until interrupted."""
    scheduled_certify_flow.serve(name=name, cron=cron, parameters={"source": source, "catalog": catalog},
                                 description=f"clustercert: certify {source} on '{cron}'")
