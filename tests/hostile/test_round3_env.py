"""Hostile corpus, third round (issue 55 item 7): the environment. A malformed PREFECT_API_URL, a CLUSTERCERT_*
number that is not one, a PREFECT_HOME that cannot be written: each exited 4 (or said "did not start in 3 tries"
with the cause in a log) where one usage line naming the variable is due (exit 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.hostile.helpers import write_bundle
from tests.hostile.test_round3_files import BOUND_S, one_line

Count = Callable[[int], None]


def _certify(tmp_path: Path, env: dict[str, str]) -> object:
    root = write_bundle(tmp_path / "b")
    return run_cli("certify", str(root), "--reports-dir", str(tmp_path / "r"), env=env, timeout=BOUND_S)


@pytest.mark.parametrize("url", ["http://[::1/api", "http://127.0.0.1:4200/api\n", "127.0.0.1:4200/api",
                                 "http://127.0.0.1:port/api"])
def test_a_malformed_prefect_api_url_is_a_usage_error(tmp_path: Path, url: str, hostile: Count) -> None:
    hostile(1)
    one_line(_certify(tmp_path, {"PREFECT_API_URL": url}), 2, "PREFECT_API_URL: expected the URL of a Prefect "
             "server's API")


@pytest.mark.parametrize(("variable", "value"), [("CLUSTERCERT_MAX_EVIDENCE_BYTES", "2GB"),
                                                 ("CLUSTERCERT_DASK_WORKERS", "two")])
def test_a_clustercert_number_that_is_not_one_is_a_usage_error(tmp_path: Path, variable: str, value: str,
                                                               hostile: Count) -> None:
    root = write_bundle(tmp_path / "b")
    for command in (["evidence", "check", str(root)], ["certify", str(root), "--reports-dir", str(tmp_path / "r")]):
        hostile(1)
        one_line(run_cli(*command, env={variable: value, "PREFECT_API_URL": ""}, timeout=BOUND_S), 2,
                 f"{variable}: input should be a valid integer", repr(value))


def test_a_prefect_home_that_cannot_be_made_is_a_usage_error(tmp_path: Path, hostile: Count) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    hostile(1)
    one_line(_certify(tmp_path, {"PREFECT_HOME": str(blocker / "prefect"), "PREFECT_API_URL": ""}), 2,
             f"PREFECT_HOME {blocker / 'prefect'}: expected a folder this user can write")


# The read-only case needs a process that file permissions bind: root writes into a read-only folder, and CI runs
# as root. There the command runs as `nobody`; where `nobody` cannot start the interpreter (it lies under a home
# only root reads), as root without the capabilities that override file permissions.
_AS_NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")
_WITHOUT_OVERRIDE = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--")


def _unprivileged() -> tuple[str, ...]:
    """The prefix that runs a command bound by file permissions: none for a user that is not root."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no way to run the command bound by file permissions")
    for prefix in (_AS_NOBODY, _WITHOUT_OVERRIDE):
        probe = subprocess.run([*prefix, sys.executable, "-c", "import clustercert"], cwd=ROOT, capture_output=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False, timeout=60)
        if probe.returncode == 0:
            return prefix
    pytest.fail(f"running as root, neither {' '.join(_AS_NOBODY)} nor {' '.join(_WITHOUT_OVERRIDE)} could start "
                f"{sys.executable}: {probe.stderr[-300:]!r}")


def test_a_read_only_prefect_home_is_a_usage_error(hostile: Count) -> None:
    prefix = _unprivileged()
    # a folder of its own that any user reads (pytest's tmp_path lies under a folder only its owner reads)
    work = Path(tempfile.mkdtemp(prefix="clustercert-readonly-home-"))
    try:
        work.chmod(0o755)
        writable = work / "writable"  # the command's home, temporary files and reports
        writable.mkdir(mode=0o777)
        writable.chmod(0o777)
        home = work / "prefect"
        home.mkdir()
        home.chmod(0o555)
        root = write_bundle(work / "b")
        hostile(1)
        proc = run_cli("certify", str(root), "--reports-dir", str(writable / "r"), prefix=prefix, timeout=BOUND_S,
                       env={"PREFECT_HOME": str(home), "PREFECT_API_URL": "", "HOME": str(writable),
                            "TMPDIR": str(writable), "PYTHONDONTWRITEBYTECODE": "1"})
        one_line(proc, 2, f"PREFECT_HOME {home}: expected a folder this user can write", "Permission denied")
    finally:
        shutil.rmtree(work, ignore_errors=True)
