"""Every verdict one parsed health table gives, whatever its format; the prescreen's steps judged as their own
tools' outputs, a step that failed or could not be read an ERROR, a step missing SKIPPED."""

from __future__ import annotations

from clustercert.health.gpus import judge_gpu_report
from clustercert.health.links import judge_ib_ports, judge_link_flaps, judge_nvlink, judge_topology
from clustercert.health.logs import judge_dcgm_diag, judge_fabric_manager, judge_xids
from clustercert.health.rules import HealthRules
from clustercert.health.verdicts import HealthVerdict, Unit
from clustercert.parsers.health.dcgm_diag import DiagRun
from clustercert.parsers.health.fabric_manager import FabricManagerLog
from clustercert.parsers.health.gpus import GpuReport
from clustercert.parsers.health.ibstat import IbPorts
from clustercert.parsers.health.kernel_log import KernelLog
from clustercert.parsers.health.nvlink import NvlinkStatus
from clustercert.parsers.health.prescreen import Prescreen
from clustercert.parsers.health.topo import TopoMatrix
from clustercert.verdicts import Status

__all__ = ["PRESCREEN_STEPS", "judge_health", "judge_prescreen"]

# the prescreen's steps whose output is judged here, and what each covers
PRESCREEN_STEPS = {"8a": "nvidia-smi -q", "8b": "nvidia-smi topo -m", "8d": "nvidia-smi nvlink -s",
                   "10b": "InfiniBand port states"}


def judge_health(table: object, rules: HealthRules) -> list[HealthVerdict]:
    """The verdicts of one parsed health table (any type a health parser returns)."""
    if isinstance(table, GpuReport):
        return judge_gpu_report(table, rules)
    if isinstance(table, DiagRun):
        return judge_dcgm_diag(table, rules)
    if isinstance(table, KernelLog):
        verdicts = judge_xids(table, rules) + judge_link_flaps(table, rules)
        host = table.hosts[0] if len(table.hosts) == 1 else None
        return [v.on_node(host) for v in verdicts]
    if isinstance(table, FabricManagerLog):
        return judge_fabric_manager(table, rules)
    if isinstance(table, IbPorts):
        return judge_ib_ports(table, rules)
    if isinstance(table, NvlinkStatus):
        return judge_nvlink(table, rules)
    if isinstance(table, TopoMatrix):
        return judge_topology(table, rules)
    if isinstance(table, Prescreen):
        return judge_prescreen(table, rules)
    raise TypeError(f"judge_health: no judge for {type(table).__name__}")


def judge_prescreen(prescreen: Prescreen, rules: HealthRules) -> list[HealthVerdict]:
    """The verdicts of the steps read, on the node the prescreen names."""
    out: list[HealthVerdict] = []
    for table in (prescreen.gpus, prescreen.topo, prescreen.nvlink, prescreen.ib_ports):
        if table is not None:
            out += judge_health(table, rules)
    r = rules.prescreen
    for step, what in PRESCREEN_STEPS.items():
        found = prescreen.step(step)
        unit = Unit.node(f"prescreen step {step} ({what})")
        if found is None:
            out.append(HealthVerdict(unit, "prescreen.step", Status(r.step_missing), f"the prescreen output has no "
                                     f"step {step}: {what} was not examined", prescreen.file, prescreen.line,
                                     r.source))
        elif found.exit_code is not None:
            out.append(HealthVerdict(unit, "prescreen.step", Status(r.step_failed), f"step {step} ({found.title}) "
                                     f"failed with exit code {found.exit_code}: {what} could not run",
                                     prescreen.file, found.line, r.source))
        elif found.error is not None:
            out.append(HealthVerdict(unit, "prescreen.step", Status(r.step_unreadable), f"step {step}'s output could "
                                     f"not be read: {found.error}", prescreen.file, found.error_line or found.line,
                                     r.source))
    return [v.on_node(prescreen.host) for v in out]
