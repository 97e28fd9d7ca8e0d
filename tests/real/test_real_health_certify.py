"""Node health in whole certifications, as a person runs them: the degraded sample with real node-health outputs put
on its nodes (the unhealthy ones on the slow link's two nodes) ranks the slow link's nodes and the straggler's node
first in one suspect list, each with its evidence; a health-only bundle certifies under a catalog that requires the
health phase alone."""

from __future__ import annotations

import json
import shutil
from html import unescape
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustercert.evidence.bundle import load_bundle, seal_bundle
from clustercert.health import judge_health, load_health_rules
from clustercert.parsers import FORMATS
from clustercert.verdicts import Status
from tests.conftest import ROOT, assert_kept_reference, edited_references, run_cli

H = "node-health"
pytestmark = pytest.mark.slow

# the degraded sample's faults (evidence/README.md): the link gb-r3-n09 - gb-r4-n09 lost 60 % of its bandwidth; GPU 1
# of gb-r2-n05 is 12 % slow and never reported; its long run also loses tray gb-r1-n11, which the job replaces
SLOW_LINK = ("gb-r3-n09", "gb-r4-n09")
STRAGGLER = "gb-r2-n05"
# node -> (file in the bundle, real sample, format)
HEALTH = {
    "gb-r3-n09": ("health/gb-r3-n09/dmesg.log", "gpud/dmesg.xid48-dbe-xid63-rowremap-xid94.log", "kernel-log"),
    "gb-r4-n09": ("health/gb-r4-n09/nvidia-smi-q.txt", "thamada-gls/nvidia-smi-a.A100SXMx4.txt", "nvidia-smi-q"),
    STRAGGLER: ("health/gb-r2-n05/diag.txt", "gcm/diag-r4.all-pass.txt", "dcgmi-diag"),
    "gb-r1-n01": ("health/gb-r1-n01/ibstat.txt", "gpud/ibstat.h100.ib-ndr-8x400.bond.all-active.txt", "ibstat"),
}


