"""Progress of a running certification: the flows name each stage and the run or file being worked on, and whoever
started the flow (the CLI) may listen.

Nothing is reported when nobody listens (tests, `--json`, Dask workers)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Sink", "current_stage", "listening", "report"]

Sink = Callable[[str, str], None]
_LOCK = threading.Lock()
_SINKS: list[Sink] = []


def report(stage: str, what: str = "") -> None:
    """Tell the listener that `stage` (e.g. "efficiency") is now working on `what` (a run id, a file, a step)."""
    with _LOCK:
        sinks = list(_SINKS)
    for sink in sinks:
        sink(stage, what)


def current_stage(default: str) -> str:
    """The name of the flow this task runs in (the phase subflow: "efficiency", "scaling", "resilience")."""
    from prefect.runtime import flow_run

    name = flow_run.flow_name
    return str(name) if name else default


@contextmanager
def listening(sink: Sink) -> Iterator[None]:
    """Send every `report` made in this process to `sink` while the block runs (tasks run in threads: the sink is
    called from any of them)."""
    with _LOCK:
        _SINKS.append(sink)
    try:
        yield
    finally:
        with _LOCK:
            _SINKS.remove(sink)
