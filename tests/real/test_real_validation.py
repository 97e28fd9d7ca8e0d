"""Every real sample validates cleanly: no expectation of checks/ fails or errors on real evidence."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import RunKind, load_bundle
from clustercert.evidence.parse import ParsedFile, parse_bundle
from clustercert.parsers import FORMATS, detect_format
from clustercert.parsers.nemo_resilience import parse_nemo_resilience
from clustercert.validation.suites import ResultStatus, ValidationReport, load_suites, run_tables, validate_bundle
from clustercert.validation.tables import mlperf_table, scheduler_table, training_table
from tests.real.test_real_parsers import SACCT_FIELDS

ROOT = Path(__file__).resolve().parents[2]


def _not_passed(report: ValidationReport) -> list[str]:
    return [f"{r.file} {r.expectation}: {r.status.value} {r.message}" for r in report.all_results()
            if r.status is not ResultStatus.PASS]


def _training_files(real: Path) -> list[Path]:
    return sorted((real / "training-logs").glob("*.log")) + sorted((real / "megatron-lm").rglob("golden_*.json"))


def test_real_training_logs_validate_cleanly(real_samples: Path) -> None:
    suites = load_suites(ROOT / "checks")
    tables = []
    for path in _training_files(real_samples):
        fmt = detect_format(path)
        log = FORMATS[fmt](path, path.name)
        resilience = parse_nemo_resilience(path, path.name) if fmt == "nemo" else None
        tables.append(training_table(ParsedFile(path.stem, RunKind.TRAINING, path.name, path.name, log, None,
                                                resilience)))
    report = run_tables(tables, suites)
    assert len(report.tables) == 8
    assert report.blocking == [] and report.summary()["errors"] == 0
    # One advisory finding, and it is real: NeMo's toy log prints `train_step_timing in s: -12.71` at iteration 9
    # (SOURCES.md notes it); outside any measurement window it is reported, not gating.
    toy = "nemo2-llama3-toy-1gpu-bf16-20steps.log"
    assert _not_passed(report) == [f"{toy} step_time_positive: FAIL 1 of 20 rows outside the expectation (every step "
                                   "takes time: a zero or negative time outside the window (NeMo's timer around a "
                                   "checkpoint save prints one) is reported but measures nothing certified)"]
    bad = next(r for r in report.all_results() if r.file == toy and r.expectation == "step_time_positive")
    assert [(s.line, s.value) for s in bad.sample] == [(488, -12.71)]
    # the in-job restart (step 15 back to 10 after a checkpoint load) is a new segment, not a duplicate
    restart = next(t for t in report.tables if "crash-and-in-job-restart" in t.file)
    assert any(r.expectation == "iterations_strictly_increasing" and r.unexpected_count == 0 for r in restart.results)


def test_real_sacct_and_mlperf_validate_cleanly(real_samples: Path) -> None:
    sacct_path = real_samples / "slurm" / "sacct-multi-node.txt"
    sacct = FORMATS["sacct"](sacct_path, sacct_path.name, fields=SACCT_FIELDS, timezone="UTC")
    mlperf_path = real_samples / "mlperf-training" / "dell-xe9680-h100-llama2_70b_lora"
    mlperf = FORMATS["mlperf"](mlperf_path, mlperf_path.name, ruleset="4.0.0")
    tables = [
        scheduler_table(ParsedFile("sacct", RunKind.SCHEDULER, sacct_path.name, sacct_path.name, sacct)),
        mlperf_table(ParsedFile("mlperf", RunKind.MLPERF, mlperf_path.name, mlperf_path.name, mlperf)),
    ]
    report = run_tables(tables, load_suites(ROOT / "checks"))
    assert [t.rows for t in report.tables] == [sum(1 + len(j.steps) for j in sacct.jobs), 10]
    assert _not_passed(report) == []


@pytest.mark.parametrize("catalog_id", ["exemplar-h100", "exemplar-gb200"])
def test_real_nccl_tests_validate_cleanly_in_a_bundle(real_samples: Path, tmp_path: Path, catalog_id: str) -> None:
    """Each file as a collective run declaring the GPU count its name gives (N nodes x G GPUs): the busbw
    ceiling (2 x NVLink per direction) is never tripped and the ranks agree with bundle.yaml."""
    runs = []
    for path in sorted((real_samples / "nccl-tests").glob("*.log")):
        shutil.copyfile(path, tmp_path / path.name)
        match = re.match(r"nccl_N(\d+)_G(\d+)", path.name)
        assert match is not None
        gpus = int(match.group(1)) * int(match.group(2))
        run_id = path.stem.lower().replace("_", "-")
        runs.append(f"  - {{id: {run_id}, phase: scaling, kind: collective, format: nccl-tests, gpus: {gpus}, "
                    f"files: [{path.name}]}}\n")
    # The nodes the files' rank lines name: 10 of cluster01 (cnode3-*) and the cluster00 pair (cnode2-*).
    nodes = ", ".join([*(f"cnode3-{i:03d}" for i in range(2, 12)), "cnode2-001", "cnode2-002"])
    (tmp_path / "bundle.yaml").write_text(
        "schema_version: 1\ncluster: {name: real, provider: samples}\n"
        f"system: {{gpu: h100-sxm, gpus_per_node: 8, nodes: [{nodes}]}}\n"
        f"catalog: {catalog_id}\nrecipe_version: 'x'\nruns:\n" + "".join(runs)
    )
    bundle = load_bundle(tmp_path)
    catalog = load_catalog(catalog_id, ROOT / "references")
    report = validate_bundle(bundle, catalog, parse_bundle(bundle), checks_dir=ROOT / "checks")
    assert len(report.tables) == 4 and _not_passed(report) == []
    ceiling = {"exemplar-h100": 900.0, "exemplar-gb200": 1800.0}[catalog_id]
    kwargs = next(r.kwargs for r in report.all_results() if r.expectation == "busbw_oop_below_ceiling")
    assert kwargs["max_value"] == ceiling
    assert sum(1 for r in report.cross_source if r.expectation == "gpu_counts_agree" and r.unexpected_count == 0) == 1
