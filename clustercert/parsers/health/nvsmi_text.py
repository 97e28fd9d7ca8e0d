"""`nvidia-smi -q` (and `-a`, and `-q -d SECTION`) text reports, as drivers R470 to R580 print them."""

from __future__ import annotations

import re
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import LineCounter, Reading, read_tool_text
from clustercert.parsers.health.gpus import GpuRecord, GpuReport, bus_id_of, reading_of

__all__ = ["HEADER", "parse_nvsmi_text", "parse_nvsmi_text_of"]

HEADER = "==============NVSMI LOG=============="
_FIX = "Re-capture `nvidia-smi -q` on the node and add the whole output"
# Line patterns start with their line's `\n` (its first line is never one of these): the scan for that literal runs
# at C speed, where `^` in MULTILINE mode is tried at every offset. A match's line is that of start() + 1.
_GPU = re.compile(r"\nGPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])[ \t]*(?=\n|\Z)")
_HEAD_FIELD = re.compile(r"^(Timestamp|Driver Version|CUDA Version|Attached GPUs)[ \t]*:[ \t]*([^\n]*)$",
                         re.MULTILINE)
# a GPU's own lines (four spaces in): its readings and the headings of its sections
_TOP = re.compile(r"\n    ([^ \n][^\n]*)")
# a section's lines: indent, key (up to its colon: no pattern rescans a long run of spaces), `: value` if any
_BODY = re.compile(r"\n( {8,64})([^ \n:][^:\n]*)(:[^\n]*)?(?=\n|\Z)")

# The tool's names of the readings kept (section, sub-section..., key) -> FIELDS name. R535 renamed `Clocks Throttle
# Reasons` to `Clocks Event Reasons` and `Power Readings` to `GPU Power Readings`; both spellings are read.
_PATHS: dict[tuple[str, ...], str] = {
    ("Product Name",): "name",
    ("GPU UUID",): "uuid",
    ("Serial Number",): "serial",
    ("Minor Number",): "minor_number",
    ("PCI", "Bus Id"): "bus_id",
    ("PCI", "Replays Since Reset"): "pcie.replays",
    ("PCI", "Replay Number Rollovers"): "pcie.replay_rollovers",
    ("ECC Mode", "Current"): "ecc.mode",
    ("Retired Pages", "Single Bit ECC"): "retired.single_bit",
    ("Retired Pages", "Double Bit ECC"): "retired.double_bit",
    ("Retired Pages", "Pending Page Blacklist"): "retired.pending",
    ("Retired Pages", "Pending Page Retirement"): "retired.pending",
    ("Retired Pages", "Pending"): "retired.pending",
    ("Remapped Rows", "Correctable Error"): "remap.correctable",
    ("Remapped Rows", "Uncorrectable Error"): "remap.uncorrectable",
    ("Remapped Rows", "Pending"): "remap.pending",
    ("Remapped Rows", "Remapping Failure Occurred"): "remap.failure",
    ("GPU Power Readings", "Power Draw"): "power.draw",
    ("Power Readings", "Power Draw"): "power.draw",
    ("Utilization", "Gpu"): "utilization.gpu",
    ("Fabric", "State"): "fabric.state",
    ("Fabric", "Status"): "fabric.status",
    ("Fabric", "CliqueId"): "fabric.clique_id",
    ("Fabric", "ClusterUUID"): "fabric.cluster_uuid",
    ("Fabric", "Health", "Summary"): "fabric.health.summary",
    ("Fabric", "Health", "Bandwidth"): "fabric.health.bandwidth",
    ("Fabric", "Health", "Route Unhealthy"): "fabric.health.route_unhealthy",
    ("Fabric", "Health", "Incorrect Configuration"): "fabric.health.incorrect_configuration",
    ("GPU Reset Status", "Reset Required"): "reset.required",
    ("GPU Reset Status", "Drain and Reset Recommended"): "reset.drain_and_reset_recommended",
}
for _scope in ("Volatile", "Aggregate"):
    for _name, _key in (("SRAM Correctable", "sram_correctable"), ("SRAM Uncorrectable", "sram_uncorrectable"),
                        ("SRAM Uncorrectable Parity", "sram_uncorrectable_parity"),
                        ("SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded"),
                        ("DRAM Correctable", "dram_correctable"), ("DRAM Uncorrectable", "dram_uncorrectable"),
                        ("SRAM Threshold Exceeded", "sram_threshold_exceeded")):
        if _scope == "Aggregate" or _key != "sram_threshold_exceeded":
            _PATHS[("ECC Errors", _scope, _name)] = f"ecc.{_scope.lower()}.{_key}"
    _PATHS[("ECC Errors", _scope, "Double Bit", "Total")] = f"ecc.{_scope.lower()}.double_bit"
