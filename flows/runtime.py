"""The Prefect API a command-line certification runs against, started so that a busy machine is slower, never a
failure.

With PREFECT_API_URL set, that server is used as it is. Without it Prefect starts a temporary local server on its
first API call and gives up after PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS (20 s by default): on a loaded
2-core machine the server's imports and database migrations alone take longer, and the run ended in "Timed out while
attempting to connect to ephemeral Prefect API server" (exit 4). Here the temporary server is started before the
flow, with a bound that holds under load (STARTUP_TIMEOUT_S unless the user set Prefect's variable) and a few tries;
the flow's own client then reuses it (Prefect keeps one temporary server per process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clustercert.errors import ClusterCertError

__all__ = ["STARTUP_ATTEMPTS", "STARTUP_TIMEOUT_S", "PrefectStartError", "prefect_runtime", "server_log", "start_api"]

STARTUP_TIMEOUT_S = 300
STARTUP_ATTEMPTS = 3
_TIMEOUT_VAR = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
_HEARTBEAT_VAR = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"


class PrefectStartError(ClusterCertError):
    """Prefect's temporary API server did not start (the machine, not the evidence): exit 4."""

    exit_code = 4


def startup_timeout() -> int:
    """The bound on one start of the temporary server: the user's PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
    else STARTUP_TIMEOUT_S."""
    raw = os.environ.get(_TIMEOUT_VAR, "").strip()
    try:
        return max(1, int(raw)) if raw else STARTUP_TIMEOUT_S
    except ValueError:
        raise ClusterCertError(f"{_TIMEOUT_VAR}: expected a number of seconds, got '{raw}'. Fix or unset it") \
            from None


@contextmanager
def _child_output_to(log: Path) -> Iterator[None]:
    """Point this process' stdout and stderr (file descriptors 1 and 2) at `log` while a child is spawned, so that
    the child writes there; they are restored at once (the window is the fork and exec of one process)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


def server_log() -> Path:
    """Where the temporary server's own output goes: PREFECT_HOME/clustercert-temporary-server.log."""
    from prefect.settings import PREFECT_HOME

    return Path(PREFECT_HOME.value()) / "clustercert-temporary-server.log"


def start_api(timeout_s: int | None = None, attempts: int = STARTUP_ATTEMPTS) -> str | None:
    """Start Prefect's temporary server for this process when no PREFECT_API_URL is set; returns its API URL (None
    when a configured server is used). A failed start is stopped and tried again, `attempts` times in all.

    The server's own output (its errors, and the tracebacks it prints when it is stopped mid-request, as on SIGTERM)
    goes to `server_log()`, never to the user's terminal: it is Prefect's, not the certification's."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return None
    log = server_log()

    class LoggedServer(SubprocessASGIServer):
        # Prefect keeps its temporary servers by port in a dict of the base class, so the flow's own client
        # (`SubprocessASGIServer()`) finds this one.
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            with _child_output_to(log):
                return super()._run_uvicorn_command()

    bound = startup_timeout() if timeout_s is None else timeout_s
    problem = ""
    for attempt in range(1, attempts + 1):
        server = LoggedServer()
        try:
            server.start(timeout=bound)
        except RuntimeError as exc:  # Prefect raises RuntimeError for a start that timed out or died
            problem = str(exc).splitlines()[0][:300]
            server.stop()
            if attempt < attempts:
                time.sleep(1.0)
            continue
        return str(server.api_url)
    raise PrefectStartError(
        f"Prefect's temporary API server did not start in {attempts} tries of up to {bound} s each ({problem}; its "
        f"output: {log}). Raise {_TIMEOUT_VAR}, or start a server (`prefect server start`) and set PREFECT_API_URL")


@contextmanager
def prefect_runtime() -> Iterator[str | None]:
    """The API started (see `start_api`) and, unless the user set PREFECT_FLOWS_HEARTBEAT_FREQUENCY, flow-run
    heartbeats off: a certification is a short local process, and each flow's heartbeat thread costs up to a second
    at its end (four flows per certification). Yields the temporary server's API URL, or None."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    url = start_api()
    if _HEARTBEAT_VAR in os.environ:
        yield url
        return
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield url
