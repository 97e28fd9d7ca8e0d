"""Each node-health check, one passing and one failing case, on small outputs written as the tools print them
(the real files' own verdicts: tests/real/test_real_health.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.errors import CatalogError
from clustercert.health import HealthRules, HealthVerdict, judge_health, load_health_rules
from clustercert.parsers.health.dcgm_diag import parse_dcgm_diag_of
from clustercert.parsers.health.fabric_manager import parse_fabric_manager_of
from clustercert.parsers.health.ibstat import parse_ibstat_of
from clustercert.parsers.health.kernel_log import parse_kernel_log_of
from clustercert.parsers.health.nvlink import parse_nvlink_status_of
from clustercert.parsers.health.nvsmi_text import parse_nvsmi_text_of
from clustercert.parsers.health.nvsmi_xml import parse_nvsmi_xml_of
from clustercert.parsers.health.topo import parse_topo_of
from clustercert.verdicts import Status

ROOT = Path(__file__).resolve().parents[2]
PASS, WARN, FAIL, SKIPPED, ERROR = Status.PASS, Status.WARN, Status.FAIL, Status.SKIPPED, Status.ERROR


@pytest.fixture(scope="module")
def rules() -> HealthRules:
    return load_health_rules(ROOT / "references" / "health-rules.yaml")


GPU = """GPU 00000000:{bus}:00.0
    Product Name                          : {name}
    GPU Reset Status
        Reset Required                    : {reset}
        Drain and Reset Recommended       : No
    PCI
        Bus Id                            : 00000000:{bus}:00.0
        Replays Since Reset               : {replays}
        Replay Number Rollovers           : {rollovers}
    Clocks Event Reasons
        Idle                              : Not Active
        HW Slowdown                       : {hw}
            HW Thermal Slowdown           : Not Active
            HW Power Brake Slowdown       : {hw}
    Utilization
        Gpu                               : {util} %
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable Parity     : 0
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : {dbe}
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable Parity     : 0
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : {dbe}
            SRAM Threshold Exceeded       : {sram}
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 0
        Pending                           : No
        Remapping Failure Occurred        : {failure}
    GPU Power Readings
        Power Draw                        : 70.00 W
    Fabric
        State                             : {state}
        Status                            : Success
        CliqueId                          : {clique}
        ClusterUUID                       : {uuid}
        Health
            Bandwidth                     : N/A
    Processes                             : {processes}
"""
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
BUSES = ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"]


def smi(n: int = 8, **changes: dict[str, str]) -> str:
    """An `nvidia-smi -q` report of `n` healthy H100s; changes[bus] overrides that GPU's fields."""
    defaults = {"name": "NVIDIA H100 80GB HBM3", "reset": "No", "replays": "60", "rollovers": "0",
                "hw": "Not Active", "util": "0", "dbe": "0", "sram": "No", "failure": "No", "state": "Completed",
                "clique": "0", "uuid": ZERO_UUID, "processes": "None"}
    blocks = [GPU.format(bus=bus, **{**defaults, **changes.get(bus, {})}) for bus in BUSES[:n]]
    return (f"\n==============NVSMI LOG==============\n\nTimestamp                                 : Wed Jul 31 "
            f"11:22:39 2024\nDriver Version                            : 565.57.01\n\nAttached GPUs             "
            f"                : {n}\n" + "\n".join(blocks))


def _judge(table: object, rules: HealthRules, check: str) -> list[tuple[str, Status, str]]:
    verdicts: list[HealthVerdict] = judge_health(table, rules)
    return [(v.unit.name, v.status, v.reason) for v in verdicts if v.check == check]


def _statuses(table: object, rules: HealthRules, check: str) -> list[Status]:
    return [status for _, status, _ in _judge(table, rules, check)]


def test_the_healthy_report_passes_every_check(rules: HealthRules) -> None:
    verdicts = judge_health(parse_nvsmi_text_of(smi(), "q.txt"), rules)
    assert {v.status for v in verdicts} == {PASS}
    assert {v.check for v in verdicts} == {
        "gpu.ecc_volatile_uncorrectable", "gpu.ecc_aggregate_uncorrectable", "gpu.remap_pending",
        "gpu.remap_failure", "gpu.sram_threshold_exceeded", "gpu.reset_required", "gpu.drain_and_reset_recommended",
        "gpu.hw_slowdown", "gpu.fabric", "gpu.pcie_replays"}


