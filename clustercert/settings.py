"""The one settings model: CLUSTERCERT_* environment variables, read only when asked."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from clustercert import PROJECT_ROOT

__all__ = ["PROJECT_ROOT", "TABLE_PATH_VARIABLE", "TELEMETRY_MEMORY_VARIABLE", "Settings", "load_settings",
           "table_path", "telemetry_memory_bytes"]


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
    reports_url: str | None = None  # where the run folders of reports_dir are published (http/https), for links
    dask_workers: int = 0  # > 0: `certify` runs the phase tasks on a local Dask cluster of this many workers
    dask_address: str | None = None  # a running Dask scheduler (tcp://host:8786) for the phase tasks instead


def load_settings(*, prefect: bool = False) -> Settings:
    """Read the environment now (never at import time); a CLUSTERCERT_TABLE_PATH of neither path is refused here,
    before any command does work; so is a CLUSTERCERT_TELEMETRY_MEMORY_MIB that is not a number of MiB, any
    CLUSTERCERT_* value of the wrong type, an empty folder variable and a malformed PREFECT_API_URL. `prefect`
    (a command that runs a flow) also refuses a PREFECT_HOME that cannot be written: each a UsageError naming
    the variable."""
    from pydantic import ValidationError

    from clustercert.errors import UsageError

    table_path()
    telemetry_memory_bytes()
    for name in Settings.model_fields:
        variable = f"CLUSTERCERT_{name.upper()}"
        if name.endswith("_dir") and variable in os.environ and not os.environ[variable].strip():
            raise UsageError(f"{variable}: expected a folder, got an empty value (it would mean the current "
                             "folder). Unset it for the default, or name the folder")
    try:
        settings = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        variable = f"CLUSTERCERT_{str(first['loc'][0]).upper()}" if first["loc"] else "CLUSTERCERT_*"
        raise UsageError(f"{variable}: {first['msg'].lower()}, got {str(first.get('input'))[:40]!r}. Fix or unset "
                         "it") from None
    _check_reports_url(settings.reports_url)
    _check_prefect_api_url(os.environ.get("PREFECT_API_URL"))
    if prefect:
        _check_prefect_home(os.environ.get("PREFECT_HOME"))
    return settings


def _check_prefect_api_url(url: str | None) -> None:
    """A PREFECT_API_URL Prefect can use (http(s), a host, nothing around it); unset or empty: a temporary server."""
    from urllib.parse import urlsplit

    from clustercert.errors import UsageError

    if not url:
        return
    problem = None
    if url != url.strip() or any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        problem = "spaces or line breaks"
    else:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  # raises on a port that is not a number
        except ValueError as exc:
            problem = str(exc)
        else:
            if parts.scheme not in ("http", "https") or not parts.hostname:
                problem = "no http(s) scheme and host"
    if problem is not None:
        raise UsageError(f"PREFECT_API_URL: expected the URL of a Prefect server's API "
                         f"(http://127.0.0.1:4200/api), got {url[:80]!r} ({problem}). Fix it, or unset it for a "
                         "temporary server of the run's own")


def _check_prefect_home(home: str | None) -> None:
    """PREFECT_HOME (Prefect's database and logs) a folder this user can write: Prefect itself only warns, then its
    server fails to start three times and the cause is in a log."""
    import tempfile

    from clustercert.errors import UsageError

    folder = Path(home).expanduser() if home else Path.home() / ".prefect"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UsageError(f"PREFECT_HOME {folder}: expected a folder this user can write, got one that cannot be "
                         f"written ({exc.strerror or exc.__class__.__name__}). Set PREFECT_HOME to a folder you "
                         "can write") from None


def _check_reports_url(url: str | None) -> None:
    """A CLUSTERCERT_REPORTS_URL that a browser can follow from Prefect's UI (an http page): http(s) only."""
    from urllib.parse import urlsplit

    from clustercert.errors import UsageError

    if url is None or not url.strip():
        return
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"CLUSTERCERT_REPORTS_URL: expected the http(s) URL where the run folders of "
                         f"CLUSTERCERT_REPORTS_DIR are published, got {url[:80]!r}. Fix or unset it (the report is "
                         f"then named by its path)")


# How large tables are read (issue 13): `columnar` (unset: the default) reads regular lines in bulk, `rows` reads
# every line by the per-line code (the small-table path the equivalence tests compare against). parsers/dcgm.py.
TABLE_PATH_VARIABLE = "CLUSTERCERT_TABLE_PATH"
_TABLE_PATHS = ("columnar", "rows")


def table_path() -> str:
    """`columnar` or `rows`, from CLUSTERCERT_TABLE_PATH (unset or empty: columnar)."""
    from clustercert.errors import UsageError

    value = os.environ.get(TABLE_PATH_VARIABLE, "").strip() or "columnar"
    if value not in _TABLE_PATHS:
        raise UsageError(f"{TABLE_PATH_VARIABLE}: expected 'columnar' or 'rows', got {value[:40]!r}. "
                         f"Unset it (the columnar path) or set it to rows (the per-line path).")
    return value


# How much memory one telemetry file's columns may take (36 bytes a sample) before they are kept in scratch files
# of the temporary folder (TMPDIR) and read back a block at a time: parsers/dcgm.py. A large cluster's day is many
# gigabytes of columns.
TELEMETRY_MEMORY_VARIABLE = "CLUSTERCERT_TELEMETRY_MEMORY_MIB"
_TELEMETRY_MEMORY_MIB = 1024


def telemetry_memory_bytes() -> int:
    """CLUSTERCERT_TELEMETRY_MEMORY_MIB in bytes (unset or empty: 1024 MiB; 0: every file's columns to scratch)."""
    from clustercert.errors import UsageError

    value = os.environ.get(TELEMETRY_MEMORY_VARIABLE, "").strip()
    if not value:
        return _TELEMETRY_MEMORY_MIB * 1024**2
    try:
        mib = int(value)
    except ValueError:
        mib = -1
    if mib < 0:
        raise UsageError(f"{TELEMETRY_MEMORY_VARIABLE}: expected a whole number of MiB (0 or more), got "
                         f"{value[:40]!r}. Unset it (1024 MiB) or give the memory one telemetry file's columns may "
                         f"take before they are kept in the temporary folder.")
    return mib * 1024**2
