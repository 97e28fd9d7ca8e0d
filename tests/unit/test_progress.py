"""Progress lines: plain on a pipe, a live status on a terminal, nothing when disabled (--json); the flows' reports
reach whoever listens, from any thread."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable

import pytest
from rich.console import Console

from clustercert.cli.progress import Progress
from clustercert.evidence.guards import amount
from flows.progress import listening, report
from tests.conftest import ROOT


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=terminal, width=80, color_system=None), buffer


def test_plain_lines_name_stage_what_and_elapsed_time() -> None:
    console, buffer = _console(terminal=False)
    with Progress(console, started=0.0) as progress, listening(progress):
        report("efficiency", "parse llama3-70b-fp8-512-r1 (training/r1.log)")
        worker = threading.Thread(target=report, args=("scaling", "parse nccl-pair-1"))
        worker.start()
        worker.join()
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("progress [") and lines[0].endswith(
        " s] efficiency: parse llama3-70b-fp8-512-r1 (training/r1.log)")
    assert lines[1].endswith(" s] scaling: parse nccl-pair-1")
    report("judge", "after the run")  # nobody listens any more: nothing is printed
    assert buffer.getvalue().splitlines() == lines


def test_a_terminal_gets_a_live_status_and_a_closing_line() -> None:
    console, buffer = _console(terminal=True)
    with Progress(console) as progress, listening(progress):
        report("validate", "expectation suites")
    text = buffer.getvalue()
    assert "validate: expectation suites" in text and "progress [" not in text
    assert "done in " in text.rstrip().splitlines()[-1]  # after the status line is cleared


def test_the_live_clock_runs_through_a_long_step() -> None:
    """One step (a 52-page layout) showed one elapsed time for 9 s, as if the run had stopped: the live line reads
    the clock each time it is drawn. The test's clock stands still where it says: the time shown is the one the
    clock gave, however late the machine draws it."""
    import re
    import time

    now = [100.0]
    console, buffer = _console(terminal=True)

    def drawn(seconds: float) -> None:
        deadline = time.monotonic() + 60
        while f"[ {seconds:5.1f} s] report" not in buffer.getvalue():
            assert time.monotonic() < deadline, buffer.getvalue()
            time.sleep(0.01)

    with Progress(console, started=0.0, clock=lambda: now[0]) as progress, listening(progress):
        report("report", "report.pdf: lay out the pages")
        drawn(100.0)  # the status is drawn on its own thread
        now[0] = 109.0  # nine seconds into the one step, no new line told
        drawn(109.0)
    shown = [float(t) for t in re.findall(r"\[\s*([\d.]+) s\] report: report\.pdf: lay out the pages",
                                          buffer.getvalue())]
    assert set(shown) == {100.0, 109.0}, shown


def test_the_live_line_stays_one_line_at_the_terminals_width() -> None:
    """A long path wrapped the status onto a second line and back with each file: it is cut with an ellipsis."""
    import re

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=40, color_system=None)
    with Progress(console, started=0.0) as progress, listening(progress):
        report("scaling", "parse nccl-pair-gb-r3-n09-gb-r4-n09 (collectives/pair/gb-r3-n09-gb-r4-n09.log)")
    frames = [ln for ln in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buffer.getvalue()))
              if "scaling" in ln]
    assert frames and all(len(ln) <= 40 and ln.endswith("…") for ln in frames), frames


def test_a_live_status_shows_square_brackets_in_a_name_as_they_are() -> None:
    """The spinner read its text as rich markup: a file under `k[/b]x` raised MarkupError into the run, and
    `[bold]run` was shown without its name's first part."""
    for name in ("/data/[bold]run/bundle", "/data/k[/b]x/r1.log"):
        console, buffer = _console(terminal=True)
        with Progress(console) as progress, listening(progress):
            report("load", name)
        assert f"load: {name}" in buffer.getvalue()


def test_disabled_prints_nothing() -> None:
    console, buffer = _console(terminal=False)
    with Progress(console, enabled=False) as progress, listening(progress):
        report("load", "bundle")
    assert buffer.getvalue() == ""


def test_within_a_stage_a_line_is_shown_at_most_once_per_period() -> None:
    console, buffer = _console(terminal=False)
    with Progress(console, started=0.0, every=3600.0) as progress, listening(progress):
        report("scaling", "training runs and collectives")
        for number in range(1, 1001):  # a sweep's files: none of them a minute after the stage's line
            report("scaling", f"parse pair-{number}, {number} of 1,000")
        report("resilience", "the long run")  # a new stage is shown at once
        report("resilience", "parse telemetry")
    lines = buffer.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["scaling: training runs and collectives",
                                                          "resilience: the long run"]