@pytest.mark.parametrize("change,check,status", [
    ({"dbe": "2"}, "gpu.ecc_volatile_uncorrectable", FAIL),
    ({"dbe": "2"}, "gpu.ecc_aggregate_uncorrectable", WARN),
    ({"failure": "Yes"}, "gpu.remap_failure", FAIL),
    ({"sram": "Yes"}, "gpu.sram_threshold_exceeded", FAIL),
    ({"reset": "Yes"}, "gpu.reset_required", FAIL),
    ({"hw": "Active"}, "gpu.hw_slowdown", FAIL),
    ({"hw": "Active", "util": "97", "processes": "None"}, "gpu.hw_slowdown", WARN),
    ({"rollovers": "1"}, "gpu.pcie_replay_rollovers", FAIL),
    ({"state": "In Progress"}, "gpu.fabric", FAIL),
])
def test_one_bad_gpu_fails_its_check_alone(rules: HealthRules, change: dict[str, str], check: str,
                                           status: Status) -> None:
    report = parse_nvsmi_text_of(smi(**{"4C": change}), "q.txt")
    got = _judge(report, rules, check)
    assert [(name, s) for name, s, _ in got if s is not PASS] == [("GPU 2 (00000000:4C:00.0)", status)]


def test_remap_pending_needs_a_reset(rules: HealthRules) -> None:
    text = smi(1).replace("        Pending                           : No",
                          "        Pending                           : Yes")
    assert _statuses(parse_nvsmi_text_of(text, "q.txt"), rules, "gpu.remap_pending") == [FAIL]


def test_pcie_replays_far_above_the_nodes_median(rules: HealthRules) -> None:
    report = parse_nvsmi_text_of(smi(**{"9B": {"replays": "5000"}, "19": {"replays": "400"}}), "q.txt")
    got = _judge(report, rules, "gpu.pcie_replays")
    # 400 is 6.7x the median of 60: not far; 5000 is 83x and 4940 above it
    assert [(name, s, r) for name, s, r in got if s is not PASS] == [
        ("GPU 4 (00000000:9B:00.0)", FAIL, "5000 PCIe replays since reset, 83x the node's median 60")]
    lone = parse_nvsmi_text_of(smi(1), "q.txt")
    assert _statuses(lone, rules, "gpu.pcie_replays") == [SKIPPED]


def test_nvl72_gpu_outside_a_domain_fails_and_inside_passes(rules: HealthRules) -> None:
    gb200 = {"name": "NVIDIA GB200"}
    outside = parse_nvsmi_text_of(smi(4, **dict.fromkeys(BUSES[:4], gb200)), "q.txt")
    assert set(_judge(outside, rules, "gpu.fabric")) == {
        (name, FAIL, f"not registered in a multi-node NVLink domain (clique 0, cluster UUID {ZERO_UUID})")
        for name in (f"GPU {i} (00000000:{bus}:00.0)" for i, bus in enumerate(BUSES[:4]))}
    inside = {**gb200, "clique": "2", "uuid": "5c8a5cbb-3b3e-45d5-a1d4-0e7c0b5a1a10"}
    report = parse_nvsmi_text_of(smi(4, **dict.fromkeys(BUSES[:4], inside)), "q.txt")
    assert set(_statuses(report, rules, "gpu.fabric")) == {PASS}


def test_nvl72_gpu_whose_report_shows_no_fabric_is_an_error(rules: HealthRules) -> None:
    text = smi(1, **{"19": {"name": "NVIDIA GB200"}})
    text = text[:text.index("    Fabric")] + "    Processes                             : None\n"
    assert _statuses(parse_nvsmi_text_of(text, "q.txt"), rules, "gpu.fabric") == [ERROR]


