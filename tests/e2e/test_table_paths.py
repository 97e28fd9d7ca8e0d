"""Results do not depend on the processing path (issue 13): a mid-size bundle certified through the columnar path
(the default) with its telemetry's columns kept in scratch files (CLUSTERCERT_TELEMETRY_MEMORY_MIB=0, the way a
4,096-GPU day is held) and re-run through the small-table path (CLUSTERCERT_TABLE_PATH=rows: every telemetry line
read by the per-line code, one row at a time, the columns in memory) gives the same results.json, validation.json,
report and PDF bytes.

The bundle is the seed scenario's cluster with its long run's DCGM telemetry sampled every 5 s instead of every
60 s and per-rank timings of every step: 270,592 samples (the shipped sample has 22,528) in 19 MB, so the columnar
reader works over several pieces; one workload, one repeat, no scaling points and no collectives keep the rest
of the certification small (its outcome does not matter here, only that both paths agree on it)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow

EVERY_S = 5.0


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from clustercert.catalog import load_catalog
    from clustercert.evidence.bundle import load_bundle, seal_bundle
    from clustercert.settings import load_settings
    from clustercert.simulate.scenario import ScenarioName, scenario_for, write_bundle
    from clustercert.simulate.topology import build_topology

    work = tmp_path_factory.mktemp("paths")
    sc = replace(scenario_for(ScenarioName.SEED, repeats=1), margins={("llama3-70b", "fp8"): 0.024},
                 scaling_gpus=(), megatron=frozenset(), telemetry_every_s=EVERY_S, timings_every=1)
    catalog = load_catalog(build_topology(sc.system, sc.gpus).catalog, load_settings().references_dir)
    bundle = write_bundle(work / "bundle", sc, catalog)
    # Without its collectives (41 nccl-tests files, tables and charts that do not read telemetry): a smaller run.
    doc = yaml.safe_load((bundle / "bundle.yaml").read_text())
    for run in [r for r in doc["runs"] if r["kind"] == "collective"]:
        doc["runs"].remove(run)
        for rel in run["files"]:
            (bundle / rel).unlink()
    (bundle / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    seal_bundle(load_bundle(bundle))
    reports = work / "reports"
    first = run_cli("certify", str(bundle), "--reports-dir", str(reports), "--json", timeout=900,
                    env={"CLUSTERCERT_TELEMETRY_MEMORY_MIB": "0"})
    (run_dir,) = [p for p in reports.iterdir() if p.is_dir()]
    again = work / "rows"
    rerun = run_cli("rerun", str(run_dir), "--keep", str(again), env={"CLUSTERCERT_TABLE_PATH": "rows"},
                    timeout=900)
    return {"bundle": bundle, "certify": first, "run_dir": run_dir, "rerun": rerun, "replay": again / run_dir.name}


def _samples(prom: Path) -> int:
    """Sample lines, counted without the parser."""
    return sum(1 for line in prom.read_text().splitlines() if line.startswith("DCGM_FI_"))


def test_the_mid_size_bundle_is_mid_size(certified: dict[str, Any]) -> None:
    prom = certified["bundle"] / "resilience" / "dcgm.prom"
    samples, shipped = _samples(prom), _samples(ROOT / "evidence" / "gb200-seed" / "resilience" / "dcgm.prom")
    # the same run sampled every 5 s instead of every 60 s: about 12 times the shipped sample's (each stretch
    # between the job's restarts starts on its own grid)
    assert 11.5 * shipped < samples < 12.5 * shipped
    assert os.path.getsize(prom) > 2 * 8 * 2**20  # three pieces of the columnar reader (8 MiB each)
    assert certified["certify"].returncode in (0, 1, 3), certified["certify"].stderr[-2000:]
    assert (certified["run_dir"] / "manifest.dsse.json").is_file()  # a signed run folder, whatever its outcome
    results = json.loads((certified["run_dir"] / "results.json").read_text())
    assert [t["samples"] for t in results["phases"]["resilience"]["telemetry"]] == [samples]


def test_the_small_table_path_reproduces_the_columnar_run(certified: dict[str, Any]) -> None:
    rerun = certified["rerun"]
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    original, replay = certified["run_dir"], certified["replay"]
    for name in ("results.json", "validation.json", "report.html"):
        assert (replay / name).read_bytes() == (original / name).read_bytes(), name
    assert json.loads((replay / "results.json").read_text()) == json.loads((original / "results.json").read_text())


def test_an_unknown_table_path_is_refused_before_any_work(certified: dict[str, Any], tmp_path: Path) -> None:
    proc = run_cli("rerun", str(certified["run_dir"]), "--keep", str(tmp_path / "x"),
                   env={"CLUSTERCERT_TABLE_PATH": "fast"})
    assert proc.returncode == 2, proc.stderr
    assert "CLUSTERCERT_TABLE_PATH" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_bad_telemetry_memory_is_refused_before_any_work(certified: dict[str, Any], tmp_path: Path,
                                                          value: str) -> None:
    proc = run_cli("rerun", str(certified["run_dir"]), "--keep", str(tmp_path / "x"),
                   env={"CLUSTERCERT_TELEMETRY_MEMORY_MIB": value})
    assert proc.returncode == 2, proc.stderr
    assert f"CLUSTERCERT_TELEMETRY_MEMORY_MIB: expected a whole number of MiB (0 or more), got {value!r}" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()
