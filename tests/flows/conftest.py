"""A real Prefect server (SQLite, loopback) for the flow tests, started once per session and always stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class PrefectServer:
    api_url: str
    home: Path

    def env(self) -> dict[str, str]:
        """What a client process needs to use this server (and its result storage)."""
        return {"PREFECT_API_URL": self.api_url, "PREFECT_HOME": str(self.home),
                "PREFECT_LOGGING_TO_API_ENABLED": "true", "PREFECT_RUNNER_POLL_FREQUENCY": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group we started, then SIGKILL what is left after 10 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_UI_ENABLED": "false",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("PREFECT_API_URL", None)
    log = (home / "server.log").open("wb")
    prefect = str(Path(sys.executable).with_name("prefect"))
    proc = subprocess.Popen([prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
            time.sleep(0.25)
        yield PrefectServer(api_url=url, home=home)
    finally:
        stop(proc)
        log.close()
