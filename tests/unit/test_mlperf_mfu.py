"""An MLPerf result's MFU: from the benchmarks file's FLOPs per sample (references/mlperf-benchmarks.yaml), the runs'
tracked_stats step time and the catalog's peak; never derived for a benchmark the file does not publish (issue 56)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.errors import CatalogError
from clustercert.evidence.bundle import Phase, Precision, RunKind, RunSpec
from clustercert.mlperf_benchmarks import load_mlperf_benchmarks
from clustercert.parsers.mlperf import MlperfResult, MlperfRun
from clustercert.phases.efficiency import MlperfFlops, judge_mlperf, mlperf_mfu
from tests.conftest import ROOT

SHIPPED = ROOT / "references" / "mlperf-benchmarks.yaml"
# test_flops.py: Llama 2 70B LoRA, one 8192-token sample, non-causal scores, frozen weights x 2/3
LORA_FLOPS = 2.7793592e15
H100_PEAKS = {"bf16": 989.0, "fp8": 1979.0}  # DOMAIN.md section 2


def _result(benchmark: str, throughputs: tuple[float, ...] = (2.0, 2.0), gbs: int | None = 8,
            system_gpus: int | None = 8) -> MlperfResult:
    runs = [MlperfRun(f"result_{i}.txt", "success", 0, 60_000 * (30 + i), 1, 2, throughputs=throughputs,
                      global_batch_size=gbs) for i in range(3)]
    return MlperfResult("r", benchmark, "4.0.0", runs, None, "sys", 31.0, None, system_gpus=system_gpus)


def _run(precision: Precision | None = Precision.FP8, gpus: int | None = None) -> RunSpec:
    return RunSpec(id="lora", phase=Phase.EFFICIENCY, kind=RunKind.MLPERF, format="mlperf", files=["r"],
                   precision=precision, gpus=gpus)


@pytest.fixture(scope="module")
def flops() -> MlperfFlops:
    return MlperfFlops(load_mlperf_benchmarks(SHIPPED), H100_PEAKS, "catalog exemplar-h100")


def test_the_shipped_file_publishes_llama2_70b_lora(flops: MlperfFlops) -> None:
    counted = flops.benchmarks.flops("llama2_70b_lora")
    assert counted is not None
    assert counted.flops_per_sample == pytest.approx(LORA_FLOPS, rel=1e-7)
    assert (counted.model, counted.seq_len) == ("Llama 2 70B", 8192)
    assert counted.sources == ("mlcommons-llama2-70b-config", "mlcommons-llama2-70b-run", "megatron-bridge-flop-utils")


def test_mfu_by_hand(flops: MlperfFlops) -> None:
    # 2.0 samples/s with 8 per step: 4 s a step; 2.7793592e15 x 8 / 4 s / 8 GPUs = 6.948398e14 FLOP/s per GPU,
    # over the FP8 peak of 1979 TFLOP/s: 0.351106
    value, said = mlperf_mfu(_run(), _result("llama2_70b_lora"), flops)
    assert value == pytest.approx(0.351106, rel=1e-5)
    assert said.startswith("; MFU 35.1% (2.779e+15 FLOPs per sample of Llama 2 70B at 8192 tokens (non-causal, LoRA")
    assert "global batch 8, 8 GPUs, fp8 peak 1979 TFLOP/s from catalog exemplar-h100" in said
    # the bundle's GPU count wins over the system JSON's; BF16 halves the peak's denominator
    half, _ = mlperf_mfu(_run(Precision.BF16, gpus=16), _result("llama2_70b_lora"), flops)
    assert half == pytest.approx(0.351106 / 2 * 1979 / 989, rel=1e-5)


@pytest.mark.parametrize(("run", "result", "why"), [
    (_run(), _result("bert"), "no FLOPs for bert"),
    (_run(), _result("llama2_70b_lora", throughputs=()), "no tracked_stats step time in the runs"),
    (_run(), _result("llama2_70b_lora", gbs=None), "no tracked_stats step time in the runs"),  # samples/s alone
    (_run(), MlperfResult("r", "llama2_70b_lora", None, [
        MlperfRun("result_0.txt", "success", 0, 1, 1, 2, step_times_s=(4.0,), global_batch_size=8),
        MlperfRun("result_1.txt", "success", 0, 1, 1, 2, step_times_s=(8.0,), global_batch_size=16)],
        None, None, None, None, system_gpus=8), "the runs do not log one global_batch_size"),
    (_run(), _result("llama2_70b_lora", system_gpus=None), "the number of GPUs is neither in bundle.yaml"),
    (_run(None), _result("llama2_70b_lora"), "bundle.yaml gives the run no precision"),
    (_run(Precision.NVFP4), _result("llama2_70b_lora"), "the catalog has no nvfp4 peak"),
])
def test_mfu_not_derived_says_why(flops: MlperfFlops, run: RunSpec, result: MlperfResult, why: str) -> None:
    value, said = mlperf_mfu(run, result, flops)
    assert value is None and said.startswith(f"; MFU not derived: {why}")


def test_the_check_message_carries_the_mfu(flops: MlperfFlops) -> None:
    (check,) = judge_mlperf([_run()], {"lora": _result("llama2_70b_lora")}, {}, flops)
    assert "; step time 4.000 s (mean of 3 runs' tracked_stats" in check.message
    assert "; MFU 35.1% (" in check.message
    (other,) = judge_mlperf([_run()], {"lora": _result("dlrm_dcnv2")}, {}, flops)
    assert "; MFU not derived: no FLOPs for dlrm_dcnv2;" in other.message


def test_a_benchmark_citing_an_unknown_source_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "mlperf-benchmarks.yaml"
    bad.write_text(SHIPPED.read_text().replace("source: megatron-bridge-flop-utils", "source: nowhere"))
    with pytest.raises(CatalogError, match="cites source 'nowhere'"):
        load_mlperf_benchmarks(bad)
