"""A real MLPerf Training submission in MLCommons' own layout (`results/<system>/<benchmark>/` beside
`systems/<system>.json`): init asks nothing the system JSON answers, the system's name reaches the check the report
shows, and the step time and the MFU come from the runs' `tracked_stats` (issue 56)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from clustercert.evidence.bundle import Precision, load_bundle
from clustercert.mlperf_benchmarks import load_mlperf_benchmarks
from clustercert.phases.efficiency import MlperfFlops, judge_mlperf
from clustercert.phases.evidence import parse_run
from tests.conftest import ROOT, run_cli

SYSTEM = "XE9680x8H100-SXM-80GB"  # SOURCES.md: Dell/systems/XE9680x8H100-SXM-80GB.json, saved as system.json
BENCH = "llama2_70b_lora"


def _layout(real: Path, root: Path) -> Path:
    """The sample as MLCommons publishes it: the system JSON in systems/, not inside the result folder."""
    sample = real / "mlperf-training" / "dell-xe9680-h100-llama2_70b_lora"
    results = root / "results" / SYSTEM / BENCH
    results.mkdir(parents=True)
    for path in sample.iterdir():
        if path.name != "system.json":
            shutil.copy(path, results / path.name)
    (root / "systems").mkdir()
    shutil.copy(sample / "system.json", root / "systems" / f"{SYSTEM}.json")
    return root


def _tracked_step_time(result: Path) -> float:
    """The oracle: global_batch_size / the mean of the file's tracked_stats throughput (samples/s), read line by
    line from the `:::MLLOG` records as printed."""
    records = [json.loads(line.split(":::MLLOG", 1)[1]) for line in result.read_text().splitlines()
               if ":::MLLOG" in line]
    gbs = next(r["value"] for r in records if r["key"] == "global_batch_size")
    seen = [r["value"]["throughput"] for r in records if r["key"] == "tracked_stats"]
    return float(gbs) / (sum(seen) / len(seen))


@pytest.fixture(scope="module")
def drafted(real_samples: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = _layout(real_samples, tmp_path_factory.mktemp("submission") / "dell")
    init = run_cli("evidence", "init", str(root))
    check = run_cli("evidence", "check", str(root))
    return {"root": root, "init": init, "check": check, "text": (root / "bundle.yaml").read_text()}


def test_init_asks_nothing_the_system_json_answers(drafted: dict[str, object]) -> None:
    assert drafted["init"].returncode == 0, drafted["init"].stderr  # type: ignore[attr-defined]
    text = str(drafted["text"])
    draft = yaml.safe_load(text)
    # the JSON: accelerator_model_name "NVIDIA H100-SXM5-80GB", accelerators_per_node "8", number_of_nodes "1"
    assert draft["system"] == {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": [f"{SYSTEM.lower()}-n001"]}
    (run,) = draft["runs"]
    assert run["files"] == [f"results/{SYSTEM}/{BENCH}", f"systems/{SYSTEM}.json"]
    assert "nothing to fill in" in drafted["init"].stdout  # type: ignore[attr-defined]
    assert run["precision"] == "fp8"  # result_0.txt line 98 `fp8: true`, as in every run (the MFU's peak)
    assert "result_0.txt prints fp8: true at line 98, as do all 10 runs" in text
    assert f"#   systems/{SYSTEM}.json" not in text  # used, not listed among the files not used
    check = drafted["check"]
    assert check.returncode == 0, check.stdout + check.stderr  # type: ignore[attr-defined]


def test_the_system_name_and_tracked_step_time_reach_the_check(drafted: dict[str, object]) -> None:
    root = drafted["root"]
    assert isinstance(root, Path)
    bundle = load_bundle(root)
    (run,) = bundle.spec.runs
    result = parse_run(bundle, run, 1 << 30)
    assert getattr(result, "system_name", None) == SYSTEM
    (check,) = judge_mlperf([run], {run.id: result}, {})
    assert check.title == f"MLPerf {BENCH} time to train on {SYSTEM}"
    results = sorted((root / "results" / SYSTEM / BENCH).glob("result_*.txt"))
    expected = sum(map(_tracked_step_time, results)) / len(results)
    shown = float(check.message.split("; step time ")[1].split(" s ")[0])
    assert shown == pytest.approx(expected, abs=5e-4)
    assert f"mean of {len(results)} runs' tracked_stats: global_batch_size / tracked throughput" in check.message


def test_the_mfu_of_the_real_submission_by_hand(drafted: dict[str, object]) -> None:
    """MFU from the sample's own printed numbers: each run's step time is global_batch_size / its mean tracked
    throughput; FLOPs per sample of Llama 2 70B LoRA at 8192 tokens by hand (tests/unit/test_flops.py); 8 GPUs
    (the system JSON: 1 node x 8); the FP8 peak of an H100 SXM, 1979 TFLOP/s (DOMAIN.md section 2)."""
    root = drafted["root"]
    assert isinstance(root, Path)
    bundle = load_bundle(root)
    (fp8,) = bundle.spec.runs
    assert fp8.precision is Precision.FP8  # drafted by init: every result file's NeMo config prints `fp8: true`
    result = parse_run(bundle, fp8, 1 << 30)
    flops = MlperfFlops(load_mlperf_benchmarks(ROOT / "references" / "mlperf-benchmarks.yaml"),
                        {"bf16": 989.0, "fp8": 1979.0}, "catalog exemplar-h100")
    (check,) = judge_mlperf([fp8], {fp8.id: result}, {}, flops)
    results = sorted((root / "results" / SYSTEM / BENCH).glob("result_*.txt"))
    step = sum(map(_tracked_step_time, results)) / len(results)
    expected = 2.7793592e15 * 8 / step / 8 / 1979e12
    shown = float(check.message.split("; MFU ")[1].split("%")[0]) / 100
    assert shown == pytest.approx(expected, abs=5e-4)  # printed to 0.1 %
    assert 0.34 < expected < 0.35  # about 684 TFLOP/s per GPU: 2.78e15 FLOPs x ~1.97 samples/s / 8 GPUs
    assert "global batch 8, 8 GPUs, fp8 peak 1979 TFLOP/s" in check.message
