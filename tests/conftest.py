"""Test isolation: Prefect, keys, reports and HOME all live in a temporary folder, set before anything runs.

One real Prefect server (`clustercert server`, as a user starts one: SQLite, loopback) serves the whole test run,
pytest-xdist's workers included: it is started on the first test that needs it (a subprocess certification, or the
`prefect_server` fixture) and stopped when the session ends, also on failure, interrupt or a kill of the test run.
Without it every certification paid a temporary server start of its own (6-12 s idle, and a timeout risk under
load); one per worker paid a start and the idle services' CPU (3 % of a core each) twice."""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_PARENTS = os.environ.get("CLUSTERCERT_TEST_SANDBOX", "")
if getattr(multiprocessing.current_process(), "_inheriting", False) and os.path.isdir(_PARENTS):
    # A child that multiprocessing spawned from a test process, importing the test module of its target (and so
    # this file) while it unpickles it: its parent's sandbox. Such a child may end without its exit handlers
    # (killed, or os._exit, as tests/unit/test_charts_ahead.py's children do): a sandbox of its own was left in /tmp
    # by each.
    _SANDBOX = Path(_PARENTS)
else:
    _SANDBOX = Path(tempfile.mkdtemp(prefix="clustercert-tests-"))
    os.environ["CLUSTERCERT_TEST_SANDBOX"] = str(_SANDBOX)
    # Removed when this process exits (registered first, so run last: after the session's Prefect server is
    # stopped), unless CLUSTERCERT_KEEP_TEST_SANDBOX is set (the server's log, the keys and run folders, to look
    # at a failure). Each test run left one per process (the controller and each pytest-xdist worker), up to 30 MB
    # each, in /tmp.
    if not os.environ.get("CLUSTERCERT_KEEP_TEST_SANDBOX"):
        atexit.register(shutil.rmtree, _SANDBOX, ignore_errors=True)
# One signing key folder for the whole test run: pytest-xdist's workers inherit it from the controller (set here at
# the controller's import of this file, before it starts them), so a run folder one worker certified verifies on
# another (`seed_certified` is certified once per test run). The first certification creates the development key.
_KEYS = os.environ.setdefault("CLUSTERCERT_TEST_KEY_DIR", str(_SANDBOX / "keys"))
# The test run's owner: the process that imported this file first (pytest-xdist's controller, whose workers are its
# children and inherit its environment; pytest itself without workers). The session's Prefect server is recorded
# in the owner's sandbox, follows the owner's life and is stopped by the owner at the end of the run.
_OWNER = int(os.environ.get("CLUSTERCERT_TEST_OWNER_PID", "0"))
if _OWNER not in (os.getpid(), os.getppid()):  # not a worker of this run's owner (a pytest that a test started)
    _OWNER = os.getpid()
    os.environ["CLUSTERCERT_TEST_OWNER_PID"] = str(_OWNER)
    os.environ["CLUSTERCERT_TEST_SHARED"] = str(_SANDBOX)
_SHARED = Path(os.environ["CLUSTERCERT_TEST_SHARED"])

# Set at import of this conftest, before any test module imports prefect.
ISOLATED_ENV = {
    "HOME": str(_SANDBOX / "home"),
    "PREFECT_HOME": str(_SANDBOX / "prefect"),
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_TO_API_ENABLED": "false",
    # The temporary Prefect server misses its 20 s default start on a loaded 2-core machine.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "CLUSTERCERT_KEY_DIR": _KEYS,
    "CLUSTERCERT_REPORTS_DIR": str(_SANDBOX / "reports"),
}
for _k, _v in ISOLATED_ENV.items():
    os.environ[_k] = _v
Path(ISOLATED_ENV["HOME"]).mkdir(parents=True, exist_ok=True)
os.environ.pop("PREFECT_API_URL", None)


@dataclass(frozen=True)
class PrefectServer:
    api_url: str
    home: Path

    def env(self) -> dict[str, str]:
        """What a client process needs to use this server (and its result storage)."""
        return {"PREFECT_API_URL": self.api_url, "PREFECT_HOME": str(self.home),
                "PREFECT_LOGGING_TO_API_ENABLED": "true", "PREFECT_RUNNER_POLL_FREQUENCY": "1"}

    def log_text(self) -> str:
        """What the server wrote so far (its banner, its errors; retryable ones included)."""
        return (self.home / "server.log").read_text(errors="replace")


def free_port() -> int:
    """A loopback port free now (nothing listens on it once this returns)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group we started, then SIGKILL what is left after 10 s (`_stop_group`), and reap it."""
    if proc.poll() is None:
        _stop_group(proc.pid)
        proc.wait(timeout=10)


_SERVER: list[PrefectServer] = []  # this process' handle on the run's server, once it has asked for it
# Commands that run flows: they use the session's server unless the test names its own PREFECT_API_URL.
FLOW_COMMANDS = frozenset({"certify", "rerun"})


