"""A health verdict: one unit (a node, a GPU, an NVLink, a port, an NVSwitch, an interface), its status, why,
and the file and line of its evidence."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from clustercert.verdicts import Status

__all__ = ["HealthVerdict", "Unit", "UnitKind", "bus_id_of_pci", "worst"]

_ORDER = (Status.PASS, Status.SKIPPED, Status.WARN, Status.ERROR, Status.FAIL)


class UnitKind(StrEnum):
    NODE = "node"
    GPU = "gpu"
    NVLINK = "nvlink"
    PORT = "port"
    NVSWITCH = "nvswitch"
    INTERFACE = "interface"


@dataclass(frozen=True)
class Unit:
    """What a verdict is about; `name` is how a person reads it (`GPU 3 (00000000:4C:00.0)`, `GPU 0 link 7`,
    `mlx5_2 port 1`), the other fields say it for a program."""

    kind: UnitKind
    name: str
    gpu: int | None = None
    bus_id: str | None = None
    link: int | None = None
    port: str | None = None

    @classmethod
    def node(cls, what: str = "node") -> Unit:
        return cls(UnitKind.NODE, what)

    @classmethod
    def of_gpu(cls, index: int | None, bus_id: str | None) -> Unit:
        if index is None:
            return cls(UnitKind.GPU, f"GPU {bus_id}", bus_id=bus_id)
        return cls(UnitKind.GPU, f"GPU {index}" + (f" ({bus_id})" if bus_id else ""), gpu=index, bus_id=bus_id)

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind.value, "name": self.name, "gpu": self.gpu, "bus_id": self.bus_id,
                "link": self.link, "port": self.port}


@dataclass(frozen=True)
class HealthVerdict:
    """One unit's verdict on one check (`check` is stable: `gpu.remap_pending`, `xid`, `dcgm.gpu_memory`), the
    reason in words, where its evidence is, and the rules' source for it; `node` where the evidence names it."""

    unit: Unit
    check: str
    status: Status
    reason: str
    file: str
    line: int
    source: str
    node: str | None = None

    def on_node(self, node: str | None) -> HealthVerdict:
        return self if node is None else replace(self, node=node)

    def to_json(self) -> dict[str, object]:
        return {"unit": self.unit.to_json(), "check": self.check, "status": self.status.value,
                "reason": self.reason, "file": self.file, "line": self.line, "source": self.source,
                "node": self.node}


def worst(statuses: list[Status]) -> Status:
    """The most severe of `statuses` (FAIL > ERROR > WARN > SKIPPED > PASS); PASS for none."""
    return max(statuses, key=_ORDER.index, default=Status.PASS)


def bus_id_of_pci(pci: str) -> str:
    """The nvidia-smi bus id (`00000000:19:00.0`) of the address a kernel log prints (`0000:19:00`), function 0."""
    domain, _, rest = pci.partition(":")
    return f"{domain.zfill(8)}:{rest}.0".upper()
