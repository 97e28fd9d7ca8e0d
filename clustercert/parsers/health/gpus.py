"""The GPUs of one `nvidia-smi -q` report, text or XML: the readings the health rules judge, each with its line."""

from __future__ import annotations

from dataclasses import dataclass, field

from clustercert.errors import EvidenceError
from clustercert.parsers.health.common import Reading, to_count, to_flag, to_measure

__all__ = ["FIELDS", "GpuRecord", "GpuReport", "bus_id_of", "reading_of"]

# The readings kept, by the name this package gives them, and how each is typed. The text and XML parsers map the
# tool's own names (which differ by driver: `Clocks Throttle Reasons` before 535, `Clocks Event Reasons` after)
# onto these; a reading the report does not print is absent, one printed N/A is None.
FIELDS: dict[str, str] = {
    "name": "text",
    "uuid": "text",
    "serial": "text",
    "minor_number": "count",
    "bus_id": "text",
    "ecc.mode": "text",
    "ecc.volatile.sram_correctable": "count",
    "ecc.volatile.sram_uncorrectable": "count",
    "ecc.volatile.sram_uncorrectable_parity": "count",
    "ecc.volatile.sram_uncorrectable_secded": "count",
    "ecc.volatile.dram_correctable": "count",
    "ecc.volatile.dram_uncorrectable": "count",
    "ecc.aggregate.sram_correctable": "count",
    "ecc.aggregate.sram_uncorrectable": "count",
    "ecc.aggregate.sram_uncorrectable_parity": "count",
    "ecc.aggregate.sram_uncorrectable_secded": "count",
    "ecc.aggregate.dram_correctable": "count",
    "ecc.aggregate.dram_uncorrectable": "count",
    "ecc.aggregate.sram_threshold_exceeded": "flag",
    # drivers before R535 (and Volta) print single/double bit totals instead of SRAM/DRAM
    "ecc.volatile.double_bit": "count",
    "ecc.aggregate.double_bit": "count",
    "retired.single_bit": "count",
    "retired.double_bit": "count",
    "retired.pending": "flag",
    "remap.correctable": "count",
    "remap.uncorrectable": "count",
    "remap.pending": "flag",
    "remap.failure": "flag",
    "clocks.idle": "flag",
    "clocks.applications_clocks_setting": "flag",
    "clocks.sw_power_cap": "flag",
    "clocks.hw_slowdown": "flag",
    "clocks.hw_thermal_slowdown": "flag",
    "clocks.hw_power_brake_slowdown": "flag",
    "clocks.sync_boost": "flag",
    "clocks.sw_thermal_slowdown": "flag",
    "clocks.display_clock_setting": "flag",
    "power.draw": "watts",
    "utilization.gpu": "percent",
    "pcie.replays": "count",
    "pcie.replay_rollovers": "count",
    "fabric.state": "text",
    "fabric.status": "text",
    "fabric.clique_id": "count",
    "fabric.cluster_uuid": "text",
    "fabric.health.summary": "text",
    "fabric.health.bandwidth": "text",
    "fabric.health.route_unhealthy": "text",
    "fabric.health.incorrect_configuration": "text",
    "reset.required": "flag",
    "reset.drain_and_reset_recommended": "flag",
}

_FIX = "Re-capture `nvidia-smi -q` on the node and add the whole output"


def reading_of(key: str, text: str, *, file: str, line: int) -> Reading:
    """The reading `key` of a value as the tool printed it, typed by FIELDS; a value of the wrong kind is located."""
    kind = FIELDS[key]
    value: int | float | bool | str | None
    if kind == "count" and text.isdigit() and len(text) < 20:  # the common case, `0`, read at once
        return Reading(int(text), line, text)
    if kind == "count":
        value = to_count(text, file=file, line=line, field=key, fix=_FIX)
    elif kind == "flag":
        value = to_flag(text, file=file, line=line, field=key, fix=_FIX)
    elif kind == "watts":
        value = to_measure(text, " W", file=file, line=line, field=key, fix=_FIX)
    elif kind == "percent":
        value = to_measure(text, " %", file=file, line=line, field=key, fix=_FIX)
    else:
        shown = text.strip()
        value = None if shown in ("N/A", "[N/A]", "") else shown
    return Reading(value, line, text.strip())


@dataclass(frozen=True)
class GpuRecord:
    """One GPU of a report: its index (the order nvidia-smi lists it in, which is its index), bus id and readings."""

    index: int
    bus_id: str
    line: int
    readings: dict[str, Reading]
    # processes listed on the GPU: 0 for `Processes : None`, None when the report does not show them (`-d`)
    processes: int | None = None
    processes_line: int | None = None

    def value(self, key: str) -> int | float | bool | str | None:
        """The typed value of a reading, None when absent or printed N/A."""
        found = self.readings.get(key)
        return None if found is None else found.value

    def line_of(self, key: str) -> int:
        """The line of a reading, else the GPU's own line."""
        found = self.readings.get(key)
        return self.line if found is None else found.line

    @property
    def name(self) -> str | None:
        value = self.value("name")
        return value if isinstance(value, str) else None

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "bus_id": self.bus_id,
            "line": self.line,
            "processes": self.processes,
            "processes_line": self.processes_line,
            "readings": {key: reading.to_json() for key, reading in sorted(self.readings.items())},
        }


@dataclass(frozen=True)
class GpuReport:
    """One `nvidia-smi -q` report (`source` says text or XML): its header and its GPUs in index order."""

    file: str
    source: str
    line: int
    last_line: int
    attached_gpus: int
    gpus: list[GpuRecord]
    driver_version: str | None = None
    cuda_version: str | None = None
    timestamp: str | None = None
    # the `-d` sections the report was limited to, when it was (`nvidia-smi -q -d PAGE_RETIREMENT`), else empty
    displayed: list[str] = field(default_factory=list)
    # the line of `Attached GPUs` (<attached_gpus>): where the GPU count is printed
    attached_line: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "source": self.source,
            "line": self.line,
            "last_line": self.last_line,
            "attached_gpus": self.attached_gpus,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "timestamp": self.timestamp,
            "displayed": self.displayed,
            "gpus": [gpu.to_json() for gpu in self.gpus],
        }


def bus_id_of(text: str, *, file: str, line: int) -> str:
    """A GPU's PCI bus id as nvidia-smi prints it (`00000000:19:00.0`), upper-case hex; anything else is located."""
    value = text.strip()
    parts = value.split(":")
    if len(parts) == 3 and all(parts) and "." in parts[2] and all(
            c in "0123456789abcdefABCDEF." for c in value.replace(":", "")) and len(value) <= 20:
        return value.upper()
    raise EvidenceError(file, f"expected a PCI bus id like 00000000:19:00.0, got {value[:40]!r}. {_FIX}", line=line)
