"""`evidence init` on a folder of real node-health outputs as an operator collects them: each file listed as a health
run of the node its hostname, folder or file name says (else a FILL_IN asking for it), and the draft, filled in,
accepted by `evidence check`; a health run bundle.yaml gets wrong is refused with its entry named."""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import PLACEHOLDER, RunKind, load_bundle
from clustercert.evidence.init import _system_of
from clustercert.evidence.llmb import write_llmb_draft
from clustercert.evidence.smi import Inferred, SmiReport, gpu_names, gpus_per_node, nvlink_domains
from clustercert.health import load_health_rules
from clustercert.parsers import FORMATS
from clustercert.phases.evidence import parse_run
from clustercert.phases.health import judge_health_phase
from clustercert.simulate.llmb import suite_jobs, write_llmb_install
from clustercert.verdicts import Status
from tests.conftest import ROOT, run_cli
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
    doc["runs"] = [r for r in doc["runs"] if r.get("nodes") != [PLACEHOLDER]]
    edit(doc["runs"][0])
    (folder / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_cli("evidence", "check", str(folder))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert said in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


# ---- the system as nvidia-smi's reports show it (issue 56: GPU model, GPUs per node, NVLink domains) ----------

XML = "k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.{}.xml"


def _line_of(path: Path, text: str) -> int:
    """The file's first line holding `text`: the oracle for where init says a value comes from."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _smi(real: Path, node: str, chip: str) -> SmiReport:
    path = real / H / XML.format(chip)
    return SmiReport(f"{node}/smi.xml", node, FORMATS["nvidia-smi-xml"](path, f"{node}/smi.xml"))


def test_gpu_counts_and_product_names_with_where_each_is_printed(real_samples: Path) -> None:
    gb200 = real_samples / H / XML.format("gb200")
    attached, product = _line_of(gb200, "<attached_gpus>"), _line_of(gb200, "<product_name>")
    a, b = _smi(real_samples, "gb-a", "gb200"), _smi(real_samples, "gb-b", "gb200")
    # SOURCES.md: the GB200 report is of 4 GPUs, the B200's of 8
    assert gpus_per_node([a, b]) == Inferred(4, f"Attached GPUs 4 in nvidia-smi's gb-a/smi.xml:{attached}, "
                                                f"gb-b/smi.xml:{attached}")
    assert gpu_names([a, b]) == {"NVIDIA GB200": f"gb-a/smi.xml:{product}"}
    mixed = gpus_per_node([a, _smi(real_samples, "b2-a", "b200")])
    assert mixed is not None and mixed.value is None
    assert mixed.why.startswith(f"needed: the nvidia-smi reports attach different GPU counts (4 in gb-a/smi.xml:"
                                f"{attached}; 8 in b2-a/smi.xml:")
    assert gpus_per_node([]) is None


def test_nvlink_domains_from_the_fabric_clique_or_why_not(real_samples: Path) -> None:
    gb200 = real_samples / H / XML.format("gb200")
    clique = _line_of(gb200, "<cliqueId>")
    a, b = _smi(real_samples, "gb-a", "gb200"), _smi(real_samples, "gb-b", "gb200")
    # SOURCES.md: every GPU of the GB200 report prints cliqueId 2 of one cluster UUID
    assert nvlink_domains([a, b], ["gb-a", "gb-b"], 18) == Inferred(
        [{"name": "clique-2", "nodes": ["gb-a", "gb-b"]}],
        f"nvidia-smi's Fabric ClusterUUID and CliqueId of each node's GPUs (gb-a/smi.xml:{clique}, "
        f"gb-b/smi.xml:{clique})")
    asked = [nvlink_domains(reports, nodes, per) for reports, nodes, per in (
        ([a, b], ["gb-a", "gb-b"], 1),  # more nodes in one clique than a domain holds
        ([a], ["gb-a", "gb-b"], 18),  # a node without a report
        ([a, _smi(real_samples, "h-a", "h100")], ["gb-a", "h-a"], 18),  # SOURCES.md: the H100's cliqueId 0, UUID 0
        ([SmiReport("smi.xml", PLACEHOLDER, a.report)], [], 18),  # a report of no known node
        ([a, _smi(real_samples, "gb-a", "gb300")], ["gb-a"], 18),  # SOURCES.md: the GB300's cliqueId is 32766
    )]
    assert all(x is not None and x.value is None for x in asked)
    whys = [x.why for x in asked if x is not None]
    assert "clique 2 of 00000001-0000-0000-0000-000000000001 holds 2 nodes, more than the 1 of one domain" in whys[0]
    assert whys[1].endswith("gb-b show no fabric clique in an nvidia-smi report")
    assert "h-a's GPUs are in no multi-node NVLink domain (clique 0, ClusterUUID 00000000-0000-0000-0000-000000000000"\
           in whys[2]
    assert whys[3].endswith("the node of smi.xml is not known")
    assert f"gb-a's GPUs print more than one domain: clique 2 of 00000001-0000-0000-0000-000000000001 (gb-a/smi.xml:" \
           f"{clique}), clique 32766 of" in whys[4]
    # drivers before R550 print no clique (SOURCES.md: the 535 report's Fabric block has none): nothing to say
    text = real_samples / H / "gpud/nvidia-smi-q.h100x8.535.183.01.txt"
    old = SmiReport("n/q.txt", "n", FORMATS["nvidia-smi-q"](text, "n/q.txt"))
    assert nvlink_domains([old], ["n"], 18) is None


def test_grace_hopper_is_not_an_h200() -> None:
    assert _system_of("NVIDIA GH200 480GB") is None
    assert _system_of("NVIDIA H200") == "h200-sxm"


def test_init_fills_the_system_from_nvidia_smi_and_its_draft_checks(real_samples: Path, tmp_path: Path) -> None:
    folder = tmp_path / "gb200"
    for node in ("gb-r1-n01", "gb-r1-n02"):
        (folder / node).mkdir(parents=True)
        shutil.copyfile(real_samples / H / XML.format("gb200"), folder / node / "nvidia-smi-q-x.xml")
    proc = run_cli("evidence", "init", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    product = _line_of(real_samples / H / XML.format("gb200"), "<product_name>")
    assert (f'from nvidia-smi: system.gpu: "gb200-nvl72" (nvidia-smi\'s product name NVIDIA GB200 '
            f"(gb-r1-n01/nvidia-smi-q-x.xml:{product}))") in proc.stdout
    assert 'system.nvlink_domains: [{"name": "clique-2", "nodes": ["gb-r1-n01", "gb-r1-n02"]}]' in proc.stdout
    assert "nothing to fill in" in proc.stdout
    system = yaml.safe_load((folder / "bundle.yaml").read_text())["system"]
    assert (system["gpu"], system["gpus_per_node"], system["nodes"]) == ("gb200-nvl72", 4, ["gb-r1-n01", "gb-r1-n02"])
    checked = run_cli("evidence", "check", str(folder))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_init_asks_when_the_reports_are_of_two_systems(real_samples: Path, tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    for node, chip in (("n1", "gb200"), ("n2", "b200")):
        (folder / node).mkdir(parents=True)
        shutil.copyfile(real_samples / H / XML.format(chip), folder / node / "smi.xml")
    proc = run_cli("evidence", "init", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "from nvidia-smi:" not in proc.stdout
    lines = (folder / "bundle.yaml").read_text().splitlines()
    gpu = next(line for line in lines if line.startswith("  gpu: "))
    assert gpu.startswith(f'  gpu: "{PLACEHOLDER}"  # needed: the files name GPUs of 2 systems (b200, gb200-nvl72: '
                          "NVIDIA B200 (n2/smi.xml:")
    assert next(line for line in lines if line.startswith("  gpus_per_node: ")).startswith(
        f'  gpus_per_node: "{PLACEHOLDER}"  # needed: the nvidia-smi reports attach different GPU counts (4 in n1/')
    refused = run_cli("evidence", "check", str(folder))
    assert refused.returncode == 3 and "system.gpu" in refused.stderr, refused.stdout + refused.stderr


# ---- llmb-run's prescreen (issue 59: the Exemplar prescreen as health evidence) -----------------------------------

def test_the_llmb_prescreen_output_is_health_evidence_of_its_node(real_samples: Path, tmp_path: Path) -> None:
    catalog = load_catalog("exemplar-gb200-26.08", ROOT / "references")
    nodes = [f"gb-r1-n{n:02d}" for n in range(1, 5)]
    install = write_llmb_install(tmp_path / "install", catalog, suite_jobs(catalog)[:1], nodes=nodes)
    (written,) = install.rglob("microbenchmark_system_info/**/slurm-*.out")
    garbled = written.read_text()  # the simulator's stand-in: no banner of launch.sh's
    written.write_text(prescreen_of(real_samples / H, host="gb-r1-n02"))
    (written.parent / "slurm-4099001.out").write_text(prescreen_of(real_samples / H, host="gb-r9-n01"))
    (written.parent / "slurm-4099002.out").write_text(garbled)
    _, draft, _ = write_llmb_draft(install, ROOT / "references")
    doc = yaml.safe_load(draft.text)
    health = {PurePosixPath(r["files"][0]).name: r for r in doc["runs"] if r["kind"] == "health"}
    assert {name: (r["phase"], r["format"], r["nodes"]) for name, r in health.items()} == {
        written.name: ("health", "prescreen", ["gb-r1-n02"]),
        "slurm-4099001.out": ("health", "prescreen", [PLACEHOLDER])}
    asked = next(line for line in draft.text.splitlines() if "the prescreen ran on gb-r9-n01" in line)
    assert asked.split("#", 1)[1].strip().startswith("needed: the prescreen ran on gb-r9-n01 (the hostname it prints "
                                                     "(line 5)), which is not among the 4 hosts")
    assert [PurePosixPath(a).name for a in doc["attachments"] if "system_info" in a] == ["slurm-4099002.out"]
    # filled in (the provider; the other node's output left out), the prescreen is judged in the health phase
    text = (install / "bundle.yaml").read_text().replace('provider: "FILL_IN"', 'provider: "test"')
    doc = yaml.safe_load(text)
    doc["runs"] = [r for r in doc["runs"] if r.get("nodes") != [PLACEHOLDER]]
    (install / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    bundle = load_bundle(install, in_bundle_names=True)
    parsed = {run.id: parse_run(bundle, run, 1 << 30) for run in bundle.spec.runs if run.kind is RunKind.HEALTH}
    result = judge_health_phase(bundle, catalog, parsed, load_health_rules(ROOT / "references" / "health-rules.yaml"))
    node = next(c for c in result.checks if c.id == "health.gb-r1-n02_healthy")
    # the prescreen's nvidia-smi -q: the 535.161 H100 report, HW power brake active on idle GPUs (SOURCES.md)
    assert node.status is Status.FAIL and "power" in node.message.lower()
