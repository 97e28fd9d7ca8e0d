"""Test isolation: Prefect, keys, reports and HOME all live in a temporary folder, set before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_SANDBOX = Path(tempfile.mkdtemp(prefix="clustercert-tests-"))

# Set at import of this conftest, before any test module imports prefect.
ISOLATED_ENV = {
    "HOME": str(_SANDBOX / "home"),
    "PREFECT_HOME": str(_SANDBOX / "prefect"),
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_TO_API_ENABLED": "false",
    # The temporary Prefect server misses its 20 s default start on a loaded 2-core machine.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "CLUSTERCERT_KEY_DIR": str(_SANDBOX / "keys"),
    "CLUSTERCERT_REPORTS_DIR": str(_SANDBOX / "reports"),
}
for _k, _v in ISOLATED_ENV.items():
    os.environ[_k] = _v
Path(ISOLATED_ENV["HOME"]).mkdir(parents=True, exist_ok=True)
os.environ.pop("PREFECT_API_URL", None)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `python -m clustercert ARGS` as a user would, from the project root."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "clustercert", *args], cwd=ROOT, env=full_env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )


@pytest.fixture(scope="session")
def sandbox() -> Path:
    return _SANDBOX
