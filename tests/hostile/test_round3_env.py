"""Hostile corpus, third round (issue 55 item 7): the environment. A malformed PREFECT_API_URL, a CLUSTERCERT_*
number that is not one, a PREFECT_HOME that cannot be written: each exited 4 (or said "did not start in 3 tries"
with the cause in a log) where one usage line naming the variable is due (exit 2)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli
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


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_prefect_home_is_a_usage_error(tmp_path: Path, hostile: Count) -> None:
    home = tmp_path / "prefect"
    home.mkdir()
    home.chmod(0o555)
    hostile(1)
    one_line(_certify(tmp_path, {"PREFECT_HOME": str(home), "PREFECT_API_URL": ""}), 2,
             f"PREFECT_HOME {home}: expected a folder this user can write")
