"""What a certification is asked to do: the one parameter of the `certify` flow, as Prefect records it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["DEFAULT_LIMIT", "CertifyRequest"]

DEFAULT_LIMIT = 2 * 1024**3


class CertifyRequest(BaseModel):
    """Certify the bundle at `bundle_path` into the new folder `run_dir`, as the run `run_meta` (RunMeta's JSON),
    signed with the keys in `key_dir`, judged against `catalog` (a catalog id or path; None: bundle.yaml's) from
    `references_dir`, reported with the templates in `templates_dir`; evidence files up to `limit` bytes each;
    the phases' tasks on the Dask scheduler at `dask_address` when given; a redacted copy of the report when
    `redact`. The passphrase of the keys is never part of it (Prefect records a flow's parameters): the task that
    signs reads it from the settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bundle_path: str
    run_dir: str
    run_meta: dict[str, Any]
    key_dir: str
    references_dir: str
    templates_dir: str
    catalog: str | None = None
    baselines: str | None = None  # a baselines file (certify --baselines): the targets it gives replace the catalog's
    # reference files by their key (runs.references: a re-run's copies); one not given is references_dir's
    references: dict[str, str] = {}
    limit: int = DEFAULT_LIMIT
    dask_address: str | None = None
    redact: bool = False
