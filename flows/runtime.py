"""The Prefect API a command-line certification runs against, started so that a busy machine is slower, never a
failure.

With PREFECT_API_URL set, that server is used as it is. Without it Prefect starts a temporary local server on its
first API call and gives up after PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS (20 s by default): on a loaded
2-core machine the server's imports and database migrations alone take longer, and the run ended in "Timed out while
attempting to connect to ephemeral Prefect API server" (exit 4). Here the temporary server is started before the
flow (`certify` spawns it as soon as the bundle is known to be readable and goes on with its own start-up while the
server starts), with a bound that holds under load (STARTUP_TIMEOUT_S unless the user set Prefect's variable) and a
few tries; the flow's own client is then pointed at it.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clustercert.errors import ClusterCertError, UsageError

__all__ = ["SERVERS", "STARTUP_ATTEMPTS", "STARTUP_TIMEOUT_S", "PrefectStartError", "TemporaryServer",
           "prefect_runtime", "server_log", "spawn_api", "start_api", "stop_all",
           "wait_for_users_server"]

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


def server_log() -> Path:
    """Where the temporary server's own output goes: PREFECT_HOME/clustercert-temporary-server.log."""
    from prefect.settings import get_current_settings

    from flows.server_output import log_path

    return log_path(get_current_settings())


# The settings that turn off the temporary server's services a certification does not use (see `spawn`)
_UNNEEDED_SERVICES = ("PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED", "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED")

# The temporary servers this process started and has not stopped (`stop_all`: `clustercert.cli.safety` stops them
# on a signal)
SERVERS: list[TemporaryServer] = []
# uvicorn's exit status when its start failed: its port was taken between our choice and its bind, or the app's
# own start-up (Prefect's: its database, its settings) failed, which no new port mends
_STARTUP_FAILURE = 3


def _free_port() -> int:
    """A loopback port free now (the server may still find it taken: it then exits with _STARTUP_FAILURE)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_taken(port: int) -> bool:
    """Whether another process holds loopback `port` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


