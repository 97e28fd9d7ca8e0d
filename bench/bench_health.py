"""Node-health parsing throughput (MB/s) over the health outputs of a cluster's nodes built from the real samples,
written to bench/results/health.json."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gauge import gauge, processor  # bench/ is the script's folder: first on its path

from clustercert.health import judge_health, load_health_rules
from clustercert.parsers import FORMATS

ROOT = Path(__file__).resolve().parents[1]
TARGET_MB_PER_S = 50.0  # issue 59: the health outputs of 128 nodes parsed at 50 MB/s at least
BANNER = "=" * 80

# Each node's files: one of each kind, the real sample of its kind chosen by the node's number (so the fleet holds
# every variant), under node-NNN/ as a bundle would hold them.
KINDS: dict[str, tuple[str, list[str]]] = {
    "nvidia-smi-q.txt": ("nvidia-smi-q", ["gpud/nvidia-smi-q.h100x8.535.161.08.hw-power-brake.txt",
                                          "gpud/nvidia-smi-q.h100x8.535.183.01.txt",
                                          "thamada-gls/nvidia-smi-a.H100SXMx8.txt",
                                          "thamada-gls/nvidia-smi-a.A100SXMx4.txt"]),
    "nvidia-smi-q-x.xml": ("nvidia-smi-xml", [f"k8s-test-infra-nvidia-smi-xml/nvidia-smi-q-x.{name}.xml"
                                              for name in ("h100", "b200", "gb200", "gb300")]),
    "dcgmi-diag.txt": ("dcgmi-diag", ["nccl-tests-issue-264/diag-r3.h100x8.v3.3.8.gpu-memory-fail-cuinit.txt",
                                      "awsome-distributed-training/diag-r2.a100x8-p4de.v3.3.3.nvlinks-expected-12.txt",
                                      "gcm/diag-r4.all-pass.txt"]),
    "fabricmanager.log": ("fabric-manager", ["gpud/fabricmanager.nvswitch-nonfatal-12028.log"]),
    "ibstat.txt": ("ibstat", ["gpud/ibstat.h100.ib-ndr.3-eth-ports-down.txt",
                              "gpud/ibstat.h100.ib-ndr-8x400.bond.all-active.txt",
                              "gpud/ibstat.h100.roce-400g.all-active.txt",
                              "gpud/ibstat.h100.roce-400g.2-ports-down.txt",
                              "gpud/ibstat.a100.hdr.all-active.txt", "gpud/ibstat.a100-azure.hdr.ibpanic-exit255.txt"]),
    "ibstatus.txt": ("ibstatus", ["gpud/ibstatus.a100-azure.hdr.all-active.txt"]),
    "nvlink-s.txt": ("nvlink-status", ["gpud/nvidia-smi-nvlink-status.a100x8.txt"]),
    "dcgmi-nvlink-s.txt": ("dcgmi-nvlink", ["gcm/nvlink-s.8gpu-12links-up.txt"]),
    "topo-m.txt": ("nvidia-smi-topo", ["sglang-issue-30401/nvidia-smi-topo-m.h100x8-8nic.txt"]),
}
# the kernel ring buffer a node's `dmesg` shows: filled to this size with the real logs' lines, in turn
KERNEL_LOG_BYTES = 512 * 1024
KERNEL_LOGS = ["gpud/dmesg.xid13-xid43-app-faults.log", "gpud/dmesg.h100-xe9680.xid119-gsp-timeout.log",
               "gpud/dmesg.xid48-dbe-xid63-rowremap-xid94.log"]


def samples() -> Path | None:
    root = Path(os.environ.get("CLUSTERCERT_REAL_SAMPLES") or ROOT.parent / "shared" / "samples" / "real")
    return root / "node-health" if (root / "SOURCES.md").is_file() else None


def _kernel_log(health: Path, node: int) -> str:
    """A full ring buffer of the real logs' lines, starting with a different log per node."""
    lines: list[str] = []
    order = KERNEL_LOGS[node % 3:] + KERNEL_LOGS[:node % 3]
    for rel in order:
        lines += (health / rel).read_text().rstrip("\n").split("\n")
    out: list[str] = []
    size = i = 0
    while size < KERNEL_LOG_BYTES:
        out.append(lines[i % len(lines)])
        size += len(out[-1]) + 1
        i += 1
    return "\n".join(out) + "\n"


