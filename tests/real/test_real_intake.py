"""Real evidence as collected goes into a bundle: MLPerf result folders, header-less sacct dumps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clustercert.evidence.bundle import load_bundle, seal_bundle
from clustercert.evidence.parse import parse_run as parse_files
from clustercert.parsers.mlperf import MlperfResult
from clustercert.phases.evidence import parse_run
from tests.conftest import run_cli

MLPERF = "mlperf-training/dell-xe9680-h100-llama2_70b_lora"

BUNDLE = """\
schema_version: 1
cluster: {name: dell, provider: Dell}
system: {gpu: h100-sxm, gpus_per_node: 8, nodes: [n1]}
catalog: exemplar-h100
recipe_version: "4.0"
runs:
  - {id: lora, phase: efficiency, kind: mlperf, format: mlperf, ruleset: "4.0.0", files: FILES}
"""


def _hand_olympic(folder: Path) -> float:
    """Independent oracle: run_start/run_stop straight from each result file's :::MLLOG lines, by hand."""
    minutes = []
    for index in range(10):
        times = {}
        for line in (folder / f"result_{index}.txt").read_text().splitlines():
            if ":::MLLOG" in line:
                record = json.loads(line.split(":::MLLOG", 1)[1])
                if record["key"] in ("run_start", "run_stop"):
                    times[record["key"]] = record["time_ms"]
        minutes.append((times["run_stop"] - times["run_start"]) / 60000)
    kept = sorted(minutes)[1:-1]  # olympic: drop the fastest and the slowest of 10
    return sum(kept) / len(kept) * json.loads((folder / "scaling.json").read_text())["scaling_factor"]


def _mlperf_bundle(tmp_path: Path, real_samples: Path, files: list[str]) -> Path:
    shutil.copytree(real_samples / MLPERF, tmp_path / "mlperf")
    (tmp_path / "bundle.yaml").write_text(BUNDLE.replace("FILES", json.dumps(files)))
    return tmp_path


@pytest.mark.parametrize("listing", ["folder", "files"])
def test_an_mlperf_result_is_scored_from_all_its_runs(tmp_path: Path, real_samples: Path, listing: str) -> None:
    files = (["mlperf"] if listing == "folder"
             else [f"mlperf/result_{i}.txt" for i in range(10)] + ["mlperf/scaling.json", "mlperf/system.json"])
    bundle = load_bundle(_mlperf_bundle(tmp_path, real_samples, files))
    result = parse_run(bundle, bundle.spec.runs[0], 1 << 30)
    assert isinstance(result, MlperfResult), result
    assert len(result.runs) == 10 and result.error is None
    assert result.score_minutes == pytest.approx(_hand_olympic(real_samples / MLPERF))
    assert result.system_name == "XE9680x8H100-SXM-80GB"
    (checked,) = parse_files(bundle, bundle.spec.runs[0])
    assert isinstance(checked.result, MlperfResult) and checked.result.score_minutes == result.score_minutes
    # the seal names each file of the folder, never the folder
    sealed = seal_bundle(bundle).read_text().splitlines()
    assert sorted(line.split("  ", 1)[1] for line in sealed) == sorted(
        ["bundle.yaml", "mlperf/scaling.json", "mlperf/system.json"] + [f"mlperf/result_{i}.txt" for i in range(10)])


def test_evidence_seal_of_an_mlperf_folder(tmp_path: Path, real_samples: Path) -> None:
    root = _mlperf_bundle(tmp_path, real_samples, ["mlperf"])
    proc = run_cli("evidence", "seal", str(root))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"sealed 13 files: {root / 'MANIFEST.sha256'}"
