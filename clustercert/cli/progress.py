"""Progress on stderr while a certification runs: the stage, the run or file being worked on, the elapsed time.

A live status line on a terminal, its clock running while it is drawn (a cluster's PDF layout or telemetry is one
long step); plain lines otherwise, each with the time it was printed at; nothing at all with --json.

Every new stage is shown at once; within a stage, what is worked on is shown at most once per `every` seconds (a
cluster's pairwise nccl-tests sweep is thousands of files: a plain line for each filled a scheduler's log and cost
the run its printing). What came within the period is not lost when nothing follows it: the latest of it is shown
when the period ends (a step told a moment after the one before may be the one that takes the longest)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

from rich.console import Console
from rich.text import Text

from clustercert.cli import safety

__all__ = ["Progress"]


class _Timer(Protocol):
    """What Progress needs of a threading.Timer."""

    daemon: bool

    def start(self) -> None: ...

    def cancel(self) -> None: ...


class _Running:
    """The live line: its elapsed time read each time the status is drawn (10 times a second), so the clock runs
    through a long step; as Text (the spinner reads a string as rich markup: a path's `[/b]` stopped the run), one
    line cut to the terminal's width (wrapped, a long path made the status jump between one and two lines)."""

    def __init__(self, clock: Callable[[], float], started: float, text: str) -> None:
        self.clock, self.started, self.text = clock, started, text

    def __rich__(self) -> Text:
        return Text(f"[{self.clock() - self.started:6.1f} s] {self.text}", no_wrap=True, overflow="ellipsis")


class Progress:
    """A progress listener (a `flows.progress.Sink`): call it with (stage, what). `clock` and `timer` are
    time.monotonic and threading.Timer but where a test drives the time (a busy machine runs a real timer late)."""

    def __init__(self, console: Console, *, enabled: bool = True, live: bool | None = None,
                 started: float | None = None, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 timer: Callable[[float, Callable[[], None]], _Timer] = threading.Timer) -> None:
        self.console = console
        self.enabled = enabled
        self.live = console.is_terminal if live is None else live
        self.clock, self.timer = clock, timer
        self.started = clock() if started is None else started
        # a live line is redrawn at most 10 times a second; a plain line is kept, so at most one a second
        self.every = (0.1 if self.live else 1.0) if every is None else every
        self._lock = threading.Lock()
        self._status: Any = None
        self._stage: str | None = None  # the stage of the last line shown, and when it was shown
        self._shown = -math.inf
        self._pending: str | None = None  # the latest line of the stage held back within the period
        self._timer: _Timer | None = None  # shows it when the period ends
        self._closed = False
        self._quiet_on_stop = contextlib.ExitStack()

    def __call__(self, stage: str, what: str = "") -> None:
        if not self.enabled:
            return
        with self._lock:
            now = self.clock()
            text = stage + (f": {what}" if what else "")
            if stage == self._stage and now - self._shown < self.every:
                # the same stage, shown a moment ago: the latest line is held, shown when the period ends unless
                # another is shown first
                self._pending = text
                self._wake(self._shown + self.every - now)
                return
            self._pending = None
            self._stage = stage
            self._show(text, now)

    def _wake(self, after: float) -> None:
        if self._timer is None and not self._closed:
            self._timer = self.timer(max(after, 0.0), self._flush)
            self._timer.daemon = True
            self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            self._timer = None
            if self._pending is None or self._closed:
                return
            now = self.clock()
            if now - self._shown < self.every:  # a line was shown since the wait began: wait out its period
                self._wake(self._shown + self.every - now)
                return
            text, self._pending = self._pending, None
            self._show(text, now)

    def _show(self, text: str, now: float) -> None:
        if self._closed:  # quieted by a signal while this line waited for the lock
            return
        self._shown = now
        if self.live:
            if self._status is None:
                self._status = self.console.status(_Running(self.clock, self.started, text))
                self._status.start()
            else:
                self._status.update(_Running(self.clock, self.started, text))
        else:
            self.console.print(f"progress [{now - self.started:6.1f} s] {text}", markup=False, highlight=False)

    def quiet(self) -> None:
        """Show nothing more, and take the live line off the terminal: a signal stops the command, and its own line
        is the last. Called from the signal handler, so without the lock the interrupted code may hold."""
        self._closed, self._pending = True, None
        status, self._status = self._status, None
        if status is not None:
            status.stop()

    def __enter__(self) -> Progress:
        self._quiet_on_stop.enter_context(safety.quiet_on_stop(self.quiet))
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._quiet_on_stop.close()
        with self._lock:
            self._closed, self._pending = True, None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._status is not None:
                self._status.stop()
                self._status = None
        if self.enabled and self.live and kind is None:
            elapsed = self.clock() - self.started
            self.console.print(f"done in {elapsed:.1f} s", markup=False, highlight=False)
