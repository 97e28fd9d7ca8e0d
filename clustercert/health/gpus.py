"""Verdicts per GPU from an `nvidia-smi -q` report: memory errors and row remapping, reset status, hardware
slowdown, PCIe replays against the node's peers, and NVLink fabric registration."""

from __future__ import annotations

import statistics

from clustercert.health.rules import HealthRules, Rule
from clustercert.health.verdicts import HealthVerdict, Unit
from clustercert.parsers.health.gpus import GpuRecord, GpuReport
from clustercert.verdicts import Status

__all__ = ["judge_gpu_report"]

_HW_SLOWDOWN = ("clocks.hw_slowdown", "clocks.hw_thermal_slowdown", "clocks.hw_power_brake_slowdown")
_HW_NAMES = {"clocks.hw_slowdown": "HW Slowdown", "clocks.hw_thermal_slowdown": "HW Thermal Slowdown",
             "clocks.hw_power_brake_slowdown": "HW Power Brake Slowdown"}
_UNCORRECTABLE = ("dram_uncorrectable", "sram_uncorrectable", "sram_uncorrectable_parity",
                  "sram_uncorrectable_secded", "double_bit")


def judge_gpu_report(report: GpuReport, rules: HealthRules) -> list[HealthVerdict]:
    """Every GPU's verdicts on what its report shows (a check whose readings the report does not print gives no
    verdict: `nvidia-smi -q -d PAGE_RETIREMENT` shows only retired pages)."""
    if not report.gpus:
        return [HealthVerdict(Unit.node(), "gpu.present", Status.ERROR, "the report lists no GPU (`Attached "
                              "GPUs: 0`): nothing to examine", report.file, report.line, rules.fabric.source)]
    out: list[HealthVerdict] = []
    for gpu in report.gpus:
        unit = Unit.of_gpu(gpu.index, gpu.bus_id)
        out += _memory(gpu, unit, report.file, rules)
        out += _reset(gpu, unit, report.file, rules)
        out += _slowdown(gpu, unit, report.file, rules)
        out += _fabric(gpu, unit, report.file, rules)
    out += _replays(report, rules)
    return out


def _verdict(unit: Unit, check: str, rule: Rule, bad: bool, reason: str, file: str, line: int) -> HealthVerdict:
    return HealthVerdict(unit, check, Status(rule.status) if bad else Status.PASS, reason, file, line, rule.source)


def _count(gpu: GpuRecord, scope: str) -> tuple[int | None, int]:
    """The uncorrectable ECC errors of a scope (volatile, aggregate), summed over the kinds the driver prints, with
    the line of the first; None when the report shows none of them."""
    total: int | None = None
    line = gpu.line
    for kind in _UNCORRECTABLE:
        value = gpu.value(f"ecc.{scope}.{kind}")
        if isinstance(value, int):
            if total is None:
                line = gpu.line_of(f"ecc.{scope}.{kind}")
            total = (total or 0) + value
            if value:
                line = gpu.line_of(f"ecc.{scope}.{kind}")
    return total, line


