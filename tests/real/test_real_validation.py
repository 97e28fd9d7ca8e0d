"""Every real sample validates cleanly: no expectation of checks/ fails or errors on real evidence."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import RunKind, load_bundle
from clustercert.evidence.facts import bundle_facts
from clustercert.evidence.parse import ParsedFile, parse_bundle
from clustercert.parsers import FORMATS, RESILIENCE_FORMATS, detect_format
from clustercert.validation.suites import ResultStatus, ValidationReport, load_suites, run_tables, validate_bundle
from clustercert.validation.tables import gpu_health_table, mlperf_table, scheduler_table, training_table
from tests.real.test_real_health import prescreen_of
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
        resilience = RESILIENCE_FORMATS[fmt](path, path.name) if fmt in RESILIENCE_FORMATS else None
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


def test_real_nvidia_smi_reports_validate_cleanly(real_samples: Path) -> None:
    """Every real `nvidia-smi -q` and `-q -x` report passes the gpu_health suite, one row per GPU it attaches."""
    health = real_samples / "node-health"
    tables, attached = [], []
    for path in sorted(health.rglob("*")):
        fmt = detect_format(path) if path.is_file() and path.name != "README.upstream.md" else None
        if fmt not in ("nvidia-smi-q", "nvidia-smi-xml"):
            continue
        report = FORMATS[fmt](path, path.name)
        table = gpu_health_table(ParsedFile(path.stem, RunKind.HEALTH, path.name, path.name, report))
        assert table is not None
        tables.append(table)
        attached.append((path.name, report.attached_gpus))
    # SOURCES.md: the GPUs each report is of
    gpus = {"nvidia-smi-q-d-page-retirement.a100x8.clean.txt": 8,
            "nvidia-smi-q.h100x8.535.161.08.hw-power-brake.txt": 8,
            "nvidia-smi-q.h100x8.535.183.01.txt": 8, "nvidia-smi-q-x.a100.xml": 1, "nvidia-smi-q-x.b200.xml": 8,
            "nvidia-smi-q-x.gb200.xml": 4, "nvidia-smi-q-x.gb300.xml": 4, "nvidia-smi-q-x.h100.xml": 8,
            "nvidia-smi-a.A100SXMx4.txt": 4, "nvidia-smi-a.GH200.txt": 1, "nvidia-smi-a.H100SXMx8.txt": 8,
            "nvidia-smi-a.H200.txt": 1}
    assert dict(attached) == gpus
    report = run_tables(tables, load_suites(ROOT / "checks"))
    assert {t.file: t.rows for t in report.tables} == gpus
    assert _not_passed(report) == []


def test_the_prescreens_nvidia_smi_report_is_a_gpu_health_table(real_samples: Path, tmp_path: Path) -> None:
    path = tmp_path / "slurm-4242.out"
    path.write_text(prescreen_of(real_samples / "node-health"))
    prescreen = FORMATS["prescreen"](path, path.name)
    table = gpu_health_table(ParsedFile("p", RunKind.HEALTH, path.name, path.name, prescreen))
    assert table is not None
    frame = next(table.batches())
    # its step 8a is the 535.161 H100 report: 8 GPUs (SOURCES.md), at the prescreen file's own lines
    step = prescreen.step("8a")
    assert step is not None and table.rows == 8 and int(frame["_line"].min()) > step.line
    assert _not_passed(run_tables([table], load_suites(ROOT / "checks"))) == []
    # a prescreen whose step 8a gave no report has no table
    assert gpu_health_table(ParsedFile("p", RunKind.HEALTH, path.name, path.name,
                                       dataclasses.replace(prescreen, gpus=None))) is None


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
    report = validate_bundle(bundle, bundle_facts(bundle, catalog), parse_bundle(bundle), checks_dir=ROOT / "checks")
    assert len(report.tables) == 4 and _not_passed(report) == []
    ceiling = {"exemplar-h100": 900.0, "exemplar-gb200": 1800.0}[catalog_id]
    kwargs = next(r.kwargs for r in report.all_results() if r.expectation == "busbw_oop_below_ceiling")
    assert kwargs["max_value"] == ceiling
    assert sum(1 for r in report.cross_source if r.expectation == "gpu_counts_agree" and r.unexpected_count == 0) == 1


BRIDGE = "megatron-bridge-llama3-8b-8gpu-bf16-20iters.log"
SWIFT = "megatron-lm-via-ms-swift-qwen2-0.5b-2gpu-bf16-120iters.log"


def _clock_table(path: Path) -> tuple[ValidationReport, list[float], list[float]]:
    log = FORMATS["megatron"](path, path.name)
    table = training_table(ParsedFile(path.stem, RunKind.TRAINING, path.name, path.name, log, None, None))
    frame = next(table.batches())
    report = run_tables([table], load_suites(ROOT / "checks"))
    return report, frame["clock_ratio_low"].dropna().tolist(), frame["clock_ratio_high"].dropna().tolist()


def _clock_result(report: ValidationReport, expectation: str) -> ResultStatus:
    return next(r for r in report.all_results() if r.expectation == expectation).status


def test_real_megatron_step_times_agree_with_their_own_clock(real_samples: Path) -> None:
    # Oracle, read off the logs by hand. Bridge (log interval 1): iteration 1 at 17:02:50, iteration 20 at
    # 17:03:08, 18 s apart; the printed times of iterations 2-20 add up to 751.4 + 450.8 + ... + 449.2 = 18367.0 ms.
    # ms-swift (log interval 10, each printed time the mean over its 10 iterations): iteration 10 at 15:26:21,
    # iteration 120 at 15:28:12, 111 s apart; 10 x (786.2 + 779.4 + ... + 717.2) = 80167.0 ms, plus the
    # save-checkpoint of 30421.36 ms (max over ranks) printed between iterations 100 and 110: 110588.36 ms.
    for name, wall, logged in ((BRIDGE, 18.0, 18.3670), (SWIFT, 111.0, 110.58836)):
        report, low, high = _clock_table(real_samples / "training-logs" / name)
        assert low[-1] == pytest.approx((wall - 1.0) / logged) and high[-1] == pytest.approx((wall + 1.0) / logged)
        assert _clock_result(report, "step_times_match_clock") is ResultStatus.PASS
        assert _clock_result(report, "clock_covers_step_times") is ResultStatus.PASS
    # without the save-checkpoint time the ms-swift clock would show 111 s for 80.2 s of steps: a false alarm
    assert (111.0 - 1.0) / 80.167 > 1.1


def test_real_megatron_log_with_halved_step_times_is_caught(real_samples: Path, tmp_path: Path) -> None:
    text = (real_samples / "training-logs" / BRIDGE).read_text(encoding="utf-8")
    forged = re.sub(r"elapsed time per iteration \(ms\): ([\d.]+)",
                    lambda m: f"elapsed time per iteration (ms): {float(m.group(1)) / 2:.1f}", text)
    path = tmp_path / BRIDGE
    path.write_text(forged, encoding="utf-8")
    report, low, _ = _clock_table(path)
    failed = next(r for r in report.all_results() if r.expectation == "step_times_match_clock")
    assert failed.status is ResultStatus.FAIL and failed.file == BRIDGE
    # iteration 4 (line 8418) at 17:02:52, 2 s after iteration 1, for (751.4 + 450.8 + 561.1) / 2 ms printed:
    # (2 - 1) / 0.88165 = 1.134 > 1.1; at iteration 20, (18 - 1) / 9.1835 = 1.85
    assert failed.sample[0].line == 8418
    assert low[-1] == pytest.approx(17.0 / (18.367 / 2), rel=1e-3)
    assert report.blocking != []


def _requeued(real: Path, *, load_line: bool = True) -> str:
    """The ms-swift log as a Slurm job requeued with its output appended: killed after iteration 70, started
    again (its start-up printed again), the checkpoint of iteration 50 loaded, iterations 60-120 run again ten
    minutes later. Without `load_line` the second start-up says nothing of a checkpoint: a spliced log."""
    lines = (real / "training-logs" / SWIFT).read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if re.match(r" \[2024-07-15 \S+\] iteration ", line))
    start_up, steps = lines[:first], lines[first:]
    # the real start-up loads the fine-tuning's starting checkpoint (line 535, "... at iteration 0")
    again = [line.replace("at iteration 0", "at iteration 50") if load_line else line
             for line in start_up if load_line or "successfully loaded checkpoint" not in line]
    later = [re.sub(r"^ \[2024-07-15 15:(\d\d)", lambda m: f" [2024-07-15 15:{int(m.group(1)) + 10:02d}", line)
             for line in steps[5:]]
    return "".join([*start_up, *steps[:7], "srun: error: cnode7: task 0: Killed\n", *again, *later])


def _requeued_report(real: Path, tmp_path: Path, *, load_line: bool) -> tuple[ValidationReport, str]:
    text = _requeued(real, load_line=load_line)
    (tmp_path / "swift.log").write_text(text, encoding="utf-8")
    (tmp_path / "bundle.yaml").write_text(
        "schema_version: 1\ncluster: {name: real, provider: samples}\n"
        "system: {gpu: h100-sxm, gpus_per_node: 2, nodes: [n1]}\ncatalog: exemplar-h100\nrecipe_version: 'x'\n"
        "runs:\n  - {id: swift, phase: efficiency, kind: training, format: megatron, workload: llama3.1-70b, "
        "precision: bf16, gpus: 2, gbs: 8, seq_len: 128, files: [swift.log]}\n"
    )
    bundle = load_bundle(tmp_path)
    facts = bundle_facts(bundle, load_catalog("exemplar-h100", ROOT / "references"))
    return validate_bundle(bundle, facts, parse_bundle(bundle), checks_dir=ROOT / "checks"), text


def test_real_megatron_log_requeued_into_the_same_file_is_a_restart(real_samples: Path, tmp_path: Path) -> None:
    report, text = _requeued_report(real_samples, tmp_path, load_line=True)
    table = next(t for t in report.tables if t.file.endswith("swift.log"))
    assert [r.expectation for r in table.results if r.status is not ResultStatus.PASS] == []
    assert report.blocking == []
    # the second start-up's load line, and the second print of iteration 60, are where the test wrote them
    numbered = text.splitlines()
    load = [n for n, line in enumerate(numbered, 1) if "successfully loaded checkpoint" in line]
    assert len(load) == 2 and numbered[load[1] - 1].endswith("at iteration 50")
    parsed = parse_bundle(load_bundle(tmp_path))["swift"][0]
    assert parsed.resilience is not None
    banner = [n for n, line in enumerate(numbered, 1) if "---- arguments ----" in line]
    assert len(banner) == 2 and load[0] < banner[1] < load[1]  # the second start-up's argument dump: a relaunch
    assert [(e.kind.value, e.line, e.step) for e in parsed.resilience.events] == [
        ("checkpoint_loaded", load[0], 0), ("relaunch", banner[1], None), ("checkpoint_loaded", load[1], 50)]


def test_real_megatron_log_spliced_without_a_checkpoint_load_still_fails(real_samples: Path, tmp_path: Path) -> None:
    report, text = _requeued_report(real_samples, tmp_path, load_line=False)
    failed = next(r for r in report.all_results() if r.expectation == "iterations_strictly_increasing")
    # iteration 60 printed again after 70: the first step after the second start-up
    again = [n for n, line in enumerate(text.splitlines(), 1) if re.search(r"iteration\s+60/", line)]
    assert failed.status is ResultStatus.FAIL and len(again) == 2 and failed.sample[0].line == again[1]
    assert report.blocking != []
