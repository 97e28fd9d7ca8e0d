"""A new run's metadata: a unique id from the start time, bundle.yaml and a nonce; the signer; the previous run."""

from __future__ import annotations

import datetime as dt
import os
import secrets
from pathlib import Path
from typing import Any, Protocol

from clustercert.attest.signing import PDF_CERT, signer_identity
from clustercert.evidence.bundle import BUNDLE_FILE, LoadedBundle
from clustercert.evidence.hashing import sha256_file
from clustercert.runs.history import index_runs, previous_summary

__all__ = ["Signer", "new_nonce", "new_run_meta"]


class Signer(Protocol):
    """Who signs a run (a loaded `KeyPair` is one): the manifest key's fingerprint, whether it is a development key,
    and its key directory, whose keys decide which earlier runs count as history."""

    @property
    def fingerprint(self) -> str: ...

    @property
    def dev_key(self) -> bool: ...

    @property
    def key_dir(self) -> Path: ...


def new_nonce() -> str:
    """Six random hex digits that tell apart runs of the same bundle started in the same second."""
    return secrets.token_hex(3)


def new_run_meta(bundle: LoadedBundle, now: dt.datetime, signer: Signer, reports_dir: Path,
                 catalog_arg: str | None = None, *, nonce: str | None = None,
                 profile: str | None = None) -> dict[str, Any]:
    """RunMeta JSON for a run starting `now` (read once by the caller) and signed by `signer`; the previous run
    comes from `reports_dir` (only folders that verify against the signer's key directory count as history);
    `catalog_arg` is `--catalog` as typed (the report's command repeats it so that it runs as printed); `profile` the
    certification profile judged (`phases.profile.choose_profile`; None: bundle.yaml's, else `full`).

    The run id is `<UTC start>-<bundle.yaml sha256[:8]>-<nonce>`: two runs of one bundle started in the same
    second get distinct ids (the nonce is drawn here unless given). `rerun` replays the recorded id."""
    started_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    run_id = f"{now:%Y%m%dT%H%M%SZ}-{sha256_file(bundle.root / BUNDLE_FILE)[:8]}-{nonce or new_nonce()}"
    previous = previous_summary(index_runs(reports_dir, key_dir=signer.key_dir), bundle.spec.cluster.name, started_at)
    # the bundle's absolute path (links as the user named them): `verify`, `rerun` and the report's command find it
    # from any folder (`certify .` recorded '.', which named another folder, or none, once the user had moved on)
    return {"run_id": run_id, "started_at": started_at, "bundle_path": os.path.abspath(bundle.root),
            "signer": signer.fingerprint, "dev_key": signer.dev_key, "previous_run": previous,
            "catalog_arg": catalog_arg, "profile": profile or bundle.spec.profile or "full",
            "signer_identity": signer_identity(signer.key_dir) if (signer.key_dir / PDF_CERT).is_file() else None}