# `clustercert server` (the server a user starts for schedules and repeated certifications: Prefect's `prefect server
# start` with SQLite writes that wait for the lock), as the `clustercert` script runs it, in a process that ends with
# the test run's owner: a test run killed outright (a CI time limit, `kill`) runs no atexit, and left its servers
# running for good. The owner need not be its parent (a worker may start it), so the owner is looked for in /proc;
# once it is gone (or only a zombie), the server's process group (its own session) is sent SIGTERM.
_SERVE = ("import os, signal, sys, threading, time\n"
          "def owner_gone(pid):\n"
          "    try:\n"
          "        return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] == 'Z'\n"
          "    except OSError:\n"
          "        return True\n"
          "def watch(pid):\n"
          "    while not owner_gone(pid):\n"
          "        time.sleep(0.5)\n"
          "    os.killpg(0, signal.SIGTERM)\n"
          "threading.Thread(target=watch, args=(int(sys.argv[1]),), daemon=True).start()\n"
          "from clustercert.cli.app import entry\n"
          "sys.exit(entry(sys.argv[2:]))\n")


def shared_prefect_server() -> PrefectServer:
    """The test run's Prefect server: started by the first process of the run that asks for it (`clustercert
    server` on a free loopback port, which seeds its fresh home's database from the template as a user's first
    start does), under a lock in the owner's sandbox; the others read where it serves. Retryable errors are logged
    (PREFECT_API_LOG_RETRYABLE_ERRORS): `PrefectServer.log_text` shows whether a run met one."""
    if _SERVER:
        return _SERVER[0]
    import fcntl

    home = _SHARED / "prefect-server"
    home.mkdir(parents=True, exist_ok=True)
    record = home / "server.json"
    with (_SHARED / "prefect-server.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when the start fails
        if record.is_file():
            server = PrefectServer(api_url=json.loads(record.read_text())["api_url"], home=home)
        else:
            server, pid = _start_server(home)
            record.write_text(json.dumps({"api_url": server.api_url, "pid": pid}))
    _SERVER.append(server)
    return server


def _start_server(home: Path) -> tuple[PrefectServer, int]:
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_UI_ENABLED": "false",
           "PREFECT_API_LOG_RETRYABLE_ERRORS": "true", "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    log = os.open(home / "server.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        # spawned without a Popen: the process that starts it may end first (a worker), and the owner stops it
        pid = os.posix_spawn(sys.executable, [sys.executable, "-c", _SERVE, str(_OWNER), "server", "--host",
                                              "127.0.0.1", "--port", str(port)], env, setsid=True,
                             file_actions=[(os.POSIX_SPAWN_DUP2, log, 1), (os.POSIX_SPAWN_DUP2, log, 2)])
    finally:
        os.close(log)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 300  # a loaded 2-core machine: slow, never a failure
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if os.waitpid(pid, os.WNOHANG)[0] or time.monotonic() > deadline:
            _stop_group(pid)
            _reap(pid)
            raise RuntimeError(f"clustercert server did not start: {(home / 'server.log').read_text()[-2000:]}")
        time.sleep(0.25)
    if os.getpid() == _OWNER:
        atexit.register(_stop_shared)  # also when the session dies before pytest_sessionfinish
    return PrefectServer(api_url=url, home=home), pid


def _stop_shared() -> None:
    """The owner stops the run's server, whichever process of the run started it."""
    record = _SHARED / "prefect-server" / "server.json"
    if record.is_file():
        pid = int(json.loads(record.read_text())["pid"])
        record.unlink()
        _stop_group(pid)
        _reap(pid)


def _reap(pid: int) -> None:
    """Reap `pid` where it is this process' child (this process started it), else nothing: init reaps it."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _stop_group(pid: int) -> None:
    """SIGTERM the process group of `pid` (a process in its own session), SIGKILL what is left after 10 s. Its end
    is watched in /proc (ended, or only a zombie), so it need not be this process' child."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 10
        while process_running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not process_running(pid):
            break


# The unit files that take tens of seconds (each whole, on one pytest-xdist worker: --dist loadfile) run first among
# the unit files: dispatched last, as their names sort, one kept a worker busy for half a minute while the other,
# out of files, waited.
LONG_UNIT_FILES = ("tests/unit/test_report.py", "tests/unit/test_validation.py")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    def group(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return 0 if not path.startswith("tests/unit/") else 1 if path in LONG_UNIT_FILES else 2

    items[:] = sorted(items, key=group)  # stable: collection order within each group


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.getpid() == _OWNER:  # pytest-xdist's controller finishes after its workers
        _stop_shared()


_WORKER_HOSTILE = [0]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist: a worker finished; add up the hostile inputs it tried (tests/hostile/conftest.py)."""
    _WORKER_HOSTILE[0] += int(getattr(node, "workeroutput", {}).get("hostile_tried", 0))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.hostile.conftest import hostile_tried

    tried = _WORKER_HOSTILE[0] + hostile_tried()
    if tried:
        terminalreporter.write_line(f"hostile corpus: {tried} hostile inputs tried (tests/hostile)")


def _cli_env(args: tuple[str, ...], env: dict[str, str]) -> dict[str, str]:
    """The environment a command runs in: this one, the project on the path, the session's Prefect server for a flow
    command (unless `env` names another), then `env`."""
    server = {}
    if args and args[0] in FLOW_COMMANDS and "PREFECT_API_URL" not in env:
        server = {"PREFECT_API_URL": shared_prefect_server().api_url}
    return {**os.environ, "PYTHONPATH": str(ROOT), **server, **env}


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            prefix: tuple[str, ...] = (), cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m clustercert ARGS` as a user would, from the project root or `cwd` (a flow command against the
    session's Prefect server unless `env` names another), under the command `prefix` if given (`taskset -c 0`)."""
    full_env = _cli_env(args, {"COLUMNS": "200", **(env or {})})
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "clustercert", *args], cwd=cwd or ROOT, env=full_env, capture_output=True,
        text=True, timeout=timeout, check=False,
    )
    if census := os.environ.get("CLUSTERCERT_TEST_CPU_CENSUS"):
        _count_cpu(Path(census), args, before, started)
    return proc


