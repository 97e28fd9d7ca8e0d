"""bench/bench_scale.py: the memory of the certification's process tree (a child that runs in its parent's memory,
vfork before its exec, is the parent's memory again and is left out; any other child counts), each analysis
stage's verdict against its floor with the issue's stages beside it, and the floor's timing."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import bench_scale

        yield bench_scale
    finally:
        sys.path.remove(str(ROOT / "bench"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
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


def _stage(name: str, seconds: float, floor: float | None, completed: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"stage": name, "seconds": seconds, "completed": completed}
    if floor is not None:
        out["floor_s"], out["ratio_to_floor"] = floor, round(seconds / floor, 1)
    return out


def _size(stages: list[dict[str, Any]], seconds: float = 40.0) -> dict[str, Any]:
    return {"gpus": 512, "certify": {"exit_code": 0, "seconds": seconds, "peak_rss_tree_gib": 1.5, "stages": stages}}


def test_a_small_stage_over_its_floor_fails_the_verdict_the_issue_stages_are_shown_beside(bench: ModuleType) -> None:
    stages = [
        _stage("start", 0.3, None),
        _stage("efficiency", 0.5, 0.01),
        _stage("scaling", 3.0, 1.5),
        _stage("resilience", 19.0, 10.0),
        _stage("validate", 9.0, 10.0),
        _stage("report", 8.0, None),
    ]
    got = bench.targets([_size(stages)])
    v = got["verdicts"]["512"]
    assert v["floor_ratios"] == {"efficiency": 50.0, "scaling": 2.0, "resilience": 1.9, "validate": 0.9}
    assert v["floor_ok"] is False and got["met"] is False  # the per-phase verdict is the one judged
    # 0.5 + 3 + 19 = 22.5 s over 0.01 + 1.5 + 10 = 11.51 s of floor
    assert v["floor_ratios_by_issue_stage"] == {"parse + measure": 2.0, "validate": 0.9}


def test_an_unfinished_phase_leaves_its_issue_stage_without_a_ratio(bench: ModuleType) -> None:
    stages = [
        _stage("efficiency", 0.02, 0.01),
        _stage("scaling", 3.0, 1.5),
        _stage("resilience", 5.0, None, completed=False),
    ]
    assert bench.by_issue_stage(stages) == {"parse + measure": None}
    stages[-1] = _stage("resilience", 20.0, 10.0)
    # 23.02 s over 11.51 s
    assert bench.by_issue_stage(stages) == {"parse + measure": 2.0}
    got = bench.targets([_size(stages)])
    assert got["verdicts"]["512"]["floor_ok"] is True and got["met"] is True


def _scan_taking(seconds: list[float]) -> tuple[list[list[Path]], Any]:
    calls: list[list[Path]] = []

    def scan(paths: list[Path]) -> dict[str, Any]:
        calls.append(paths)
        return {"seconds": seconds[len(calls) - 1], "rows": 7}

    return calls, scan


def test_a_floor_scan_of_milliseconds_is_timed_best_of_five_a_longer_one_once(bench: ModuleType) -> None:
    paths = [Path("a.log")]
    calls, scan = _scan_taking([0.03, 0.012, 0.02, 0.009, 0.05])
    got = bench._steady(scan, paths)
    assert got == {"seconds": 0.009, "rows": 7, "passes_s": [0.03, 0.012, 0.02, 0.009, 0.05]}
    assert calls == [paths] * 5
    calls, scan = _scan_taking([1.8])
    assert bench._steady(scan, paths) == {"seconds": 1.8, "rows": 7} and len(calls) == 1


def test_the_operators_log_is_counted_and_its_longest_wait_found(bench: ModuleType) -> None:
    """From the certification's stderr: every progress line counted (not other lines), each stage's first kept, and
    the longest wait for the next line by the CLI's own clock, with the line it followed (hand-read: 9.5 s)."""
    import io

    stderr = io.BytesIO(b"".join(line.encode() + b"\n" for line in [
        "progress [   2.0 s] hash: sha256 of the evidence: t.prom (22.0 GiB); 1 of 2 files (1 B of 22.0 GiB) hashed",
        "note: no signing key in /k; created a development key there.",
        "progress [   7.0 s] hash: sha256 of the evidence: t.prom (22.0 GiB); 1 of 2 files (1 B of 22.0 GiB) hashed",
        "progress [  16.5 s] start: Prefect API",
        "progress [  17.0 s] resilience: judge stragglers from 45,793,280 per-rank timings",
        "progress [  20.0 s] validate: expectation suites over every table",
    ]))
    watch = bench.Watch()
    bench._read_stderr(stderr, watch)
    assert watch.lines == 5
    assert [s["stage"] for s in watch.stages] == ["hash", "start", "resilience", "validate"]
    assert watch.silence == (9.5, "progress [   7.0 s] hash: sha256 of the evidence: t.prom (22.0 GiB); 1 of 2 files "
                                  "(1 B of 22.0 GiB) hashed")
