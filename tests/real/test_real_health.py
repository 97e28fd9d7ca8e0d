"""Every file of the real node-health samples (SOURCES.md, "Node health evidence"): the units each shows
unhealthy and why, the units healthy, the tests skipped, each number read from the file itself; the same files
cut short end in a located error, never a pass."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.health import HealthRules, HealthVerdict, judge_health, load_health_rules
from clustercert.parsers import FORMATS, detect_format
from clustercert.parsers.health import (
    HEALTH_FORMATS,
    DiagRun,
    FabricManagerLog,
    GpuReport,
    IbPorts,
    KernelLog,
    NvlinkStatus,
    Prescreen,
    TopoMatrix,
)
from clustercert.parsers.health.prescreen import BANNER
from clustercert.verdicts import Status

ROOT = Path(__file__).resolve().parents[2]
PASS, WARN, FAIL, SKIPPED, ERROR = Status.PASS, Status.WARN, Status.FAIL, Status.SKIPPED, Status.ERROR

# every file of the folder and the format it is; the README is no tool output and is refused as evidence
FILES = {
    "awsome-distributed-training/diag-r2.a100x8-p4de.v3.3.3.nvlinks-expected-12.txt": "dcgmi-diag",
    "azurehpc-health-checks/nvidia-smi-nvlink-s.a100-gpu6.all-links-inactive.txt": "nvlink-status",
    "azurehpc-health-checks/nvidia-smi-nvlink-s.a100-gpu7.good.txt": "nvlink-status",
    "azurehpc-health-checks/nvidia-smi-q-d-page-retirement.a100x8.clean.txt": "nvidia-smi-q",
    "azurehpc-health-checks/syslog.ib6-link-flaps.txt": "kernel-log",
    "gcm/diag-r4.all-pass.txt": "dcgmi-diag",
    "gcm/nvlink-s.8gpu-12links-up.txt": "dcgmi-nvlink",
    "gpud/dmesg.h100-xe9680.xid119-gsp-timeout.log": "kernel-log",
    "gpud/dmesg.xid13-xid43-app-faults.log": "kernel-log",
    "gpud/dmesg.xid48-dbe-xid63-rowremap-xid94.log": "kernel-log",
    "gpud/fabricmanager.nvswitch-nonfatal-12028.log": "fabric-manager",
    "gpud/ibstat.a100-azure.hdr.ibpanic-exit255.txt": "ibstat",
    "gpud/ibstat.a100.hdr.all-active.txt": "ibstat",
    "gpud/ibstat.h100.ib-ndr-8x400.bond.all-active.txt": "ibstat",
    "gpud/ibstat.h100.ib-ndr.3-eth-ports-down.txt": "ibstat",
    "gpud/ibstat.h100.roce-400g.2-ports-down.txt": "ibstat",
    "gpud/ibstat.h100.roce-400g.all-active.txt": "ibstat",
    "gpud/ibstatus.a100-azure.hdr.all-active.txt": "ibstatus",
    "gpud/nvidia-smi-nvlink-status.a100x8.txt": "nvlink-status",
    "gpud/nvidia-smi-q.h100x8.535.161.08.hw-power-brake.txt": "nvidia-smi-q",
    "gpud/nvidia-smi-q.h100x8.535.183.01.txt": "nvidia-smi-q",
    "k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.a100.xml": "nvidia-smi-xml",
    "k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.b200.xml": "nvidia-smi-xml",
    "k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.gb200.xml": "nvidia-smi-xml",
    "k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.gb300.xml": "nvidia-smi-xml",
    "k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.h100.xml": "nvidia-smi-xml",
    "nccl-tests-issue-264/diag-r3.h100x8.v3.3.8.gpu-memory-fail-cuinit.txt": "dcgmi-diag",
    "sglang-issue-30401/nvidia-smi-topo-m.h100x8-8nic.txt": "nvidia-smi-topo",
    "thamada-gls/nvidia-smi-a.A100SXMx4.txt": "nvidia-smi-q",
    "thamada-gls/nvidia-smi-a.GH200.txt": "nvidia-smi-q",
    "thamada-gls/nvidia-smi-a.H100SXMx8.txt": "nvidia-smi-q",
    "thamada-gls/nvidia-smi-a.H200.txt": "nvidia-smi-q",
}
NOT_EVIDENCE = "k8s-test-infra-nvidia-smi-xml/README.upstream.md"


@pytest.fixture(scope="module")
def rules() -> HealthRules:
    return load_health_rules(ROOT / "references" / "health-rules.yaml")


def _parse(root: Path, rel: str) -> object:
    return FORMATS[FILES[rel]](root / rel, rel)


def _judged(root: Path, rel: str, rules: HealthRules) -> tuple[object, list[HealthVerdict]]:
    table = _parse(root, rel)
    return table, judge_health(table, rules)


def _not_pass(verdicts: list[HealthVerdict]) -> list[tuple[str, str, Status, int]]:
    return [(v.unit.name, v.check, v.status, v.line) for v in verdicts if v.status is not PASS]


def _line(root: Path, rel: str, line: int) -> str:
    return (root / rel).read_text().split("\n")[line - 1]


def test_every_file_of_the_folder_is_listed_here(real_samples: Path) -> None:
    folder = real_samples / "node-health"
    found = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != "SOURCES.md"}
    assert found == set(FILES) | {NOT_EVIDENCE}


@pytest.mark.parametrize("rel", sorted(FILES))
def test_each_file_is_detected_as_its_format(real_samples: Path, rel: str) -> None:
    assert detect_format(real_samples / "node-health" / rel) == FILES[rel]


def test_the_upstream_readme_is_no_evidence(real_samples: Path) -> None:
    with pytest.raises(EvidenceError, match="could not detect one"):
        detect_format(real_samples / "node-health" / NOT_EVIDENCE)
    for fmt in HEALTH_FORMATS:  # whichever parser it is given, a located refusal
        with pytest.raises(EvidenceError, match=rf"^{re.escape(NOT_EVIDENCE)} line 1: expected "):
            FORMATS[fmt](real_samples / "node-health" / NOT_EVIDENCE, NOT_EVIDENCE)


# ---------------------------------------------------------------------------------------------- nvidia-smi -q


def test_h100_535_161_power_brake_while_idle_fails_every_gpu(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    rel = "gpud/nvidia-smi-q.h100x8.535.161.08.hw-power-brake.txt"
    report, verdicts = _judged(root, rel, rules)
    assert isinstance(report, GpuReport)
    assert (report.driver_version, report.attached_gpus, len(report.gpus)) == ("535.161.08", 8, 8)
    assert [g.bus_id[9:11] for g in report.gpus] == ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"]
    assert [g.value("pcie.replays") for g in report.gpus] == [67, 63, 52, 43, 49, 53, 82, 67]
    failed = _not_pass(verdicts)
    assert [(name, check, status) for name, check, status, _ in failed] == [
        (f"GPU {i} ({g.bus_id})", "gpu.hw_slowdown", FAIL) for i, g in enumerate(report.gpus)]
    for verdict in (v for v in verdicts if v.status is FAIL):
        assert "HW Slowdown, HW Power Brake Slowdown active while idle (no process, 0 % utilization" in verdict.reason
        assert _line(root, rel, verdict.line).strip() == "HW Power Brake Slowdown       : Active"
    healthy = Counter(v.check for v in verdicts if v.status is PASS)
    assert healthy == {"gpu.ecc_volatile_uncorrectable": 8, "gpu.ecc_aggregate_uncorrectable": 8,
                       "gpu.remap_pending": 8, "gpu.remap_failure": 8, "gpu.sram_threshold_exceeded": 8,
                       "gpu.reset_required": 8, "gpu.drain_and_reset_recommended": 8, "gpu.fabric": 8,
                       "gpu.pcie_replays": 8}
    assert {v.reason for v in verdicts if v.check == "gpu.fabric"} == {"fabric Completed/Success"}


def test_h100_535_183_power_brake_under_load_warns_one_gpu(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    rel = "gpud/nvidia-smi-q.h100x8.535.183.01.txt"
    report, verdicts = _judged(root, rel, rules)
    assert isinstance(report, GpuReport)
    assert [g.value("pcie.replays") for g in report.gpus] == [120, 111, 58, 60, 63, 93, 69, 78]
    assert [g.value("clocks.idle") for g in report.gpus] == [True, True, False, True, True, True, True, True]
    (warned,) = [v for v in verdicts if v.status is not PASS]
    assert (warned.unit.name, warned.check, warned.status) == ("GPU 2 (00000000:75:00.0)", "gpu.hw_slowdown", WARN)
    assert warned.reason == "HW Power Brake Slowdown active under load (1 process(es), 0 % utilization, 118.01 W)"
    assert report.gpus[2].value("clocks.hw_slowdown") is False  # the parent line says Not Active
    replays = {v.unit.gpu: v.reason for v in verdicts if v.check == "gpu.pcie_replays"}
    assert replays[0] == "120 PCIe replays since reset (node median 73.5)"


def test_a100_row_remap_pending_fails_gpu_9e_only(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    rel = "thamada-gls/nvidia-smi-a.A100SXMx4.txt"
    report, verdicts = _judged(root, rel, rules)
    assert isinstance(report, GpuReport)
    by_bus = {g.bus_id: g for g in report.gpus}
    gpu = by_bus["00000000:9E:00.0"]
    assert gpu.value("ecc.volatile.dram_correctable") == gpu.value("ecc.aggregate.dram_correctable") == 353
    assert (gpu.value("remap.correctable"), gpu.value("remap.pending")) == (1, True)
    assert (by_bus["00000000:C2:00.0"].value("remap.correctable"),
            by_bus["00000000:C2:00.0"].value("remap.pending")) == (1, False)
    failed = _not_pass(verdicts)
    assert [(n, c, s) for n, c, s, _ in failed] == [("GPU 1 (00000000:9E:00.0)", "gpu.remap_pending", FAIL)]
    assert _line(root, rel, failed[0][3]).strip() == "Pending                           : Yes"
    assert not [v for v in verdicts if v.check == "gpu.fabric"]  # Fabric N/A: an A100 registers no fabric


def test_gh200_lifetime_uncorrectable_warns_and_its_remap_passes(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    report, verdicts = _judged(root, "thamada-gls/nvidia-smi-a.GH200.txt", rules)
    assert isinstance(report, GpuReport)
    (gpu,) = report.gpus
    assert (gpu.value("ecc.volatile.dram_uncorrectable"), gpu.value("ecc.aggregate.dram_uncorrectable")) == (0, 1)
    assert (gpu.value("remap.uncorrectable"), gpu.value("remap.pending"), gpu.value("remap.failure")) == (1, False,
                                                                                                       False)
    assert [(c, s) for _, c, s, _ in _not_pass(verdicts)] == [("gpu.ecc_aggregate_uncorrectable", WARN),
                                                               ("gpu.pcie_replays", SKIPPED)]
    assert {v.check: v.status for v in verdicts}["gpu.remap_pending"] is PASS


def test_h100_565_and_h200_fabric_outside_any_domain_pass(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    report, verdicts = _judged(root, "thamada-gls/nvidia-smi-a.H100SXMx8.txt", rules)
    assert isinstance(report, GpuReport)
    assert [g.value("pcie.replays") for g in report.gpus] == [7, 0, 0, 0, 0, 4, 15, 0]
    assert {(g.value("fabric.clique_id"), g.value("fabric.cluster_uuid")) for g in report.gpus} == {
        (0, "00000000-0000-0000-0000-000000000000")}
    assert _not_pass(verdicts) == []
    assert {v.reason for v in verdicts if v.check == "gpu.fabric"} == {
        "fabric Completed/Success, clique 0 (not in a multi-node NVLink domain)"}
    _h200, verdicts = _judged(root, "thamada-gls/nvidia-smi-a.H200.txt", rules)
    assert [(c, s) for _, c, s, _ in _not_pass(verdicts)] == [("gpu.pcie_replays", SKIPPED)]  # one GPU: no peers


def test_page_retirement_report_judges_retired_pages_only(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    report, verdicts = _judged(root, "azurehpc-health-checks/nvidia-smi-q-d-page-retirement.a100x8.clean.txt", rules)
    assert isinstance(report, GpuReport)
    assert report.displayed == ["Retired Pages"]
    assert [g.bus_id for g in report.gpus] == [f"0000000{i}:00:00.0" for i in range(1, 9)]
    assert {(g.value("retired.single_bit"), g.value("retired.double_bit"), g.value("retired.pending"))
            for g in report.gpus} == {(0, 0, False)}
    assert [(v.check, v.status) for v in verdicts] == [("gpu.retired_pages_pending", PASS)] * 8


# ---------------------------------------------------------------------------------------------- nvidia-smi -q -x


@pytest.mark.parametrize("name,gpus,clique,domain", [
    ("b200", 8, 0, False), ("gb200", 4, 2, True), ("gb300", 4, 32766, True), ("h100", 8, 0, False)])
def test_xml_fabric_and_health(real_samples: Path, rules: HealthRules, name: str, gpus: int, clique: int,
                               domain: bool) -> None:
    root = real_samples / "node-health"
    report, verdicts = _judged(root, f"k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.{name}.xml", rules)
    assert isinstance(report, GpuReport)
    assert len(report.gpus) == report.attached_gpus == gpus
    assert {g.value("fabric.state") for g in report.gpus} == {"Completed"}
    assert {g.value("fabric.clique_id") for g in report.gpus} == {clique}
    uuid = "00000001-0000-0000-0000-000000000001" if domain else "00000000-0000-0000-0000-000000000000"
    assert {g.value("fabric.cluster_uuid") for g in report.gpus} == {uuid}
    assert _not_pass(verdicts) == []
    fabric = {v.reason for v in verdicts if v.check == "gpu.fabric"}
    assert fabric == ({f"fabric Completed/Success, clique {clique}, cluster UUID {uuid}"} if domain else
                      {f"fabric Completed/Success, clique {clique} (not in a multi-node NVLink domain)"})


def test_xml_h100_replay_counters(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    rel = "k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.h100.xml"
    report, verdicts = _judged(root, rel, rules)
    assert isinstance(report, GpuReport)
    assert [g.value("pcie.replays") for g in report.gpus] == [150, 144, 174, 158, 145, 172, 162, 106]
    first = report.gpus[0].readings["pcie.replays"]
    assert _line(root, rel, first.line).strip() == "<replay_counter>150</replay_counter>"
    assert {v.status for v in verdicts if v.check == "gpu.pcie_replays"} == {PASS}


def test_xml_a100_vm_has_no_fabric_to_judge(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    report, verdicts = _judged(root, "k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.a100.xml", rules)
    assert isinstance(report, GpuReport)
    assert (report.driver_version, report.gpus[0].name) == ("570.148.08", "NVIDIA A100-SXM4-40GB")
    assert not [v for v in verdicts if v.check == "gpu.fabric"]
    assert [(c, s) for _, c, s, _ in _not_pass(verdicts)] == [("gpu.pcie_replays", SKIPPED)]


# ---------------------------------------------------------------------------------------------- dcgmi diag


def test_diag_gpu_memory_fails_every_gpu_and_skips_are_not_passes(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    rel = "nccl-tests-issue-264/diag-r3.h100x8.v3.3.8.gpu-memory-fail-cuinit.txt"
    run, verdicts = _judged(root, rel, rules)
    assert isinstance(run, DiagRun)
    assert (run.metadata["DCGM Version"], run.metadata["Driver Version Detected"], run.gpu_count) == (
        "3.3.8", "560.35.03", 8)
    tests = {t.name: t for t in run.tests}
    assert (tests["PCIe"].result, tests["GPU Memory"].result, tests["Memory Bandwidth"].result,
            tests["EUD Test"].result) == ("Skip", "Fail", "Skip", "Skip")
    info = tests["Persistence Mode"].messages[0]
    assert info.kind == "Info" and info.text.endswith("Persistence mode for GPU 4 is disab" "led. Enable pers")
    by = Counter((v.check, v.status) for v in verdicts)
    assert by == {("dcgm.gpu_memory", FAIL): 8, ("dcgm.pcie", SKIPPED): 8, ("dcgm.memory_bandwidth", SKIPPED): 8,
                  ("dcgm.eud_test", SKIPPED): 8, **{(f"dcgm.{c}", PASS): 1 for c in (
                      "denylist", "nvml_library", "cuda_main_library", "permissions_and_os_blocks",
                      "persistence_mode", "environment_variables", "page_retirement_row_remap",
                      "graphics_processes", "inforom")}}
    for gpu in range(8):
        (memory,) = [v for v in verdicts if v.check == "dcgm.gpu_memory" and v.unit.gpu == gpu]
        assert f"GPU {gpu} Error using CUDA API cuInit" in memory.reason
        assert "Unable to initialize CUDA library: 'system not yet initialized'" in memory.reason
        assert memory.line == 35 + 7 * gpu and _line(root, rel, memory.line).startswith("| Warning")
    skipped = [v for v in verdicts if v.status is SKIPPED]
    assert {v.reason for v in skipped if v.check == "dcgm.pcie"} == {
        "PCIe: Skip (DCGM printed no reason): not run, so not passed"}


def test_diag_p4de_passes_with_an_empty_stress_category(real_samples: Path, rules: HealthRules) -> None:
    run, verdicts = _judged(real_samples / "node-health",
                            "awsome-distributed-training/diag-r2.a100x8-p4de.v3.3.3.nvlinks-expected-12.txt", rules)
    assert isinstance(run, DiagRun)
    assert run.categories == ["Metadata", "Deployment", "Integration", "Hardware", "Stress"]
    assert [t.name for t in run.tests if t.category != "Deployment"] == ["PCIe", "GPU Memory"]
    assert len([t for t in run.tests if t.category == "Deployment"]) == 9
    assert Counter(v.status for v in verdicts) == {PASS: 9 + 8 + 8}


def test_diag_older_dcgm_blacklist_and_no_metadata(real_samples: Path, rules: HealthRules) -> None:
    run, verdicts = _judged(real_samples / "node-health", "gcm/diag-r4.all-pass.txt", rules)
    assert isinstance(run, DiagRun)
    assert (run.metadata, run.gpu_count, run.tests[0].name) == ({}, None, "Blacklist")
    assert [t.name for t in run.tests if t.category != "Deployment"] == [
        "PCIe", "GPU Memory", "Diagnostic", "Pulse Test", "SM Stress", "Targeted Stress", "Targeted Power",
        "Memory Bandwidth", "Memtest"]
    # the GPU count is not printed: each test is one verdict for all GPUs, never one per guessed GPU
    assert len(verdicts) == 18 and {v.status for v in verdicts} == {PASS}
    assert {v.unit.name for v in verdicts} == {"dcgmi diag (node)", "dcgmi diag (all GPUs)"}


# ---------------------------------------------------------------------------------------------- kernel logs


def test_xid48_dbe_with_row_remap_and_contained_errors(real_samples: Path, rules: HealthRules) -> None:
    root = real_samples / "node-health"
    rel = "gpud/dmesg.xid48-dbe-xid63-rowremap-xid94.log"
    log, verdicts = _judged(root, rel, rules)
    assert isinstance(log, KernelLog)
    assert Counter(x.xid for x in log.xids) == {48: 1, 63: 1, 94: 9}
    assert [x.line for x in log.xids] == list(range(11, 22))
    assert log.xids[0].message.startswith("An uncorrectable double bit error (DBE) has been detected on GPU in the "
                                          "framebuffer at physAddr 0x12bac1c3e0 partition 2, subpartition 1.")
    assert [(v.unit.bus_id, v.status, v.line) for v in verdicts] == [
        ("00000000:19:00.0", FAIL, 11), ("00000000:19:00.0", PASS, 12), ("00000000:19:00.0", WARN, 13)]
    assert verdicts[0].reason.startswith("Xid 48 (Double Bit ECC Error: WORKFLOW_XID_48) x1;")
    assert verdicts[2].reason.startswith("Xid 94 (Contained memory error: RESTART_APP) x9;")


def test_xid13_and_43_flood_fails_no_node(real_samples: Path, rules: HealthRules) -> None:
    log, verdicts = _judged(real_samples / "node-health", "gpud/dmesg.xid13-xid43-app-faults.log", rules)
    assert isinstance(log, KernelLog)
    assert Counter((x.pci, x.xid) for x in log.xids) == {("0000:38:00", 13): 629, ("0000:38:00", 43): 7}
    assert (log.first_stamp, log.last_stamp) == ("2025-01-21T02:21:33,498559+00:00",
                                                 "2025-01-21T04:41:44,287197+00:00")
    assert sorted((v.status, v.reason.split(";")[0]) for v in verdicts) == [
        (PASS, "Xid 43 (GPU stopped processing: IGNORE) x7"),
        (WARN, "Xid 13 (Graphics Engine Exception: RESTART_APP) x629")]
    assert FAIL not in {v.status for v in verdicts}


def test_xid119_gsp_timeouts_fail_the_gpu(real_samples: Path, rules: HealthRules) -> None:
    log, verdicts = _judged(real_samples / "node-health", "gpud/dmesg.h100-xe9680.xid119-gsp-timeout.log", rules)
    assert isinstance(log, KernelLog)
    assert [(x.xid, x.line, x.process) for x in log.xids] == [
        (119, 3, "nvidia-smi"), (119, 38, "nvidia-smi"), (119, 40, "nvidia-smi"), (119, 42, "cache_mgr_main"),
        (119, 43, "gpud")]
    assert log.gpu_uuids == {"0000:9b:00": "GPU-509665ad-b600-ac93-3616-d754b23d636d"}
    (verdict,) = verdicts
    assert (verdict.unit.bus_id, verdict.status, verdict.line) == ("00000000:9B:00.0", FAIL, 3)
    assert verdict.reason.startswith("Xid 119 (GSP RPC Timeout: RESET_GPU) x5; first at [Sun Feb 23 16:24:18 2025]")


def test_syslog_ib_link_flaps(real_samples: Path, rules: HealthRules) -> None:
    log, verdicts = _judged(real_samples / "node-health", "azurehpc-health-checks/syslog.ib6-link-flaps.txt", rules)
    assert isinstance(log, KernelLog)
    assert log.hosts == ["jplc7eb7-vm-0"]
    assert Counter((c.interface, c.up) for c in log.carrier) == {("ib6", False): 6, ("ib6", True): 6}
    flaps = [v for v in verdicts if v.check == "ib.link_flaps"]
    assert [(v.unit.name, v.status, v.line, v.node) for v in flaps] == [("ib6", FAIL, 3, "jplc7eb7-vm-0")]
    assert flaps[0].reason == ("lost carrier 6 time(s) and regained it 6 time(s), Aug 17 06:18:01 to "
                               "Aug 17 06:18:06")
    assert [v.status for v in verdicts if v.check == "xid"] == [PASS]  # no Xid in this log


# ---------------------------------------------------------------------------------------------- fabric manager


def test_fabric_manager_non_fatal_nvswitch_error(real_samples: Path, rules: HealthRules) -> None:
    log, verdicts = _judged(real_samples / "node-health", "gpud/fabricmanager.nvswitch-nonfatal-12028.log", rules)
    assert isinstance(log, FabricManagerLog)
    assert log.levels == {"INFO": 53, "ERROR": 1}
    (entry,) = log.entries
    assert (entry.sxid, entry.fatal, entry.switch_pci, entry.switch_physical_id, entry.port, entry.line) == (
        12028, False, "00000000:86:00.0", 3, 61, 100)
    (verdict,) = verdicts
    assert (verdict.unit.name, verdict.status) == ("NVSwitch 00000000:86:00.0 (physical id 3) port 61", WARN)


# ---------------------------------------------------------------------------------------------- InfiniBand


def test_ibstat_that_panicked_keeps_its_eight_cas_and_reports_the_failure(real_samples: Path,
                                                                         rules: HealthRules) -> None:
    ports, verdicts = _judged(real_samples / "node-health", "gpud/ibstat.a100-azure.hdr.ibpanic-exit255.txt", rules)
    assert isinstance(ports, IbPorts)
    assert [p.ca for p in ports.ports] == [f"mlx5_{i}" for i in range(8)]
    assert {(p.state, p.rate_gbps, p.link_layer, p.ca_type) for p in ports.ports} == {
        ("Active", 200.0, "InfiniBand", "MT4124")}
    assert (ports.failure, ports.failure_line) == (
        "[1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory", 137)
    assert [(v.status, v.line) for v in verdicts if v.status is not PASS] == [(ERROR, 137)]
    assert len([v for v in verdicts if v.status is PASS]) == 8


@pytest.mark.parametrize("rel,down,up", [
    ("gpud/ibstat.h100.ib-ndr.3-eth-ports-down.txt", ["mlx5_2", "mlx5_7", "mlx5_8"], 9),
    ("gpud/ibstat.h100.roce-400g.2-ports-down.txt", ["mlx5_11", "mlx5_5"], 10),
    ("gpud/ibstat.h100.roce-400g.all-active.txt", [], 12),
    ("gpud/ibstat.h100.ib-ndr-8x400.bond.all-active.txt", [], 9),
    ("gpud/ibstat.a100.hdr.all-active.txt", [], 9),
    ("gpud/ibstatus.a100-azure.hdr.all-active.txt", [], 9),
])
def test_ib_ports_down_fail_and_active_ones_pass(real_samples: Path, rules: HealthRules, rel: str,
                                                 down: list[str], up: int) -> None:
    ports, verdicts = _judged(real_samples / "node-health", rel, rules)
    assert isinstance(ports, IbPorts)
    assert sorted(p.ca for p in ports.ports if p.state == "Down") == down
    assert {p.physical_state for p in ports.ports if p.state == "Down"} <= {"Disabled"}
    assert sorted(v.unit.name.split()[0] for v in verdicts if v.status is FAIL) == down
    assert len([v for v in verdicts if v.status is PASS]) == up
    assert {v.reason for v in verdicts if v.status is FAIL} <= {"State Down, physical state Disabled (Ethernet)"}
    # issue 58: a port down cites the line its state was printed on, not its `Port 1:` header. The oracle walks the
    # file: the first `State:` line after the CA's own `CA '...'` line
    lines = (real_samples / "node-health" / rel).read_text().split("\n")
    for v in (v for v in verdicts if v.status is FAIL):
        ca = lines.index(f"CA '{v.unit.name.split()[0]}'")
        state = next(i for i in range(ca, len(lines)) if lines[i].strip().startswith("State:")) + 1
        assert (v.line, lines[v.line - 1].strip()) == (state, "State: Down")


def test_ib_rates_as_printed(real_samples: Path) -> None:
    root = real_samples / "node-health"
    roce = _parse(root, "gpud/ibstat.h100.roce-400g.all-active.txt")
    assert isinstance(roce, IbPorts)
    assert Counter(p.rate_gbps for p in roce.ports) == {400.0: 8, 100.0: 4}
    assert {p.link_layer for p in roce.ports} == {"Ethernet"}
    status = _parse(root, "gpud/ibstatus.a100-azure.hdr.all-active.txt")
    assert isinstance(status, IbPorts)
    assert [(p.ca, p.rate_gbps, p.link_layer) for p in status.ports][-1] == ("mlx5_8", 40.0, "Ethernet")
    assert Counter(p.rate_gbps for p in status.ports) == {200.0: 8, 40.0: 1}


# ---------------------------------------------------------------------------------------------- NVLink, topology


def test_nvlink_all_links_inactive_fails_gpu6(real_samples: Path, rules: HealthRules) -> None:
    status, verdicts = _judged(real_samples / "node-health",
                               "azurehpc-health-checks/nvidia-smi-nvlink-s.a100-gpu6.all-links-inactive.txt", rules)
    assert isinstance(status, NvlinkStatus)
    (verdict,) = verdicts
    assert (verdict.unit.name, verdict.status, verdict.line) == ("GPU 6 NVLinks", FAIL, 2)
    assert verdict.reason == ("no NVLink up: NVML: Unable to retrieve NVLink information as all links are "
                              "inactive")


@pytest.mark.parametrize("rel,gpus,speed", [
    ("azurehpc-health-checks/nvidia-smi-nvlink-s.a100-gpu7.good.txt", [7], 25.0),
    ("gpud/nvidia-smi-nvlink-status.a100x8.txt", list(range(8)), 25.0),
    ("gcm/nvlink-s.8gpu-12links-up.txt", list(range(8)), None),
])
def test_nvlink_twelve_links_up_per_gpu(real_samples: Path, rules: HealthRules, rel: str, gpus: list[int],
                                        speed: float | None) -> None:
    status, verdicts = _judged(real_samples / "node-health", rel, rules)
    assert isinstance(status, NvlinkStatus)
    assert [d.index for d in status.devices] == gpus
    assert {(len(d.links), d.kind) for d in status.devices} == {(12, "gpu")}
    assert {(link.state, link.speed_gbs) for d in status.devices for link in d.links} == {("up", speed)}
    assert [v.status for v in verdicts] == [PASS] * 12 * len(gpus)


def test_topology_every_gpu_pair_nv18(real_samples: Path, rules: HealthRules) -> None:
    matrix, verdicts = _judged(real_samples / "node-health", "sglang-issue-30401/nvidia-smi-topo-m.h100x8-8nic.txt",
                               rules)
    assert isinstance(matrix, TopoMatrix)
    assert matrix.devices == [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(8)]
    assert [matrix.link(f"GPU{i}", f"NIC{i}") for i in range(8)] == ["PIX"] * 8
    assert [r.cpu_affinity for r in matrix.rows[:8]] == ["0-47,96-143"] * 4 + ["48-95,144-191"] * 4
    assert matrix.nics["NIC7"] == "mlx5_7"
    assert len(verdicts) == 28 and {v.status for v in verdicts} == {PASS}


# ---------------------------------------------------------------------------------------------- prescreen


def _step(step: str, title: str, output: str, failed: int | None = None) -> str:
    """One step as launch.sh's run_step prints it: a banner, the command's output, and `[FAILED]` on a non-zero
    exit."""
    text = f"\n{BANNER}\n[{step}] {title}\n{BANNER}\n{output}"
    return text + (f"\n[FAILED] exit code {failed} (non-fatal, continuing)\n" if failed is not None else "")


def prescreen_of(root: Path, host: str = "node-017") -> str:
    """A prescreen's slurm-<jobid>.out as launch.sh writes it, its tools' outputs taken from the real samples."""
    smi = (root / "gpud/nvidia-smi-q.h100x8.535.161.08.hw-power-brake.txt").read_text()
    topo = (root / "sglang-issue-30401/nvidia-smi-topo-m.h100x8-8nic.txt").read_text()
    nvlink = (root / "azurehpc-health-checks/nvidia-smi-nvlink-s.a100-gpu6.all-links-inactive.txt").read_text()
    return "".join([
        f"\n{BANNER}\nSystem Info Collection Start\n{BANNER}\n",
        f"Host: {host}\nSLURM_JOB_ID: 4242\nLLMB_EXPERIMENT_DIR: unset\nTimestamp: 2026-09-01T10:00:00+00:00\n",
        _step("1a", "lscpu - CPU details, SKU, core count", "Architecture:             x86_64\n"),
        _step("8a", "nvidia-smi -q - GPU hardware, firmware, software details", smi),
        _step("8b", "nvidia-smi topo -m - GPU/NIC topology matrix (NVLink, PCIe, NUMA affinity)", topo),
        _step("8d", "nvidia-smi nvlink -s + fabric state - NVLink/fabric up",
              f"--- nvidia-smi nvlink -s ---\n{nvlink.rstrip()}\n\n[WARNING] 1 NVLink(s) reported inactive.\n"),
        _step("10", "ibv_devinfo - InfiniBand HCA device info", "bash: ibv_devinfo: command not found\n", 127),
        _step("10b", "IB port state - /sys/class/infiniband port up/active", "No InfiniBand devices found "
              "(/sys/class/infiniband absent)\n"),
        f"\n{BANNER}\nSystem Info Collection Summary\n{BANNER}\n",
        "Failed non-fatal steps: 1\nCompleted at: 2026-09-01T10:02:00+00:00\n",
    ])


def test_prescreen_steps_are_read_with_their_parsers_and_the_whole_files_lines(real_samples: Path, tmp_path: Path,
                                                                              rules: HealthRules) -> None:
    root = real_samples / "node-health"
    path = tmp_path / "slurm-4242.out"
    path.write_text(prescreen_of(root))
    assert detect_format(path) == "prescreen"
    prescreen = FORMATS["prescreen"](path, "slurm-4242.out")
    assert isinstance(prescreen, Prescreen)
    assert (prescreen.host, prescreen.job_id, prescreen.failed_steps) == ("node-017", "4242", 1)
    assert [(s.step, s.exit_code) for s in prescreen.steps] == [("1a", None), ("8a", None), ("8b", None),
                                                                ("8d", None), ("10", 127), ("10b", None)]
    lines = path.read_text().split("\n")
    assert prescreen.gpus is not None and prescreen.topo is not None and prescreen.nvlink is not None
    replays = prescreen.gpus.gpus[6].readings["pcie.replays"]
    assert replays.value == 82 and lines[replays.line - 1].strip() == "Replays Since Reset               : 82"
    assert lines[prescreen.topo.rows[0].line - 1].startswith("GPU0     X      NV18")
    (device,) = prescreen.nvlink.devices
    assert lines[(device.message_line or 0) - 1].startswith("NVML: Unable to retrieve NVLink information")
    verdicts = judge_health(prescreen, rules)
    assert {v.node for v in verdicts} == {"node-017"}
    failed = Counter((v.check, v.status) for v in verdicts if v.status is not PASS)
    assert failed == {("gpu.hw_slowdown", FAIL): 8, ("nvlink.down", FAIL): 1}


def test_prescreen_step_that_failed_or_is_missing_is_never_a_pass(real_samples: Path, rules: HealthRules) -> None:
    text = prescreen_of(real_samples / "node-health")
    start = text.index("\n" + BANNER + "\n[8b]")
    end = text.index("\n" + BANNER + "\n[8d]")
    failed_topo = text[:start] + _step("8b", "nvidia-smi topo -m - GPU/NIC topology matrix", "", 9) + text[end:]
    from clustercert.parsers.health.prescreen import parse_prescreen_of

    prescreen = parse_prescreen_of(failed_topo.replace(text[text.index("\n" + BANNER + "\n[10b]"):
                                                            text.index("\n" + BANNER + "\nSystem Info Collection "
                                                                       "Summary")], ""), "slurm.out")
    assert prescreen.topo is None
    steps = {v.unit.name: (v.status, v.reason) for v in judge_health(prescreen, rules)
             if v.check == "prescreen.step"}
    assert steps == {
        "prescreen step 8b (nvidia-smi topo -m)": (ERROR, "step 8b (nvidia-smi topo -m - GPU/NIC topology matrix) "
                                                          "failed with exit code 9: nvidia-smi topo -m could not run"),
        "prescreen step 10b (InfiniBand port states)": (SKIPPED, "the prescreen output has no step 10b: "
                                                                 "InfiniBand port states was not examined")}


# ---------------------------------------------------------------------------------------------- cut short


def _cut_points(rel: str, text: str) -> list[int]:
    """Where a file is cut: the middle, and for a log (which has no end to miss) inside an Xid or entry line."""
    if FILES[rel] == "kernel-log":
        marker = "NVRM: Xid (" if "NVRM: Xid (" in text else ": lost carrier"
        at = text.index(marker, len(text) // 3)
        return [at + len(marker) + 5, text.rfind("\n", 0, at) + 8]
    if FILES[rel] == "fabric-manager":
        at = text.index("[ERROR]")
        return [at - 6, at + 12]
    if FILES[rel] == "nvlink-status" and "Link 5:" in text:
        # the output has no end and no GPU count: cut at a GPU's end it reads as a node of fewer GPUs (the bundle's
        # nvidia-smi -q says how many there are); cut inside a GPU's list it is refused
        at = text.index("Link 5:", len(text) // 3)
        # between two links: the GPU lists fewer than the others (a lone GPU's count is judged, not parsed)
        return [at, at + len("Link 5: 25 G")] if text.count("\nGPU ") else [at + len("Link 5: 25 G")]
    return [len(text) // 2]


def test_one_gpus_nvlink_list_cut_at_a_line_end_fails_its_link_count(real_samples: Path, tmp_path: Path,
                                                                     rules: HealthRules) -> None:
    """One GPU's list cut between two links parses (nothing in the output says how many follow); its product's
    link count does: an A100-SXM4 has 12."""
    rel = "azurehpc-health-checks/nvidia-smi-nvlink-s.a100-gpu7.good.txt"
    text = (real_samples / "node-health" / rel).read_text()
    path = tmp_path / "cut.txt"
    path.write_text(text[:text.index("Link 5:")])
    verdicts = judge_health(FORMATS["nvlink-status"](path, rel), rules)
    assert [(v.unit.name, v.check, v.status, v.reason) for v in verdicts if v.status is not PASS] == [
        ("GPU 7 NVLinks", "nvlink.count", FAIL, "5 of the 12 NVLinks a NVIDIA A100-SXM4-80GB has are up")]


@pytest.mark.parametrize("rel", sorted(FILES))
def test_each_file_cut_short_is_a_located_error(real_samples: Path, tmp_path: Path, rel: str) -> None:
    text = (real_samples / "node-health" / rel).read_text()
    for cut in _cut_points(rel, text):
        path = tmp_path / Path(rel).name
        path.write_text(text[:cut])
        with pytest.raises(EvidenceError) as raised:
            FORMATS[FILES[rel]](path, rel)
        error = raised.value
        assert error.line is not None and 1 <= error.line <= text[:cut].count("\n") + 1, str(error)
        assert re.match(rf"{re.escape(rel)} line {error.line}( field '[^']+')?: expected ", str(error)), str(error)


def test_prescreen_cut_short_is_a_located_error(real_samples: Path, tmp_path: Path) -> None:
    text = prescreen_of(real_samples / "node-health")
    path = tmp_path / "slurm-4242.out"
    path.write_text(text[:len(text) // 2])
    with pytest.raises(EvidenceError, match=r"slurm-4242.out line \d+: expected the prescreen's closing `System "
                                            r"Info Collection Summary` banner"):
        FORMATS["prescreen"](path, "slurm-4242.out")


@pytest.mark.parametrize("name", ["a100", "b200", "gb200", "gb300", "h100"])
def test_xml_read_by_its_tags_equals_expat_element_by_element(real_samples: Path, name: str) -> None:
    """The fast reading of a plain nvidia-smi document gives the report expat's handlers give; a document with a
    comment (or a CDATA section, an entity reference) is read by the handlers alone, to the same report."""
    from clustercert.parsers.health import nvsmi_xml

    data = (real_samples / "node-health" / f"k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.{name}.xml").read_bytes()
    fast = nvsmi_xml.parse_nvsmi_xml_of(data, "q.xml")
    slow = nvsmi_xml._Reader("q.xml", 1).read(data)
    assert fast.to_json() == slow.to_json()
    assert nvsmi_xml._plain(data) is not None
    commented = data.replace(b"<fabric>", b"<fabric><!-- <state>Not Started</state> -->", 1)
    assert nvsmi_xml._plain(commented) is None
    assert nvsmi_xml.parse_nvsmi_xml_of(commented, "q.xml").to_json() == slow.to_json()


@pytest.mark.parametrize("rel", ["gpud/dmesg.xid13-xid43-app-faults.log",
                                 "gpud/dmesg.h100-xe9680.xid119-gsp-timeout.log",
                                 "gpud/dmesg.xid48-dbe-xid63-rowremap-xid94.log"])
def test_xid_lines_read_with_their_stamps_equal_the_general_reading(real_samples: Path, rel: str) -> None:
    """A kernel log whose Xid lines each start with their time stamp (dmesg -T, dmesg --time-format iso, with
    --decode or not) is read by the stamped pattern, to the events the general reading gives; a syslog's Xid line
    (host and tag before it) leaves the stamped pattern short, and the general reading is used."""
    from clustercert.parsers.health import kernel_log

    text = (real_samples / "node-health" / rel).read_text()
    stamped = kernel_log._xids_stamped(text, 1)
    assert stamped and len(stamped) == text.count("NVRM: Xid (")
    assert stamped == kernel_log._xids(text, 1)
    # from its first Xid line on: the file's first line is one, read at the line given
    first = text.rfind("\n", 0, text.index("NVRM: Xid (")) + 1
    assert kernel_log._xids_stamped(text[first:], 7) == kernel_log._xids(text[first:], 7)
    assert kernel_log._xids_stamped(text[first:], 7)[0].line == 7
    syslog = "\n".join(f"Feb 23 16:24:18 gpu-node-7 kernel: {line}" for line in text.splitlines()) + "\n"
    assert kernel_log._xids_stamped(syslog, 1) == []
    read = kernel_log.parse_kernel_log_of(syslog, "syslog")
    assert [(x.line, x.xid, x.pci) for x in read.xids] == [(x.line, x.xid, x.pci) for x in stamped]
    assert read.hosts == ["gpu-node-7"]
