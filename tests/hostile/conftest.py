"""The hostile corpus' harness: a time bound on every case (SIGALRM fails it), and a count of the hostile inputs
tried, printed at the end of the run."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from types import FrameType

import pytest

# Seconds one case may take (a whole-run case sets its own subprocess timeouts and asks for more).
CASE_BOUND_S = 60
_TRIED = [0]


def count_hostile(n: int = 1) -> None:
    """Record that `n` more hostile inputs were tried."""
    _TRIED[0] += n


@pytest.fixture
def hostile() -> Callable[[int], None]:
    return count_hostile


class CaseTimedOut(Exception):
    pass


@pytest.fixture(autouse=True)
def time_bound(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the case when it runs past its bound: a hang or a superlinear regex is a failure, not a wait."""
    marker = request.node.get_closest_marker("slow")
    bound = CASE_BOUND_S * (8 if marker is not None else 1)

    def expire(signum: int, frame: FrameType | None) -> None:
        raise CaseTimedOut(f"{request.node.nodeid}: ran past the hostile-input bound of {bound} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(bound)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist (`make test` runs two workers) each worker hands its count to the controller, where
    # tests/conftest.py adds them up and prints the total.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["hostile_tried"] = _TRIED[0]


def hostile_tried() -> int:
    return _TRIED[0]
