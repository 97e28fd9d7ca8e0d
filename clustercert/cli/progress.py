"""Progress on stderr while a certification runs: the stage, the run or file being worked on, the elapsed time.
A live status line on a terminal, its clock running while it is drawn (a cluster's PDF layout or telemetry is one
long step); plain lines otherwise, each with the time it was printed at; nothing at all with --json.

Every new stage is shown at once; within a stage, what is worked on is shown at most once per `every` seconds (a
cluster's pairwise nccl-tests sweep is 8,141 files: a plain line for each made 8,141 lines of a scheduler's log and
cost a 512-GPU certification about a second of printing)."""

from __future__ import annotations

import math
import threading
import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.text import Text

__all__ = ["Progress"]


class _Running:
    """The live line: its elapsed time read each time the status is drawn (10 times a second), so the clock runs
    through a long step; as Text (the spinner reads a string as rich markup: a path's `[/b]` stopped the run), one
    line cut to the terminal's width (wrapped, a long path made the status jump between one and two lines)."""

    def __init__(self, started: float, text: str) -> None:
        self.started, self.text = started, text

    def __rich__(self) -> Text:
        return Text(f"[{time.monotonic() - self.started:6.1f} s] {self.text}", no_wrap=True, overflow="ellipsis")


class Progress:
    """A progress listener (a `flows.progress.Sink`): call it with (stage, what)."""

    def __init__(self, console: Console, *, enabled: bool = True, live: bool | None = None,
                 started: float | None = None, every: float | None = None) -> None:
        self.console = console
        self.enabled = enabled
        self.live = console.is_terminal if live is None else live
        self.started = time.monotonic() if started is None else started
        # a live line is redrawn at most 10 times a second; a plain line is kept, so at most one a second
        self.every = (0.1 if self.live else 1.0) if every is None else every
        self._lock = threading.Lock()
        self._status: Any = None
        self._stage: str | None = None  # the stage of the last line shown, and when it was shown
        self._shown = -math.inf

    def __call__(self, stage: str, what: str = "") -> None:
        if not self.enabled:
            return
        with self._lock:
            now = time.monotonic()
            if stage == self._stage and now - self._shown < self.every:
                return  # the same stage, shown a moment ago: the next file after the pause is shown
            self._stage, self._shown = stage, now
            text = stage + (f": {what}" if what else "")
            if self.live:
                if self._status is None:
                    self._status = self.console.status(_Running(self.started, text))
                    self._status.start()
                else:
                    self._status.update(_Running(self.started, text))
            else:
                self.console.print(f"progress [{now - self.started:6.1f} s] {text}", markup=False, highlight=False)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            if self._status is not None:
                self._status.stop()
                self._status = None
        if self.enabled and self.live and kind is None:
            elapsed = time.monotonic() - self.started
            self.console.print(f"done in {elapsed:.1f} s", markup=False, highlight=False)
