"""Megatron logs as clusters write them (samples/real/recipe-logs, megatron-lm): each file's runs, restarts, nan values
and numbers as SOURCES.md describes them, and as the files themselves print them."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from clustercert.evidence.bundle import RunKind
from clustercert.evidence.parse import ParsedFile
from clustercert.metrics.throughput import measure_window
from clustercert.parsers import detect_format
from clustercert.parsers.dllogger import parse_dllogger
from clustercert.parsers.megatron import parse_megatron
from clustercert.parsers.megatron_resilience import parse_megatron_resilience
from clustercert.parsers.nemo_resilience import LogEventKind
from clustercert.validation.tables import training_table

CSCS = "recipe-logs/megatron-lm-gh200-cscs-attn-bench"


def _read(real_samples: Path, name: str):  # type: ignore[no-untyped-def]
    path = real_samples / CSCS / name
    assert detect_format(path) == "megatron"
    return path, parse_megatron(path, name), parse_megatron_resilience(path, name)


def _kinds(resilience, kind: LogEventKind) -> list[tuple[int, int | None]]:  # type: ignore[no-untyped-def]
    return [(e.line, e.step) for e in resilience.events if e.kind is kind]


def _segments(path: Path, name: str, log, resilience) -> list[int]:  # type: ignore[no-untyped-def]
    parsed = ParsedFile(run="r", kind=RunKind.TRAINING, rel=name, display=name, result=log, resilience=resilience)
    frame = next(training_table(parsed).batches())
    return list(frame["segment"])


def test_a_nan_grad_norm_beside_a_nan_count_of_zero(real_samples: Path) -> None:
    """1737333.out: iteration 1 prints `grad norm: nan` and no loss while its line says `number of nan iterations:
    0`; 15 iterations, 139.8 TFLOP/s and about 7788 ms from iteration 3; one launch."""
    _path, log, resilience = _read(real_samples, "1737333.out")
    assert [s.iteration for s in log.steps] == list(range(1, 16))
    assert log.steps[0].line == 930 and log.steps[0].loss is None and log.steps[1].loss is None
    assert [(m.line, m.field, m.counted) for m in log.nan_marks] == [(930, "grad norm", 0)]
    assert {s.tflops_per_gpu for s in log.steps[2:]} <= {139.7, 139.8, 139.9}  # "139.8" in SOURCES.md
    assert all(7.78 < s.step_time_s < 7.80 for s in log.steps[2:])  # type: ignore[operator]
    assert {s.loss for s in log.steps[2:]} == {10.40111}
    assert _kinds(resilience, LogEventKind.RELAUNCH) == []  # one launch: its banner at line 14 is no restart
    problems = measure_window(log.steps, log.nan_marks, (3, 12), resamples=10, seed=1)
    assert isinstance(problems, list) and problems[0].line == 930
    assert "'number of nan iterations: 0'" in problems[0].message


def test_a_resume_from_iteration_14000_whose_first_step_is_slow(real_samples: Path) -> None:
    """2340717.out: checkpoint loaded at iteration 14000, iterations 14001-15549 printed by rank 55 (`55: ` before
    the print time), saved at 15549; the first step after the load 5618.2 ms and 79.0 TFLOP/s, then a median of
    1337 ms and 331.8 TFLOP/s over 14011-15549; 5 iterations below 300 TFLOP/s."""
    path, log, resilience = _read(real_samples, "2340717.out")
    iterations = [s.iteration for s in log.steps]
    assert iterations == list(range(14001, 15550))
    first = log.steps[0]
    assert (first.line, first.step_time_s, first.tflops_per_gpu) == (1705, 5.6182, 79.0)
    later = [s for s in log.steps if s.iteration >= 14011]
    assert statistics.median(s.tflops_per_gpu for s in later) == pytest.approx(331.8, abs=0.05)  # type: ignore[misc]
    assert statistics.median(s.step_time_s for s in later) == pytest.approx(1.337, abs=0.0005)  # type: ignore[misc]
    assert sum(s.tflops_per_gpu < 300 for s in log.steps) == 5  # type: ignore[operator]
    loaded = _kinds(resilience, LogEventKind.CHECKPOINT_LOADED)
    assert loaded == [(1126, 14000)]
    assert _kinds(resilience, LogEventKind.CHECKPOINT_SAVED)[-1][1] == 15549
    assert _kinds(resilience, LogEventKind.RELAUNCH) == []  # resumed by a new job, one launch in this output
    assert log.nan_marks == [] and set(_segments(path, "2340717.out", log, resilience)) == {0}


def test_a_fresh_start_that_ends_mid_run(real_samples: Path) -> None:
    """2611435.out: iterations 1-230 of 15550, checkpoints saved at 50, 100, 150 and 200, no END TIME; a median of
    1200 ms and 322.9 TFLOP/s from iteration 11."""
    _path, log, resilience = _read(real_samples, "2611435.out")
    assert [s.iteration for s in log.steps] == list(range(1, 231)) and log.steps[-1].max_iteration == 15550
    later = [s for s in log.steps if s.iteration >= 11]
    assert statistics.median(s.tflops_per_gpu for s in later) == pytest.approx(322.9, abs=0.05)  # type: ignore[misc]
    assert statistics.median(s.step_time_s for s in later) == pytest.approx(1.200, abs=0.0005)  # type: ignore[misc]
    assert [step for _, step in _kinds(resilience, LogEventKind.CHECKPOINT_SAVED)] == [50, 100, 150, 200]
    assert _kinds(resilience, LogEventKind.CHECKPOINT_LOADED) == []
    problems = measure_window(log.steps, log.nan_marks, (35, 44), resamples=10, seed=1)
    assert isinstance(problems, list)
    assert [p.message for p in problems] == ["the final iteration 15550 was never logged (last: 230)"]


def test_two_launches_in_one_output_are_two_runs(real_samples: Path) -> None:
    """3108456.out: a 2-iteration smoke test (9185.1 ms and 301.0 TFLOP/s, grad norm 313480.938; 5928.8 ms and
    98.4, grad norm 8.690), then the real run counting from 1 again to 408, each launch with its own argument dump;
    the real run's median 1602.8 ms and 365.1 TFLOP/s from iteration 11."""
    path, log, resilience = _read(real_samples, "3108456.out")
    iterations = [s.iteration for s in log.steps]
    assert iterations == [1, 2, *range(1, 409)]
    smoke = log.steps[:2]
    assert [(s.step_time_s, s.tflops_per_gpu, s.grad_norm) for s in smoke] == [
        (9.1851, 301.0, 313480.938), (5.9288, 98.4, 8.690)]
    assert smoke[0].line == 1827
    assert _kinds(resilience, LogEventKind.RELAUNCH) == [(1939, None)]  # the second banner; the first at line 77
    assert smoke[1].line < 1939 < log.steps[2].line
    real = [s for s in log.steps[2:] if s.iteration >= 11]
    # an even count of iterations: each median is the mean of the middle two (365.0 and 365.1 TFLOP/s, 1602.7 and
    # 1602.8 ms), which SOURCES.md rounds to 365.1 and 1602.8
    assert statistics.median(s.tflops_per_gpu for s in real) == pytest.approx(365.05)  # type: ignore[misc]
    assert statistics.median(s.step_time_s for s in real) == pytest.approx(1.60275)  # type: ignore[misc]
    # the counter going back after the second banner is a restart, not a spliced log
    assert _segments(path, "3108456.out", log, resilience) == [0, 0] + [1] * 408
    assert log.nan_marks == []


