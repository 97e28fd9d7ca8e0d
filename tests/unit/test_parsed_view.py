"""What `evidence parse` prints, from objects written here by hand (the real files, through the command line, are in
tests/real/test_real_parse_view.py)."""

from __future__ import annotations

from typing import Any

from clustercert.cli.parsed_view import _elapsed, _span, parsed_lines

END = "  (--json prints every value read)"


def _step(iteration: int, seconds: float | None, line: int, **more: Any) -> dict[str, Any]:
    return {"iteration": iteration, "step_time_s": seconds, "line": line, "tflops_per_gpu": None, "loss": None,
            "pause_s": 0.0, "untimed_pause": False, **more}


def test_durations_and_spans_as_a_person_reads_them() -> None:
    assert [_elapsed(93784), _elapsed(59.9), _elapsed(0), _elapsed(None)] == ["1-02:03:04", "00:00:59", "00:00:00",
                                                                             "-"]
    start = "2022-07-05T16:17:52+02:00"
    assert _span(start, "2022-07-05T16:22:53+02:00") == f"{start} to 16:22:53"
    assert _span(start, "2022-07-06T01:00:00+02:00") == f"{start} to 2022-07-06T01:00:00+02:00"  # another day
    assert _span(start, "2022-07-05T16:22:53+00:00") == f"{start} to 2022-07-05T16:22:53+00:00"  # another offset
    assert _span(None, None) == "- to -"


def test_a_training_log_with_pauses_nan_values_and_many_steps() -> None:
    steps = [_step(i, 2.0 + i / 10, 10 + i, loss=9.0 - i) for i in range(9)]
    steps[4] = {**steps[4], "pause_s": 12.5}  # a checkpoint save before step 4, timed
    steps[7] = {**steps[7], "untimed_pause": True}
    nan = [{"line": 30, "field": "loss"}, {"line": 31, "field": "grad_norm"}, {"line": 40, "field": "loss"},
           {"line": 41, "field": "loss"}]
    lines = parsed_lines({"format": "nemo", "steps": steps, "nan": nan, "lines": 50, "warnings": []}, 80)
    # step times 2.0 .. 2.8: median 2.4; losses 9 .. 1
    assert lines == [
        "  9 steps read of 50 lines: iterations 0..8, lines 10-18",
        "  step time (s): median 2.4 (min 2, max 2.8) over 9 steps",
        "  loss: 9 at iteration 0, 1 at iteration 8",
        "  paused before 2 steps (checkpoint saves, evaluations): 12.5 s timed",
        "  steps (iteration, step time s, TFLOPS per GPU, loss, line):",
        "    0    2  -  9  10",
        "    1  2.1  -  8  11",
        "    2  2.2  -  7  12",
        "    ... 3 steps more",
        "    6  2.6  -  3  16",
        "    7  2.7  -  2  17",
        "    8  2.8  -  1  18",
        "  not a number: 4 values (loss at line 30, grad_norm at line 31, loss at line",
        "      40, ...)",
        END,
    ]


def test_a_zero_or_negative_step_time_is_named_with_its_line() -> None:
    steps = [_step(i, t, 5 + i) for i, t in enumerate([1.0, 0.0, -2.5, 1.0, -1.0, -0.5])]  # sorted: -2.5 -1 -0.5 0 1 1
    lines = parsed_lines({"format": "megatron", "steps": steps, "nan": [], "lines": 10, "warnings": []}, 120)
    assert lines[1:3] == ["  step time (s): median -0.25 (min -2.5, max 1) over 6 steps",
                          "  step time zero or negative: 4 steps (0 s at line 6, -2.5 s at line 7, -1 s at line 9, "
                          "...)"]


def test_a_nemo_logs_resilience_events_and_straggler_reports() -> None:
    events = [{"kind": kind, "line": line} for kind, line in (("checkpoint_saved", 5), ("worker_failed", 9),
                                                              ("checkpoint_saved", 12), ("restart", 14))]
    reports = [{"kind": "relative", "line": 20 + i, "scores": [{}] * (i + 1)} for i in range(4)]
    lines = parsed_lines({"format": "nemo", "steps": [_step(0, 1.5, 3)], "nan": [], "lines": 30, "warnings": [],
                          "events": events, "straggler_reports": reports}, 120)
    assert lines[-3:] == [
        "  resilience events: 4 events (checkpoint_saved 2, worker_failed 1, restart 1)",
        "  straggler reports: 4, relative at line 20 (1 rank), relative at line 21 (2 ranks), relative at line 22 (3 "
        "ranks), ...",
        END,
    ]
    assert lines[:2] == ["  1 step read of 30 lines: iteration 0, line 3", "  step time (s): 1.5 over 1 step"]
    one_loss = [_step(1, 1.25, 1), _step(2, 1.2, 2, loss=7.2)]  # the first step's loss printed nan: none read
    assert parsed_lines({"format": "megatron", "steps": one_loss, "nan": [{"line": 1, "field": "loss"}],
                         "lines": 2, "warnings": []}, 80)[2] == "  loss: 7.2 at iteration 2"


