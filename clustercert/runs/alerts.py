"""Alerts for a finished run: when one is due (outcome or regressions) and the webhook that carries it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from clustercert.errors import UsageError

__all__ = ["alert_payload", "post_webhook"]

_ALERT_OUTCOMES = {"NOT CERTIFIED", "INCOMPLETE"}


def alert_payload(results: dict[str, Any], run_dir: str) -> dict[str, Any] | None:
    """The alert for a run that ended NOT CERTIFIED or INCOMPLETE or regressed since the previous run of its
    cluster; None when no alert is due."""
    previous = results.get("previous_run") or {}
    regressions = [c for c in previous.get("changes", []) if c["regressed"]]
    reasons = []
    if results["outcome"] in _ALERT_OUTCOMES:
        reasons.append(f"outcome {results['outcome']}")
    if regressions:
        reasons.append(f"{len(regressions)} headline figure(s) regressed since run {previous['run_id']}")
    if not reasons:
        return None
    return {"schema_version": 1, "event": "clustercert.run.alert", "cluster": results["cluster"]["name"],
            "run_id": results["run_id"], "outcome": results["outcome"], "reasons": reasons,
            "regressions": regressions, "run_dir": run_dir}


def post_webhook(url: str, payload: dict[str, Any], timeout: float = 10.0) -> int:
    """POST `payload` as JSON to `url`; returns the HTTP status (an OSError for an unreachable receiver)."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"CLUSTERCERT_ALERT_WEBHOOK: expected an http(s) URL, got '{url}'")
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