def _memory(gpu: GpuRecord, unit: Unit, file: str, rules: HealthRules) -> list[HealthVerdict]:
    out: list[HealthVerdict] = []
    g = rules.gpu
    volatile, line = _count(gpu, "volatile")
    if volatile is not None:
        out.append(_verdict(unit, "gpu.ecc_volatile_uncorrectable", g.volatile_uncorrectable, volatile > 0,
                            f"{volatile} uncorrectable ECC error(s) since the driver loaded" if volatile else
                            "no uncorrectable ECC error since the driver loaded", file, line))
    aggregate, line = _count(gpu, "aggregate")
    if aggregate is not None:
        out.append(_verdict(unit, "gpu.ecc_aggregate_uncorrectable", g.aggregate_uncorrectable, aggregate > 0,
                            f"{aggregate} uncorrectable ECC error(s) over the GPU's life" if aggregate else
                            "no uncorrectable ECC error over the GPU's life", file, line))
    flags = (("remap.pending", "gpu.remap_pending", g.remap_pending,
              "a remapped row is pending: the GPU needs a reset before the spare row is used",
              "no row remap pending"),
             ("remap.failure", "gpu.remap_failure", g.remap_failure, "a row remap failed",
              "no row remap failure"),
             ("ecc.aggregate.sram_threshold_exceeded", "gpu.sram_threshold_exceeded", g.sram_threshold_exceeded,
              "the SRAM uncorrectable-error threshold is exceeded", "SRAM error threshold not exceeded"),
             ("retired.pending", "gpu.retired_pages_pending", g.retired_pages_pending,
              "a retired page is pending: the GPU needs a reset", "no retired page pending"))
    for key, check, rule, bad, good in flags:
        value = gpu.value(key)
        if isinstance(value, bool):
            detail = ""
            if key == "remap.pending" and value:
                detail = (f" (remapped rows: {gpu.value('remap.correctable')} correctable, "
                          f"{gpu.value('remap.uncorrectable')} uncorrectable)")
            out.append(_verdict(unit, check, rule, value, (bad + detail) if value else good, file,
                                gpu.line_of(key)))
    return out


def _reset(gpu: GpuRecord, unit: Unit, file: str, rules: HealthRules) -> list[HealthVerdict]:
    out = []
    for key, check, rule, bad, good in (
            ("reset.required", "gpu.reset_required", rules.gpu.reset_required, "the driver says the GPU needs a reset",
             "no reset required"),
            ("reset.drain_and_reset_recommended", "gpu.drain_and_reset_recommended",
             rules.gpu.drain_and_reset_recommended, "the driver recommends draining and resetting the GPU",
             "no drain and reset recommended")):
        value = gpu.value(key)
        if isinstance(value, bool):
            out.append(_verdict(unit, check, rule, value, bad if value else good, file, gpu.line_of(key)))
    return out


def _slowdown(gpu: GpuRecord, unit: Unit, file: str, rules: HealthRules) -> list[HealthVerdict]:
    shown = [key for key in _HW_SLOWDOWN if isinstance(gpu.value(key), bool)]
    if not shown:
        return []
    active = [key for key in shown if gpu.value(key) is True]
    if not active:
        return [HealthVerdict(unit, "gpu.hw_slowdown", Status.PASS, "no hardware slowdown active", file,
                              gpu.line_of(shown[0]), rules.gpu.hw_slowdown_idle.source)]
    names = ", ".join(_HW_NAMES[key] for key in active)
    line = gpu.line_of(active[-1])
    util = gpu.value("utilization.gpu")
    power = gpu.value("power.draw")
    load = f"{util:g} % utilization" if isinstance(util, float) else "utilization not shown"
    draw = f", {power:g} W" if isinstance(power, float) else ""
    if gpu.processes == 0 and util in (0.0, None):
        rule = rules.gpu.hw_slowdown_idle
        reason = f"{names} active while idle (no process, {load}{draw})"
    elif gpu.processes is None and util is None:
        rule = rules.gpu.hw_slowdown_busy
        reason = f"{names} active; the report does not show whether the GPU was idle"
    else:
        rule = rules.gpu.hw_slowdown_busy
        reason = f"{names} active under load ({gpu.processes if gpu.processes is not None else '?'} process(es), " \
                 f"{load}{draw})"
    return [HealthVerdict(unit, "gpu.hw_slowdown", Status(rule.status), reason, file, line, rule.source)]


def _is_zero_uuid(uuid: object) -> bool:
    return not isinstance(uuid, str) or not uuid.replace("0", "").replace("-", "")