def run_cli_on_terminal(*args: str, env: dict[str, str] | None = None, timeout: float = 300, columns: int = 80,
                        prefix: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess[str], str]:
    """`run_cli` with stderr on a pseudo-terminal of `columns` columns (stdout still a pipe): the command and what
    the terminal showed, escape sequences removed (a live status redraws its line after a CR)."""
    import fcntl
    import re
    import struct
    import termios

    full_env = _cli_env(args, {"COLUMNS": str(columns), "TERM": "xterm", **(env or {})})
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    with subprocess.Popen([*prefix, sys.executable, "-m", "clustercert", *args], cwd=ROOT, env=full_env,
                          stdout=subprocess.PIPE, stderr=follower, text=True) as proc:
        os.close(follower)
        screen = bytearray()
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            screen += chunk
        os.close(leader)
        stdout, _ = proc.communicate(timeout=timeout)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", bytes(screen).decode("utf-8", "replace"))
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, shown), shown


def _count_cpu(census: Path, args: tuple[str, ...], before: resource.struct_rusage, started: float) -> None:
    """One line for the command just run, in `census` (CLUSTERCERT_TEST_CPU_CENSUS): the CPU seconds of the command
    and of every process it waited for (its chart and PDF processes), its wall seconds, the test, the command.
    Where the suite's time goes (docs/development.md, Tests); commands a test starts with Popen (the killed and stopped
    runs, the served deployment) and the session's Prefect server are not counted."""
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    test = os.environ.get("PYTEST_CURRENT_TEST", "-")
    with census.open("a", encoding="utf-8") as out:  # one short write per line: the workers' lines do not mix
        out.write(f"{cpu:.2f}\t{time.monotonic() - started:.2f}\t{test}\t{' '.join(args[:2])}\n")


MINI_RUN = "llama3-70b-fp8-128-r1"


