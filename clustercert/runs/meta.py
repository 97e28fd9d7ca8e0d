"""A new run's metadata: its id from the start time and bundle.yaml, the signer, the cluster's previous run."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from clustercert.evidence.bundle import BUNDLE_FILE, LoadedBundle
from clustercert.evidence.hashing import sha256_file
from clustercert.runs.history import index_runs, previous_summary

__all__ = ["new_run_meta"]


def new_run_meta(bundle: LoadedBundle, now: dt.datetime, signer: str, dev_key: bool,
                 reports_dir: Path, catalog_arg: str | None = None) -> dict[str, Any]:
    """RunMeta JSON for a run starting `now` (read once by the caller); the previous run comes from `reports_dir`;
    `catalog_arg` is `--catalog` as typed (the report's command repeats it so that it runs as printed)."""
    started_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    run_id = f"{now:%Y%m%dT%H%M%SZ}-{sha256_file(bundle.root / BUNDLE_FILE)[:8]}"
    previous = previous_summary(index_runs(reports_dir), bundle.spec.cluster.name, started_at)
    return {"run_id": run_id, "started_at": started_at, "bundle_path": str(bundle.root), "signer": signer,
            "dev_key": dev_key, "previous_run": previous, "catalog_arg": catalog_arg}