def test_a_counter_that_goes_back_is_shown_stretch_by_stretch() -> None:
    """A restart from a checkpoint (or a repeated step) starts a new stretch; past three, how many more. NeMo's
    global step is the counter where every step has one; a megatron log has none: its iteration."""
    counters = [1, 2, 3, 1, 2, 1, 5, 6, 6]  # stretches 1..3, 1..2, 1..6, 6
    steps = [_step(0, 1.0, 10 + i, global_step=c) for i, c in enumerate(counters)]
    lines = parsed_lines({"format": "nemo", "steps": steps, "nan": [], "lines": 20, "warnings": []}, 120)
    assert lines[0] == "  9 steps read of 20 lines: global steps 1..3, 1..2, 1..6 and 1 stretch more, lines 10-18"
    assert lines[1:4] == ["  step time (s): median 1 (min 1, max 1) over 9 steps",
                          "  steps (global step, step time s, TFLOPS per GPU, loss, line):", "    1  1  -  -  10"]
    steps = [_step(c, 1.0, 10 + i) for i, c in enumerate(counters[:4])]  # no global step: the iteration
    lines = parsed_lines({"format": "megatron", "steps": steps, "nan": [], "lines": 20, "warnings": []}, 120)
    assert lines[0] == "  4 steps read of 20 lines: iterations 1..3, 1, lines 10-13"
    mixed = [_step(0, 1.0, 3, global_step=0), _step(0, 1.0, 4)]  # one without: the iteration for all
    assert parsed_lines({"format": "nemo", "steps": mixed, "nan": [], "lines": 4, "warnings": []},
                        120)[0] == "  2 steps read of 4 lines: iterations 0, 0, lines 3-4"


def test_a_log_without_steps_says_so_and_its_warnings_wrap_under_it() -> None:
    warning = "the log's lines 3-9 hold no iteration this parser reads: " + "x" * 10
    lines = parsed_lines({"format": "megatron", "steps": [], "nan": [], "lines": 9, "warnings": [warning]}, 40)
    assert lines == [
        "  0 steps read of 9 lines",
        "  warning: the log's lines 3-9 hold no",
        "      iteration this parser reads:",
        "      xxxxxxxxxx",
        END,
    ]


def test_nccl_tests_a_measured_test_and_an_aborted_one() -> None:
    rows = [{"size_bytes": 8, "busbw_oop": 0.01, "busbw_ip": 0.02, "line": 30},
            {"size_bytes": 1 << 30, "busbw_oop": 400.5, "busbw_ip": 401.25, "line": 31}]
    tests = [
        {"collective": "all_reduce", "ranks": 16, "hosts": ["a"] * 8 + ["b"] * 8, "rows": rows, "line": 1,
         "last_line": 33, "reported_avg_busbw": 200.4, "computed_avg_busbw": 200.445, "error": None},
        {"collective": "alltoall", "ranks": 16, "hosts": [], "rows": [], "line": 35, "last_line": 40,
         "reported_avg_busbw": None, "computed_avg_busbw": None, "error": "no # Avg bus bandwidth line",
         "cause": "unhandled system error", "cause_line": 39},
    ]
    tests.append({"collective": "sendrecv", "ranks": 2, "hosts": ["a", "b"], "rows": [], "line": 41,
                  "last_line": 41, "error": None})  # none such from the parser (rowless is aborted): not a crash
    assert parsed_lines({"format": "nccl-tests", "tests": tests}, 200) == [
        "  3 tests, 1 aborted; busbw in GB/s at the largest size, out of place / in place; the average as printed "
        "/ as computed",
        "  all_reduce: 16 ranks on 2 hosts, lines 1-33, 2 sizes 8 B..1.0 GiB: busbw 400.5 / 401.25 (line 31); "
        "average 200.4 / 200.445",
        "  alltoall: 16 ranks, lines 35-40: ABORTED, no # Avg bus bandwidth line (cause at line 39: unhandled "
        "system error)",
        "  sendrecv: 2 ranks on 2 hosts, line 41: no rows",
        END,
    ]


