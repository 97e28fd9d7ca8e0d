"""Efficiency additions: which FLOPs convention a log's printed TFLOP/s follows, and MLPerf time to train."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clustercert.mlperf_benchmarks import load_mlperf_benchmarks
from clustercert.phases.efficiency import judge_efficiency
from clustercert.verdicts import Severity, Status
from tests.conftest import ROOT
from tests.unit.phase_bundles import by_id, gb200, parse_all, write_bundle

# DOMAIN.md section 4 worked numbers, Llama 3 70B at s = 8192
CAUSAL, NON_CAUSAL = 3.68003e15, 3.94391e15
GBS, GPUS, STEP = 2048, 512, 7.6


def _tflops(flops: float, step_s: float = STEP) -> float:
    return flops * GBS / step_s / GPUS / 1e12


def _bundle(tmp_path: Path, printed: float | None, mlperf: dict[str, str] | None = None) -> dict[str, Any]:
    lines = "".join(
        f"Training epoch 0, iteration {i}/49 | global_batch_size: {GBS} | global_step: {i} | reduced_train_loss: 5.2 "
        f"| train_step_timing in s: {STEP}" + (f" | TFLOPS_per_GPU: {printed:.2f}" if printed else "") + "\n"
        for i in range(50)
    )
    runs: list[dict[str, Any]] = [{"id": "l70-r1", "phase": "efficiency", "kind": "training", "format": "nemo",
                                   "workload": "llama3-70b", "precision": "fp8", "gpus": GPUS, "gbs": GBS,
                                   "seq_len": 8192, "files": ["l70.log"]}]
    files: dict[str, str | bytes] = {"l70.log": lines}
    if mlperf is not None:
        runs.append({"id": "llama2-lora", "phase": "efficiency", "kind": "mlperf", "format": "mlperf",
                     "ruleset": "4.0.0", "files": ["mlperf"]})
        files.update({f"mlperf/{k}": v for k, v in mlperf.items()})
    return {"bundle": write_bundle(tmp_path / "b", runs, files)}


def _judge(b: dict[str, Any], **rules: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    bundle = b["bundle"]
    parsed = parse_all(bundle)
    logs = {k: v for k, v in parsed.items() if k == "l70-r1"}
    result = judge_efficiency(bundle.spec, gb200(**rules), logs, parsed)  # type: ignore[arg-type]
    workloads = {w.workload: w.to_json() for w in result.workloads}
    return by_id(result.checks), workloads


@pytest.mark.parametrize(("printed", "convention"), [(_tflops(CAUSAL), "causal"),
                                                     (_tflops(NON_CAUSAL), "non-causal")])
def test_log_tflops_matched_to_its_convention(tmp_path: Path, printed: float, convention: str) -> None:
    checks, workloads = _judge(_bundle(tmp_path, printed))
    check = checks["efficiency.llama3-70b-fp8-512_log_tflops_explained"]
    assert check.status is Status.PASS and check.severity is Severity.ADVISORY
    assert workloads["llama3-70b"]["log_flops_convention"] == convention
    assert workloads["llama3-70b"]["log_tflops_per_gpu"] == pytest.approx(round(printed, 2))


def test_log_tflops_no_convention_explains_is_a_warning(tmp_path: Path) -> None:
    # 1800 is 0.929 of the causal value (1936.9) and 0.867 of the non-causal one: outside 2 % of both
    checks, workloads = _judge(_bundle(tmp_path, 1800.0))
    check = checks["efficiency.llama3-70b-fp8-512_log_tflops_explained"]
    assert check.status is Status.WARN and "no convention explains it" in check.message
    assert f"causal: {1800.0 / _tflops(CAUSAL):.3f}" in check.message
    assert workloads["llama3-70b"]["log_flops_convention"] is None


def test_log_without_tflops_has_no_convention_check(tmp_path: Path) -> None:
    checks, workloads = _judge(_bundle(tmp_path, None))
    assert "efficiency.llama3-70b-fp8-512_log_tflops_explained" not in checks
    assert workloads["llama3-70b"]["log_tflops_per_gpu"] is None


def _mllog(start_ms: int, minutes: float, status: str = "success") -> str:
    events = [
        {"key": "submission_benchmark", "value": "llama2_70b_lora", "time_ms": start_ms - 1000, "metadata": {}},
        {"key": "run_start", "value": None, "time_ms": start_ms, "metadata": {}},
        {"key": "run_stop", "value": 0.92, "time_ms": start_ms + int(minutes * 60000), "metadata": {"status": status}},
    ]
    return "".join(f":::MLLOG {json.dumps(e)}\n" for e in events)


RUNS = {f"result_{i}.txt": _mllog(1_000_000 * (i + 1), m) for i, m in enumerate([30.0, 28.0, 31.0, 29.0, 40.0])}


def test_mlperf_score_reported_without_a_target(tmp_path: Path) -> None:
    checks, _ = _judge(_bundle(tmp_path, None, RUNS))
    check = checks["efficiency.mlperf-llama2-lora_time_to_train"]
    # olympic mean: drop 28 and 40, mean of 29, 30, 31 = 30.0 minutes
    assert check.severity is Severity.ADVISORY and check.status is Status.SKIPPED
    assert check.measured == pytest.approx(30.0)


def test_mlperf_against_a_catalog_target(tmp_path: Path) -> None:
    b = _bundle(tmp_path, None, RUNS)
    passed, _ = _judge(b, mlperf_targets_minutes={"llama2_70b_lora": 31.0})
    failed, _ = _judge(b, mlperf_targets_minutes={"llama2_70b_lora": 29.5})
    assert passed["efficiency.mlperf-llama2-lora_time_to_train"].status is Status.PASS
    check = failed["efficiency.mlperf-llama2-lora_time_to_train"]
    assert check.status is Status.FAIL and check.severity is Severity.REQUIRED
    assert "score 30.00 min vs target 29.5 min" in check.message


def test_mlperf_mfu_is_said_through_judge_efficiency(tmp_path: Path) -> None:
    # the benchmarks file reaches the MLPerf check: these runs log no tracked_stats, so no MFU, and the check says why
    b = _bundle(tmp_path, None, RUNS)["bundle"]
    parsed = parse_all(b)
    benchmarks = load_mlperf_benchmarks(ROOT / "references" / "mlperf-benchmarks.yaml")
    result = judge_efficiency(b.spec, gb200(), {"l70-r1": parsed["l70-r1"]}, parsed,  # type: ignore[arg-type]
                              benchmarks=benchmarks)
    check = by_id(result.checks)["efficiency.mlperf-llama2-lora_time_to_train"]
    assert "; MFU not derived: no tracked_stats step time in the runs" in check.message
    without = by_id(judge_efficiency(b.spec, gb200(), {"l70-r1": parsed["l70-r1"]}, parsed).checks)  # type: ignore[arg-type]
    assert "MFU" not in without["efficiency.mlperf-llama2-lora_time_to_train"].message  # no file given, no clause
