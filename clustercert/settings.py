"""The one settings model: CLUSTERCERT_* environment variables, read only when asked."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["PROJECT_ROOT", "Settings", "load_settings"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _default_key_dir() -> Path:
    return Path.home() / ".config" / "clustercert" / "keys"


class Settings(BaseSettings):
    """Where clustercert finds its data and keys; every field is a CLUSTERCERT_<NAME> variable."""

    model_config = SettingsConfigDict(env_prefix="CLUSTERCERT_", extra="ignore")

    key_dir: Path = Field(default_factory=_default_key_dir)
    reports_dir: Path = PROJECT_ROOT / "reports"
    references_dir: Path = PROJECT_ROOT / "references"
    checks_dir: Path = PROJECT_ROOT / "checks"
    templates_dir: Path = PROJECT_ROOT / "templates"
    key_passphrase: str | None = None
    max_evidence_bytes: int = 2 * 1024**3
    alert_webhook: str | None = None  # scheduled runs POST their alerts here (issue 7)
    dask_workers: int = 0  # > 0: `certify` runs the phase tasks on a local Dask cluster of this many workers
    dask_address: str | None = None  # a running Dask scheduler (tcp://host:8786) for the phase tasks instead


def load_settings() -> Settings:
    """Read the environment now (never at import time)."""
    return Settings()
