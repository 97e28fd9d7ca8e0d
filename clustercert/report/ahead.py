"""The report's charts drawn ahead, in a process of their own, while the run goes on.

Every chart is drawn from a phase's section and the catalog's rules, which the run has as soon as that phase is
done; the later phases, validation, judging and the report's HTML need the main process. A run on two cores draws
its charts on the other core meanwhile. `ChartsAhead` starts a fresh interpreter (spawned, never forked: the run has
Prefect's threads) when the run starts; it loads what drawing needs and waits. Each phase's section is sent to it
when the phase is done (`send`, once per phase): it draws that phase's charts as `render.build_context` would, while
the next phase runs, and sends back everything it drew when the report asks (`drawn`), keyed as
`charts.shared_charts` keys a chart (its function and its arguments). The report takes a chart from there only where
its key, its data, is the same; any other chart (a redacted copy's, one whose data changed) is drawn as before.
Drawn bytes do not depend on the process (tests/unit/test_charts_ahead.py compares them), so the report is the same
either way; a child that fails, dies or is not done within `WAIT_S` leaves every chart to the report, which draws
it."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["WAIT_S", "ChartsAhead", "draw_all", "usable_cores"]

WAIT_S = 600.0
log = logging.getLogger(__name__)


def usable_cores() -> int:
    """The processors this process may run on: the report's work goes to a second process (the charts drawn ahead,
    the redacted copy's PDF) only where there are two."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def draw_all(results: dict[str, Any]) -> dict[str, Any]:
    """Every chart the report of `results` (results.json, or only its `phases` and `rules`) draws, keyed as
    `charts.shared_charts` keys them."""
    import clustercert.report.charts as charts
    from clustercert.report.render import PHASES, _phase_context

    drawn: dict[str, Any] = {}
    with charts.shared_charts(drawn):
        for name in PHASES:
            _phase_context(name, results, [])
    return drawn


def warm() -> None:
    """What drawing needs loaded (matplotlib, the report's modules, the chart font), loaded while the child waits
    for its data."""
    import clustercert.report.charts as charts
    import clustercert.report.render  # noqa: F401

    fig = charts._draw(1.0, 1.0)
    fig.add_subplot().set_title("warm")
    charts._png(fig)


def _child(conn: Any, target: Callable[[dict[str, Any]], dict[str, Any]], parent: int) -> None:
    from clustercert.lifeline import follow_parent

    follow_parent(parent)  # a run killed outright leaves no child drawing for nobody
    try:
        warm()
        drawn: dict[str, Any] = {}
        while (part := conn.recv()) is not None:  # None: the report asks for what was drawn
            drawn.update(target(part))
        conn.send(("drawn", drawn))
    except BaseException as exc:  # the parent draws instead; it says why in its log
        with contextlib.suppress(OSError):
            conn.send(("failed", f"{exc.__class__.__name__}: {exc}"))
    finally:
        conn.close()


class ChartsAhead:
    """A child process that draws the charts of the data each `send()` gives it (a phase's section as it is done);
    `drawn()` waits for them (at most `wait_s`) and returns them all, or {} when nothing was sent or the child
    failed or took too long; `close()` stops a child still running. Started early (before the phases), the child
    loads what drawing needs while the run works.

    The data goes to the child through a pipe of our own, written in order by one thread: whatever is handed to a
    spawned process's start is written before that start returns, into a pipe the parent holds open too, so a child
    that dies first would leave the write (anything over 64 KiB) blocked forever. Our pipe's other end is the
    child's alone: a child that dies makes the write fail and `drawn()` return {} at once."""

    def __init__(self, *, target: Callable[[dict[str, Any]], dict[str, Any]] = draw_all,
                 wait_s: float = WAIT_S) -> None:
        context = multiprocessing.get_context("spawn")
        self._wait_s = wait_s
        self._drawn: dict[str, Any] | None = None
        self._parts: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        self._unsendable = False  # no thread to send with: nothing is drawn ahead
        self._asked = False
        self._conn, child_conn = context.Pipe(duplex=True)
        self._process = context.Process(target=_child, args=(child_conn, target, os.getpid()), daemon=True,
                                        name="clustercert-charts")
        from clustercert.lifeline import signals_wait

        with signals_wait():  # a SIGINT or SIGTERM meanwhile stops the run once the child is among its children
            self._process.start()
        child_conn.close()  # the child holds its end: a child that dies closes it, and recv() then fails at once

    def send(self, results: dict[str, Any]) -> None:
        """Draw the charts of `results` (results.json, or some of its `phases` and its `rules`); any number of
        times before `drawn()`."""
        if self._asked:
            raise RuntimeError("the charts ahead were asked for already: nothing more is drawn")
        if self._unsendable:
            return
        if self._sender is None:
            sender = threading.Thread(target=self._send_parts, name="clustercert-charts-send", daemon=True)
            try:
                sender.start()
            except RuntimeError as exc:  # no thread left to this process: drawn() returns {}, the report draws them
                log.warning("charts drawn ahead: no thread to send the data (%s); the report draws them", exc)
                self._unsendable = True
                return
            self._sender = sender
        self._parts.put(results)

    def _send_parts(self) -> None:
        while True:
            part = self._parts.get()
            try:
                self._conn.send(part)
            except (OSError, ValueError):  # the child died, or close() came first: drawn() says so
                return
            except Exception as exc:  # the data cannot be pickled: the child is stopped, so drawn() returns {} at once
                log.warning("charts drawn ahead: the data cannot be sent (%s: %s); the report draws them",
                            exc.__class__.__name__, exc)
                self._process.kill()
                return
            if part is None:
                return

    def drawn(self) -> dict[str, Any]:
        if self._drawn is None:
            self._drawn = self._receive()
            self.close()
        return self._drawn

    def _receive(self) -> dict[str, Any]:
        self._asked = True
        if self._sender is None:
            return {}
        self._parts.put(None)  # the end of the data: the child sends what it drew
        try:
            if not self._conn.poll(self._wait_s):
                log.warning("charts drawn ahead: not done within %g s; the report draws them", self._wait_s)
                return {}
            kind, value = self._conn.recv()
        except (EOFError, OSError) as exc:  # the child died before it sent anything
            log.warning("charts drawn ahead: the child process ended without them (%s); the report draws them",
                        exc.__class__.__name__)
            return {}
        except Exception as exc:  # what it sent cannot be read back (unpickling): nothing of it is used
            log.warning("charts drawn ahead: unreadable (%s: %s); the report draws them", exc.__class__.__name__, exc)
            return {}
        if kind != "drawn":
            log.warning("charts drawn ahead: %s; the report draws them", value)
            return {}
        return dict(value)

    def close(self) -> None:
        """The child stopped (it is done, or killed), the pipe closed and the sender done; safe to call again."""
        self._asked = True
        if self._process.is_alive():
            self._process.join(timeout=1.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        if self._sender is not None:
            self._parts.put(None)  # a sender that waits for more data ends: its write to the gone child fails
            self._sender.join()  # the child is gone, so its end of the pipe is closed: a blocked send fails now
        self._conn.close()