class TemporaryServer:
    """Prefect's server app for this process alone, as Prefect's own temporary server runs it (uvicorn on a free
    local port, the UI off, ephemeral mode, this process' Prefect settings; its SQLite writes wait their turn, see
    `flows.prefect_db.create_app`), in a process of its own (`flows.server_boot`) that reads Prefect's settings,
    opens its log `log` (None: PREFECT_HOME's `server_output.LOG_NAME`, which its settings place) and seeds its
    database, so that this process need not import Prefect to start it: the server's start waits neither for that
    import nor for anything else Prefect's server process would import.

    `spawn` starts it and returns at once, so a certification goes on with its own work while the server starts
    on the other core; `wait` then waits for its health endpoint, up to a deadline on the wall clock."""

    def __init__(self, log: Path | None = None, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.log = log
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.env = env  # the server's whole environment, else this process' (see `spawn`)
        self.cwd = cwd
        self.early: Path | None = None  # its output until it opened its log (see `output`)
        self.warmed = threading.Event()  # set once it answered its first request through Prefect's API (`_warm`)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def spawn(self) -> None:
        self.stop()
        self.port = _free_port()
        # -P: the folder the run was started in is not put first on the server's import path, so a `flows` package
        # of the user's there (a Prefect project's usual folder) does not stand in for clustercert's
        # --parent: the server stops when this process is gone, also when it was killed outright (clustercert.lifeline)
        command = [sys.executable, "-P", "-m", "flows.server_boot", "--port", str(self.port), "--parent",
                   str(os.getpid())]
        if self.log is not None:
            command += ["--log", str(self.log)]
        env = self.env
        if env is None:
            # Prefect's telemetry heartbeat is off unless the user turned it on: a certification does not phone home
            # (on a closed network it only fails, into the log, while the server starts)
            env = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", **os.environ, "PREFECT_UI_ENABLED": "0",
                   "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
            if "prefect.settings" in sys.modules:
                # settings this process may have set in-process (temporary_settings) travel in the environment; a
                # process that has not imported Prefect has none, and the server reads the same sources it would
                from prefect.settings import get_current_settings

                env.update(get_current_settings().to_environment_variables(exclude_unset=True))
            # Two of the services Prefect runs in a temporary server serve nothing a certification's run needs: the
            # event persister (every state change's event written to the database, beside the run's own records,
            # which the task-run recorder keeps writing) and the automations' triggers (a temporary server has none).
            # Off unless the user set them: fewer writes to a database the API also writes to.
            for name in _UNNEEDED_SERVICES:
                env.setdefault(name, "false")
            command.append("--seed")  # a fresh home's database from the template (`flows.server_boot.main`)
        # From its early output file to its record in SERVERS, a SIGINT or SIGTERM waits (`lifeline.signals_wait`): the
        # command's stop (`cli.safety`) then stops this server and removes that file with it
        from clustercert.lifeline import signals_wait

        with signals_wait():
            try:
                fd, early = tempfile.mkstemp(prefix="clustercert-prefect-server.", suffix=".log")
                self.early = Path(early)
                command += ["--early", early]
            except OSError:  # no writable temporary folder: what it says before it opens its log is lost, not the run
                fd, self.early = os.open(os.devnull, os.O_WRONLY), None
            try:
                self.process = subprocess.Popen(command, env=env, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=fd,
                                                stderr=fd)
            except BaseException:
                from flows.server_output import drop_if_empty

                drop_if_empty(self.early)  # no process wrote to it
                raise
            finally:
                os.close(fd)
            SERVERS.append(self)
        self.warmed = threading.Event()
        threading.Thread(target=self._warm, args=(self.process, self.api_url, self.warmed), daemon=True,
                         name="clustercert-warm-server").start()

    def _warm(self, process: subprocess.Popen[bytes], url: str, warmed: threading.Event) -> None:
        """The server's first request through Prefect's API routers costs it a fraction of a second, once (its health
        check does not go through them): asked as soon as it answers, while this process still gets the run ready,
        on the server's core, instead of by the flow's first call (Prefect's client asks this one, the API's
        version)."""
        while self.process is process and process.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}/admin/version", timeout=60) as response:
                    if response.status == 200:
                        warmed.set()
                    return
            except (OSError, ValueError):
                time.sleep(0.1)

    def output(self) -> Path:
        """Where the server's output is: its log, or, when it ended before it knew where that is (Prefect's own
        import or settings failed), the file it wrote to until then."""
        early = self.early
        if early is not None and early.is_file() and early.stat().st_size:
            return early
        return self.log if self.log is not None else server_log()

    def answers(self) -> bool:
        """Whether the server answers its health check now."""
        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=1) as response:
                return bool(response.status == 200)
        except (OSError, ValueError):
            return False

    def wait(self, timeout_s: float) -> str:
        """The API URL once the server answers its health check; RuntimeError when it exits or `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            process = self.process
            if process is None:
                raise RuntimeError("the server was not started")
            code = process.poll()
            if code == _STARTUP_FAILURE and _port_taken(self.port):  # taken meanwhile: another port, same deadline
                self.spawn()
                continue
            if code is not None:  # its own start-up failed: starting it again, on any port, fails the same way
                raise RuntimeError(f"the server process exited with code {code}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=5) as response:
                    if response.status == 200:
                        return self.api_url
            except (OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                raise RuntimeError(f"it did not answer within {timeout_s:g} s")
            time.sleep(0.1)

    def stop(self) -> None:
        """The server stopped; its early output file removed when empty (what a start that failed early wrote is
        kept: `output` names it)."""
        process, self.process = self.process, None
        if self in SERVERS:
            SERVERS.remove(self)
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        from flows.server_output import drop_if_empty

        drop_if_empty(self.early)  # gone already when the server moved it into its log


def stop_all() -> None:
    """Every temporary server this process started stopped, each as `TemporaryServer.stop` does it: a certification
    stopped by a signal while its server still started (before the server moved its early output into its log)
    left that empty file in the temporary folder, one per stopped run."""
    for server in list(SERVERS):
        server.stop()


def _api_url_set() -> bool:
    """Whether the user set PREFECT_API_URL: in Prefect's settings when this process has read them, else in the
    environment (a profile or prefect.toml that sets it is found by the server's process, which then serves
    nothing, and by `prefect_runtime`, which stops it)."""
    if "prefect.settings" in sys.modules:
        from prefect.settings import PREFECT_API_URL

        return bool(PREFECT_API_URL.value())
    return bool(os.environ.get("PREFECT_API_URL", "").strip())


def spawn_api() -> TemporaryServer | None:
    """The temporary server started now (see `TemporaryServer`) when no PREFECT_API_URL is set, else None; hand it
    to `prefect_runtime`, which waits for it. Imports no part of Prefect."""
    if _api_url_set():
        return None
    server = TemporaryServer()
    server.spawn()
    atexit.register(server.stop)
    return server


def start_api(timeout_s: int | None = None, attempts: int = STARTUP_ATTEMPTS,
              server: TemporaryServer | None = None) -> str | None:
    """The API URL of this process' temporary server (`server` if one was spawned, else one started now) when no
    PREFECT_API_URL is set, else None. A start that fails (the server exits, or does not answer within the bound)
    is stopped and tried again, `attempts` times in all; then PrefectStartError says so in one line.

    The server's own output (its errors, and the tracebacks it prints when it is stopped mid-request, as on SIGTERM)
    goes to `server_log()`, never to the user's terminal: it is Prefect's, not the certification's."""
    if server is None:
        server = spawn_api()
        if server is None:
            return None
    bound = startup_timeout() if timeout_s is None else timeout_s
    problem = ""
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            time.sleep(1.0)
            server.spawn()
        try:
            return server.wait(bound)
        except RuntimeError as exc:
            problem = str(exc).splitlines()[0][:300]
            server.stop()
    raise PrefectStartError(
        f"Prefect's temporary API server did not start in {attempts} tries of up to {bound} s each ({problem}; its "
        f"output: {server.output()}). Raise {_TIMEOUT_VAR}, or start a server (`clustercert server`) and set "
        "PREFECT_API_URL")


