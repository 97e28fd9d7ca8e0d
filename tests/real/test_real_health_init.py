"""`evidence init` on a folder of real node-health outputs as an operator collects them: each file listed as a health
run of the node its hostname, folder or file name says (else a FILL_IN asking for it), and the draft, filled in,
accepted by `evidence check`; a health run bundle.yaml gets wrong is refused with its entry named."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustercert.evidence.bundle import PLACEHOLDER
from tests.conftest import run_cli
from tests.real.test_real_health import prescreen_of

H = "node-health"


def _collect(real: Path, into: Path) -> dict[str, str]:
    """The folder: files at its root and in per-node folders, and the node each should be given (`?`: none)."""
    health = real / H
    layout = {
        # the hostname the file prints: the syslog's host column, the prescreen's `Host:` line
        "syslog.ib6-link-flaps.txt": (health / "azurehpc-health-checks/syslog.ib6-link-flaps.txt", "jplc7eb7-vm-0"),
        "slurm-4242.out": (None, "h100-a07"),
        # a file name led by a node another file names
        "h100-a07.dmesg.log": (health / "gpud/dmesg.xid48-dbe-xid63-rowremap-xid94.log", "h100-a07"),
        # a per-node folder, as a collection script lays its outputs out
        "h100-a08/nvidia-smi-q.txt": (health / "thamada-gls/nvidia-smi-a.H100SXMx8.txt", "h100-a08"),
        "h100-a08/ibstat.txt": (health / "gpud/ibstat.h100.ib-ndr-8x400.bond.all-active.txt", "h100-a08"),
        # nothing says whose it is
        "diag-r4.txt": (health / "gcm/diag-r4.all-pass.txt", "?"),
    }
    into.mkdir()
    for rel, (source, _) in layout.items():
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        if source is None:
            (into / rel).write_text(prescreen_of(health, host="h100-a07"))
        else:
            shutil.copyfile(source, into / rel)
    return {rel: node for rel, (_, node) in layout.items()}


@pytest.fixture(scope="module")
def drafted(real_samples: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("health-init") / "collected"
    expected = _collect(real_samples, folder)
    proc = run_cli("evidence", "init", str(folder))
    text = (folder / "bundle.yaml").read_text() if (folder / "bundle.yaml").exists() else ""
    return {"folder": folder, "expected": expected, "proc": proc, "text": text,
            "doc": yaml.safe_load(text) if text else {}}


def _runs_by_file(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["files"][0]: r for r in doc.get("runs", [])}


def test_every_health_file_is_a_health_run_of_its_format(drafted: dict[str, Any]) -> None:
    assert drafted["proc"].returncode == 0, drafted["proc"].stdout + drafted["proc"].stderr
    runs = _runs_by_file(drafted["doc"])
    assert sorted(runs) == sorted(drafted["expected"])
    assert {rel: (r["phase"], r["kind"], r["format"]) for rel, r in runs.items()} == {
        "syslog.ib6-link-flaps.txt": ("health", "health", "kernel-log"),
        "slurm-4242.out": ("health", "health", "prescreen"),
        "h100-a07.dmesg.log": ("health", "health", "kernel-log"),
        "h100-a08/nvidia-smi-q.txt": ("health", "health", "nvidia-smi-q"),
        "h100-a08/ibstat.txt": ("health", "health", "ibstat"),
        "diag-r4.txt": ("health", "health", "dcgmi-diag"),
    }


def test_each_file_goes_to_the_node_its_hostname_folder_or_name_gives(drafted: dict[str, Any]) -> None:
    runs = _runs_by_file(drafted["doc"])
    assert {rel: r["nodes"] for rel, r in runs.items()} == {
        rel: [PLACEHOLDER if node == "?" else node] for rel, node in drafted["expected"].items()}
    lines = drafted["text"].splitlines()

    def comment(rel: str) -> str:
        at = next(i for i, ln in enumerate(lines) if f'files: ["{rel}"]' in ln)
        return lines[at - 1].split("#", 1)[1].strip()

    # the prescreen's Host: line is line 5 of what launch.sh writes (a blank line, then the start banner)
    assert comment("slurm-4242.out") == "the hostname it prints (line 5)"
    assert comment("syslog.ib6-link-flaps.txt") == "the hostname its syslog lines print"
    assert comment("h100-a07.dmesg.log") == "its file name, which starts with h100-a07, a node the evidence names"
    assert comment("h100-a08/ibstat.txt") == "its folder's name (h100-a08/): check that it is the node's hostname"
    assert comment("diag-r4.txt").startswith("needed: the node this output is from")


def test_the_draft_says_what_each_file_holds(drafted: dict[str, Any]) -> None:
    held = {ln.split("format: ")[1] for ln in drafted["text"].splitlines() if "format: " in ln}
    # the H100 report's 8 GPUs, the older DCGM's 10 categories of tests (SOURCES.md), 9 ibstat CAs
    assert '"nvidia-smi-q"  # 8 GPUs' in held
    assert '"ibstat"  # 9 ports' in held
    assert any(h.startswith('"dcgmi-diag"  # ') and h.endswith(" tests") for h in held)


def test_a_draft_left_with_its_fill_in_is_refused_then_filled_in_it_checks(drafted: dict[str, Any],
                                                                          tmp_path: Path) -> None:
    folder = tmp_path / "bundle"
    shutil.copytree(drafted["folder"], folder)
    refused = run_cli("evidence", "check", str(folder))
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "FILL_IN" in refused.stderr and "Traceback" not in refused.stderr
    doc = yaml.safe_load((folder / "bundle.yaml").read_text())
    nodes = ["h100-a07", "h100-a08", "h100-a09", "jplc7eb7-vm-0"]
    doc["system"].update({"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": nodes})
    doc["catalog"] = "exemplar-h100"
    for run in doc["runs"]:
        if run["nodes"] == [PLACEHOLDER]:
            run["nodes"] = ["h100-a09"]
    (folder / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    checked = run_cli("evidence", "check", str(folder))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "health" in checked.stdout


@pytest.mark.parametrize(("edit", "said"), [
    (lambda run: run.pop("nodes"), "a health run needs nodes: [the one node whose output it is]"),
    (lambda run: run.update(phase="scaling"), "kind health goes with phase health, got kind 'health' in phase "
                                              "'scaling'"),
    (lambda run: run.update(format="nccl-tests"), "expected a format for kind health"),
])
def test_a_health_run_bundle_yaml_gets_wrong_is_refused_with_its_entry(drafted: dict[str, Any], tmp_path: Path,
                                                                       edit: Any, said: str) -> None:
    folder = tmp_path / "bundle"
    shutil.copytree(drafted["folder"], folder)
    doc = yaml.safe_load((folder / "bundle.yaml").read_text())
    doc["system"].update({"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": ["h100-a07", "h100-a08", "h100-a09",
                                                                           "jplc7eb7-vm-0"]})
    doc["catalog"] = "exemplar-h100"
    doc["runs"] = [r for r in doc["runs"] if r["nodes"] != [PLACEHOLDER]]
    edit(doc["runs"][0])
    (folder / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_cli("evidence", "check", str(folder))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert said in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