XML = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">
<nvidia_smi_log>
\t<driver_version>580.173.02</driver_version>
\t<attached_gpus>1</attached_gpus>
\t<gpu id="00000000:29:00.0">
\t\t<product_name>NVIDIA GB200</product_name>
\t\t<fabric>
\t\t\t<state>Completed</state>
\t\t\t<status>Success</status>
\t\t\t<cliqueId>2</cliqueId>
\t\t\t<clusterUuid>5c8a5cbb-3b3e-45d5-a1d4-0e7c0b5a1a10</clusterUuid>
\t\t\t<health>
\t\t\t\t<summary>{summary}</summary>
\t\t\t\t<bandwidth>{bandwidth}</bandwidth>
\t\t\t</health>
\t\t</fabric>
\t\t<processes>
\t\t</processes>
\t</gpu>
</nvidia_smi_log>
"""


def test_fabric_health_and_bandwidth_in_the_xml(rules: HealthRules) -> None:
    good = parse_nvsmi_xml_of(XML.format(summary="Healthy", bandwidth="Full").encode(), "x.xml")
    assert _statuses(good, rules, "gpu.fabric") == [PASS]
    assert good.gpus[0].line == 6 and good.gpus[0].readings["fabric.health.summary"].line == 14
    bad = parse_nvsmi_xml_of(XML.format(summary="Unhealthy", bandwidth="Degraded").encode(), "x.xml")
    assert _judge(bad, rules, "gpu.fabric") == [
        ("GPU 0 (00000000:29:00.0)", FAIL, "fabric health Unhealthy; fabric bandwidth Degraded")]


NVLINK = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)
{links0}GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000001)
{links1}"""


def _links(speeds: list[str]) -> str:
    return "".join(f"\t Link {i}: {s}\n" for i, s in enumerate(speeds))


def test_nvlink_inactive_and_slow_links_fail(rules: HealthRules) -> None:
    good = ["26.562 GB/s"] * 18
    text = NVLINK.format(links0=_links(good), links1=_links([*good[:5], "<inactive>", "13.281 GB/s", *good[7:]]))
    verdicts = judge_health(parse_nvlink_status_of(text, "nvlink.txt"), rules)
    assert [(v.unit.name, v.check, v.status, v.reason, v.line) for v in verdicts if v.status is not PASS] == [
        ("GPU 1 link 5", "nvlink.down", FAIL, "link inactive", 26),
        ("GPU 1 link 6", "nvlink.speed", FAIL, "13.281 GB/s while the node's links run at 26.562 GB/s", 27),
        ("GPU 1 NVLinks", "nvlink.count", FAIL, "17 of the 18 NVLinks a NVIDIA H100 80GB HBM3 has are up", 20)]
    assert len([v for v in verdicts if v.status is PASS]) == 34


TOPO = """\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \t{a}\tNV18\t0-47\t0\t\tN/A
GPU1\t{a}\t X \tNV18\t0-47\t0\t\tN/A
GPU2\tNV18\tNV18\t X \t0-47\t0\t\tN/A
"""


def test_topology_pair_over_pcie_fails(rules: HealthRules) -> None:
    assert set(_statuses(parse_topo_of(TOPO.format(a="NV18"), "topo.txt"), rules, "topology.gpu_pair")) == {PASS}
    got = _judge(parse_topo_of(TOPO.format(a="SYS"), "topo.txt"), rules, "topology.gpu_pair")
    assert [(n, s, r) for n, s, r in got if s is not PASS] == [
        ("GPU0-GPU1", FAIL, "GPU0 and GPU1 connect over SYS while 2 of the node's 3 GPU pairs connect over NV18")]


PORT = """CA 'mlx5_{i}'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tPort 1:
\t\tState: {state}
\t\tPhysical state: {physical}
\t\tRate: {rate}
\t\tLink layer: InfiniBand
"""


