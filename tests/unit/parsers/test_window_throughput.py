"""Step time and printed TFLOP/s per GPU over the window 35-44, from Megatron-Bridge and NeMo 2 lines as they print
them, against means written out by hand; nan values as the log's own counter shows them."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.metrics.throughput import RunThroughput, measure_window
from clustercert.parsers import megatron
from clustercert.parsers.megatron import parse_megatron
from clustercert.parsers.nemo import parse_nemo

# The window's values, written out: step time (ms as printed) and TFLOP/s per GPU for iterations 35..44
WINDOW_MS = [9412.3, 9398.7, 9405.1, 9421.8, 9389.4, 9402.6, 9417.2, 9395.9, 9408.4, 9411.0]
WINDOW_TFLOPS = [612.4, 613.3, 612.9, 611.8, 613.9, 613.1, 612.1, 613.5, 612.7, 612.5]
# their means, added up by hand: 94062.4 ms / 10 and 6128.2 / 10
ORACLE_STEP_S = 9.40624
ORACLE_TFLOPS = 612.82


def _ms(i: int) -> float:
    """Iteration i's printed step time: the window's values, 61234.5 ms for the first step, 9300 + i ms elsewhere
    (every iteration differs, so a throughput paired with the wrong record shows)."""
    return WINDOW_MS[i - 35] if 35 <= i <= 44 else 61234.5 if i == 1 else 9300.0 + i


def _tflops(i: int) -> float:
    return WINDOW_TFLOPS[i - 35] if 35 <= i <= 44 else 500.0 + i


def bridge_log(prefix_throughput: str = "", prefix_record: str = "", *, after: bool = False,
               nan_at: int | None = None) -> str:
    """A Megatron-Bridge console log of 50 iterations as `training_log` prints them: rank 0's `Step Time` line,
    then the last rank's record (`after`: the other order)."""
    out = ["------------------------ arguments ------------------------\n",
           "  tensor_model_parallel_size ...................... 4\n",
           "-------------------- end of arguments ---------------------\n"]
    for i in range(1, 51):
        throughput = (f"{prefix_throughput}Step Time : {_ms(i) / 1000:.2f}s GPU utilization: "
                      f"{_tflops(i):.1f}MODEL_TFLOP/s/GPU\n")
        grad = "nan" if i == nan_at else f"{1.0 + 1 / i:.3f}"
        record = (f"{prefix_record} [2026-08-20 10:{i // 60:02d}:{i % 60:02d}] iteration {i:8d}/{50:8d} | "
                  f"consumed samples: {256 * i:12d} | elapsed time per iteration (ms): {_ms(i):.1f} | "
                  f"throughput per GPU (TFLOP/s/GPU): {_tflops(i):.1f} | learning rate: 1.500000E-05 | "
                  f"global batch size:   256 | lm loss: {11.0 - i / 10:E} | loss scale: 1.0 | grad norm: {grad} | "
                  "number of skipped iterations:   0 | number of nan iterations:   0 |\n")
        out += [record, throughput] if after else [throughput, record]
    return "".join(out)


def write(tmp_path: Path, text: str, name: str = "log-x_1234_0.out") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def measured(steps: object, nans: object = ()) -> RunThroughput:
    got = measure_window(steps, list(nans), (35, 44), resamples=50, seed=1)  # type: ignore[arg-type]
    assert isinstance(got, RunThroughput), got
    return got


@pytest.mark.parametrize("line_by_line", [False, True], ids=["template", "line-by-line"])
@pytest.mark.parametrize(("prefix_throughput", "prefix_record"), [("", ""), ("0: [default0]:", "511: ")],
                         ids=["plain", "srun-labels"])
def test_bridge_step_time_and_printed_tflops_over_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line_by_line: bool, prefix_throughput: str, prefix_record: str
) -> None:
    if line_by_line:
        monkeypatch.setattr(megatron, "_pipe_log_fast", lambda *args, **kwargs: None)
    log = parse_megatron(write(tmp_path, bridge_log(prefix_throughput, prefix_record)), "log-x_1234_0.out")
    assert len(log.steps) == 50 and log.warnings == []
    # each record gets the throughput line printed just before it
    assert [s.tflops_per_gpu for s in log.steps] == [_tflops(i) for i in range(1, 51)]
    got = measured(log.steps)
    assert got.mean_s == pytest.approx(ORACLE_STEP_S, rel=1e-12)
    assert got.tflops_mean == pytest.approx(ORACLE_TFLOPS, rel=1e-12) and got.tflops_steps == 10
    assert got.lines[0] == 3 + 2 * 35  # iteration 35's record: 3 header lines, then two lines per iteration