def _fabric(gpu: GpuRecord, unit: Unit, file: str, rules: HealthRules) -> list[HealthVerdict]:
    f = rules.fabric
    name = gpu.name or ""
    domain = any(product in name for product in f.nvlink_domain_products)
    state = gpu.value("fabric.state")
    if state is None:
        if domain and "name" in gpu.readings:
            return [HealthVerdict(unit, "gpu.fabric", Status.ERROR, f"{name} is an NVLink-domain GPU and its "
                                  "report shows no fabric state: its registration cannot be told", file, gpu.line,
                                  f.nvlink_domain_source)]
        return []  # no NVSwitch fabric on this GPU (A100 PCIe, a VM): nothing to register
    line = gpu.line_of("fabric.state")
    problems = []
    status = gpu.value("fabric.status")
    if state not in f.state_ok:
        problems.append(f"fabric state {state}")
    if status is not None and status not in f.status_ok:
        problems.append(f"fabric status {status}")
    summary = gpu.value("fabric.health.summary")
    if summary is not None and summary not in f.health_ok:
        problems.append(f"fabric health {summary}")
    bandwidth = gpu.value("fabric.health.bandwidth")
    if bandwidth is not None and bandwidth not in f.bandwidth_ok:
        problems.append(f"fabric bandwidth {bandwidth}")
    clique = gpu.value("fabric.clique_id")
    uuid = gpu.value("fabric.cluster_uuid")
    source = f.source
    if domain and not problems and (_is_zero_uuid(uuid) or not clique):
        problems.append(f"not registered in a multi-node NVLink domain (clique {clique}, cluster UUID {uuid})")
        source = f.nvlink_domain_source
    if problems:
        return [HealthVerdict(unit, "gpu.fabric", Status.FAIL, "; ".join(problems), file, line, source)]
    detail = f"fabric {state}/{status}"
    if clique is not None:
        detail += f", clique {clique}" + ("" if _is_zero_uuid(uuid) else f", cluster UUID {uuid}")
        if _is_zero_uuid(uuid):
            detail += " (not in a multi-node NVLink domain)"
    return [HealthVerdict(unit, "gpu.fabric", Status.PASS, detail, file, line, source)]


def _replays(report: GpuReport, rules: HealthRules) -> list[HealthVerdict]:
    """PCIe replays against the node's other GPUs (the counters run since the last reset: peers share uptime)."""
    rule = rules.gpu.pcie_replays
    counted = [(gpu, gpu.value("pcie.replays")) for gpu in report.gpus]
    values = [(gpu, v) for gpu, v in counted if isinstance(v, int)]
    out: list[HealthVerdict] = []
    for gpu in report.gpus:
        rollovers = gpu.value("pcie.replay_rollovers")
        if isinstance(rollovers, int) and rollovers > 0:
            out.append(HealthVerdict(Unit.of_gpu(gpu.index, gpu.bus_id), "gpu.pcie_replay_rollovers",
                                     Status(rules.gpu.pcie_replay_rollovers.status),
                                     f"the PCIe replay counter rolled over {rollovers} time(s)", report.file,
                                     gpu.line_of("pcie.replay_rollovers"), rules.gpu.pcie_replay_rollovers.source))
    if not values:
        return out
    if len(values) < 2:
        gpu, value = values[0]
        return [*out, HealthVerdict(Unit.of_gpu(gpu.index, gpu.bus_id), "gpu.pcie_replays", Status.SKIPPED,
                                    f"{value} PCIe replays since reset; no other GPU on the node to compare with",
                                    report.file, gpu.line_of("pcie.replays"), rule.source)]
    median = statistics.median(v for _, v in values)
    for gpu, value in values:
        far = value >= rule.ratio * median and value - median >= rule.min_excess
        if far:
            times = f"{value / median:.0f}x" if median else "far above"
            reason = f"{value} PCIe replays since reset, {times} the node's median {median:g}"
        else:
            reason = f"{value} PCIe replays since reset (node median {median:g})"
        out.append(HealthVerdict(Unit.of_gpu(gpu.index, gpu.bus_id), "gpu.pcie_replays",
                                 Status(rule.status) if far else Status.PASS, reason, report.file,
                                 gpu.line_of("pcie.replays"), rule.source))
    return out
