"""A helper process that ends with the process that started it, however that one ended.

A certification starts helpers: Prefect's temporary server (`flows.server_boot`), the process that draws the charts
ahead (`report.ahead`), the one that renders the redacted copy's PDF (`runs.folder`). When the certification stops
on a signal it can handle, it stops them. When it is killed outright (SIGKILL: a scheduler's hard kill after its
grace time, the kernel's out-of-memory killer, `kill -9`), it cannot, and they ran on, orphaned, for good: the
server held about 220 MiB and a port, and woke its services every few seconds, on a login node that other users
share (seen: a killed `certify --redact` left the server, the PDF process and multiprocessing's resource tracker
running). Each helper now watches its parent from a thread of its own and leaves when the parent is gone. The
parent's process id is handed to the helper, not read there, so a parent that dies while the helper starts is
noticed too (the helper's parent is then already another process).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["GRACE_S", "POLL_S", "defer", "follow_parent", "leave_now", "signals_wait", "stop_gracefully"]

# How often a helper looks for its parent: one system call, so a helper outlives its parent by at most this long
POLL_S = 0.5
# How long a helper asked to stop (SIGTERM) may take before it is ended at once
GRACE_S = 15.0


def leave_now() -> None:
    """The helper ends at once, without its clean-up (its parent, to which it answered, is gone)."""
    os._exit(1)


def stop_gracefully() -> None:
    """The helper is sent SIGTERM, as its parent would have sent it (a server shuts down its connections and its
    database), and ended at once if it is still running `GRACE_S` later."""
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os._exit(1)


def _watch(parent: int, leave: Callable[[], None], poll_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    leave()


def follow_parent(parent: int, leave: Callable[[], None] = leave_now, poll_s: float = POLL_S) -> bool:
    """Call `leave` (in a daemon thread) as soon as this process' parent is no longer process `parent`: it died, and
    this process was handed to init or to a subreaper. False where no thread could be started (the helper then
    lives as before: its work is not refused for it)."""
    watcher = threading.Thread(target=_watch, args=(parent, leave, poll_s), name="clustercert-lifeline", daemon=True)
    try:
        watcher.start()
    except RuntimeError:
        return False
    return True


# Signals that wait. A signal the command handles (SIGINT, SIGTERM: `cli.safety`) stops what the command started, as
# far as the command knows of it, and ends it at once (past any `finally`). Caught in the window between a helper's
# first trace and the command's record of it, the stop missed that helper: a certification stopped between the
# temporary server's early output file and its process left that file in the temporary folder for good; stopped
# while the process was forked, before it was recorded, the run exited with its server still starting, unknown,
# until the server's own lifeline noticed. The same holds for files put in place: a signal between two of a new
# signing key's left half a key, one during `evidence seal` left its temporary file in the user's bundle.
_held = [0]  # steps under way that signals wait for (`signals_wait`), in any thread
_held_lock = threading.Lock()  # for the count's changes (threads write files at once); never taken by `defer`
_deferred: list[Callable[[], None]] = []  # what signal handlers asked meanwhile (`defer`), in order


@contextlib.contextmanager
def signals_wait() -> Iterator[None]:
    """While the block runs (a helper started: its files made, its process launched, the command told of it; or
    a file put in place), a signal handler that `defer`s waits: it runs when the last such block ends, in whichever
    thread, and its stop then finds the helper, or the files, whole. For steps of milliseconds: the signal waits as
    long."""
    with _held_lock:
        _held[0] += 1
    try:
        yield
    finally:
        with _held_lock:
            _held[0] -= 1
            last = not _held[0]
        while last:
            try:
                call = _deferred.pop(0)  # not looked at first: `defer` may take a call back meanwhile
            except IndexError:
                break
            call()


def defer(call: Callable[[], None]) -> bool:
    """`call` held until no `signals_wait` block runs, and True; False, holding nothing, where none does. A signal
    handler runs between two steps of the main thread, never beside it: a held call runs where that thread leaves
    the block (or where the thread that runs the block does)."""
    if not _held[0]:
        return False
    _deferred.append(call)
    if _held[0]:
        return True
    # The last block ended meanwhile (in another thread), maybe after it looked for held calls: the call is taken
    # back and made here, unless that thread took it (list operations are atomic: one of the two gets it)
    try:
        _deferred.remove(call)
    except ValueError:
        return True
    return False