def mini_bundle(tmp_path: Path) -> Path:
    """The smallest bundle that runs every step of a certification: one 128-GPU training run of `clustercert
    simulate` (its files and bundle.yaml), copied into `tmp_path / "mini"`.

    Simulated once per test run: the first process of the run that asks writes it, under a lock in the owner's
    sandbox, and every caller gets a copy of its own (callers change and certify it)."""
    import fcntl

    made = _SHARED / "mini-bundle"
    with (_SHARED / "mini-bundle.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when the simulation fails
        if not (made / "bundle.yaml").is_file():
            shutil.rmtree(made, ignore_errors=True)  # what a failed attempt left
            _simulate_mini(Path(tempfile.mkdtemp(prefix="mini-", dir=_SHARED)), made)
    mini = tmp_path / "mini"
    shutil.copytree(made, mini)
    return mini


def _simulate_mini(work: Path, mini: Path) -> None:
    import yaml

    full = work / "full"
    proc = run_cli("simulate", "--out", str(full), "--gpus", "128", "--repeats", "1", "--fault", "none")
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load((full / "bundle.yaml").read_text())
    doc["runs"] = [r for r in doc["runs"] if r["id"] == MINI_RUN]
    for rel in doc["runs"][0]["files"]:
        (mini / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(full / rel, mini / rel)
    (mini / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))  # written last: the bundle is whole
    shutil.rmtree(work, ignore_errors=True)


def edited_references(into: Path, name: str, old: str, new: str) -> Path:
    """A copy of references/ at `into` with `old` (once in `name`) replaced by `new`: references/ as changed after
    a run, which a re-run of it must not judge with."""
    shutil.copytree(ROOT / "references", into)
    path = into / name
    text = path.read_text()
    assert text.count(old) == 1, f"{name}: {old!r}"
    path.write_text(text.replace(old, new))
    return into


def assert_kept_reference(run_dir: Path, name: str, key: str, edition: tuple[str, str]) -> None:
    """The run folder keeps the bytes of references/`name` it judged with (those a re-run judges with), listed in
    its manifest, whose predicate names the file's id and version (`edition`) and sha256 under `key`."""
    from clustercert.attest.manifest import RUN_PREFIX
    from clustercert.evidence.hashing import sha256_file

    shipped = ROOT / "references" / name
    assert (run_dir / name).read_bytes() == shipped.read_bytes()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    listed = {s["name"]: s["digest"]["sha256"] for s in manifest["subject"]}
    assert listed[RUN_PREFIX + name] == sha256_file(shipped)
    assert manifest["predicate"][key] == {"id": edition[0], "version": edition[1], "sha256": sha256_file(shipped)}


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (state, parent, ...); None when there is no such
    process."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_running(pid: int) -> bool:
    """Whether process `pid` exists and has not ended (a zombie has: it only waits to be reaped), from /proc."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Every process below `pid` now, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(entry.name)) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def command_line(pid: int) -> str:
    """The command line of process `pid`, its arguments joined by spaces ("" when it is gone)."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_ended(pids: list[int], within_s: float) -> list[int]:
    """The processes of `pids` still running after `within_s` seconds (or as soon as none is)."""
    deadline = time.monotonic() + within_s
    while (running := [pid for pid in pids if process_running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return running


@pytest.fixture(scope="session")
def sandbox() -> Path:
    return _SANDBOX


@pytest.fixture(scope="session")
def prefect_server() -> PrefectServer:
    """The session's real Prefect server (see `shared_prefect_server`)."""
    return shared_prefect_server()


@pytest.fixture(scope="session")
def seed_certified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`certify --redact --verbose` of a copy of evidence/gb200-seed as a person runs it at an 80-column terminal:
    exit code, the printed summary, run folder, results (and `out`, what `--json` prints, from results.json).

    Certified once per test run: under pytest-xdist the first worker that needs it certifies it, under a lock in
    the run's shared temporary folder, and the others read what it recorded (the tests only read the folder)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _certify_seed(tmp_path_factory.mktemp("seed"))
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent / "seed-certified"  # the workers' common basetemp
    shared.mkdir(exist_ok=True)
    record = shared / "record.json"
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when the certification fails
        if record.is_file():
            done = json.loads(record.read_text())
            return {**done, "bundle": Path(done["bundle"]),
                    "run_dir": None if done["run_dir"] is None else Path(done["run_dir"])}
        found = _certify_seed(Path(tempfile.mkdtemp(prefix="seed-", dir=shared)))
        record.write_text(json.dumps({**found, "bundle": str(found["bundle"]),
                                      "run_dir": None if found["run_dir"] is None else str(found["run_dir"])}))
        return found


def _certify_seed(work: Path) -> dict[str, Any]:
    bundle = work / "bundle"
    shutil.copytree(ROOT / "evidence" / "gb200-seed", bundle)
    reports = work / "reports"
    proc = run_cli("certify", str(bundle), "--redact", "--verbose", "--reports-dir", str(reports),
                   env={"COLUMNS": "80"})
    folders = [p for p in reports.iterdir() if p.is_dir()] if reports.is_dir() else []
    run_dir = folders[0] if len(folders) == 1 else None
    results = json.loads((run_dir / "results.json").read_text()) if run_dir is not None else {}
    out = {k: results[k] for k in ("outcome", "run_id", "valid_until", "checks", "workloads")} if results else {}
    return {"bundle": bundle, "run_dir": run_dir, "out": {**out, "run_dir": str(run_dir)}, "stdout": proc.stdout,
            "stderr": proc.stderr, "rc": proc.returncode, "results": results}


def page_one_text(run_dir: str | Path) -> str:
    """The report's first page as pdftotext reads it, its words joined by single spaces."""
    if shutil.which("pdftotext") is None:
        reason = "reading page one needs pdftotext (apt-get install -y poppler-utils)"
        if os.environ.get("CLUSTERCERT_REQUIRE_REAL_SAMPLES") == "1":
            pytest.fail(reason + "; CLUSTERCERT_REQUIRE_REAL_SAMPLES=1 requires it")
        pytest.skip(reason)
    done = subprocess.run(["pdftotext", "-f", "1", "-l", "1", str(Path(run_dir) / "report.pdf"), "-"],
                          capture_output=True, text=True, timeout=60, check=True)
    return " ".join(done.stdout.replace("\u200b", "").split())