def test_the_nemo_dllogger_run_that_slows_at_its_end(real_samples: Path) -> None:
    """gpu-recipes dllogger.json: steps 0-49, 107.35 s at step 0, 31.65, 32.47, 32.76, 32.90 s at steps 46-49;
    the mean of steps 10-30 is 25.40 s."""
    path = real_samples / "recipe-logs" / "gpu-recipes-nemo-gpt3-175b-h100x256" / "dllogger.json"
    log = parse_dllogger(path, "dllogger.json")
    assert [s.iteration for s in log.steps] == list(range(50))
    assert log.steps[0].step_time_s == pytest.approx(107.35, abs=0.005)
    assert [round(s.step_time_s, 2) for s in log.steps[46:]] == [31.65, 32.47, 32.76, 32.90]  # type: ignore[arg-type]
    window = [s.step_time_s for s in log.steps if 10 <= s.iteration <= 30]
    assert statistics.fmean(window) == pytest.approx(25.40, abs=0.005)  # type: ignore[arg-type]
    assert log.nan_marks == []


def test_evidence_parse_shows_both_launches_and_the_last_ones_settings(real_samples: Path) -> None:
    """`evidence parse --json` as a user runs it on 3108456.out: the second launch, and the settings the real run
    printed (its argument dump, after line 1939)."""
    import json

    from tests.conftest import run_cli

    proc = run_cli("evidence", "parse", str(real_samples / CSCS / "3108456.out"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [e["line"] for e in out["events"] if e["kind"] == "relaunch"] == [1939]
    assert len(out["steps"]) == 410 and out["nan"] == []
    settings = out["settings"]
    assert [s["value"] for s in settings["global_batch_size"]] == ["288"]
    assert [s["value"] for s in settings["micro_batch_size"]] == ["3"]
    assert [s["value"] for s in settings["seq_length"]] == ["8192"]
    assert all(1939 < s["line"] < 2744 for found in settings.values() for s in found)


def test_a_step_time_window_cites_the_lines_of_its_first_and_last_iteration(real_samples: Path) -> None:
    """The span a workload's step time cites (efficiency: first..last line of the window's steps, issue 58) holds
    the window's first and last iteration and the step times measured: opened and read here with a regular
    expression, Megatron-Bridge's own print, not clustercert's parser."""
    from clustercert.parsers import parse_training_log

    path = real_samples / "training-logs" / "megatron-bridge-llama3-8b-8gpu-bf16-20iters.log"
    log = parse_training_log(path, path.name, "megatron")
    measured = measure_window(log.steps, log.nan_marks, (5, 20), resamples=10, seed=1)
    assert not isinstance(measured, list)
    text = path.read_text().splitlines()
    printed = re.compile(r"\biteration\s+(\d+)/\s*\d+ .*elapsed time per iteration \(ms\): ([\d.]+)")
    rows = [printed.search(line) for line in text[measured.lines[0] - 1:measured.lines[-1]]]
    found = [(int(m.group(1)), float(m.group(2)) / 1000) for m in rows if m]
    assert [i for i, _ in found] == list(range(5, 21)) == [int(printed.search(text[n - 1]).group(1))  # type: ignore[union-attr]
                                                          for n in measured.lines]
    assert [t for _, t in found] == pytest.approx(list(measured.step_times))