for _heading in ("Clocks Event Reasons", "Clocks Throttle Reasons"):
    for _name, _key in (("Idle", "idle"), ("Applications Clocks Setting", "applications_clocks_setting"),
                        ("SW Power Cap", "sw_power_cap"), ("HW Slowdown", "hw_slowdown"),
                        ("Sync Boost", "sync_boost"), ("SW Thermal Slowdown", "sw_thermal_slowdown"),
                        ("Display Clock Setting", "display_clock_setting")):
        _PATHS[(_heading, _name)] = f"clocks.{_key}"
    _PATHS[(_heading, "HW Slowdown", "HW Thermal Slowdown")] = "clocks.hw_thermal_slowdown"
    _PATHS[(_heading, "HW Slowdown", "HW Power Brake Slowdown")] = "clocks.hw_power_brake_slowdown"
_SECTIONS = frozenset(path[0] for path in _PATHS if len(path) > 1)
# A section whose kept readings all sit right under its heading (PCI: 3 of its 25 lines) is read by one pattern of
# those keys at that depth; the others (ECC errors, clocks, fabric: readings under sub-headings) by _BODY.
_FLAT: dict[str, re.Pattern[str]] = {
    section: re.compile(r"\n        (" + "|".join(re.escape(key) for key in sorted(
        (path[1] for path in _PATHS if path[0] == section), key=len, reverse=True)) + r") *:([^\n]*)")
    for section in _SECTIONS if all(len(path) == 2 for path in _PATHS if path[0] == section)}

# What a section printed in full holds: a report cut inside one of these is refused rather than read as clean
_COMPLETE: dict[str, tuple[str, ...]] = {
    "Retired Pages": ("retired.single_bit", "retired.double_bit", "retired.pending"),
    "Remapped Rows": ("remap.correctable", "remap.uncorrectable", "remap.pending", "remap.failure"),
    "Fabric": ("fabric.state", "fabric.status"),
    "GPU Reset Status": ("reset.required",),
}