def test_a_sacct_dump_of_many_jobs_shows_the_first_and_last_three() -> None:
    jobs = [{"job_id": str(100 + i), "state": "COMPLETED", "state_raw": "COMPLETED", "elapsed_s": 60 * i,
             "start": None, "end": None, "steps": [{}] * i, "line": 2 + i, "incarnation": 1} for i in range(8)]
    jobs[7] = {**jobs[7], "job_id": "106", "incarnation": 2, "state": "CANCELLED", "state_raw": "CANCELLED by 0"}
    lines = parsed_lines({"format": "sacct", "jobs": jobs, "fields": ["JobID", "State"], "timezone": "UTC",
                          "warnings": []}, 80)
    assert lines == [
        "  8 jobs (COMPLETED 7, CANCELLED 1), 28 steps; times in UTC; 2 fields",
        "  jobs (id, state, elapsed, start to end, steps, line):",
        "    100    COMPLETED       00:00:00  - to -  0  2",
        "    101    COMPLETED       00:01:00  - to -  1  3",
        "    102    COMPLETED       00:02:00  - to -  2  4",
        "    ... 2 jobs more",
        "    105    COMPLETED       00:05:00  - to -  5  7",
        "    106    COMPLETED       00:06:00  - to -  6  8",
        "    106/2  CANCELLED by 0  00:07:00  - to -  7  9",
        END,
    ]


def test_mlperf_runs_and_a_result_that_is_not_scored() -> None:
    runs = [{"file": "result_0.txt", "status": "success", "minutes": 29.4305, "seed": 1, "start_line": 5,
             "stop_line": 50},
            {"file": "result_1.txt", "status": "aborted", "minutes": None, "seed": None, "start_line": 5,
             "stop_line": None}]
    lines = parsed_lines({"format": "mlperf", "benchmark": "bert", "system_name": None, "ruleset": "4.0.0",
                          "runs": runs, "score_minutes": None, "scaling_factor": 1.0,
                          "error": "10 runs needed, got 2"}, 80)
    assert lines == [
        "  bert on an unnamed system, ruleset 4.0.0: 2 runs",
        "    result_0.txt: success, 29.43 min, seed 1 (lines 5-50)",
        "    result_1.txt: aborted, - (line 5)",
        "  not scored: 10 runs needed, got 2",
        END,
    ]


def test_telemetry_means_are_of_the_values_that_are_numbers() -> None:
    """`dcgmi dmon` prints N/A: GPU 1's first SMACT sample has no value, so the metric's mean is (0.9 + 0.8 + 0.7)
    / 3 = 0.8 over its 3 values, not over its 4 samples (a mean weighted by samples read 0.775)."""
    series = [{"metric": "SMACT", "gpu": "0", "host": None, "count": 2, "values": 2, "min": 0.8, "max": 0.9,
               "mean": 0.85, "first_ms": 0, "last_ms": 1000},
              {"metric": "SMACT", "gpu": "1", "host": None, "count": 2, "values": 1, "min": 0.7, "max": 0.7,
               "mean": 0.7, "first_ms": 0, "last_ms": 1000},
              {"metric": "POWER", "gpu": "1", "host": None, "count": 2, "values": 0, "min": None, "max": None,
               "mean": None, "first_ms": 0, "last_ms": 1000}]
    assert parsed_lines({"format": "dcgm", "source": "dmon", "samples": 6, "series": series}, 80) == [
        "  6 samples (dmon) in 3 series: 2 GPUs",
        "  from 1970-01-01T00:00:00Z to 1970-01-01T00:00:01Z (1 s)",
        "  per metric: samples, min, mean, max (values that are not numbers left out):",
        "    SMACT: 4, 0.7, 0.8, 0.9",
        "    POWER: 2, no numbers",
        END,
    ]


def test_one_size_and_one_event_are_not_ranges() -> None:
    rows = [{"size_bytes": 1024, "busbw_oop": 1.5, "busbw_ip": 2.5, "line": 1}]
    test = {"collective": "all_gather", "ranks": 4, "hosts": [], "rows": rows, "line": 1, "last_line": 1,
            "reported_avg_busbw": 2.0, "computed_avg_busbw": 2.0, "error": None}
    assert parsed_lines({"format": "nccl-tests", "tests": [test]}, 200)[1] == (
        "  all_gather: 4 ranks, line 1, 1 size 1.0 KiB: busbw 1.5 / 2.5 (line 1); average 2 / 2")
    event = {"ts": "2026-11-02T09:00:00+00:00", "type": "job_started"}
    assert parsed_lines({"format": "events", "events": [event]}, 80)[:2] == [
        "  1 event at 2026-11-02T09:00:00+00:00", "  by type: job_started 1"]


def test_every_parser_has_its_view() -> None:
    """A parser added without a view of its own fails here, not at a user's `evidence parse`."""
    from clustercert.cli.parsed_view import _BY_FORMAT
    from clustercert.parsers import FORMATS, TRAINING_FORMATS

    assert set(FORMATS) == set(TRAINING_FORMATS) | set(_BY_FORMAT)