class _Clock:
    """The time and the timers of a Progress, moved by the test: a timer fires when the test says the time came,
    never late or early because the machine was busy (a real 0.3 s timer, run late under CI's load, once showed a
    line before the next stage's came)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[_Clock.Timer] = []

    class Timer:
        def __init__(self, clock: _Clock, after: float, action: Callable[[], None]) -> None:
            self.clock, self.at, self.action = clock, clock.now + after, action
            self.daemon, self.started, self.cancelled = False, False, False

        def start(self) -> None:
            self.started = True
            self.clock.timers.append(self)

        def cancel(self) -> None:
            self.cancelled = True

    def __call__(self) -> float:
        return self.now

    def timer(self, after: float, action: Callable[[], None]) -> _Clock.Timer:
        return _Clock.Timer(self, after, action)

    def advance(self, seconds: float) -> None:
        """Move the time on, firing each timer due meanwhile at its own time."""
        until = self.now + seconds
        while due := sorted((timer for timer in self.timers if timer.at <= until and not timer.cancelled),
                            key=lambda timer: timer.at):
            timer = due[0]
            self.timers.remove(timer)
            self.now = max(self.now, timer.at)
            timer.action()
        self.now = until


def _lines(buffer: io.StringIO) -> list[tuple[float, str]]:
    return [(float(line[len("progress ["):].split(" s]", 1)[0]), line.split("] ", 1)[1])
            for line in buffer.getvalue().splitlines()]


def test_the_latest_line_held_back_is_shown_when_the_period_ends() -> None:
    """A step told a moment after the one before may be the one that takes the next 20 s (a cluster's straggler
    scoring after its timeline): held back within the period, the latest such line is shown when it ends; one
    superseded by a newer one, or by a new stage shown at once, never is; nothing is shown after the block."""
    clock = _Clock()
    console, buffer = _console(terminal=False)
    with Progress(console, started=0.0, every=1.0, clock=clock, timer=clock.timer) as progress, listening(progress):
        report("resilience", "judge goodput")
        clock.advance(0.1)
        report("resilience", "judge stalls")  # superseded by the next before the period ends
        clock.advance(0.1)
        report("resilience", "judge stragglers")
        clock.advance(0.7)
        assert len(_lines(buffer)) == 1  # still held: the period is not over
        clock.advance(0.2)  # 1.0 s after the first line: the held one is shown
        clock.advance(3.0)
        report("resilience", "count the telemetry")  # shown at once: the period after the last line is over
        clock.advance(0.1)
        report("resilience", "held, then superseded by a new stage")
        clock.advance(0.1)
        report("validate", "expectation suites")
        report("validate", "build the tables")  # held when the block ends: never shown
    clock.advance(10.0)  # the timers left fire after the block: they show nothing
    assert _lines(buffer) == [(0.0, "resilience: judge goodput"), (1.0, "resilience: judge stragglers"),
                              (4.1, "resilience: count the telemetry"), (4.3, "validate: expectation suites")]


def test_a_line_held_while_another_is_shown_waits_out_that_ones_period() -> None:
    """A timer that fires after a newer line of the stage was shown (a new stage came and went back) does not
    show its line at once: it waits out the period of the line shown since."""
    clock = _Clock()
    console, buffer = _console(terminal=False)
    with Progress(console, started=0.0, every=1.0, clock=clock, timer=clock.timer) as progress, listening(progress):
        report("scaling", "parse pair-1")
        clock.advance(0.5)
        report("scaling", "parse pair-2")  # held until 1.0
        report("hash", "sha256 of the evidence")  # a new stage: shown at once, the held line dropped
        report("scaling", "parse pair-3")  # another stage than the last shown: shown at once
        report("scaling", "parse pair-4")  # held: pair-3 was shown a moment ago
        clock.advance(0.6)  # the first timer fires at 1.0, while pair-3's period runs to 1.5
        assert [what for _, what in _lines(buffer)][-1] == "scaling: parse pair-3"
        clock.advance(0.5)
    assert _lines(buffer) == [(0.0, "scaling: parse pair-1"), (0.5, "hash: sha256 of the evidence"),
                              (0.5, "scaling: parse pair-3"), (1.5, "scaling: parse pair-4")]


def test_a_held_line_is_shown_by_a_real_timer() -> None:
    """With the real clock and timer: the held line comes, on the timer's thread, no sooner than the period after
    the line before (a lower bound only: a busy machine may run the timer late, never early)."""
    import time

    console, buffer = _console(terminal=False)
    with Progress(console, every=0.3) as progress, listening(progress):
        report("resilience", "judge goodput")
        report("resilience", "judge stragglers")
        deadline = time.monotonic() + 60
        while len(buffer.getvalue().splitlines()) < 2:
            assert time.monotonic() < deadline, buffer.getvalue()
            time.sleep(0.01)
    lines = _lines(buffer)
    assert [what for _, what in lines] == ["resilience: judge goodput", "resilience: judge stragglers"]
    assert lines[1][0] - lines[0][0] >= 0.2, lines  # printed to 0.1 s: at the period's end, not at once


def test_without_a_period_every_line_is_shown() -> None:
    console, buffer = _console(terminal=False)
    with Progress(console, started=0.0, every=0.0) as progress, listening(progress):
        for number in range(1, 4):
            report("scaling", f"parse pair-{number}")
    assert [line.split("] ", 1)[1] for line in buffer.getvalue().splitlines()] == [
        "scaling: parse pair-1", "scaling: parse pair-2", "scaling: parse pair-3"]


_STOPPED_WHILE_A_LINE_IS_HELD = textwrap.dedent("""
    import os, signal, sys, time
    from rich.console import Console
    from clustercert.cli import safety
    from clustercert.cli.progress import Progress

    safety.install_signal_handlers()
    stop_children = safety._stop_children

    def slowly():  # a temporary Prefect server that takes its time to stop, as a real one may
        if sys.argv[2] == "twice":  # the user, tired of waiting, presses Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2.0)
        stop_children()

    safety._stop_children = slowly
    console = Console(stderr=True, force_terminal=sys.argv[1] == "terminal", width=80, color_system=None)
    with Progress(console, every=1.0) as progress:
        progress("report", "render and sign")
        progress("report", "render the HTML and PDF reports")  # held for the period, which ends while stopping
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(600)
""")
_STOP_LINE = "stopped by SIGTERM. Run the command again to start anew.\n"


def _stopped(console: str, signals: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _STOPPED_WHILE_A_LINE_IS_HELD, console, signals], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("terminal", [False, True], ids=["plain", "terminal"])
def test_a_signal_s_line_is_the_last_on_stderr(terminal: bool) -> None:
    """CI's run of tests/hostile/test_whole_runs.py saw a held progress line printed by its timer after "stopped by
    SIGTERM", while the temporary server stopped; on a terminal the live line went on being drawn over the stop's
    line. A signal now quiets the display first and writes its line last; on a terminal the live line is erased."""
    run = _stopped("terminal" if terminal else "plain", "once")
    assert run.returncode == 143, run.stderr
    assert "render the HTML" not in run.stderr
    if terminal:
        # the live line drawn, then erased (the cursor up to its line, the line cleared), the cursor shown again
        assert "] report: render and sign" in run.stderr
        assert run.stderr.endswith("\x1b[1A\x1b[2K" + _STOP_LINE), repr(run.stderr)
        assert run.stderr.rindex("\x1b[?25h") > run.stderr.rindex("\x1b[?25l"), repr(run.stderr)
    else:
        assert re.fullmatch(r"progress \[ +\d+\.\d s\] report: render and sign\n" + re.escape(_STOP_LINE),
                            run.stderr), run.stderr


def test_a_second_signal_while_stopping_ends_at_once_with_the_first_ones_line() -> None:
    """Ctrl-C pressed while a SIGTERM's stop waits for the temporary server: the command ends at once, with the
    exit code of the second signal, and still says what the first stopped."""
    run = _stopped("plain", "twice")
    assert run.returncode == 130, run.stderr
    assert run.stderr.splitlines()[1:] == [_STOP_LINE.strip()], run.stderr


def test_a_phase_tells_how_far_a_long_read_of_its_evidence_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """A phase's parse names each run as it starts it; a long read within it (a cluster's telemetry: minutes) adds
    how many bytes of how many are read, every few seconds (here: after every block of the sample's telemetry)."""
    import clustercert.evidence.guards as guards
    from clustercert.runs.evidence import EvidenceSet
    from clustercert.runs.folder import load_inputs
    from flows.phases import parse_runs_task
    from tests.conftest import ROOT

    monkeypatch.setattr(guards, "_READ_SHOWN", 0.0)
    inputs = load_inputs(ROOT / "evidence" / "gb200-seed", ROOT / "references")
    runs = [r for r in inputs.bundle.spec.runs if r.phase.value == "resilience"]
    telemetry = next(r for r in runs if r.kind.value == "telemetry")
    number = runs.index(telemetry) + 1
    size = (inputs.bundle.root / telemetry.files[0]).stat().st_size
    told: list[tuple[str, str]] = []
    with listening(lambda stage, what: told.append((stage, what))):
        parse_runs_task.fn(EvidenceSet(inputs, 1 << 30), [r.id for r in runs])
    said = f"parse {telemetry.id} ({telemetry.files[0]}), {number} of {len(runs)}"
    at = told.index(("resilience", said))
    reads = [what for _, what in told[at + 1:] if what.startswith(said + ": ")]
    assert reads and reads[-1] == f"{said}: {amount(size)} of {amount(size)} read", told
    assert all(stage == "resilience" for stage, _ in told)