def test_ib_port_down_and_port_below_its_peers_rate(rules: HealthRules) -> None:
    ports = [("Active", "LinkUp", "400")] * 6 + [("Active", "LinkUp", "200"), ("Down", "Polling", "10")]
    text = "".join(PORT.format(i=i, state=s, physical=p, rate=r) for i, (s, p, r) in enumerate(ports))
    verdicts = judge_health(parse_ibstat_of(text, "ibstat.txt"), rules)
    assert [(v.unit.name, v.check, v.status, v.reason) for v in verdicts if v.status is not PASS] == [
        ("mlx5_6 port 1", "ib.port_rate", FAIL, "Active at 200 Gb/s while 6 of its 7 peers (InfiniBand) run at 400 "
                                                "Gb/s"),
        ("mlx5_7 port 1", "ib.port_state", FAIL, "State Down, physical state Polling (InfiniBand)")]


def _syslog(losses: int) -> str:
    lines = ["Aug 17 00:00:24 node-1 systemd[1]: Finished Rotate log files."]
    lines += ["Aug 17 06:18:01 node-1 systemd-networkd[5398]: ib3: lost carrier",
              "Aug 17 06:18:06 node-1 systemd-networkd[5398]: ib3: Gained carrier"] * losses
    lines += ["Aug 17 06:19:00 node-1 systemd-networkd[5398]: eth0: lost carrier"]  # not an IPoIB link
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("losses,status", [(1, WARN), (2, WARN), (3, FAIL)])
def test_ib_link_flaps_by_count(rules: HealthRules, losses: int, status: Status) -> None:
    got = _judge(parse_kernel_log_of(_syslog(losses), "syslog"), rules, "ib.link_flaps")
    assert [(name, s) for name, s, _ in got] == [("ib3", status)]


def _xid(code: int, message: str) -> str:
    return f"[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): {code}, pid=1, name=python, {message}\n"


