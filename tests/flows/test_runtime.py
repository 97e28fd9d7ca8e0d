"""The temporary Prefect server of a command-line run: started under a bound, tried again, or refused in one line."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flows.prefect_db import template_path
from flows.runtime import TemporaryServer
from tests.conftest import ROOT, free_port, wait_ended

_SCRIPT = """
import sys, urllib.request
from flows.runtime import PrefectStartError, start_api
try:
    url = start_api(timeout_s=int(sys.argv[1]), attempts=int(sys.argv[2]))
except PrefectStartError as exc:
    print("refused:", exc)
    raise SystemExit(4)
if url is None:
    print("configured")
    raise SystemExit(0)
with urllib.request.urlopen(url + "/health", timeout=10) as response:
    print("health", response.status, url)
"""


def _python(script: str, *args: str, env: dict[str, str], python: tuple[str, ...] = (),
            cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`script` in a fresh interpreter (with `python` options), as a user's process: no PREFECT_API_URL unless
    given, clustercert on PYTHONPATH."""
    full = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    full.update({"PYTHONPATH": str(ROOT), **env})
    return subprocess.run([sys.executable, *python, "-c", script, *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=600, check=False)


def _start(timeout_s: int, attempts: int, **env: str) -> subprocess.CompletedProcess[str]:
    return _python(_SCRIPT, str(timeout_s), str(attempts), env=env)


_EARLY = """
import urllib.request
from prefect.settings import PREFECT_API_URL
from flows.runtime import SERVERS, prefect_runtime, spawn_api
server = spawn_api()  # as certify does once the bundle is readable: the server starts while the run gets ready
process = server.process
import flows.certify  # the run's own imports meanwhile
server.wait(300)  # ... which took longer than the server's start (a cluster's bundle): it answers already
seen, asked, answers = [], [], server.answers
server.answers = lambda: asked.append(answers()) or asked[-1]  # what the run was told, each time it asked
with prefect_runtime(server, [lambda: seen.append("step")]) as url:
    assert PREFECT_API_URL.value() == url and SERVERS == [server], (PREFECT_API_URL.value(), url, SERVERS)
    with urllib.request.urlopen(url + "/health", timeout=10) as response:
        print("health", response.status, url)
    print("answers:", any(answers() for _ in range(10)))  # its one-second health check, on a busy machine too
print("asked:", asked, "steps taken meanwhile:", seen)
assert process.poll() is not None and SERVERS == [], "the server outlived its run"
print("stopped")
"""


def test_the_temporary_server_spawned_early_answers_the_flows_client_and_stops_after(tmp_path: Path) -> None:
    """Spawned before the run's imports, answering once they are done: the flows' client is pointed at it, the
    work that was to be done meanwhile is left for later (a server that answers is not kept waiting), and the
    server is stopped when the run ends."""
    proc = _python(_EARLY, env={"PREFECT_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("health 200 http://127.0.0.1:") and lines[1] == "answers: True", proc.stdout
    # Told it answers, the run takes no step. A health check slower than its second (seen once in CI, on a machine
    # at a seventh of its speed) tells it no: then it takes the step, and asks again before the next
    assert lines[2:] in (["asked: [True] steps taken meanwhile: []", "stopped"],
                         ["asked: [False] steps taken meanwhile: ['step']", "stopped"]), proc.stdout
    # a fresh home: the server started on a copy of the template (flows/prefect_db.py). Its block types got their
    # ids when the template was made; a database migrated from nothing would have new ones.
    types = "SELECT id, slug FROM block_type ORDER BY slug"
    with sqlite3.connect(tmp_path / "prefect.db") as db, sqlite3.connect(template_path()) as template:
        assert db.execute(types).fetchall() == template.execute(types).fetchall()


_MEANWHILE = """
import sys
from prefect.settings import PREFECT_API_URL
from flows.runtime import SERVERS, prefect_runtime, spawn_api
seen = []

def step():  # taken with the server spawned, not yet answering, and the flows' client not yet pointed at it
    seen.append((len(SERVERS), SERVERS[0].process.poll() if SERVERS and SERVERS[0].process else "none",
                 server.answers(), PREFECT_API_URL.value()))
    if sys.argv[1] == "fails":
        raise KeyError("meanwhile failed")

server = spawn_api()
try:
    with prefect_runtime(server, [step, step]) as url:
        print("ran", seen, url.startswith("http://127.0.0.1:"))
except KeyError as exc:
    print("raised", exc, seen)
print("left", SERVERS)
"""


@pytest.mark.parametrize("how", ["works", "fails"])
def test_work_meanwhile_runs_while_the_server_starts_and_a_failure_there_stops_it(how: str, tmp_path: Path) -> None:
    proc = _python(_MEANWHILE, how, env={"PREFECT_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    # one server process, running (poll() None), not answering, and no API URL set yet when the step ran
    step = "(1, None, False, None)"
    if how == "works":  # both steps (a step takes no time: the server is still starting after both)
        assert lines == [f"ran [{step}, {step}] True", "left []"], proc.stdout
    else:
        assert lines == [f"raised 'meanwhile failed' [{step}]", "left []"], proc.stdout  # the server stopped
    # a server that answers already: test_the_temporary_server_spawned_early_answers_the_flows_client_and_stops_after


def test_a_start_that_cannot_meet_its_bound_is_tried_again_then_refused_in_one_line() -> None:
    # One second is less than the server's own imports take: every try times out.
    proc = _start(1, 2)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "did not start in 2 tries of up to 1 s each" in proc.stdout
    assert "PREFECT_API_URL" in proc.stdout and "Traceback" not in proc.stderr


def test_a_configured_server_is_used_as_it_is() -> None:
    proc = _start(1, 1, PREFECT_API_URL="http://127.0.0.1:9/api")
    assert (proc.returncode, proc.stdout.strip()) == (0, "configured"), proc.stdout + proc.stderr


def test_the_servers_own_errors_go_to_its_log_not_the_terminal(tmp_path: Path) -> None:
    # A database the server cannot open: it prints a traceback and exits. That is Prefect's output, not the run's:
    # it lands in PREFECT_HOME's log, which the refusal names; the terminal gets the one line. Its start-up failed,
    # so it is refused at once, not started again and again until the bound (uvicorn's exit status is the one a
    # taken port gives).
    proc = _start(120, 1, PREFECT_HOME=str(tmp_path),
                  PREFECT_SERVER_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{tmp_path}/missing/prefect.db")
    log = tmp_path / "clustercert-temporary-server.log"
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stdout.startswith("refused: Prefect's temporary API server did not start in 1 tries of up to 120 s "
                                  "each (the server process exited with code 3;")
    assert f"its output: {log}" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr and proc.stderr == ""
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "unable to open database file" in text
    assert text.count("Application startup failed") == 1


class _Exited:
    def __init__(self, code: int) -> None:
        self.code = code

    def poll(self) -> int:
        return self.code


def test_a_start_that_failed_on_a_taken_port_goes_to_another_port_and_no_other_failure_does(tmp_path: Path) -> None:
    server = TemporaryServer(tmp_path / "server.log")
    spawned: list[int] = []

    def spawn() -> None:  # the next start fails with another status, which ends the wait
        spawned.append(server.port)
        server.process = _Exited(7)  # type: ignore[assignment]

    server.spawn = spawn  # type: ignore[method-assign]
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        server.port = held.getsockname()[1]
        server.process = _Exited(3)  # type: ignore[assignment]
        with pytest.raises(RuntimeError, match="exited with code 7"):
            server.wait(30)
        assert spawned == [server.port]  # started again once, on another port
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        server.port = free.getsockname()[1]
    server.process = _Exited(3)  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="exited with code 3"):
        server.wait(30)
    assert len(spawned) == 1  # the port was free: the server's own start-up failed, and is not tried again


_UNIMPORTED = """
import sys
from flows.runtime import spawn_api
server = spawn_api()  # as certify does, before anything has imported Prefect
print("prefect imported:", sorted(m for m in sys.modules if m == "prefect" or m.startswith("prefect.")))
print("answers:", server.wait(300) == server.api_url)
# its first request through Prefect's API asked and answered in the background (the flow's first call would)
print("warmed:", server.warmed.wait(120))
server.stop()
print("early output left:", server.early.exists())
"""


def test_the_temporary_server_is_started_without_importing_prefect(tmp_path: Path) -> None:
    """The server's start does not wait for this process' `import prefect` (0.7-1.0 s here): its own process reads
    Prefect's settings (flows/server_boot.py), and answers; its first API request is made as soon as it does."""
    proc = _python(_UNIMPORTED, env={"PREFECT_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["prefect imported: []", "answers: True", "warmed: True",
                                        "early output left: False"]
    assert (tmp_path / "prefect.db").is_file() and (tmp_path / "clustercert-temporary-server.log").is_file()


_PROFILE = """
import sys
from flows.runtime import SERVERS, prefect_runtime, spawn_api
server = spawn_api()  # the environment sets no PREFECT_API_URL: started
process = server.process
with prefect_runtime(server) as url:  # Prefect's settings read: the profile's server is the user's
    print("url:", url, "running:", SERVERS, "stopped:", process.poll() is not None)
"""


def test_a_server_set_in_a_profile_is_used_and_the_spawned_one_stopped(tmp_path: Path) -> None:
    port = free_port()
    users = _serve_later(port, 200, after_s=0)  # the user's server: asked whether it answers, once
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(f'active = "mine"\n[profiles.mine]\nPREFECT_API_URL = "http://127.0.0.1:{port}/api"\n')
    proc = _python(_PROFILE, env={"PREFECT_HOME": str(tmp_path / "home"), "PREFECT_PROFILES_PATH": str(profiles)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    users.join(timeout=10)
    assert not users.is_alive()  # the profile's server was the one asked
    # prefect_runtime yields the temporary server's URL, or None for the user's own (Prefect's client reads it)
    assert proc.stdout.splitlines() == ["url: None running: [] stopped: True"]


def test_a_server_that_failed_before_it_knew_its_log_is_refused_naming_what_it_wrote(tmp_path: Path) -> None:
    # A setting Prefect cannot read: the server's process fails at its first import of Prefect, before it knows
    # where its log goes; what it wrote is kept and named, and the terminal gets the one line.
    proc = _start(120, 1, PREFECT_HOME=str(tmp_path), PREFECT_API_REQUEST_TIMEOUT="soon", TMPDIR=str(tmp_path))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stdout.startswith("refused: Prefect's temporary API server did not start in 1 tries of up to 120 s "
                                  "each (the server process exited with code 1;"), proc.stdout
    early = [p for p in tmp_path.iterdir() if p.name.startswith("clustercert-prefect-server.")]
    assert len(early) == 1 and f"its output: {early[0]})" in proc.stdout
    assert "request_timeout" in early[0].read_text() and "Traceback" not in proc.stdout + proc.stderr


_NO_TMP = """
import tempfile
from flows import runtime

def mkstemp(*args, **kwargs):
    raise FileNotFoundError("No usable temporary directory found")

tempfile.mkstemp = mkstemp
server = runtime.spawn_api()
print("answers:", server.wait(300) == server.api_url, "early:", server.early)
server.stop()
"""


def test_without_a_temporary_folder_the_server_still_starts(tmp_path: Path) -> None:
    """Its output before it opens its log goes nowhere then; the log still gets the rest, and the run goes on."""
    proc = _python(_NO_TMP, env={"PREFECT_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["answers: True early: None"]
    assert (tmp_path / "clustercert-temporary-server.log").is_file()


_ELSEWHERE = """
from flows.runtime import spawn_api
server = spawn_api()
print("answers:", server.wait(300) == server.api_url)
server.stop()
"""


def test_a_flows_folder_of_the_users_where_the_run_starts_does_not_stand_in_for_clustercerts(tmp_path: Path) -> None:
    """A Prefect project often has a `flows` package; a certification started in its folder (the `clustercert`
    command does not put that folder on its own import path) starts its server all the same."""
    project = tmp_path / "project"
    (project / "flows").mkdir(parents=True)
    (project / "flows" / "__init__.py").write_text("raise ImportError('the user project flows package')\n")
    proc = _python(_ELSEWHERE, python=("-P",), cwd=project, env={"PREFECT_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["answers: True"]


def _serve_later(port: int, status: int, after_s: float) -> threading.Thread:
    """A plain HTTP server on `port` that starts after `after_s` seconds and answers `status` to one request."""
    import http.server

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    def serve() -> None:
        time.sleep(after_s)
        with http.server.HTTPServer(("127.0.0.1", port), Answer) as httpd:
            httpd.handle_request()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("status", [200, 503])
def test_the_users_server_is_waited_for_while_it_starts_and_any_answer_will_do(status: int) -> None:
    """A server that starts 1.5 s after the run asks (a restart at 3 a.m.) is waited for; an error status is an
    answer (Prefect's to judge), not a missing server."""
    from flows.runtime import wait_for_users_server

    port = free_port()
    server = _serve_later(port, status, after_s=1.5)
    started = time.monotonic()
    wait_for_users_server(f"http://127.0.0.1:{port}/api", bound_s=30)
    assert 1.0 < time.monotonic() - started < 30
    server.join(timeout=10)
    assert not server.is_alive()  # it was asked, and answered


def test_a_users_server_url_that_is_no_url_is_refused_at_once() -> None:
    from clustercert.errors import UsageError
    from flows.runtime import wait_for_users_server

    with pytest.raises(UsageError, match=r"^PREFECT_API_URL ftp-ish: expected the http\(s\) URL of a Prefect"):
        wait_for_users_server("ftp-ish", bound_s=30)


def _early_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("clustercert-prefect-server.*"))


def test_a_run_stopped_while_its_server_starts_leaves_no_file_in_the_temporary_folder(tmp_path: Path) -> None:
    """SIGTERM while the server is still starting, before it moved what it wrote until then into its log: the
    run stops its server, and the empty file the server's early output went to goes with it (each such stopped run
    left one in the user's temporary folder)."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temporary), "PREFECT_HOME": str(tmp_path / "home"),
           "CLUSTERCERT_KEY_DIR": str(tmp_path / "keys")}
    env.pop("PREFECT_API_URL", None)
    run = subprocess.Popen([sys.executable, "-m", "clustercert", "certify", str(ROOT / "evidence" / "gb200-seed"),
                            "--reports-dir", str(tmp_path / "reports")], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not _early_files(temporary):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.01)
    [early] = _early_files(temporary)  # the server is being spawned, or was, and has not yet opened its log (its
    # start takes a second or more: Prefect's settings are read first)
    assert early.stat().st_size == 0
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 143, out + err
    assert err.splitlines()[-1].startswith("stopped by SIGTERM"), err
    assert _early_files(temporary) == []


# The signal comes in the window between the server's early output file and the run's record of the server: just
# after the file is made (no process yet), or just after the process is forked (not yet recorded). The handler runs
# at the next step of the main thread, inside spawn_api().
_SIGNALLED = """
import os, signal, subprocess, sys, tempfile
from clustercert.cli import safety
from flows import runtime

safety.install_signal_handlers()
where = sys.argv[1]
made, forked = tempfile.mkstemp, subprocess.Popen


def mkstemp(*args, **kwargs):
    fd, name = made(*args, **kwargs)
    print("early", name, flush=True)
    if where == "file":
        os.kill(os.getpid(), signal.SIGTERM)
    return fd, name


class Popen(forked):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        print("server", self.pid, flush=True)
        if where == "process":
            os.kill(os.getpid(), signal.SIGTERM)


tempfile.mkstemp, subprocess.Popen = mkstemp, Popen
runtime.spawn_api()
print("not stopped", flush=True)
"""


def _processes_naming(text: str) -> list[int]:
    """Every process whose command line holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("where", ["file", "process"])
def test_a_signal_while_the_server_is_spawned_stops_it_with_its_file(tmp_path: Path, where: str) -> None:
    """SIGTERM right after the server's early output file is made (before its process), or right after its process
    is forked (before the run recorded it): the run stops the server it was starting and removes that file before it
    exits. Before, the first left the file in the temporary folder for good (seen: one of 15 runs stopped as the
    file appeared), the second left the server starting on, orphaned, until its own lifeline noticed."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update({"PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), "PREFECT_HOME": str(tmp_path / "home")})
    run = subprocess.run([sys.executable, "-c", _SIGNALLED, where], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    said = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
    assert run.returncode == 143, run.stdout + run.stderr
    assert run.stderr.splitlines()[-1].startswith("stopped by SIGTERM"), run.stderr
    assert "not stopped" not in run.stdout
    assert "server" in said, run.stdout  # the process was started: the signal waited for it
    early = Path(said["early"])
    assert early.parent == tmp_path
    assert _early_files(tmp_path) == []  # as the run exited, not later
    assert _processes_naming(str(early)) == []  # its server is gone too: stopped by the run, not orphaned


_KILLED = """
import sys
from flows.runtime import spawn_api
server = spawn_api()
print(server.process.pid, server.early, flush=True)
sys.stdin.read()  # until the test kills this process outright
"""


def test_a_run_killed_outright_while_its_server_starts_leaves_no_file_in_the_temporary_folder(tmp_path: Path) -> None:
    """SIGKILL gives the run no chance to stop anything: the server, which watches its parent, removes its empty
    early output file as it leaves."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update({"PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), "PREFECT_HOME": str(tmp_path / "home")})
    with subprocess.Popen([sys.executable, "-c", _KILLED], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as parent:
        assert parent.stdout is not None
        pid, name = parent.stdout.readline().split()
        early = Path(name)
        assert early.parent == tmp_path and early.exists() and early.stat().st_size == 0
        parent.kill()
        parent.wait(timeout=30)
    left = wait_ended([int(pid)], within_s=60)
    for server in left:
        os.kill(server, signal.SIGKILL)
    assert left == []
    assert _early_files(tmp_path) == []
