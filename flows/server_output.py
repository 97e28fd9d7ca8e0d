"""Where the temporary Prefect server's output goes: its log in PREFECT_HOME, and the early file it wrote before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["LOG_NAME", "drop_if_empty", "log_path"]

# The server's output, in PREFECT_HOME unless the starter names another file
LOG_NAME = "clustercert-temporary-server.log"


def log_path(settings: Any) -> Path:
    """Where the server's output goes by default: PREFECT_HOME/LOG_NAME of `settings` (Prefect's)."""
    return Path(settings.home) / LOG_NAME


def drop_if_empty(early: Path | None) -> None:
    """`early` (the file a temporary server's output went to until it opened its log) removed when nothing was
    written to it; kept when the server said something there (why its start failed), or gone already (the server
    moved it into its log)."""
    try:
        if early is not None and early.stat().st_size == 0:
            early.unlink()
    except OSError:
        pass
