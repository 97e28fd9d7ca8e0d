"""A command's safety net: the output folder and keys checked before any work; SIGINT and SIGTERM stop a run
promptly (exit 130 and 143) leaving no unfinished run folder; crash logs written under new, unique names."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from clustercert import lifeline
from clustercert.errors import SigningError, UsageError

__all__ = ["SIGNAL_EXIT_CODES", "check_key_dir", "check_reports_dir", "discard_unfinished", "install_signal_handlers",
           "output_folder", "own_prefect_sigterm", "quiet_on_stop", "running", "scratch", "write_crash_log"]

SIGNAL_EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal number, as shells report it
_ENVELOPE = "manifest.dsse.json"  # attest.manifest.ENVELOPE (not imported: this module loads before anything heavy)
_state: dict[str, Path | None] = {"run_dir": None}
_scratch: list[Path] = []  # the command's own temporary folders (`scratch`), removed on a signal too
_outputs: list[Path] = []  # the output folder a command is writing (`output_folder`), removed on a signal
_stopping: dict[str, str] = {}  # once a signal came: its "name", then the "line" that tells what it stopped
_quieted: list[Callable[[], None]] = []  # what writes to the terminal while a command runs (`quiet_on_stop`)


def check_reports_dir(reports: Path) -> None:
    """`reports` exists (created if need be) and a file can be created in it; else a UsageError, before any work."""
    hint = "Give a writable folder with --reports-dir or CLUSTERCERT_REPORTS_DIR"
    try:
        reports.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{reports}: expected a folder for run folders, got a file. {hint}") from None
    except OSError as exc:
        raise UsageError(f"{reports}: expected a folder for run folders, cannot create it ({exc.strerror}). "
                         f"{hint}") from None
    if not reports.is_dir():
        raise UsageError(f"{reports}: expected a folder for run folders, got something else. {hint}")
    try:
        with lifeline.signals_wait():  # a signal waits for the probe's removal: none is left in the user's folder
            fd, probe = tempfile.mkstemp(prefix=".clustercert-probe-", dir=reports)
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"{reports}: expected a writable folder for run folders, got {exc.strerror}. {hint}") from None


def check_key_dir(key_dir: Path) -> None:
    """The key directory, when it exists, is a folder (a file there would fail only at signing time) that only its
    owner may write into (`check_key_dir_private`)."""
    if key_dir.exists() and not key_dir.is_dir():
        raise SigningError(f"{key_dir}: expected the key directory, got a file. "
                           "Set CLUSTERCERT_KEY_DIR to a folder (created by `clustercert keys init`)")
    from clustercert.attest.signing import check_key_dir_private

    check_key_dir_private(key_dir)


def discard_unfinished(run_dir: Path | None) -> str:
    """Remove `run_dir` unless it is signed (its envelope is written last); what was done, for the user."""
    if run_dir is None or not run_dir.exists():
        return ""
    if (run_dir / _ENVELOPE).is_file():
        return f"; {run_dir} was already signed and is kept"
    shutil.rmtree(run_dir, ignore_errors=True)
    return f"; the unfinished run folder {run_dir} was removed"


@contextlib.contextmanager
def scratch(make: Callable[[], Path]) -> Iterator[Path]:
    """A temporary folder of the command's own, made by `make`, removed with all it holds when the block ends, also
    when SIGINT or SIGTERM stops the command (which ends it with os._exit, past any `finally`): a re-run stopped so
    left its folder in the temporary folder, a whole signed run folder when the signal came late. A signal waits
    while the folder is made and recorded here (`lifeline.signals_wait`), so none comes between the two."""
    with lifeline.signals_wait():
        folder = make()
        _scratch.append(folder)
    try:
        yield folder
    finally:
        _scratch.remove(folder)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def output_folder(folder: Path) -> Iterator[Path]:
    """`folder`, made now (a UsageError where it exists), for the block to fill: removed with what it holds when
    SIGINT or SIGTERM stops the command before the block ends (a stopped `simulate` left half a bundle), kept when
    the block ends, however it ends (its caller decides). Made and recorded with a signal waiting."""
    with lifeline.signals_wait():
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            raise UsageError(f"{folder}: already exists; choose a new folder") from None
        _outputs.append(folder)
    try:
        yield folder
    finally:
        _outputs.remove(folder)


@contextlib.contextmanager
def running(run_dir: Path) -> Iterator[None]:
    """While the block runs, a signal or a failure removes the unfinished `run_dir`."""
    _state["run_dir"] = run_dir
    try:
        yield
    except BaseException:
        discard_unfinished(run_dir)
        raise
    finally:
        _state["run_dir"] = None


@contextlib.contextmanager
def quiet_on_stop(quiet: Callable[[], None]) -> Iterator[None]:
    """While the block runs, a signal calls `quiet` first: what writes to the terminal from another thread (the
    progress display's timer, its live line) writes nothing after the stop's own line, which is the last."""
    _quieted.append(quiet)
    try:
        yield
    finally:
        _quieted.remove(quiet)


def _stop_children() -> None:
    # os._exit skips atexit: stop what this process started (the temporary Prefect server, a local Dask
    # cluster's worker processes) so that none is orphaned.
    if "multiprocessing" in sys.modules:
        import multiprocessing

        for child in multiprocessing.active_children():
            with contextlib.suppress(Exception):
                child.terminate()
    server = sys.modules.get("prefect.server.api.server")
    instances = getattr(getattr(server, "SubprocessASGIServer", None), "_instances", {})
    processes = [getattr(instance, "server_process", None) for instance in list(instances.values())]
    runtime = sys.modules.get("flows.runtime")
    if runtime is not None:
        with contextlib.suppress(Exception):
            runtime.stop_all()  # our temporary server, and the file its output went to while it started
    for process in processes:
        if process is None:
            continue
        with contextlib.suppress(Exception):
            process.terminate()
            try:
                process.wait(timeout=3)
            except Exception:
                process.kill()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if lifeline.defer(functools.partial(_on_signal, signum, frame)):
        return  # a step that makes something (a helper, a file, a folder) is under way: handled as it ends
    code = SIGNAL_EXIT_CODES.get(signal.Signals(signum), 128 + signum)
    if _stopping:  # a second signal while stopping: go now, with the first one's line
        _write_stop_line(_stopping.get("line", f"stopped by {_stopping['name']}."))
        os._exit(code)
    _stopping["name"] = signal.Signals(signum).name
    for quiet in list(_quieted):
        with contextlib.suppress(Exception):
            quiet()
    note = discard_unfinished(_state["run_dir"])
    for folder in _outputs:
        shutil.rmtree(folder, ignore_errors=True)
        note += f"; the unfinished {folder} was removed"
    _stopping["line"] = f"stopped by {_stopping['name']}{note}. Run the command again to start anew."
    _stop_children()
    for folder in _scratch:  # after the children that might write into it are stopped
        shutil.rmtree(folder, ignore_errors=True)
    # last: a line another thread was printing as the signal came has ended by now (written before the children
    # were stopped, this line was followed by a held progress line in a CI run)
    _write_stop_line(_stopping["line"])
    os._exit(code)


def _write_stop_line(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"{line}\n".encode())


def own_prefect_sigterm() -> None:
    """Make the SIGTERM handler Prefect's flow engine installs this module's.

    Prefect swaps in a handler that raises TerminationSignal inside whatever code runs at that moment; raised
    inside a task it can be swallowed, and the run carried on to the end and was signed ("SIGTERM is caught and
    the run carries on"). Prefect looks its handler up by module global each
    time it installs it, so pointing that global here keeps one behaviour for SIGTERM: stop now."""
    try:
        from prefect.utilities import engine
    except ImportError:  # pragma: no cover (Prefect is a dependency)
        return
    if callable(getattr(engine, "_prefect_sigterm_handler", None)):
        engine._prefect_sigterm_handler = _on_signal  # type: ignore[assignment]


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM stop the command at once: one line on stderr, no unfinished run folder, exit 130/143.

    Prefect installs its own SIGTERM handler while a flow runs: `own_prefect_sigterm` makes it this one."""
    for sig in SIGNAL_EXIT_CODES:
        with contextlib.suppress(ValueError):  # not the main thread (e.g. the CLI called from a test thread)
            signal.signal(sig, _on_signal)


def write_crash_log(text: str, folder: Path | None, stem: str) -> Path | None:
    """`text` in a new file `<stem>.<random>.error.log` in `folder` (else the temporary folder), created
    exclusively with mode 0600: never through a link, never over an earlier log. None when nowhere is writable."""
    for where in (folder, Path(tempfile.gettempdir())):
        if where is None:
            continue
        try:
            fd, name = tempfile.mkstemp(prefix=f"{stem}.", suffix=".error.log", dir=where)
        except OSError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return Path(name)
    return None
