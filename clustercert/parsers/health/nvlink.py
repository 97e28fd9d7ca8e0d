"""`nvidia-smi nvlink -s` (link speeds per GPU, `<inactive>` links, "all links are inactive") and the tables both
NVLink status parsers produce."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import read_tool_text

__all__ = ["NvLink", "NvlinkDevice", "NvlinkStatus", "parse_nvlink_status", "parse_nvlink_status_of"]

_FIX = "Re-run `nvidia-smi nvlink -s` on the node and add its whole output"
_GPU = re.compile(r"^GPU (\d{1,4}): ([^\n]*)$")
_LINK = re.compile(r"^[ \t]+Link (\d{1,3}): ([^\n]*?)[ \t]*$")
_SPEED = re.compile(r"^(\d{1,6}(?:\.\d{1,6})?) GB/s$")
_INACTIVE = ("<inactive>", "inactive", "Inactive", "Not Active", "Disabled", "<disabled>")
_ALL_INACTIVE = "all links are inactive"


@dataclass(frozen=True)
class NvLink:
    """One link: `state` up, down, inactive, disabled or unsupported; `speed_gbs` where the tool printed one."""

    link: int
    state: str
    line: int
    speed_gbs: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"link": self.link, "state": self.state, "line": self.line, "speed_gbs": self.speed_gbs}


@dataclass(frozen=True)
class NvlinkDevice:
    """A GPU (by index) or an NVSwitch (by physical id) and its links; `message` is the tool's line instead of
    links when it printed one (`NVML: Unable to retrieve NVLink information as all links are inactive`)."""

    kind: str
    index: int
    line: int
    links: list[NvLink]
    name: str | None = None
    uuid: str | None = None
    message: str | None = None
    message_line: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "index": self.index, "line": self.line, "name": self.name, "uuid": self.uuid,
                "message": self.message, "message_line": self.message_line,
                "links": [link.to_json() for link in self.links]}


@dataclass(frozen=True)
class NvlinkStatus:
    """Every device of one NVLink status output, in the order printed."""

    file: str
    source: str
    line: int
    last_line: int
    devices: list[NvlinkDevice] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "source": self.source, "line": self.line, "last_line": self.last_line,
                "devices": [d.to_json() for d in self.devices]}


def parse_nvlink_status(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> NvlinkStatus:
    """Every GPU and link `nvidia-smi nvlink -s` printed."""
    text = read_tool_text(path, display, limit=limit, what="`nvidia-smi nvlink -s` output")
    return parse_nvlink_status_of(text, display)


def parse_nvlink_status_of(text: str, display: str, *, first_line: int = 1) -> NvlinkStatus:
    """parse_nvlink_status() of an output's text; `first_line` is the file line the text starts at."""
    devices: list[NvlinkDevice] = []
    current: tuple[int, int, str, str | None, list[NvLink], list[tuple[str, int]]] | None = None
    line = first_line - 1
    first = last = 0
    for raw in text.split("\n"):
        line += 1
        if not raw.strip():
            continue
        first = first or line
        last = line
        gpu = _GPU.match(raw)
        if gpu is not None:
            if current is not None:
                devices.append(_device(current, display))
            name, marker, uuid = gpu.group(2).rstrip().partition(" (UUID: ")
            current = (int(gpu.group(1)), line, name.strip(), uuid.removesuffix(")") if marker else None, [], [])
            continue
        if current is None:
            raise EvidenceError(display, f"expected `GPU N: <name> (UUID: ...)` first, got {raw.strip()[:60]!r}. "
                                f"{_FIX}", line=line)
        link = _LINK.match(raw)
        if link is not None:
            current[4].append(_link(int(link.group(1)), link.group(2), display, line))
        elif _ALL_INACTIVE in raw:
            current[5].append((raw.strip(), line))
        else:
            raise EvidenceError(display, f"expected `Link N: <speed> GB/s` or `<inactive>` under GPU {current[0]}, "
                                f"got {raw.strip()[:60]!r}: garbled. {_FIX}", line=line)
    if current is None:
        raise EvidenceError(display, f"expected `nvidia-smi nvlink -s` output (`GPU N: ...` lines), got none. "
                            f"{_FIX}", line=first_line)
    devices.append(_device(current, display))
    most = max(len(d.links) for d in devices)
    tail = devices[-1]
    if tail.message is None and len(tail.links) < most:  # nvidia-smi lists every link of a GPU, up or not
        raise EvidenceError(display, f"expected GPU {tail.index} to list {most} links as GPU "
                            f"{next(d.index for d in devices if len(d.links) == most)} does, got {len(tail.links)}: "
                            f"the output looks cut short. {_FIX}", line=last)
    return NvlinkStatus(file=display, source="nvidia-smi nvlink -s", line=first, last_line=last, devices=devices)


def _link(number: int, value: str, display: str, line: int) -> NvLink:
    """`25 GB/s` (up, at that speed), `<inactive>` and the like."""
    speed = _SPEED.match(value)
    if speed is not None:
        return NvLink(number, "up", line, float(speed.group(1)))
    if value in _INACTIVE:
        return NvLink(number, "disabled" if "isabled" in value else "inactive", line)
    raise EvidenceError(display, f"expected a link speed (`25 GB/s`) or `<inactive>`, got {value[:40]!r}. {_FIX}",
                        line=line)


def _device(current: tuple[int, int, str, str | None, list[NvLink], list[tuple[str, int]]],
            display: str) -> NvlinkDevice:
    index, line, name, uuid, links, messages = current
    if not links and not messages:
        raise EvidenceError(display, f"expected GPU {index}'s links (or NVML's line saying why there are none), got "
                            f"none: the output looks cut short. {_FIX}", line=line)
    return NvlinkDevice("gpu", index, line, links, name=name, uuid=uuid,
                        message=messages[0][0] if messages else None,
                        message_line=messages[0][1] if messages else None)
