"""bench/bench_scale.py sums the resident memory of the certification's process tree: a child that runs in its
parent's memory (vfork, before its exec) is the parent's memory again and is left out; any other child counts."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_scale

        yield bench_scale
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_a_child_in_its_parents_memory_is_left_out_and_a_child_of_its_own_counts(bench: ModuleType) -> None:
    """A child made with clone(CLONE_VM), as vfork makes one, parked in pause(): it shares every page with this
    process, as `subprocess`'s vfork child does before its exec. A child started as a program of its own (the same
    Python, its own memory) is not left out."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.clone.restype = ctypes.c_int
    libc.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    stack = ctypes.create_string_buffer(1 << 16)  # the child's stack: kept alive until it is gone
    clone_vm, sigchld = 0x100, 17
    shared = libc.clone(ctypes.cast(libc.pause, ctypes.c_void_p), ctypes.addressof(stack) + (1 << 16),
                        clone_vm | sigchld, None)
    assert shared > 0, os.strerror(ctypes.get_errno())
    own = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while {own.pid, shared} - {p for p, _ in bench._tree(os.getpid())}:  # both listed as children
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert dict(bench._tree(os.getpid()))[shared] == os.getpid()
        assert bench._in_parents_memory(shared, os.getpid())
        assert not bench._in_parents_memory(own.pid, os.getpid())
    finally:
        os.kill(shared, signal.SIGKILL)
        os.waitpid(shared, 0)
        own.kill()
        own.wait()
    del stack
