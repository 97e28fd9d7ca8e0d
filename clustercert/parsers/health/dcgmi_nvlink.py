"""`dcgmi nvlink -s`: each GPU's and NVSwitch's links as U (up), D (down), X (disabled) or _ (not supported)."""

from __future__ import annotations

import re
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import read_tool_text
from clustercert.parsers.health.nvlink import NvLink, NvlinkDevice, NvlinkStatus

__all__ = ["parse_dcgmi_nvlink", "parse_dcgmi_nvlink_of"]

_FIX = "Re-run `dcgmi nvlink -s` on the node and add its whole output"
_DEVICE = re.compile(r"^[ \t]+(gpuId|physicalId) (\d{1,6}):[ \t]*$")
_STATES = {"U": "up", "D": "down", "X": "disabled", "_": "unsupported"}


def parse_dcgmi_nvlink(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> NvlinkStatus:
    """Every GPU's and NVSwitch's links `dcgmi nvlink -s` printed."""
    text = read_tool_text(path, display, limit=limit, what="`dcgmi nvlink -s` output")
    return parse_dcgmi_nvlink_of(text, display)


def parse_dcgmi_nvlink_of(text: str, display: str, *, first_line: int = 1) -> NvlinkStatus:
    """parse_dcgmi_nvlink() of an output's text; `first_line` is the file line the text starts at."""
    devices: list[NvlinkDevice] = []
    pending: tuple[str, int, int] | None = None  # kind, index, line of a device whose links come next
    section = ""
    heading = keyed = 0
    line = first_line - 1
    for raw in text.split("\n"):
        line += 1
        stripped = raw.strip()
        if not stripped or stripped.startswith("+--"):
            continue
        if stripped == "|  NvLink Link Status  |" or stripped.strip("| ") == "NvLink Link Status":
            heading = line
            continue
        if stripped in ("GPUs:", "NvSwitches:"):
            section = stripped
            continue
        if stripped.startswith("Key: "):
            keyed = line
            continue
        if keyed:
            raise EvidenceError(display, f"expected nothing after the `Key:` line, got {stripped[:60]!r}. {_FIX}",
                                line=line)
        device = _DEVICE.match(raw)
        if device is not None:
            if pending is not None:
                raise EvidenceError(display, f"expected the links of {pending[0]} {pending[1]}, got another device. "
                                    f"{_FIX}", line=line)
            pending = ("gpu" if device.group(1) == "gpuId" else "switch", int(device.group(2)), line)
            continue
        if stripped == "No NvSwitches found." and section == "NvSwitches:":
            continue
        states = stripped.split(" ")
        if pending is None or not all(s in _STATES for s in states):
            raise EvidenceError(display, f"expected a device's link states (`U U D X _`), got {stripped[:60]!r}: "
                                f"garbled. {_FIX}", line=line)
        kind, index, at = pending
        devices.append(NvlinkDevice(kind, index, at, [NvLink(i, _STATES[s], line) for i, s in enumerate(states)]))
        pending = None
    if not heading:
        raise EvidenceError(display, f"expected `dcgmi nvlink -s` output (its `NvLink Link Status` heading), got "
                            f"none. {_FIX}", line=first_line)
    if pending is not None or not keyed:
        raise EvidenceError(display, f"expected the output to end with its `Key: Up=U, ...` line, got the file "
                            f"ending at line {line}: cut short. {_FIX}", line=line)
    return NvlinkStatus(file=display, source="dcgmi nvlink -s", line=heading, last_line=keyed, devices=devices)
