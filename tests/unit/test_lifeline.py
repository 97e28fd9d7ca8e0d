"""A helper process ends with the process that started it, also when that one is killed outright (SIGKILL): the
generic watch (`clustercert.lifeline`), the chart process (`report.ahead`) and the redacted copy's PDF process
(`runs.folder`). The temporary Prefect server's case is a whole run: tests/hostile/test_whole_runs.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT, process_running, wait_ended


def _parent(body: str) -> subprocess.Popen[str]:
    """A Python process that runs `body` (which prints the helper's process id), then waits to be killed."""
    code = textwrap.dedent(body) + "\nimport sys, time\nsys.stdout.flush()\ntime.sleep(600)\n"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _helper_outlives(body: str, within_s: float = 30) -> list[int]:
    """Start a parent running `body`, kill it outright once it printed its helper's id; the helper if still
    running `within_s` later (a watched helper looks for its parent twice a second)."""
    with _parent(body) as parent:
        try:
            assert parent.stdout is not None
            helper = int(parent.stdout.readline())
            assert process_running(helper)
        finally:
            parent.kill()
            parent.wait(timeout=30)
    left = wait_ended([helper], within_s=within_s)
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # not left running past the test
    return left


def test_a_helper_that_follows_its_parent_ends_when_the_parent_is_killed() -> None:
    assert _helper_outlives("""
        import os, subprocess, sys
        helper = subprocess.Popen([sys.executable, "-c", "import os, sys, time; from clustercert.lifeline import "
                                   f"follow_parent; follow_parent({os.getpid()}); time.sleep(600)"])
        print(helper.pid)
    """) == []


def test_without_the_watch_the_helper_outlives_its_parent() -> None:
    """The case the watch is for: the same helper, unwatched, runs on."""
    assert len(_helper_outlives("""
        import subprocess, sys
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(helper.pid)
    """, within_s=3)) == 1


def test_a_parent_gone_before_the_watch_started_is_noticed_at_once() -> None:
    """The parent's id is handed over: a helper whose parent died while it started (its parent is already another
    process) leaves as soon as it starts watching."""
    gone = subprocess.run([sys.executable, "-c", "import os, time; from clustercert.lifeline import follow_parent; "
                           "follow_parent(os.getppid() + 1); time.sleep(600)"], cwd=ROOT, timeout=60, check=False)
    assert gone.returncode == 1


def test_stopped_gracefully_the_helper_gets_sigterm_as_from_its_parent() -> None:
    code = textwrap.dedent("""
        import os, signal, sys, time
        from clustercert.lifeline import follow_parent, stop_gracefully
        def stop(signum, frame):
            print("stopped by", signal.Signals(signum).name, flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        follow_parent(os.getppid() + 1, stop_gracefully)
        time.sleep(600)
    """)
    stopped = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60, capture_output=True, text=True,
                             check=False)
    assert (stopped.returncode, stopped.stdout) == (0, "stopped by SIGTERM\n")


def test_the_chart_process_ends_when_the_run_is_killed() -> None:
    """It ends with its pipe's other end (the parent's alone) when it waits for data, and by its watch when it is
    drawing."""
    assert _helper_outlives("""
        from clustercert.report.ahead import ChartsAhead
        ahead = ChartsAhead()
        print(ahead._process.pid)
    """) == []


def test_the_redacted_copys_pdf_process_ends_when_the_run_is_killed() -> None:
    assert _helper_outlives("""
        import os
        from clustercert.runs.folder import _SecondProcess
        aside = _SecondProcess.start()
        print(aside.pool.submit(os.getpid).result())
    """) == []


def test_a_call_deferred_while_a_helper_starts_runs_once_the_outermost_start_ends() -> None:
    """`defer` holds a signal handler's call only inside `signals_wait` (nested: until the outermost ends), in
    the order the calls came; outside one it holds nothing and the handler goes on itself."""
    from clustercert.lifeline import defer, signals_wait

    ran: list[str] = []
    assert defer(lambda: ran.append("outside")) is False and ran == []
    with signals_wait():
        with signals_wait():
            assert defer(lambda: ran.append("first")) is True
        assert ran == []  # the inner start ended, the outer has not
        assert defer(lambda: ran.append("second")) is True
        assert ran == []
    assert ran == ["first", "second"]
    assert defer(lambda: ran.append("after")) is False and ran == ["first", "second"]


def test_a_start_that_fails_still_runs_what_was_deferred() -> None:
    from clustercert.lifeline import defer, signals_wait

    ran: list[str] = []
    try:
        with signals_wait():
            defer(lambda: ran.append("stop"))
            raise OSError("fork failed")
    except OSError:
        pass
    assert ran == ["stop"]


def test_a_call_deferred_as_the_last_block_ends_in_another_thread_is_made_by_the_handler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler saw a block running, and the block's thread ended it (and looked for held calls) before the call
    was held: `defer` takes the call back and says the handler must go on itself, so no signal is lost."""
    from clustercert import lifeline

    class EndsAsHeld(list[object]):
        def append(self, call: object) -> None:
            super().append(call)
            lifeline._held[0] = 0  # the other thread's block ended just now

    monkeypatch.setattr(lifeline, "_held", [1])
    monkeypatch.setattr(lifeline, "_deferred", EndsAsHeld())
    assert lifeline.defer(lambda: None) is False
    assert list(lifeline._deferred) == []


# The signal comes just after a helper's process is launched, before multiprocessing counts it among this process'
# children (`BaseProcess.start` adds it after `_Popen` returns): the handler runs at the next step of the main thread.
_LAUNCHED = """
import multiprocessing, os, signal, sys
from multiprocessing import context
from clustercert.cli import safety

safety.install_signal_handlers()
stop_children = safety._stop_children


def stopping():
    print("stopping", *sorted(child.pid for child in multiprocessing.active_children()), flush=True)
    stop_children()


safety._stop_children = stopping
launch = context.SpawnProcess._Popen


def launched(process):
    popen = launch(process)
    print("child", popen.pid, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    return popen


context.SpawnProcess._Popen = staticmethod(launched)
if sys.argv[1] == "charts":
    from clustercert.report.ahead import ChartsAhead

    ChartsAhead()
else:
    from clustercert.runs.folder import _SecondProcess

    _SecondProcess.start()
print("not stopped", flush=True)
"""


@pytest.mark.parametrize("helper", ["charts", "pdf"])
def test_a_signal_as_a_helper_process_is_launched_stops_it_with_the_run(helper: str) -> None:
    """SIGTERM just after the chart process or the redacted copy's PDF process is launched: the run's stop (which
    terminates its children) waits until that process is one of them. Before, it stopped the others and exited,
    and the new process ran on until its own lifeline noticed the run was gone."""
    run = subprocess.run([sys.executable, "-c", _LAUNCHED, helper], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    said = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()}
    assert run.returncode == 143, run.stdout + run.stderr
    assert "not stopped" not in said
    assert said["child"][0] in said["stopping"], run.stdout
    assert wait_ended([int(said["child"][0])], within_s=30) == []