_NO_ANSWER_HINT = "Start one (`clustercert server`), or unset PREFECT_API_URL for a temporary server of the run's own"


def wait_for_users_server(url: str | None = None, bound_s: float | None = None, hint: str = _NO_ANSWER_HINT) -> None:
    """Return once the server at PREFECT_API_URL `url` (Prefect's setting by default) answers anything (a status,
    even an error: what it says is Prefect's to judge), asking again each second while it cannot be reached (a
    server restarting: the run waits for it), for up to `bound_s` seconds (by default Prefect's
    PREFECT_API_REQUEST_TIMEOUT, 60 s unless set); then UsageError, in one line: no flow was started against it.
    Prefect's client said "internal error (RuntimeError): Failed to reach API" after 5 s, exit 4. `hint` ends the
    refusal: what to do instead."""
    import urllib.error

    if url is None or bound_s is None:
        from prefect.settings import PREFECT_API_REQUEST_TIMEOUT, PREFECT_API_URL

        url = str(PREFECT_API_URL.value()) if url is None else url
        bound_s = float(PREFECT_API_REQUEST_TIMEOUT.value()) if bound_s is None else bound_s
    deadline = time.monotonic() + bound_s
    while True:
        try:
            with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=max(1.0, min(5.0, bound_s))):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except ValueError:
            raise UsageError(f"PREFECT_API_URL {url}: expected the http(s) URL of a Prefect server's API, such as "
                             "http://127.0.0.1:4200/api") from None
        except OSError as exc:  # refused, no such host, timed out
            if time.monotonic() + 1.0 > deadline:
                reason = getattr(exc, "reason", exc)
                problem = getattr(reason, "strerror", None) or str(reason) or exc.__class__.__name__
                raise UsageError(f"PREFECT_API_URL {url}: no Prefect server answers there ({problem}; asked for "
                                 f"{bound_s:g} s). {hint}") from None
        time.sleep(1.0)


@contextmanager
def prefect_runtime(server: TemporaryServer | None = None,
                    meanwhile: Sequence[Callable[[], None]] = ()) -> Iterator[str | None]:
    """The API started (see `start_api`; `server`, one `spawn_api` started earlier, is waited for) and the flows'
    client pointed at it; unless the user set PREFECT_FLOWS_HEARTBEAT_FREQUENCY, flow-run heartbeats off: a
    certification is a short local process, and each flow's heartbeat thread costs up to a second at its end (four
    flows per certification). Yields the temporary server's API URL, or None; the server is stopped after.

    `meanwhile` are steps of work the run needs later (imports that take seconds), taken one by one while the
    temporary server is starting and not yet answering, on the other core: its start takes seconds, in which this
    process would only wait. A server that answers already (a run whose own start-up took as long: a cluster's
    bundle is hashed first) is not kept waiting, and the steps left are done where the run needs them.
    """
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    if server is not None and PREFECT_API_URL.value():  # set where only Prefect looks: the user's server is used
        server.stop()
        server = None
    elif server is None:
        server = spawn_api()
    try:
        for step in meanwhile:
            if server is None or server.answers():
                break
            step()
        url = start_api(server=server) if server is not None else None
        if url is None:
            wait_for_users_server()
    except BaseException:
        if server is not None:
            server.stop()
        raise
    updates: dict[Any, Any] = {} if _HEARTBEAT_VAR in os.environ else {PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
    if url is not None:
        updates[PREFECT_API_URL] = url
    try:
        with temporary_settings(updates=updates):
            yield url
    finally:
        if server is not None:
            server.stop()