@pytest.mark.parametrize("line,status,named", [
    (_xid(79, "GPU has fallen off the bus."), FAIL, "Xid 79 (GPU has fallen off the bus: RESTART_BM) x1"),
    (_xid(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"), FAIL,
     "Xid 154 (GPU Recovery Action Changed: XID_154) x1"),
    (_xid(154, "GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)"), PASS,
     "Xid 154 (GPU Recovery Action Changed: XID_154) x1"),
    (_xid(31, "Ch 00000008, intr 00000000. MMU Fault"), WARN, "Xid 31 (GPU memory page fault: RESTART_APP) x1"),
    (_xid(999, "something new"), ERROR, "Xid 999 (not in the rules' copy of NVIDIA's catalog) x1"),
])
def test_xids_by_the_catalog(rules: HealthRules, line: str, status: Status, named: str) -> None:
    (got,) = _judge(parse_kernel_log_of(line, "dmesg"), rules, "xid")
    assert (got[1], got[2].split(";")[0]) == (status, named)


def test_fabric_manager_fatal_sxid_fails(rules: HealthRules) -> None:
    text = ("[Feb 27 2025 15:10:02] [ERROR] [tid 12727] detected NVSwitch fatal error 24007 on fid 0 on NVSwitch pci "
            "bus id 00000000:86:00.0 physical id 3 port 61\n")
    assert _judge(parse_fabric_manager_of(text, "fm.log"), rules, "fabric_manager") == [
        ("NVSwitch 00000000:86:00.0 (physical id 3) port 61", FAIL, "fatal SXid 24007, first at Feb 27 2025 15:10:02")]


DIAG_HEAD = """+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | {version:<46} |
| GPU Device IDs Detected   | 2330,2330,2330,2330                            |
+-----  Hardware  ----------+------------------------------------------------+
"""
FOOT = "+---------------------------+------------------------------------------------+\n"


def _row(name: str, value: str) -> str:
    return f"| {name:<25} | {value:<46} |\n"


def test_dcgm_results_split_per_gpu(rules: HealthRules) -> None:
    text = (DIAG_HEAD.format(version="3.3.5") + _row("Targeted Power", "Pass - GPUs: 0, 2, 3")
            + _row("", "Fail - GPU: 1") + _row("Warning", "GPU 1 Max power of 224.1 did not reach desire")
            + _row("", "d power minimum target_power_min_ratio of 224") + FOOT)
    got = _judge(parse_dcgm_diag_of(text, "diag.txt"), rules, "dcgm.targeted_power")
    assert [(n, s) for n, s, _ in got] == [("GPU 0", PASS), ("GPU 1", FAIL), ("GPU 2", PASS), ("GPU 3", PASS)]
    assert got[1][2] == ("Targeted Power: Fail (Warning: GPU 1 Max power of 224.1 did not reach desired power "
                         "minimum target_power_min_ratio of 224)")


def test_dcgm4_per_gpu_rows_and_a_skip_with_its_reason(rules: HealthRules) -> None:
    text = (DIAG_HEAD.format(version="4.4.2") + _row("memory", "Pass") + _row("", "GPU0: Pass")
            + _row("", "GPU1: Skip") + _row("Info", "GPU 1 is in use by another process")
            + _row("", "GPU2: Pass") + _row("", "GPU3: Pass") + FOOT)
    got = _judge(parse_dcgm_diag_of(text, "diag.txt"), rules, "dcgm.memory")
    assert [(n, s) for n, s, _ in got] == [("GPU 0", PASS), ("GPU 1", SKIPPED), ("GPU 2", PASS), ("GPU 3", PASS)]
    assert got[1][2] == "memory: Skip (Info: GPU 1 is in use by another process): not run, so not passed"


def test_dcgm_run_that_could_not_start_is_an_error(rules: HealthRules) -> None:
    text = ("Error: Unable to complete diagnostic for group 2147483647. Return: (-30) : DCGM GPU Diagnostic "
            "returned an error\n")
    assert _judge(parse_dcgm_diag_of(text, "diag.txt"), rules, "dcgm.run") == [
        ("dcgmi diag", ERROR, "dcgmi diag could not run: Unable to complete diagnostic for group 2147483647. "
                              "Return: (-30) : DCGM GPU Diagnostic returned an error")]


def test_rules_that_pass_a_skipped_test_are_refused(tmp_path: Path) -> None:
    text = (ROOT / "references" / "health-rules.yaml").read_text()
    bad = tmp_path / "rules.yaml"
    bad.write_text(text.replace("Skip: SKIPPED", "Skip: PASS"))
    with pytest.raises(CatalogError, match="a DCGM result of Skip is never a pass"):
        load_health_rules(bad)
    bad.write_text(text.replace("source: nvidia-memory-errors}", "source: nowhere}", 1))
    with pytest.raises(CatalogError, match="rules cite sources not listed under `sources`: nowhere"):
        load_health_rules(bad)


@pytest.mark.parametrize("line,pci,code,stamp", [
    # plain dmesg, the driver's older form without `PCI:`, and syslog with the kernel's own stamp
    ("[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.\n", "0000:03:00", 79,
     "[ 5107.644336]"),
    ("[  269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff\n", "0000:01:00", 3,
     "[  269.517039]"),
    ("May 18 19:02:39 gpu-node-7 kernel: [ 123.456789] NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the "
     "bus.\n", "0000:2b:00", 79, "May 18 19:02:39"),
])
def test_kernel_log_forms(rules: HealthRules, line: str, pci: str, code: int, stamp: str) -> None:
    log = parse_kernel_log_of(line, "dmesg")
    (event,) = log.xids
    assert (event.pci, event.xid, event.stamp, event.line) == (pci, code, stamp, 1)
    # Xid 3 is not in NVIDIA's catalog of Ampere and newer: it cannot be judged, so it is no pass
    assert _statuses(log, rules, "xid") == [FAIL if code == 79 else ERROR]


def test_worst_status_and_the_bus_id_of_a_kernel_address() -> None:
    from clustercert.health import worst
    from clustercert.health.verdicts import bus_id_of_pci

    assert worst([PASS, SKIPPED, WARN]) is WARN and worst([ERROR, FAIL, PASS]) is FAIL and worst([]) is PASS
    assert bus_id_of_pci("0000:9b:00") == "00000000:9B:00.0"


def test_rules_that_pass_a_prescreen_step_not_run_are_refused(tmp_path: Path) -> None:
    text = (ROOT / "references" / "health-rules.yaml").read_text()
    bad = tmp_path / "rules.yaml"
    bad.write_text(text.replace("step_missing: SKIPPED", "step_missing: PASS"))
    with pytest.raises(CatalogError, match="never a pass"):
        load_health_rules(bad)