def _prescreen(health: Path, node: int, smi: str) -> str:
    """The prescreen's slurm-<jobid>.out as launch.sh writes it, with this node's real tools' outputs."""
    topo = (health / "sglang-issue-30401/nvidia-smi-topo-m.h100x8-8nic.txt").read_text()
    nvlink = (health / "gpud/nvidia-smi-nvlink-status.a100x8.txt").read_text().rstrip()

    def step(step: str, title: str, output: str) -> str:
        return f"\n{BANNER}\n[{step}] {title}\n{BANNER}\n{output}"

    return "".join([
        f"\n{BANNER}\nSystem Info Collection Start\n{BANNER}\nHost: node-{node:03d}\nSLURM_JOB_ID: {7000 + node}\n",
        step("8a", "nvidia-smi -q - GPU hardware, firmware, software details", smi),
        step("8b", "nvidia-smi topo -m - GPU/NIC topology matrix (NVLink, PCIe, NUMA affinity)", topo),
        step("8d", "nvidia-smi nvlink -s + fabric state - NVLink/fabric up",
             f"--- nvidia-smi nvlink -s ---\n{nvlink}\n\n[OK] No NVLinks reported inactive.\n"),
        f"\n{BANNER}\nSystem Info Collection Summary\n{BANNER}\nFailed non-fatal steps: 0\n",
    ])


def build(health: Path, folder: Path, nodes: int) -> list[tuple[str, Path]]:
    """Every node's files under `folder`, with the format of each."""
    files: list[tuple[str, Path]] = []
    for node in range(nodes):
        where = folder / f"node-{node:03d}"
        where.mkdir()
        smi = ""
        for name, (fmt, choices) in KINDS.items():
            text = (health / choices[node % len(choices)]).read_text()
            smi = text if fmt == "nvidia-smi-q" else smi
            (where / name).write_text(text)
            files.append((fmt, where / name))
        (where / "dmesg.log").write_text(_kernel_log(health, node))
        files.append(("kernel-log", where / "dmesg.log"))
        (where / "slurm-prescreen.out").write_text(_prescreen(health, node, smi))
        files.append(("prescreen", where / "slurm-prescreen.out"))
    return files


def run(files: list[tuple[str, Path]]) -> tuple[float, dict[str, float], list[object]]:
    """One pass: every file parsed in turn; the wall time, the time per format, the tables."""
    per: dict[str, float] = {}
    tables: list[object] = []
    started = time.perf_counter()
    for fmt, path in files:
        at = time.perf_counter()
        tables.append(FORMATS[fmt](path, path.name))
        per[fmt] = per.get(fmt, 0.0) + time.perf_counter() - at
    return time.perf_counter() - started, per, tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3, help="passes over every file; the best is kept")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "health.json")
    args = parser.parse_args()
    health = samples()
    if health is None:
        print("bench_health: the real samples are not there (CLUSTERCERT_REAL_SAMPLES or ../shared/samples/real)")
        sys.exit(1 if os.environ.get("CLUSTERCERT_REQUIRE_REAL_SAMPLES") == "1" else 0)
    rules = load_health_rules(ROOT / "references" / "health-rules.yaml")
    load_before = os.getloadavg()
    speed_before = gauge()
    with tempfile.TemporaryDirectory() as folder:
        files = build(health, Path(folder), args.nodes)
        sizes: dict[str, int] = {}
        for fmt, path in files:
            sizes[fmt] = sizes.get(fmt, 0) + path.stat().st_size
        total = sum(sizes.values())
        best, best_per, tables = run(files)
        for _ in range(args.repeat - 1):
            seconds, per, tables = run(files)
            if seconds < best:
                best, best_per = seconds, per
        started = time.perf_counter()
        verdicts = sum(len(judge_health(table, rules)) for table in tables)
        judged = time.perf_counter() - started
    rate = total / 1e6 / best
    formats: list[dict[str, object]] = []
    for fmt in sorted(sizes, key=lambda f: -sizes[f]):
        count = sum(1 for f, _ in files if f == fmt)
        print(f"{fmt:16s} {count:5d} files {sizes[fmt] / 1e6:7.1f} MB {best_per[fmt]:7.3f} s "
              f"{sizes[fmt] / 1e6 / best_per[fmt]:8.1f} MB/s")
        formats.append({"format": fmt, "files": count, "bytes": sizes[fmt], "seconds": round(best_per[fmt], 3),
                        "mb_per_s": round(sizes[fmt] / 1e6 / best_per[fmt], 1)})
    print(f"{'all':16s} {len(files):5d} files {total / 1e6:7.1f} MB {best:7.3f} s {rate:8.1f} MB/s "
          f"(target {TARGET_MB_PER_S:g}); {verdicts} verdicts judged in {judged:.2f} s")
    report = {
        "schema_version": 1,
        "benchmark": "health",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": processor(),
        "processor_count": os.cpu_count(),
        # the machine is shared: the 1-minute load average before and after (2 cores: 2.0 is fully busy)
        "load_average_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "gauge_s": {"before": speed_before, "after": gauge()},
        "nodes": args.nodes,
        "files": len(files),
        "bytes": total,
        "repeat": args.repeat,
        "seconds": round(best, 3),
        "mb_per_s": round(rate, 1),
        "target_mb_per_s": TARGET_MB_PER_S,
        "met": rate >= TARGET_MB_PER_S,
        "verdicts": verdicts,
        "judge_seconds": round(judged, 3),
        "formats": formats,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
