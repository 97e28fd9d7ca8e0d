"""A TFLOP/s baseline (certify --baselines) is met by the mean TFLOP/s the log prints over the window (issue 57)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercert.baselines import apply_baselines, load_baselines
from clustercert.parsers.training import TrainingLog
from clustercert.phases.efficiency import judge_efficiency
from clustercert.verdicts import Status
from tests.unit.phase_bundles import by_id, gb200, parse_all, write_bundle

# DOMAIN.md section 4: Llama 3 70B at s = 8192, causal (Megatron's count), FLOPs per sequence
CAUSAL = 3.68003e15
GBS, GPUS, STEP = 2048, 512, 7.6
# the TFLOP/s per GPU the step time implies: 3.68003e15 * 2048 / 7.6 / 512 / 1e12 = 1936.9
BY_STEP = CAUSAL * GBS / STEP / GPUS / 1e12
CHECK = "efficiency.llama3-70b-fp8-512_meets_baseline"


def _printed(i: int, mean: float) -> float:
    """The window's printed values spread evenly around `mean` (mean - 9, mean - 7, ..., mean + 9 over
    iterations 35-44: their mean is `mean` by hand); outside the window a figure the window must not see."""
    return mean - 9 + 2 * (i - 35) if 35 <= i <= 44 else 900.0


def _judge(tmp_path: Path, printed_mean: float | None, target: float) -> Any:
    lines = "".join(
        f"Training epoch 0, iteration {i}/49 | global_batch_size: {GBS} | global_step: {i} | reduced_train_loss: 5.2 "
        f"| train_step_timing in s: {STEP}"
        + (f" | TFLOPS_per_GPU: {_printed(i, printed_mean):.2f}" if printed_mean is not None else "") + "\n"
        for i in range(50)
    )
    runs = [{"id": "l70-r1", "phase": "efficiency", "kind": "training", "format": "nemo", "workload": "llama3-70b",
             "precision": "fp8", "gpus": GPUS, "gbs": GBS, "seq_len": 8192, "files": ["l70.log"]}]
    bundle = write_bundle(tmp_path / "b", runs, {"l70.log": lines})
    targets = tmp_path / "targets.yaml"
    targets.write_text("schema_version: 1\nsupplied_by: NVIDIA account team\ndate: '2026-11-15'\nsource: message\n"
                       "baselines:\n"
                       f"  - {{workload: llama3-70b, precision: fp8, gpus: 512, tflops_per_gpu: {target}}}\n")
    catalog = apply_baselines(gb200(), load_baselines(targets))
    parsed = parse_all(bundle)
    spec = bundle.spec
    log = parsed["l70-r1"]
    assert isinstance(log, TrainingLog)
    result = judge_efficiency(spec, catalog, {"l70-r1": log}, parsed)
    return by_id(result.checks)[CHECK], {w.workload: w for w in result.workloads}["llama3-70b"]


@pytest.mark.parametrize(("mean", "target", "status", "by_step"), [
    # 1800 / 1890 = 0.952 > 0.95: PASS; the step time alone gives the same (1936.9 / 1890 = 1.025)
    (1800.0, 1890.0, Status.PASS, True),
    # 1800 / 1900 = 0.947: FAIL, where the converted step time would pass (1936.9 / 1900 = 1.019)
    (1800.0, 1900.0, Status.FAIL, True),
    # 2000 / 2100 = 0.952: PASS, where the converted step time would fail (1936.9 / 2100 = 0.922)
    (2000.0, 2100.0, Status.PASS, False),
])
def test_a_tflops_baseline_is_judged_on_the_printed_tflops(tmp_path: Path, mean: float, target: float,
                                                            status: Status, by_step: bool) -> None:
    assert (BY_STEP / target > 0.95) is by_step  # the numbers are chosen so the two readings can disagree
    check, workload = _judge(tmp_path, mean, target)
    assert check.status is status and workload.status is status
    assert (check.measured, check.target, check.unit) == (pytest.approx(mean), target, "TFLOP/s/GPU")
    assert check.delta_pct == pytest.approx(100.0 * (mean / target - 1.0))
    assert f"printed TFLOP/s {mean:.1f} per GPU (mean of 10 steps of iterations 35-44)" in check.message
    assert f"vs baseline {target:g} TFLOP/s per GPU" in check.message
    assert "the log's printed TFLOP/s was compared, not the step time" in check.message
    # the report keeps the converted step time: the baseline as a step time through Megatron-Bridge's count
    assert workload.baseline.step_time_s == pytest.approx(CAUSAL * GBS / (target * 1e12 * GPUS), rel=1e-5)
    assert check.ci_low <= check.delta_pct <= check.ci_high


@pytest.mark.parametrize(("target", "status"), [(1900.0, Status.PASS), (2100.0, Status.FAIL)])
def test_a_log_printing_no_tflops_falls_back_to_the_converted_step_time(tmp_path: Path, target: float,
                                                                        status: Status) -> None:
    check, workload = _judge(tmp_path, None, target)
    converted = CAUSAL * GBS / (target * 1e12 * GPUS)  # 1900: 7.747 s; 2100: 7.009 s, against 7.6 s measured
    assert check.status is status and workload.status is status
    assert (check.measured, check.target, check.unit) == (pytest.approx(STEP), pytest.approx(converted, rel=1e-5),
                                                          "s")
    assert check.delta_pct == pytest.approx(100.0 * (converted / STEP - 1.0), rel=1e-4)
    assert (f"the log prints no TFLOP/s over iterations 35-44, so the TFLOP/s baseline {target:g} per GPU was "
            "compared through its converted step time") in check.message