@pytest.mark.parametrize("line_by_line", [False, True], ids=["template", "line-by-line"])
def test_a_throughput_line_after_its_record_still_belongs_to_that_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line_by_line: bool
) -> None:
    if line_by_line:
        monkeypatch.setattr(megatron, "_pipe_log_fast", lambda *args, **kwargs: None)
    log = parse_megatron(write(tmp_path, bridge_log(after=True)), "x.out")
    got = measured(log.steps)
    assert (got.mean_s, got.tflops_mean) == (pytest.approx(ORACLE_STEP_S), pytest.approx(ORACLE_TFLOPS))


def test_a_job_that_ended_between_the_two_prints_keeps_every_pair(tmp_path: Path) -> None:
    # the throughput line of iteration 51 printed, its record never: 51 throughput lines for 50 records
    text = bridge_log() + "Step Time : 9.30s GPU utilization: 551.0MODEL_TFLOP/s/GPU\n"
    log = parse_megatron(write(tmp_path, text), "x.out")
    assert log.warnings == [] and [s.tflops_per_gpu for s in log.steps] == [_tflops(i) for i in range(1, 51)]


def test_throughput_lines_missing_for_some_records_are_paired_in_order_and_said(tmp_path: Path) -> None:
    text = bridge_log().replace("Step Time : 9.32s GPU utilization: 520.0MODEL_TFLOP/s/GPU\n", "")  # iteration 20
    log = parse_megatron(write(tmp_path, text), "x.out")
    assert log.warnings == ["x.out: 49 'Step Time' throughput lines for 50 iteration records; paired in order, "
                            "as NVIDIA's llmb-run does"]
    assert log.steps[48].tflops_per_gpu == 550.0  # iteration 49 got iteration 50's, as llmb-run pairs them
    assert log.steps[49].tflops_per_gpu == 550.0  # its own record's value stays where no line is left


def nemo_log() -> str:
    """A NeMo 2 console log of 50 steps, counted from 0 as NeMo prints them, TFLOP/s in NeMo's own notation."""
    out = []
    for i in range(50):
        seconds = _ms(i) / 1000
        out.append(f"Training epoch 0, iteration {i}/49 | lr: 1.124e-05 | global_batch_size: 128 | global_step: {i} | "
                   f"max_memory_reserved: 64286097408 | reduced_train_loss: 11.87 | train_step_timing in s: "
                   f"{seconds:.5g} | TFLOPS_per_GPU: {_tflops(i):.4g} | consumed_samples: {128 * (i + 1)}\n")
    return "".join(out)


def test_nemo2_step_time_and_printed_tflops_over_the_window(tmp_path: Path) -> None:
    text = nemo_log()
    assert "TFLOPS_per_GPU: 612.4 |" in text and "TFLOPS_per_GPU: 534 |" in text  # printed as %.4g
    log = parse_nemo(write(tmp_path, text.replace("TFLOPS_per_GPU: 534 |", "TFLOPS_per_GPU: 5.34e+02 |")), "n.log")
    got = measured(log.steps)
    assert got.mean_s == pytest.approx(ORACLE_STEP_S, rel=1e-12)
    assert got.tflops_mean == pytest.approx(ORACLE_TFLOPS, rel=1e-12) and got.tflops_steps == 10
    assert log.steps[34].tflops_per_gpu == 534.0  # read in exponent notation, as NeMo prints large values


def test_no_printed_tflops_leaves_the_mean_unset(tmp_path: Path) -> None:
    text = "".join(line.replace(f" | TFLOPS_per_GPU: {_tflops(i):.4g}", "")
                   for i, line in enumerate(nemo_log().splitlines(keepends=True)))
    got = measured(parse_nemo(write(tmp_path, text), "n.log").steps)
    assert got.tflops_mean is None and got.tflops_steps == 0


@pytest.mark.parametrize("line_by_line", [False, True], ids=["template", "line-by-line"])
def test_a_nan_grad_norm_beside_a_nan_count_of_zero_is_said_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line_by_line: bool
) -> None:
    if line_by_line:
        monkeypatch.setattr(megatron, "_pipe_log_fast", lambda *args, **kwargs: None)
    log = parse_megatron(write(tmp_path, bridge_log(nan_at=3)), "x.out")
    assert [(m.line, m.field, m.counted) for m in log.nan_marks] == [(3 + 2 * 3, "grad norm", 0)]
    problems = measure_window(log.steps, log.nan_marks, (35, 44), resamples=10, seed=1)
    assert isinstance(problems, list) and problems[0].line == 9
    assert problems[0].message.startswith(
        "the log prints a nan/inf grad norm while its own count on that line reads 'number of nan iterations: 0'")
    assert log.to_json()["nan"] == [{"line": 9, "field": "grad norm", "counted": 0}]
