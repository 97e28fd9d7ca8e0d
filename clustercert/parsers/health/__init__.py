"""Node-health evidence: one module per tool output format, each turning a file into a table that keeps
file and line; HEALTH_FORMATS names them, HEALTH_DETECT tells them apart by content."""

from __future__ import annotations

import re
from collections.abc import Callable

from clustercert.parsers.health.dcgm_diag import DiagRun, parse_dcgm_diag
from clustercert.parsers.health.dcgmi_nvlink import parse_dcgmi_nvlink
from clustercert.parsers.health.fabric_manager import FabricManagerLog, parse_fabric_manager
from clustercert.parsers.health.gpus import GpuRecord, GpuReport
from clustercert.parsers.health.ibstat import IbPort, IbPorts, parse_ibstat
from clustercert.parsers.health.ibstatus import parse_ibstatus
from clustercert.parsers.health.kernel_log import KernelLog, parse_kernel_log
from clustercert.parsers.health.nvlink import NvlinkStatus, parse_nvlink_status
from clustercert.parsers.health.nvsmi_text import HEADER as NVSMI_HEADER
from clustercert.parsers.health.nvsmi_text import parse_nvsmi_text
from clustercert.parsers.health.nvsmi_xml import parse_nvsmi_xml
from clustercert.parsers.health.prescreen import BANNER, START, Prescreen, parse_prescreen
from clustercert.parsers.health.topo import TopoMatrix, parse_topo

__all__ = [
    "HEALTH_DETECT",
    "HEALTH_FORMATS",
    "KERNEL_LOG_DETECT",
    "DiagRun",
    "FabricManagerLog",
    "GpuRecord",
    "GpuReport",
    "IbPort",
    "IbPorts",
    "KernelLog",
    "NvlinkStatus",
    "Prescreen",
    "TopoMatrix",
]

# format name -> parser; each takes (path, display, *, limit) like every parser of the package above
HEALTH_FORMATS: dict[str, Callable[..., object]] = {
    "prescreen": parse_prescreen,
    "nvidia-smi-q": parse_nvsmi_text,
    "nvidia-smi-xml": parse_nvsmi_xml,
    "dcgmi-diag": parse_dcgm_diag,
    "dcgmi-nvlink": parse_dcgmi_nvlink,
    "nvlink-status": parse_nvlink_status,
    "ibstat": parse_ibstat,
    "ibstatus": parse_ibstatus,
    "nvidia-smi-topo": parse_topo,
    "fabric-manager": parse_fabric_manager,
    "kernel-log": parse_kernel_log,
}

# Each detector is linear in the text: literal finds, or a pattern anchored at a line start whose repeats cannot
# overlap (a 1 MB line of the wrong shape is one failed match, never a scan restarted at each offset).
_DIAG = re.compile(r"^\| Diagnostic {2,}\| Result {2,}\|", re.MULTILINE)
_NVLINK_GPU = re.compile(r"^GPU \d{1,4}: [^\n]*\n(?:[ \t]+Link \d{1,3}: |NVML: )", re.MULTILINE)
_IBSTAT = re.compile(r"^CA '[^'\n]{1,64}'\n[ \t]+CA type: ", re.MULTILINE)
_IBSTATUS = re.compile(r"^Infiniband device '[^'\n]{1,64}' port \d{1,4} status:", re.MULTILINE)
_TOPO = re.compile(r"^[ \t]+GPU0[ \t][^\n]*CPU Affinity", re.MULTILINE)
_FABRIC_MANAGER = re.compile(r"^\[[A-Z][a-z]{2} \d\d \d{4} \d\d:\d\d:\d\d\] \[[A-Z]{4,7}\] \[tid \d+\] ",
                             re.MULTILINE)
_KERNEL_FIRST = re.compile(r"\s*(?:\w{1,8} *:\w{1,8} *: )?(?:\[ *\d+\.\d+\]|\[[A-Z][a-z]{2} [A-Z][a-z]{2} "
                           r"[ \d]\d \d\d:\d\d:\d\d \d{4}\]|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|[A-Z][a-z]{2} [ \d]\d "
                           r"\d\d:\d\d:\d\d )")

HEALTH_DETECT: list[tuple[str, Callable[[str], object]]] = [
    # the prescreen holds several of the outputs below: told first
    ("prescreen", lambda text: f"{BANNER}\n{START}\n{BANNER}" in text),
    ("nvidia-smi-xml", lambda text: "<nvidia_smi_log>" in text),
    ("nvidia-smi-q", lambda text: NVSMI_HEADER in text),
    ("dcgmi-diag", _DIAG.search),
    ("dcgmi-nvlink", lambda text: "NvLink Link Status" in text),
    ("nvlink-status", _NVLINK_GPU.search),
    ("ibstat", lambda text: _IBSTAT.search(text) or "\nibpanic: " in text or text.startswith("ibpanic: ")),
    ("ibstatus", _IBSTATUS.search),
    ("nvidia-smi-topo", _TOPO.search),
    ("fabric-manager", _FABRIC_MANAGER.search),
]
# a kernel log is told last, after every other format: its first line's time stamp, and the driver's or the
# network's lines in it
KERNEL_LOG_DETECT: tuple[str, Callable[[str], object]] = (
    "kernel-log",
    lambda text: _KERNEL_FIRST.match(text) is not None and ("NVRM: " in text or " carrier" in text
                                                            or " kernel: " in text))
