"""The flow tests use the session's real Prefect server (tests/conftest.py `prefect_server`); a test that needs a
server as an operator starts one (its UI on, Prefect's analytics setting left to clustercert) starts its own with
`operator_server`, its requests to the internet caught by a `TelemetryDouble`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.conftest import ROOT, PrefectServer, free_port, stop

__all__ = ["PrefectServer", "TelemetryDouble", "operator_env", "operator_server", "stop"]

# What the test sandbox sets for every process so that nothing phones home: left out of an operator's environment,
# whose server must keep quiet on its own
_QUIETING = ("PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK", "PREFECT_UI_ENABLED", "PREFECT_API_URL")


class TelemetryDouble:
    """Every request a process sends to the internet, caught: an HTTP proxy on 127.0.0.1 (the process' HTTPS_PROXY
    and HTTP_PROXY, loopback excepted) that records what it was asked for and forwards nothing. Prefect's server
    sends its telemetry to a fixed address (https://sens-o-matic.prefect.io/, `prefect.server.services.telemetry`);
    through the proxy its request is a CONNECT to that host, answered 403."""

    def __init__(self) -> None:
        asked: list[str] = []
        self.asked = asked

        class Handler(BaseHTTPRequestHandler):
            def _refuse(self) -> None:
                asked.append(f"{self.command} {self.path}")
                self.send_response(403)
                self.end_headers()

            do_CONNECT = do_GET = do_POST = do_PUT = _refuse

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def env(self) -> dict[str, str]:
        """The proxy settings that send a process' requests to the internet here (every other proxy setting, in
        either case, is left out by `operator_env`)."""
        return {"HTTPS_PROXY": self.url, "HTTP_PROXY": self.url, "NO_PROXY": "127.0.0.1,localhost"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def operator_env(double: TelemetryDouble, **extra: str) -> dict[str, str]:
    """This environment as an operator's shell has it: without the sandbox's quieting settings and proxies, with
    `double`'s proxy and `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in _QUIETING and not k.lower().endswith("_proxy")}
    return {**env, "PYTHONPATH": str(ROOT), **double.env(), **extra}


def home_with_a_database(home: Path) -> Path:
    """`home` made, holding a Prefect database already (this release's empty one: the bootstrap's template, made
    now when the bootstrap could not): `clustercert server` does not seed it."""
    from flows.prefect_db import build_template, template_path

    home.mkdir(parents=True)
    template = template_path() if template_path().is_file() else build_template(home.parent / "template.db")
    shutil.copyfile(template, home / "prefect.db")
    return home


@contextmanager
def operator_server(home: Path, double: TelemetryDouble, **extra: str) -> Iterator[PrefectServer]:
    """`clustercert server` on a free loopback port as an operator starts it (UI on, `operator_env`), in `home`
    (its output in home/server.log), until the block ends."""
    port = free_port()
    env = operator_env(double, PREFECT_HOME=str(home), **extra)
    with (home / "server.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "clustercert", "server", "--port", str(port)], cwd=ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = PrefectServer(api_url=f"http://127.0.0.1:{port}/api", home=home)
    try:
        deadline = time.monotonic() + 300  # a loaded 2-core machine: slow, never a failure
        while True:
            try:
                with urllib.request.urlopen(f"{server.api_url}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, server.log_text()[-3000:]
            assert time.monotonic() < deadline, "clustercert server did not answer within 300 s"
            time.sleep(0.25)
        yield server
    finally:
        stop(proc)
