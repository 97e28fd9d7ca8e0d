"""Progress on stderr while a certification runs: the stage, the run or file being worked on, the elapsed time.
A live status line on a terminal, plain lines otherwise; nothing at all with --json."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from rich.console import Console

__all__ = ["Progress"]


class Progress:
    """A progress listener (a `flows.progress.Sink`): call it with (stage, what)."""

    def __init__(self, console: Console, *, enabled: bool = True, live: bool | None = None,
                 started: float | None = None) -> None:
        self.console = console
        self.enabled = enabled
        self.live = console.is_terminal if live is None else live
        self.started = time.monotonic() if started is None else started
        self._lock = threading.Lock()
        self._status: Any = None
        self._last = ""

    def _line(self, stage: str, what: str) -> str:
        elapsed = time.monotonic() - self.started
        return f"[{elapsed:6.1f} s] {stage}" + (f": {what}" if what else "")

    def __call__(self, stage: str, what: str = "") -> None:
        if not self.enabled:
            return
        with self._lock:
            line = self._line(stage, what)
            if self.live:
                if self._status is None:
                    self._status = self.console.status(line)
                    self._status.start()
                else:
                    self._status.update(line)
            else:
                self.console.print(f"progress {line}", markup=False, highlight=False)
            self._last = line

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
