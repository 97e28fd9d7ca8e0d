"""The simulated cluster's topology: racks or nodes, GPUs per node, NVLink domains, spares."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["System", "Topology", "build_topology", "compress_hostlist"]


class System(StrEnum):
    """The systems the simulator models."""

    GB200_NVL72 = "gb200-nvl72"
    H100_SXM = "h100-sxm"


@dataclass(frozen=True)
class Topology:
    """Nodes in order, grouped into NVLink domains; `allocation` is the certification's nodes, the rest spares."""

    system: System
    gpus_per_node: int
    domains: tuple[tuple[str, tuple[str, ...]], ...]  # (name, nodes)
    allocation: tuple[str, ...]
    device_name: str  # as nccl-tests prints it
    catalog: str
    nics_per_node: int

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for _, nodes in self.domains for n in nodes)

    @property
    def spares(self) -> tuple[str, ...]:
        used = set(self.allocation)
        return tuple(n for n in self.nodes if n not in used)

    def domain_of(self, node: str) -> str:
        for name, nodes in self.domains:
            if node in nodes:
                return name
        raise KeyError(node)

    def allocation_of(self, gpus: int) -> tuple[str, ...]:
        """The first `gpus` GPUs' nodes, spread evenly over the domains the allocation uses (GB200: racks)."""
        count = gpus // self.gpus_per_node
        if self.system is System.H100_SXM:
            return self.allocation[:count]
        per_domain: dict[str, list[str]] = {}
        for node in self.allocation:
            per_domain.setdefault(self.domain_of(node), []).append(node)
        used_per_domain = max(len(v) for v in per_domain.values())
        domains = max(1, count // used_per_domain) if count >= used_per_domain else 1
        take = count // domains
        out = [n for nodes in list(per_domain.values())[:domains] for n in nodes[:take]]
        return tuple(out)


def build_topology(system: System, gpus: int) -> Topology:
    """GB200 NVL72: racks of 18 trays x 4 GPUs, 16 used per rack, 2 spares; H100: 8-GPU nodes and 4 spares."""
    if system is System.GB200_NVL72:
        used_per_rack = 16
        racks = max(1, -(-gpus // (used_per_rack * 4)))
        domains = tuple(
            (f"rack{r}", tuple(f"gb-r{r}-n{n:02d}" for n in range(1, 19))) for r in range(1, racks + 1)
        )
        allocation = tuple(n for _, nodes in domains for n in nodes[:used_per_rack])[: gpus // 4]
        return Topology(system, 4, domains, allocation, "NVIDIA GB200", "exemplar-gb200", 4)
    count = -(-gpus // 8)
    names = tuple(f"h100-n{i:04d}" for i in range(1, count + 5))
    return Topology(
        system, 8, tuple((n, (n,)) for n in names), names[:count], "NVIDIA H100 80GB HBM3", "exemplar-h100", 8
    )


_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(nodes: list[str] | tuple[str, ...]) -> str:
    """Slurm's compressed host list: `gb-r1-n[01-16],gb-r2-n[01-04]`."""
    groups: dict[str, list[str]] = {}
    order: list[str] = []
    for node in nodes:
        match = _NUMBERED.match(node)
        prefix, num = (match.group(1), match.group(2)) if match else (node, "")
        if prefix not in groups:
            order.append(prefix)
            groups[prefix] = []
        groups[prefix].append(num)
    parts: list[str] = []
    for prefix in order:
        nums = groups[prefix]
        if nums == [""]:
            parts.append(prefix)
            continue
        ranges: list[str] = []
        start = prev = nums[0]
        for num in [*nums[1:], None]:
            if num is not None and int(num) == int(prev) + 1 and len(num) == len(prev):
                prev = num
                continue
            ranges.append(start if start == prev else f"{start}-{prev}")
            if num is not None:
                start = prev = num
        parts.append(f"{prefix}{ranges[0]}" if len(nums) == 1 else f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)
