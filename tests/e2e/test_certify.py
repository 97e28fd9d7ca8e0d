"""The whole pipeline as a user runs it: certify the shipped sample, verify, tamper, bad evidence."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from clustercert.bundle import load_bundle, seal_bundle
from tests.conftest import ROOT, run_cli

SAMPLE = ROOT / "evidence" / "gb200-seed"
pytestmark = pytest.mark.slow

# DOMAIN.md section 4, worked numbers (FLOPs per sequence) in each baseline's convention.
FLOPS = {"llama3-70b": 3.68003e15, "grok1-314b": 4.27405e15, "deepseek-v3": 1.06493e15}
PEAK = {"bf16": 2450e12, "fp8": 4900e12}
STEP_LINE = re.compile(r"iteration (\d+)/\d+ .*train_step_timing in s: ([0-9.]+)")


@pytest.fixture(scope="session")
def certified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("certify")
    bundle = work / "bundle"
    shutil.copytree(SAMPLE, bundle)
    proc = run_cli("certify", str(bundle), "--json", "--reports-dir", str(work / "reports"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    return {"bundle": bundle, "run_dir": Path(out["run_dir"]), "out": out, "stderr": proc.stderr}


def _window_times(log: Path) -> list[float]:
    times = {}
    for line in log.read_text().splitlines():
        m = STEP_LINE.search(line)
        if m and 35 <= int(m.group(1)) <= 44:
            times[int(m.group(1))] = float(m.group(2))
    return [times[i] for i in range(35, 45)]


def test_certify_writes_the_run_folder(certified: dict[str, Any]) -> None:
    run_dir = certified["run_dir"]
    assert certified["out"]["outcome"] == "CERTIFIED"
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "catalog.yaml", "manifest.json", "manifest.sig", "report.html", "report.pdf", "results.json",
        "validation.json"]
    assert "development key" in certified["stderr"]


def test_results_are_computed_from_the_raw_log(certified: dict[str, Any]) -> None:
    results = json.loads((certified["run_dir"] / "results.json").read_text())
    assert results["schema_version"] == 1 and results["outcome"] == "CERTIFIED"
    assert results["valid_until"] is not None
    by_name = {w["workload"]: w for w in results["workloads"]}
    for name, flops in FLOPS.items():
        w = by_name[name]
        log = certified["bundle"] / next(r for r in w["repeats"] if r["run"] == w["run_used"])["file"]
        times = _window_times(log)
        mean = statistics.fmean(times)
        assert w["step_time_s"]["mean"] == pytest.approx(mean, rel=1e-12)
        assert w["step_time_s"]["std"] == pytest.approx(statistics.stdev(times), rel=1e-9)
        assert w["step_time_s"]["window"] == [35, 44]
        assert w["tokens_per_s_per_gpu"] == pytest.approx(w["seq_len"] * w["gbs"] / mean / 512, rel=1e-12)
        assert w["mfu"] == pytest.approx(flops * w["gbs"] / mean / 512 / PEAK[w["precision"]], rel=1e-4)
        assert w["tflops_per_gpu"] == pytest.approx(flops * w["gbs"] / mean / 512 / 1e12, rel=1e-4)
        assert w["delta_pct"] == pytest.approx(100 * (w["baseline"]["step_time_s"] / mean - 1), rel=1e-9)
        assert w["ci_low_pct"] <= w["delta_pct"] <= w["ci_high_pct"]
        assert w["status"] == "PASS" and w["baseline"]["source"]
    # The seed scenario's margins (DOMAIN.md section 1): about +1.9, +4.7, +3.8, +2.4 %.
    margins = {"deepseek-v3": 1.9, "grok1-314b": 4.7, "llama3.1-405b": 3.8, "llama3-70b": 2.4}
    for name, margin in margins.items():
        assert by_name[name]["delta_pct"] == pytest.approx(margin, abs=0.4)
    assert by_name["llama3-70b"]["baseline"]["illustrative"] is True


def test_pdf_is_a_real_report(certified: dict[str, Any]) -> None:
    from pypdf import PdfReader

    reader = PdfReader(certified["run_dir"] / "report.pdf")
    text = " ".join(page.extract_text() for page in reader.pages)
    assert "CERTIFIED" in text and "example-cloud-gb200-east" in text
    assert "development key" in text and "synthetic" in text
    assert len(reader.pages) >= 2


def test_verify_accepts_the_untouched_run(certified: dict[str, Any]) -> None:
    proc = run_cli("verify", str(certified["run_dir"]), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["valid"] and out["signer"].startswith("SHA256:")
    assert out["checked"] == 5 + 1 + len(load_bundle(certified["bundle"]).evidence_files())


def _copy(certified: dict[str, Any], dest: Path) -> tuple[Path, Path]:
    run_dir, bundle = dest / "run", dest / "bundle"
    shutil.copytree(certified["run_dir"], run_dir)
    shutil.copytree(certified["bundle"], bundle)
    return run_dir, bundle


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("target", ["evidence", "report.html", "results.json", "report.pdf", "added"])
def test_verify_names_the_tampered_file(certified: dict[str, Any], tmp_path: Path, target: str) -> None:
    run_dir, bundle = _copy(certified, tmp_path)
    if target == "evidence":
        victim = bundle / "training" / "grok1-314b" / "bf16" / "512" / "r2.log"
        _flip_byte(victim)
    elif target == "added":
        victim = run_dir / "extra.txt"
        victim.write_text("hello")
    else:
        victim = run_dir / target
        _flip_byte(victim)
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle))
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"invalid: {victim}")


def test_verify_refuses_an_untrusted_signer(certified: dict[str, Any], tmp_path: Path) -> None:
    run_dir, bundle = _copy(certified, tmp_path)
    other_keys = tmp_path / "other-keys"
    assert run_cli("keys", "init", env={"CLUSTERCERT_KEY_DIR": str(other_keys)}).returncode == 0
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle), env={"CLUSTERCERT_KEY_DIR": str(other_keys)})
    assert proc.returncode == 1 and "not a trusted key" in proc.stderr


def _broken_bundle(tmp_path: Path, edit: Any) -> tuple[Path, Path]:
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    log = bundle / "training" / "llama3-70b" / "fp8" / "512" / "r1.log"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(edit(lines)))
    seal_bundle(load_bundle(bundle))
    return bundle, log


def test_missing_window_iteration_is_incomplete_with_file_and_line(tmp_path: Path) -> None:
    def drop_40(lines: list[str]) -> list[str]:
        return [ln for ln in lines if "iteration 40/49" not in ln]

    bundle, log = _broken_bundle(tmp_path, drop_40)
    line = next(i for i, ln in enumerate(log.read_text().splitlines(), 1) if "iteration 41/49" in ln)
    proc = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "reports"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [
        f"error: {log} line {line} field 'iteration': iteration(s) 40 of the window 35-44 are missing",
        f"error: {log}: required expectation 'window_complete' failed: missing [40] (the baseline's measurement "
        "window (DOMAIN.md section 1) must be logged completely)",
    ]
    assert "Outcome: INCOMPLETE" in proc.stdout


def test_nan_grad_norm_is_incomplete_with_file_and_line(tmp_path: Path) -> None:
    def nan_at_20(lines: list[str]) -> list[str]:
        return [ln.replace(" | train_step_timing", " | grad_norm: nan | train_step_timing")
                if "iteration 20/49" in ln else ln for ln in lines]

    bundle, log = _broken_bundle(tmp_path, nan_at_20)
    line = next(i for i, ln in enumerate(log.read_text().splitlines(), 1) if "iteration 20/49" in ln)
    proc = run_cli("certify", str(bundle), "--json", "--reports-dir", str(tmp_path / "reports"))
    assert proc.returncode == 3
    out = json.loads(proc.stdout)
    assert out["outcome"] == "INCOMPLETE"
    bad = [c for c in out["checks"] if c["status"] == "ERROR"]
    assert bad[0]["message"].startswith(f"{log} line {line} field 'grad_norm': the log prints a nan/inf grad_norm")
    assert bad[0]["evidence"][0]["line"] == line


def test_changed_evidence_of_a_sealed_bundle_is_refused(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    victim = bundle / "training" / "deepseek-v3" / "bf16" / "512" / "r3.log"
    _flip_byte(victim)
    proc = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "reports"))
    assert proc.returncode == 3
    assert proc.stderr.strip() == (
        f"error: {victim}: changed since the bundle was sealed (sha256 differs from MANIFEST.sha256)")


def test_bad_catalog_is_a_configuration_error(tmp_path: Path) -> None:
    bad = tmp_path / "cat.yaml"
    bad.write_text("schema_version: 1\nid: x\n")
    proc = run_cli("certify", str(SAMPLE), "--catalog", str(bad), "--reports-dir", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}") and "Traceback" not in proc.stderr
