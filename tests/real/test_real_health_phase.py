"""The health phase on a bundle of real node-health outputs, one node each: a node's check is its worst unit
verdict (an Xid 48 fails it, a skipped DCGM test leaves it SKIPPED, an ibstat that crashed or a file cut short
leaves it ERROR: none is a pass), each finding named with its file and line; a node without health evidence is
unexamined; a catalog that requires the phase makes its absence a FAIL."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustercert.catalog import LoadedCatalog, load_catalog
from clustercert.evidence.bundle import RunKind, load_bundle
from clustercert.health import HealthRules, load_health_rules
from clustercert.phases import PhaseResult
from clustercert.phases.evidence import parse_run
from clustercert.phases.health import judge_health_phase
from clustercert.verdicts import Severity, Status
from tests.real.test_real_health import prescreen_of

ROOT = Path(__file__).resolve().parents[2]
H = "node-health"
NODES = ["n-dbe", "n-skip", "n-ibpanic", "n-clean", "n-cut", "n-host", "n-none"]


def _files(real: Path, folder: Path) -> dict[str, str]:
    """Each node's health file in `folder`, by node: real outputs, one with a DCGM test skipped, one cut short."""
    health = real / H
    out = {}

    def put(node: str, name: str, text: str) -> None:
        (folder / node).mkdir(parents=True, exist_ok=True)
        (folder / node / name).write_text(text)
        out[f"{node}/{name}"] = node

    put("n-dbe", "dmesg.log", (health / "gpud/dmesg.xid48-dbe-xid63-rowremap-xid94.log").read_text())
    # the older DCGM's all-pass table with its Memtest line (26) as DCGM prints a test it skipped
    diag = (health / "gcm/diag-r4.all-pass.txt").read_text().splitlines(keepends=True)
    assert diag[25].startswith("| Memtest ")
    diag[25] = diag[25].replace("Pass - All", "Skip - All")
    put("n-skip", "diag.txt", "".join(diag))
    put("n-ibpanic", "ibstat.txt", (health / "gpud/ibstat.a100-azure.hdr.ibpanic-exit255.txt").read_text())
    put("n-clean", "diag.txt", (health / "gcm/diag-r4.all-pass.txt").read_text())
    xml = (health / "k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.h100.xml").read_text()
    put("n-cut", "smi.xml", xml[: len(xml) // 2])
    put("n-host", "slurm-4242.out", prescreen_of(health, host="h100-a07"))
    return out


def _bundle(folder: Path, files: dict[str, str], formats: dict[str, str]) -> None:
    runs = [{"id": f"{node}-{Path(rel).stem}", "phase": "health", "kind": "health", "format": formats[rel],
             "nodes": [node], "files": [rel]} for rel, node in files.items()]
    doc = {"schema_version": 1, "cluster": {"name": "health-test", "provider": "test"},
           "system": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": NODES}, "catalog": "exemplar-h100",
           "recipe_version": "none", "runs": runs}
    (folder / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


FORMATS = {"n-dbe/dmesg.log": "kernel-log", "n-skip/diag.txt": "dcgmi-diag", "n-ibpanic/ibstat.txt": "ibstat",
           "n-clean/diag.txt": "dcgmi-diag", "n-cut/smi.xml": "nvidia-smi-xml", "n-host/slurm-4242.out": "prescreen"}


def _catalog(tmp: Path, required: list[str] | None) -> LoadedCatalog:
    if required is None:
        return load_catalog("exemplar-h100", ROOT / "references")
    doc = yaml.safe_load((ROOT / "references" / "exemplar-h100.yaml").read_text())
    doc["id"] = "health-only-h100"
    doc["profiles"] = {"full": {"title": "Node health alone (test catalog)", "phases": required}}
    path = tmp / "health-only.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_catalog(str(path), ROOT / "references")


def _judge(folder: Path, catalog: LoadedCatalog) -> PhaseResult:
    bundle = load_bundle(folder, in_bundle_names=True)
    parsed = {run.id: parse_run(bundle, run, 1 << 30) for run in bundle.spec.runs if run.kind is RunKind.HEALTH}
    rules = load_health_rules(ROOT / "references" / "health-rules.yaml")
    return judge_health_phase(bundle, catalog, parsed, rules)


@pytest.fixture(scope="module")
def rules() -> HealthRules:
    return load_health_rules(ROOT / "references" / "health-rules.yaml")


@pytest.fixture(scope="module")
def judged(real_samples: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[PhaseResult, Path]:
    folder = tmp_path_factory.mktemp("health-phase")
    _bundle(folder, _files(real_samples, folder), FORMATS)
    return _judge(folder, _catalog(folder, None)), folder


def _check(result: PhaseResult, check_id: str) -> Any:
    (check,) = [c for c in result.checks if c.id == check_id]
    return check


def test_each_node_is_its_worst_verdict_and_none_of_the_faults_passes(judged: tuple[PhaseResult, Path]) -> None:
    result, _ = judged
    assert {c.id: c.status for c in result.checks} == {
        "health.n-dbe_healthy": Status.FAIL, "health.n-skip_healthy": Status.SKIPPED,
        "health.n-ibpanic_healthy": Status.ERROR, "health.n-clean_healthy": Status.PASS,
        "health.n-cut_healthy": Status.ERROR, "health.n-host_healthy": Status.FAIL,
        "health.every_node_examined": Status.WARN}
    # the catalog (exemplar-h100) does not require the phase: shown, never decisive
    assert {c.severity for c in result.checks} == {Severity.ADVISORY}


def test_findings_name_the_fault_with_its_file_and_line(judged: tuple[PhaseResult, Path]) -> None:
    result, folder = judged
    dbe = _check(result, "health.n-dbe_healthy")
    # SOURCES.md: Xid 48 at line 11, then Xid 63 (a remap, healthy) and nine Xid 94 (contained: a warning)
    assert dbe.message.startswith("2 of 3 unit verdict(s) not healthy: FAIL GPU 00000000:19:00.0 xid: Xid 48 "
                                  "(Double Bit ECC Error")
    assert "(n-dbe/dmesg.log:11)" in dbe.message
    assert [(s.file, s.first) for s in dbe.evidence] == [("n-dbe/dmesg.log", 11), ("n-dbe/dmesg.log", 13)]
    assert "NVRM: Xid (PCI:0000:19:00): 48," in (folder / "n-dbe/dmesg.log").read_text().splitlines()[10]
    skip = _check(result, "health.n-skip_healthy")
    assert "SKIPPED dcgmi diag (all GPUs) dcgm.memtest: Memtest: Skip" in skip.message
    assert "(n-skip/diag.txt:26)" in skip.message
    panic = _check(result, "health.n-ibpanic_healthy")
    assert "(n-ibpanic/ibstat.txt:137)" in panic.message and "mlx5_8" in panic.message
    cut = _check(result, "health.n-cut_healthy")
    assert cut.message.startswith("1 of 1 unit verdict(s) not healthy: ERROR evidence file evidence.unreadable: "
                                  "cannot be read:")
    assert "n-cut/smi.xml" in cut.message


def test_a_prescreen_naming_another_host_is_an_error_on_the_node(judged: tuple[PhaseResult, Path]) -> None:
    host = _check(judged[0], "health.n-host_healthy")
    # named first: it qualifies every other finding of the file (the prescreen's idle power brake, its dead NVLinks)
    assert host.message.startswith("10 of 110 unit verdict(s) not healthy: ERROR evidence file evidence.host: the "
                                   "output names host h100-a07, bundle.yaml says node n-host: fix the run's nodes "
                                   "(n-host/slurm-4242.out:1); FAIL GPU 0 (00000000:19:00.0) gpu.hw_slowdown")
    assert host.status is Status.FAIL


def test_clean_node_and_section(judged: tuple[PhaseResult, Path]) -> None:
    result, _ = judged
    clean = _check(result, "health.n-clean_healthy")
    # the older DCGM table: 9 deployment tests and 9 others, each one verdict for all GPUs (SOURCES.md)
    assert clean.message == "18 unit verdict(s), all healthy (dcgmi-diag)"
    rows = {r["node"]: r for r in result.section["nodes"]}  # type: ignore[union-attr]
    assert [r["node"] for r in result.section["nodes"]] == [  # type: ignore[union-attr]
        "n-dbe", "n-host", "n-cut", "n-ibpanic", "n-skip", "n-clean"]
    assert (rows["n-dbe"]["status"], rows["n-dbe"]["findings_total"]) == ("FAIL", 2)
    assert result.section["unexamined"] == ["n-none"]
    examined = _check(result, "health.every_node_examined")
    assert examined.message.startswith("1 of 7 node(s) have no health evidence: n-none.")


def test_a_catalog_requiring_health_fails_a_bundle_without_it(real_samples: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bundle"
    folder.mkdir()
    shutil.copyfile(real_samples / "slurm" / "sacct-multi-node.txt", folder / "sacct.txt")
    # a bundle with evidence of another phase only
    doc = {"schema_version": 1, "cluster": {"name": "health-test", "provider": "test"},
           "system": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": NODES}, "catalog": "exemplar-h100",
           "recipe_version": "none", "runs": [{"id": "jobs", "phase": "resilience", "kind": "scheduler",
                                                "format": "sacct", "files": ["sacct.txt"]}]}
    (folder / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    result = _judge(folder, _catalog(tmp_path, ["health"]))
    assert {c.id: (c.status, c.severity) for c in result.checks} == {
        "health.evidence_present": (Status.FAIL, Severity.REQUIRED),
        "health.every_node_examined": (Status.FAIL, Severity.REQUIRED)}
    assert _check(result, "health.evidence_present").message.startswith("the bundle has no run of phase health")
    assert _check(result, "health.every_node_examined").message.startswith("7 of 7 node(s) have no health evidence")
