"""A real Slurm cluster on loopback for these tests (scripts/slurm-local), started once and always stopped.

Opt-in: the cluster needs root (to install Debian's slurm-wlm, slurmdbd, munge and mariadb-server once) and
a few minutes, so these tests run as their own CI step:
    CLUSTERCERT_SLURM_TESTS=1 .venv/bin/python -m pytest -p no:cacheprovider -m slurm tests/slurm
Without CLUSTERCERT_SLURM_TESTS=1 they are skipped with that reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local"
# The loopback cluster every plan of these tests runs on; each test file adds its jobs.
PLAN_HEADER = """\
schema_version: 1
cluster: {name: clustercert-loopback-test, provider: local Slurm on loopback}
system: {id: cpu-loopback, devices_per_node: 1}
catalog: loopback-cpu
recipe_version: clustercert-cpu-1
slurm: {poll_s: 0.5}
jobs:
"""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm: starts a real Slurm cluster on loopback (own CI step)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/slurm/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.slurm)
            if os.environ.get("CLUSTERCERT_SLURM_TESTS") != "1":
                item.add_marker(pytest.mark.skip(reason="set CLUSTERCERT_SLURM_TESTS=1 to start a Slurm cluster on "
                                                        "loopback (root; see tests/slurm/conftest.py)"))


@pytest.fixture(scope="session")
def slurm_cluster(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """Start the loopback cluster in its own folder and ports; stop it at the end, also when a test fails."""
    state = Path(tempfile.mkdtemp(prefix="clustercert-slurm-test-"))
    env = {**os.environ, "CLUSTERCERT_SLURM_DIR": str(state), "CLUSTERCERT_SLURM_PORT": "17900",
           "CLUSTERCERT_SLURM_NODES": "3"}

    def stop() -> None:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120, check=False)
        shutil.rmtree(state, ignore_errors=True)

    request.addfinalizer(stop)
    started = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=900,
                             check=False)
    assert started.returncode == 0, started.stderr[-2000:]
    yield {"SLURM_CONF": str(state / "etc" / "slurm.conf"), "CLUSTERCERT_SLURM_DIR": str(state)}
