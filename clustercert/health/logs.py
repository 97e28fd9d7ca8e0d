"""Verdicts from logs and diagnostics: Xids per GPU by what NVIDIA's catalog says they mean, fabric manager
errors per NVSwitch, and each DCGM diagnostic test per GPU (a skipped test is SKIPPED, never a pass)."""

from __future__ import annotations

import re
from collections import Counter

from clustercert.health.rules import HealthRules
from clustercert.health.verdicts import HealthVerdict, Unit, UnitKind, bus_id_of_pci
from clustercert.parsers.health.dcgm_diag import DiagRun, DiagTest
from clustercert.parsers.health.fabric_manager import FabricManagerLog
from clustercert.parsers.health.kernel_log import KernelLog, XidEvent
from clustercert.verdicts import Status

__all__ = ["judge_dcgm_diag", "judge_fabric_manager", "judge_xids", "xid_status"]

_RECOVERY = re.compile(r"\bto 0x[0-9A-Fa-f]+ (\([^)]*\))")


def xid_status(event: XidEvent, rules: HealthRules) -> tuple[Status, str]:
    """An Xid's verdict and how the catalog names it; an Xid the catalog does not list cannot be judged."""
    rule = rules.xid_rule(event.xid)
    if rule is None:
        return Status(rules.xid.unknown), f"Xid {event.xid} (not in the rules' copy of NVIDIA's catalog)"
    status = Status(rule.status)
    if rule.action == "XID_154":  # the line names the recovery action it asks for
        asked = _RECOVERY.search(event.message)
        if asked is not None and asked.group(1) in rules.xid.recovery_none:
            status = Status.PASS
    return status, f"Xid {event.xid} ({rule.description}: {rule.action})"


def judge_xids(log: KernelLog, rules: HealthRules) -> list[HealthVerdict]:
    """Per GPU, one verdict for each status its Xids get, listing them with their counts; the line is the first of
    that group. A log without Xid passes the node."""
    if not log.xids:
        return [HealthVerdict(Unit.node("GPUs (kernel log)"), "xid", Status.PASS,
                              f"no Xid in the log ({log.first_stamp} to {log.last_stamp})", log.file, log.line,
                              rules.xid.source)]
    out: list[HealthVerdict] = []
    for pci in sorted({x.pci for x in log.xids}):
        groups: dict[Status, list[tuple[XidEvent, str]]] = {}
        for event in (x for x in log.xids if x.pci == pci):
            status, name = xid_status(event, rules)
            groups.setdefault(status, []).append((event, name))
        bus_id = bus_id_of_pci(pci)
        unit = Unit.of_gpu(None, bus_id)
        for status, events in groups.items():
            counts = Counter(name for _, name in events)
            names = ", ".join(f"{name} x{n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            first = events[0][0]
            reason = f"{names}; first at {first.stamp}: {first.message[:160]}"
            out.append(HealthVerdict(unit, "xid", status, reason, log.file, first.line, rules.xid.source))
    return out


def judge_fabric_manager(log: FabricManagerLog, rules: HealthRules) -> list[HealthVerdict]:
    """Each NVSwitch port with SXid errors (fatal FAIL, non-fatal WARN), each other warning or error message with
    its count; a log with none passes the node."""
    r = rules.fabric_manager
    if not log.entries:
        total = sum(log.levels.values())
        return [HealthVerdict(Unit.node("fabric manager"), "fabric_manager", Status.PASS,
                              f"no warning or error in {total} entries ({log.first_stamp} to {log.last_stamp})",
                              log.file, log.line, r.source)]
    grouped: dict[tuple[str, str], list[int]] = {}
    firsts: dict[tuple[str, str], tuple[Unit, Status, str]] = {}
    for entry in log.entries:
        if entry.sxid is not None:
            unit = Unit(UnitKind.NVSWITCH, f"NVSwitch {entry.switch_pci} (physical id {entry.switch_physical_id}) "
                        f"port {entry.port}", port=str(entry.port))
            status = Status(r.fatal_sxid if entry.fatal else r.non_fatal_sxid)
            what = f"{'fatal' if entry.fatal else 'non-fatal'} SXid {entry.sxid}"
            key = (unit.name, what)
        else:
            unit = Unit.node("fabric manager")
            status = Status({"FATAL": r.fatal_entry, "ERROR": r.error_entry}.get(entry.level, r.warning_entry))
            what = f"[{entry.level}] {entry.message[:160]}"
            key = (unit.name, what)
        grouped.setdefault(key, []).append(entry.line)
        firsts.setdefault(key, (unit, status, entry.stamp))
    out = []
    for key, lines in grouped.items():
        unit, status, stamp = firsts[key]
        times = f" x{len(lines)}" if len(lines) > 1 else ""
        out.append(HealthVerdict(unit, "fabric_manager", status, f"{key[1]}{times}, first at {stamp}", log.file,
                                 lines[0], r.source))
    return out


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _why(test: DiagTest, gpu: int | None, result: str) -> str:
    """The result in DCGM's words, with the messages it printed for this GPU (or for all)."""
    said = [m for m in test.messages if m.gpu is None or gpu is None or m.gpu == gpu]
    text = "; ".join(f"{m.kind}: {m.text[:300]}" for m in said)
    if result in ("Skip", "Not Run"):
        return f"{test.name}: {result} ({text or 'DCGM printed no reason'}): not run, so not passed"
    if result == "Error":
        return f"{test.name}: Error ({text or 'DCGM printed no reason'}): could not run"
    return f"{test.name}: {result}" + (f" ({text})" if text else "")


def judge_dcgm_diag(run: DiagRun, rules: HealthRules) -> list[HealthVerdict]:
    """Each test per GPU (per node for the Deployment checks, and where the output does not say how many GPUs
    ran); a run that could not start is an ERROR."""
    r = rules.dcgm
    if run.error is not None:
        return [HealthVerdict(Unit.node("dcgmi diag"), "dcgm.run", Status.ERROR,
                              f"dcgmi diag could not run: {run.error}", run.file, run.error_line or run.line,
                              r.source)]
    out: list[HealthVerdict] = []
    for test in run.tests:
        check = f"dcgm.{_slug(test.name)}"
        if test.category == "Deployment" or (test.all_gpus and run.gpu_count is None):
            what = "all GPUs" if test.category != "Deployment" else "node"
            out.append(HealthVerdict(Unit.node(f"dcgmi diag ({what})"), check, Status(r.results[test.result]),
                                     _why(test, None, test.result), run.file, test.line, r.source))
            continue
        gpus = range(run.gpu_count) if test.all_gpus and run.gpu_count is not None else sorted(test.per_gpu)
        for gpu in gpus:
            result = test.per_gpu.get(gpu, test.result)
            line = next((m.line for m in test.messages if m.gpu == gpu), test.line)
            out.append(HealthVerdict(Unit.of_gpu(gpu, None), check, Status(r.results[result]),
                                     _why(test, gpu, result), run.file, line, r.source))
    return out
