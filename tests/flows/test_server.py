"""`clustercert server`, as a user starts it for schedules and repeated certifications: Prefect's server on the
address asked for, until Ctrl-C (exit 0, Prefect's own words); an address it cannot serve on is refused in one line
before Prefect is imported. (The session's server of every flow test is one: tests/conftest.py; that its runs meet
no "database is locked" is asserted in tests/flows/test_caching.py.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port, run_cli
from tests.flows.conftest import TelemetryDouble, home_with_a_database, operator_server

pytestmark = pytest.mark.slow


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_the_server_serves_a_fresh_home_until_ctrl_c(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_UI_ENABLED": "false", "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "clustercert", "server", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a loaded 2-core machine: slow, never a failure
        while not _answers(f"http://127.0.0.1:{port}/api/health"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no answer within 300 s"
            time.sleep(0.25)
        assert (home / "prefect.db").is_file()  # in the home the user gave it
        # the flow runs of a certification are read back from it (an empty list: this home has none)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/flow_runs/filter", data=b"{}",
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200 and response.read() == b"[]"
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (out, err)
    # Prefect's banner, its own way to point a client at the server; a stop, not an interrupted certification
    assert f"PREFECT_API_URL=http://127.0.0.1:{port}/api" in out, out
    assert "Traceback" not in out + err and "stopped by SIGINT" not in err, err


def test_what_the_user_sets_is_kept_and_the_telemetry_double_sees_a_server_phone_home(tmp_path: Path) -> None:
    """The control of test_schedule.py's `test_nothing_phoned_home`, whose double must be able to see a request:
    with analytics on by the user's own setting (kept, as any setting the user gives), Prefect's server sends its
    telemetry as it starts, and the double records it. The UI's API address the user set is kept too."""
    double = TelemetryDouble()
    try:
        with operator_server(home_with_a_database(tmp_path / "home"), double, PREFECT_SERVER_ANALYTICS_ENABLED="true",
                             PREFECT_UI_API_URL="https://prefect.example/api") as server:
            deadline = time.monotonic() + 120
            while not double.asked and time.monotonic() < deadline:
                time.sleep(0.25)
            with urllib.request.urlopen(server.api_url.removesuffix("/api") + "/ui-settings", timeout=30) as response:
                ui = json.load(response)
    finally:
        double.close()
    assert set(double.asked) == {"CONNECT sens-o-matic.prefect.io:443"}, server.log_text()[-2000:]
    assert ui["api_url"] == "https://prefect.example/api"


def test_a_port_in_use_is_refused_in_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = run_cli("server", "--port", str(port), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"error: --port: cannot serve on 127.0.0.1:{port} (Address already in use); choose "
                           "another with --port\n")
    assert proc.stdout == ""


def test_a_host_that_is_no_address_is_refused_in_one_line() -> None:
    proc = run_cli("server", "--host", "no-such-host.invalid", timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "error: --host: expected an address of this machine to serve on, got 'no-such-host.invalid'\n"


def test_a_prefect_home_that_cannot_be_made_is_refused_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    home = blocker / "home"  # under a file: no folder can be made there
    proc = run_cli("server", "--port", str(free_port()), env={"PREFECT_HOME": str(home)}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"error: PREFECT_HOME {home}: cannot be created (Not a directory); set PREFECT_HOME to a "
                           "folder you can write\n")


def test_certify_against_a_server_that_does_not_answer_is_refused_in_one_line(tmp_path: Path) -> None:
    """PREFECT_API_URL names a port nobody serves (a server not started, or a typo): asked again each second for
    PREFECT_API_REQUEST_TIMEOUT, then one line and exit 2; no run folder, no crash log. Prefect's client said
    "internal error (RuntimeError)", exit 4."""
    url = f"http://127.0.0.1:{free_port()}/api"
    reports = tmp_path / "reports"
    proc = run_cli("certify", str(ROOT / "evidence" / "gb200-seed"), "--reports-dir", str(reports),
                   env={"PREFECT_API_URL": url, "PREFECT_API_REQUEST_TIMEOUT": "2"}, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("error: PREFECT_API_URL"), proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: PREFECT_API_URL {url}: no Prefect server answers there (Connection refused; asked "
                      "for 2 s). Start one (`clustercert server`), or unset PREFECT_API_URL for a temporary server "
                      "of the run's own"]
    assert not reports.exists() or list(reports.iterdir()) == []