def _add_health(bundle: Path, real: Path, health: dict[str, tuple[str, str, str]]) -> None:
    doc = yaml.safe_load((bundle / "bundle.yaml").read_text())
    for node, (rel, sample, fmt) in health.items():
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real / H / sample, bundle / rel)
        doc["runs"].append({"id": f"health-{node}-{fmt}", "phase": "health", "kind": "health", "format": fmt,
                            "nodes": [node], "files": [rel]})
    (bundle / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    seal_bundle(load_bundle(bundle))


def _certified(work: Path, bundle: Path, *extra: str) -> dict[str, Any]:
    reports = work / "reports"
    proc = run_cli("certify", str(bundle), "--reports-dir", str(reports), *extra, env={"COLUMNS": "100"})
    folders = [p for p in reports.iterdir() if p.is_dir()] if reports.is_dir() else []
    run_dir = folders[0] if len(folders) == 1 else None
    results = json.loads((run_dir / "results.json").read_text()) if run_dir is not None else {}
    html = unescape((run_dir / "report.html").read_text()) if run_dir is not None else ""
    return {"proc": proc, "results": results, "html": html, "run_dir": run_dir}


@pytest.fixture(scope="module")
def degraded(real_samples: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("degraded-health")
    bundle = work / "bundle"
    shutil.copytree(ROOT / "evidence" / "gb200-degraded", bundle)
    _add_health(bundle, real_samples, HEALTH)
    return _certified(work, bundle)


def test_the_slow_link_and_the_straggler_top_the_suspect_list(degraded: dict[str, Any]) -> None:
    proc, results = degraded["proc"], degraded["results"]
    assert proc.returncode == 1, proc.stdout + proc.stderr  # NOT CERTIFIED, as the sample is without health
    suspects = results["suspects"]["nodes"]
    assert {n["node"] for n in suspects[:2]} == set(SLOW_LINK)
    assert [n["layers"] for n in suspects[:2]] == [["network", "health"], ["network", "health"]]
    assert (suspects[2]["node"], suspects[2]["layers"]) == (STRAGGLER, ["straggler"])
    assert [n["rank"] for n in suspects] == list(range(1, len(suspects) + 1))
    # below them only the nodes the long run's job itself excluded or replaced (the tray that died, evidence/README.md),
    # which the cluster has acted on already; the healthy outputs name no node
    rest = suspects[3:]
    assert "gb-r1-n11" in [n["node"] for n in rest]
    assert {tuple(n["layers"]) for n in rest} == {("resilience",)}


def test_each_suspect_carries_its_evidence_chain(degraded: dict[str, Any]) -> None:
    by_node = {n["node"]: n for n in degraded["results"]["suspects"]["nodes"]}
    r3 = by_node["gb-r3-n09"]["findings"]
    network = [f for f in r3 if f["layer"] == "network"]
    assert network and all("gb-r4-n09" in f["finding"] for f in network)
    assert {w.split(":")[0] for f in network for w in f["where"]} == {"collectives/pair/gb-r3-n09-gb-r4-n09.log"}
    # SOURCES.md: the Xid 48 line of the dmesg sample is line 11
    health = [f for f in r3 if f["layer"] == "health"]
    assert health[0]["where"] == ["health/gb-r3-n09/dmesg.log:11"] and "Xid 48" in health[0]["finding"]
    # SOURCES.md: the A100 report's GPU 00000000:9E:00.0 has a row remap pending
    r4 = [f for f in by_node["gb-r4-n09"]["findings"] if f["layer"] == "health"]
    assert any("9E:00.0" in f["finding"] and f["finding"].startswith("FAIL") for f in r4)
    straggler = by_node[STRAGGLER]["findings"]
    assert [f["layer"] for f in straggler] == ["straggler"]
    # a GPU 12 % slow: relative score 1 / 1.12 = 0.893 (DOMAIN.md section 7's score)
    score = float(straggler[0]["finding"].rsplit("relative score ", 1)[1])
    assert 0.88 < score < 0.90
    assert straggler[0]["finding"].startswith("GPU 1 ")
    assert straggler[0]["where"] and straggler[0]["where"][0].startswith("resilience/rank-timings.parquet")


def test_health_is_its_own_section_and_decides_when_submitted(degraded: dict[str, Any]) -> None:
    results, html = degraded["results"], degraded["html"]
    health = [c for c in results["checks"] if c["phase"] == "health"]
    assert {c["id"]: c["status"] for c in health if c["id"].endswith("_healthy")} == {
        "health.gb-r3-n09_healthy": "FAIL", "health.gb-r4-n09_healthy": "FAIL",
        "health.gb-r2-n05_healthy": "PASS", "health.gb-r1-n01_healthy": "PASS"}
    # the catalog's full profile judges node health where it is submitted (references/README.md, "Profiles")
    assert {c["severity"] for c in health} == {"required"}
    assert '<section id="phase-health">' in html and '<section id="suspects">' in html
    assert "gb-r3-n09" in html.split('<section id="suspects">')[1].split("</section>")[0]


def test_the_validate_stage_validates_each_nvidia_smi_report_as_a_gpu_health_table(degraded: dict[str, Any]) -> None:
    validation = json.loads((degraded["run_dir"] / "validation.json").read_text())
    (table,) = [t for t in validation["tables"] if t["suite"] == "gpu_health"]
    # SOURCES.md: the A100 report lists its node's 4 GPUs
    assert (table["file"], table["run"], table["rows"]) == ("health/gb-r4-n09/nvidia-smi-q.txt",
                                                            "health-gb-r4-n09-nvidia-smi-q", 4)
    assert {r["status"] for r in table["results"]} == {"PASS"}
    assert len(table["results"]) == 10


def test_page_one_names_the_top_suspects_one_line_each(degraded: dict[str, Any]) -> None:
    """Page one (the cover, before the contents) lists the first three suspects, one line each with its layers."""
    html = degraded["html"]
    cover = html[html.index('<section id="cover"'):html.index('<nav class="toc"')]
    assert "Suspect nodes" in cover
    lines = [li for li in cover.split("<li>") if li[:3] in ("1. ", "2. ", "3. ")]
    assert len(lines) == 3
    assert {li.split()[1] for li in lines[:2]} == set(SLOW_LINK)
    assert all("network" in li and "health" in li for li in lines[:2])
    assert lines[2].startswith(f"3. {STRAGGLER} [straggler")


def test_the_terminal_summary_lists_the_suspects(degraded: dict[str, Any]) -> None:
    out = degraded["proc"].stdout
    assert "Suspect nodes (" in out
    listed = [ln.strip() for ln in out.splitlines() if ln.strip()[:3] in ("1. ", "2. ", "3. ")]
    assert {ln.split()[1] for ln in listed[:2]} == set(SLOW_LINK)
    assert listed[2].startswith(f"3. {STRAGGLER} [straggler]: GPU 1 ")


@pytest.fixture(scope="module")
def health_only(real_samples: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("health-only")
    bundle = work / "bundle"
    bundle.mkdir()
    health = {"h100-a01": ("h100-a01/diag.txt", "gcm/diag-r4.all-pass.txt", "dcgmi-diag"),
              "h100-a02": ("h100-a02/ibstat.txt", "gpud/ibstat.h100.roce-400g.all-active.txt", "ibstat")}
    doc = {"schema_version": 1, "cluster": {"name": "health-only", "provider": "test"},
           "system": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": sorted(health)},
           "catalog": "exemplar-h100", "recipe_version": "none", "runs": []}
    (bundle / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    # bundle.yaml needs a run to load: the health runs are added with the files
    doc["runs"] = [{"id": f"{n}-{fmt}", "phase": "health", "kind": "health", "format": fmt, "nodes": [n],
                    "files": [rel]} for n, (rel, _, fmt) in health.items()]
    for rel, sample, _ in health.values():
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real_samples / H / sample, bundle / rel)
    (bundle / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    seal_bundle(load_bundle(bundle))
    return _certified(work, bundle, "--profile", "health")


def test_a_health_only_bundle_certifies_under_the_node_health_profile(health_only: dict[str, Any]) -> None:
    proc, results = health_only["proc"], health_only["results"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert results["outcome"] == "CERTIFIED"
    assert results["profile"]["id"] == "health"
    assert "Node health" in proc.stdout
    required = sorted(c["id"] for c in results["checks"] if c["severity"] == "required")
    assert required == ["health.every_node_examined", "health.evidence_present", "health.h100-a01_healthy",
                        "health.h100-a02_healthy"]
    assert results["suspects"] == {"nodes": [], "unexamined": []}
    assert "Suspect nodes" not in proc.stdout


def test_the_run_keeps_the_health_rules_it_judged_with_and_a_rerun_judges_with_them(
        health_only: dict[str, Any], real_samples: Path, tmp_path: Path) -> None:
    run_dir = health_only["run_dir"]
    assert_kept_reference(run_dir, "health-rules.yaml", "health_rules", ("health-rules", "2026-09"))
    # references/ changed after the run: DCGM's Pass is now a failure, which fails h100-a01's all-pass table
    references = edited_references(tmp_path / "references", "health-rules.yaml", "results: {Pass: PASS,",
                                   "results: {Pass: FAIL,")
    diag = real_samples / H / "gcm/diag-r4.all-pass.txt"
    judged = judge_health(FORMATS["dcgmi-diag"](diag, diag.name), load_health_rules(references / "health-rules.yaml"))
    assert Status.FAIL in {v.status for v in judged}
    proc = run_cli("rerun", str(run_dir), env={"CLUSTERCERT_REFERENCES_DIR": str(references)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("identical: results.json")
