"""Verdicts per NVLink, per GPU pair of the topology, per InfiniBand port and per flapping interface."""

from __future__ import annotations

from collections import Counter

from clustercert.health.rules import HealthRules
from clustercert.health.verdicts import HealthVerdict, Unit, UnitKind
from clustercert.parsers.health.ibstat import IbPorts
from clustercert.parsers.health.kernel_log import KernelLog
from clustercert.parsers.health.nvlink import NvlinkDevice, NvlinkStatus
from clustercert.parsers.health.topo import TopoMatrix
from clustercert.verdicts import Status

__all__ = ["judge_ib_ports", "judge_link_flaps", "judge_nvlink", "judge_topology"]


def _mode(values: list[float]) -> float | None:
    """The most common value (the larger of a tie), None for none."""
    if not values:
        return None
    counts = Counter(values)
    top = max(counts.values())
    return max(v for v, n in counts.items() if n == top)


def _link_unit(device: NvlinkDevice, link: int | None) -> Unit:
    what = "GPU" if device.kind == "gpu" else "NVSwitch"
    if link is None:
        return Unit(UnitKind.NVLINK, f"{what} {device.index} NVLinks", gpu=device.index if device.kind == "gpu"
                    else None)
    return Unit(UnitKind.NVLINK, f"{what} {device.index} link {link}",
                gpu=device.index if device.kind == "gpu" else None, link=link)


def judge_nvlink(status: NvlinkStatus, rules: HealthRules) -> list[HealthVerdict]:
    """Each link up at its peers' speed passes; a link down, inactive or disabled fails, and so does one slower
    than the node's most common speed; a GPU short of its product's expected links, or of its peers', fails."""
    r = rules.nvlink
    out: list[HealthVerdict] = []
    speeds = [link.speed_gbs for d in status.devices for link in d.links
              if link.state == "up" and link.speed_gbs is not None]
    usual = _mode(speeds)
    most = max((len(d.links) for d in status.devices if d.kind == "gpu"), default=0)
    for device in status.devices:
        if device.message is not None:
            out.append(HealthVerdict(_link_unit(device, None), "nvlink.down", Status(r.down),
                                     f"no NVLink up: {device.message}", status.file,
                                     device.message_line or device.line, r.source))
            continue
        for link in device.links:
            unit = _link_unit(device, link.link)
            if link.state == "unsupported":
                continue
            if link.state != "up":
                out.append(HealthVerdict(unit, "nvlink.down", Status(r.down), f"link {link.state}", status.file,
                                         link.line, r.source))
            elif link.speed_gbs is not None and usual is not None and link.speed_gbs < usual:
                out.append(HealthVerdict(unit, "nvlink.speed", Status(r.slower_than_peers),
                                         f"{link.speed_gbs:g} GB/s while the node's links run at {usual:g} GB/s",
                                         status.file, link.line, r.source))
            else:
                speed = f" at {link.speed_gbs:g} GB/s" if link.speed_gbs is not None else ""
                out.append(HealthVerdict(unit, "nvlink.up", Status.PASS, f"up{speed}", status.file, link.line,
                                         r.source))
        if device.kind != "gpu":
            continue
        up = sum(1 for link in device.links if link.state == "up")
        expected = next((n for product, n in r.expected_links.items() if product in (device.name or "")), None)
        if expected is not None and up < expected:
            out.append(HealthVerdict(_link_unit(device, None), "nvlink.count", Status(r.down),
                                     f"{up} of the {expected} NVLinks a {device.name} has are up", status.file,
                                     device.line, r.source))
        elif len(device.links) < most:
            out.append(HealthVerdict(_link_unit(device, None), "nvlink.count", Status(r.down),
                                     f"lists {len(device.links)} links while other GPUs of the node list {most}",
                                     status.file, device.line, r.source))
    return out


def _nv(cell: str) -> int:
    """The NVLink count of a topology cell (NV18 -> 18), 0 for a PCIe path."""
    return int(cell[2:]) if cell.startswith("NV") and cell[2:].isdigit() else 0