def parse_nvsmi_text(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> GpuReport:
    """Every GPU of an `nvidia-smi -q` text report with the readings the health rules judge."""
    text = read_tool_text(path, display, limit=limit, what="`nvidia-smi -q` output")
    return parse_nvsmi_text_of(text, display)


def parse_nvsmi_text_of(text: str, display: str, *, first_line: int = 1) -> GpuReport:
    """parse_nvsmi_text() of a report's text; `first_line` is the file line the text starts at (a prescreen's
    section)."""
    lines = LineCounter(text, first_line)
    start = text.find(HEADER)
    if start < 0:
        raise EvidenceError(display, f"expected `nvidia-smi -q` output (its `{HEADER}` line), got none. {_FIX}",
                            line=first_line)
    report_line = lines.line_at(start)
    heads = list(_GPU.finditer(text, start))
    head_end = heads[0].start() if heads else len(text)
    found = {m.group(1): (m.group(2).strip(), m.start()) for m in _HEAD_FIELD.finditer(text, start, head_end)}
    if "Attached GPUs" not in found:
        raise EvidenceError(display, f"expected an `Attached GPUs` line after `{HEADER}`, got none. {_FIX}",
                            line=report_line)
    attached_text, attached_at = found["Attached GPUs"]
    attached_line = lines.line_at(attached_at)
    if not attached_text.isdigit() or len(attached_text) > 6:
        raise EvidenceError(display, f"expected the number of attached GPUs, got {attached_text[:40]!r}. {_FIX}",
                            line=attached_line)
    attached = int(attached_text)
    if len(heads) != attached:  # counted before any is read: a report cut short, or one of a million headers
        last_line = lines.line_at(len(text.rstrip("\n")))
        raise EvidenceError(
            display, f"expected {attached} GPU sections (`Attached GPUs` at line {attached_line}), got "
            f"{len(heads)}: the report ends at line {last_line}, cut short. {_FIX}", line=last_line)
    gpus = [_gpu(text, display, lines, i, head, heads[i + 1].start() if i + 1 < len(heads) else len(text))
            for i, head in enumerate(heads)]
    last_line = lines.line_at(len(text.rstrip("\n")))
    full = any("name" in gpu.readings for gpu in gpus)
    displayed: list[str] = []
    if gpus and not full:  # `nvidia-smi -q -d ...`: every GPU shows the same sections
        displayed = sorted(_headings(text, heads[0].end(), heads[1].start() if len(heads) > 1 else len(text)))
    for gpu in gpus:
        if full and gpu.processes_line is None:
            raise EvidenceError(
                display, f"expected GPU {gpu.bus_id}'s report to end with its `Processes` entry, got none: the "
                f"report looks cut short. {_FIX}", line=last_line if gpu is gpus[-1] else gpu.line)
    if displayed and len(heads) > 1:
        last = _headings(text, heads[-1].end(), len(text))
        missing = [name for name in displayed if name not in last]
        if missing:
            raise EvidenceError(display, f"expected GPU {gpus[-1].bus_id} to show {', '.join(missing)} as the "
                                f"others do, got none: the report looks cut short. {_FIX}", line=last_line)
    return GpuReport(
        file=display, source="nvidia-smi -q", line=report_line, last_line=last_line,
        attached_gpus=attached, gpus=gpus,
        driver_version=found.get("Driver Version", (None, 0))[0],
        cuda_version=found.get("CUDA Version", (None, 0))[0],
        timestamp=found.get("Timestamp", (None, 0))[0], displayed=displayed, attached_line=attached_line)


def _headings(text: str, start: int, end: int) -> set[str]:
    """The section headings among a GPU's own lines."""
    return {m.group(1).strip() for m in _TOP.finditer(text, start, end) if ":" not in m.group(1)}


def _gpu(text: str, display: str, lines: LineCounter, index: int, head: re.Match[str], end: int) -> GpuRecord:
    """One GPU's block: its own readings, and the lines of the sections the rules read (only those are walked)."""
    gpu_line = lines.line_at(head.start() + 1)
    bus_id = bus_id_of(head.group(1), file=display, line=gpu_line)
    readings: dict[str, Reading] = {}
    processes: int | None = None
    processes_line: int | None = None
    tops = list(_TOP.finditer(text, head.end(), end))
    for j, top in enumerate(tops):
        own = top.group(1)
        name, colon, value = own.partition(":")
        name = name.strip()
        at = top.start() + 1
        if colon:
            if name == "Processes":
                processes, processes_line = (0 if value.strip() == "None" else None), lines.line_at(at)
                continue
            key = _PATHS.get((name,))
            if key is not None:
                readings[key] = reading_of(key, value, file=display, line=lines.line_at(at))
            continue
        if name not in _SECTIONS and name != "Processes":
            continue
        body_end = tops[j + 1].start() if j + 1 < len(tops) else end
        if name == "Processes":
            processes_line = lines.line_at(at)
            processes = text.count("\n        Process ID", top.end(), body_end)
            continue
        _section(text, display, lines, name, top.end(), body_end, readings)
        required = _COMPLETE.get(name, ())
        missing = [key for key in required if key not in readings]
        if missing:
            raise EvidenceError(
                display, f"expected GPU {bus_id}'s `{name}` section to show {', '.join(missing)}, got a section "
                f"that ends at line {lines.line_at(body_end)}: cut short or garbled. {_FIX}",
                line=lines.line_at(at))
    return GpuRecord(index=index, bus_id=bus_id, line=gpu_line, readings=readings, processes=processes,
                     processes_line=processes_line)


def _section(text: str, display: str, lines: LineCounter, name: str, start: int, end: int,
             readings: dict[str, Reading]) -> None:
    """The readings of one section: its lines nest by four spaces under the section's heading (one pattern finds
    them at C speed; each line's key is looked up with the headings above it)."""
    flat = _FLAT.get(name)
    if flat is not None:
        for found in flat.finditer(text, start, end):
            field = _PATHS[(name, found.group(1))]
            readings[field] = reading_of(field, found.group(2).strip(), file=display,
                                         line=lines.line_at(found.start() + 1))
        return
    path: list[str] = [name]
    for found in _BODY.finditer(text, start, end):
        indent, key, value = found.groups()
        depth = len(indent) // 4 - 1  # 1: right under the heading
        del path[depth:]
        if len(path) == depth:
            path.append(key.rstrip())
            if value is not None:
                kept = _PATHS.get(tuple(path))
                if kept is not None:
                    readings[kept] = reading_of(kept, value[1:].strip(), file=display,
                                                line=lines.line_at(found.start() + 1))