def judge_topology(matrix: TopoMatrix, rules: HealthRules) -> list[HealthVerdict]:
    """Each GPU pair: on a node whose pairs connect over NVLink, a pair over fewer links than most pairs, or over
    PCIe, fails; the others pass."""
    r = rules.topology
    gpus = [d for d in matrix.devices if d.startswith("GPU")]
    pairs = [(a, b, matrix.link(a, b)) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    counts = Counter(cell for _, _, cell in pairs)
    usual = max(counts, key=lambda cell: (counts[cell], _nv(cell))) if counts else None
    out: list[HealthVerdict] = []
    row_line = {row.device: row.line for row in matrix.rows}
    for a, b, cell in pairs:
        unit = Unit(UnitKind.NVLINK, f"{a}-{b}", gpu=int(a[3:]) if a[3:].isdigit() else None)
        weaker = usual is not None and _nv(usual) > 0 and _nv(cell) < _nv(usual)
        reason = (f"{a} and {b} connect over {cell} while {counts[usual or '']} of the node's {len(pairs)} GPU "
                  f"pairs connect over {usual}" if weaker else f"{a} and {b} connect over {cell}")
        out.append(HealthVerdict(unit, "topology.gpu_pair", Status(r.weaker_pair) if weaker else Status.PASS,
                                 reason, matrix.file, row_line[a], r.source))
    return out


def judge_ib_ports(ports: IbPorts, rules: HealthRules) -> list[HealthVerdict]:
    """Each port: not Active fails; Active below the most common rate of its peers (same link layer and CA type)
    fails; else passes. A tool that stopped before the end is an ERROR: the ports after it were not examined."""
    r = rules.infiniband
    out: list[HealthVerdict] = []
    if ports.failure is not None:
        out.append(HealthVerdict(Unit.node("InfiniBand ports"), "ib.tool", Status(r.tool_failed),
                                 f"{ports.source} stopped: {ports.failure}; the ports it did not reach were not "
                                 f"examined", ports.file, ports.failure_line or ports.line, r.source))
    groups: dict[tuple[str, str | None], list[float]] = {}
    for port in ports.ports:
        if port.state == "Active" and port.rate_gbps is not None:
            groups.setdefault((port.link_layer, port.ca_type), []).append(port.rate_gbps)
    for port in ports.ports:
        unit = Unit(UnitKind.PORT, f"{port.ca} port {port.port}", port=f"{port.ca}/{port.port}")
        layer = f" ({port.link_layer})" if port.link_layer else ""
        if port.state != "Active":
            out.append(HealthVerdict(unit, "ib.port_state", Status(r.port_down),
                                     f"State {port.state}, physical state {port.physical_state}{layer}",
                                     ports.file, port.state_line or port.line, r.source))
            continue
        peers = groups.get((port.link_layer, port.ca_type), [])
        usual = _mode(peers)
        if port.rate_gbps is not None and usual is not None and port.rate_gbps < usual:
            out.append(HealthVerdict(unit, "ib.port_rate", Status(r.slower_than_peers),
                                     f"Active at {port.rate_gbps:g} Gb/s while {peers.count(usual)} of its "
                                     f"{len(peers)} peers{layer} run at {usual:g} Gb/s", ports.file,
                                     port.rate_line or port.line, r.source))
            continue
        rate = f" at {port.rate_gbps:g} Gb/s" if port.rate_gbps is not None else ""
        out.append(HealthVerdict(unit, "ib.port_state", Status.PASS,
                                 f"Active, {port.physical_state}{rate}{layer}", ports.file, port.line, r.source))
    return out


def judge_link_flaps(log: KernelLog, rules: HealthRules) -> list[HealthVerdict]:
    """Each IPoIB interface that lost carrier in the log: WARN from `warn_at` losses, FAIL from `fail_at`."""
    r = rules.link_flaps
    out: list[HealthVerdict] = []
    names = sorted({e.interface for e in log.carrier if e.interface.startswith(tuple(r.interface_prefixes))})
    for name in names:
        events = [e for e in log.carrier if e.interface == name]
        lost = [e for e in events if not e.up]
        status = Status.FAIL if len(lost) >= r.fail_at else Status.WARN if len(lost) >= r.warn_at else Status.PASS
        if lost:
            reason = (f"lost carrier {len(lost)} time(s) and regained it {len(events) - len(lost)} time(s), "
                      f"{lost[0].stamp} to {events[-1].stamp}")
        else:
            reason = f"regained carrier {len(events)} time(s), never lost it in the log"
        line = lost[0].line if lost else events[0].line
        out.append(HealthVerdict(Unit(UnitKind.INTERFACE, name), "ib.link_flaps", status, reason, log.file, line,
                                 r.source))
    return out
