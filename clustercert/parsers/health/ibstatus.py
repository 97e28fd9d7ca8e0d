"""`ibstatus` output: one `Infiniband device 'mlx5_0' port 1 status:` block per port."""

from __future__ import annotations

import re
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import LineCounter, read_tool_text
from clustercert.parsers.health.ibstat import LINK_LAYERS, PHYSICAL_STATES, STATES, IbPort, IbPorts, rate_of, word_of

__all__ = ["parse_ibstatus", "parse_ibstatus_of"]

_FIX = "Re-run `ibstatus` on the node and add its whole output"
_DEVICE = re.compile(r"^Infiniband device '([^'\n]{1,64})' port (\d{1,4}) status:[ \t]*$", re.MULTILINE)
_KEYS = ("state", "phys state", "rate", "link_layer")


def parse_ibstatus(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> IbPorts:
    """Every port `ibstatus` printed."""
    text = read_tool_text(path, display, limit=limit, what="`ibstatus` output")
    return parse_ibstatus_of(text, display)


def _word(value: str) -> str:
    """`4: ACTIVE` -> `Active`, `5: LinkUp` -> `LinkUp`: the state word as ibstat prints it."""
    word = value.partition(":")[2].strip() or value.strip()
    return word.capitalize() if word.isupper() else word


def parse_ibstatus_of(text: str, display: str, *, first_line: int = 1) -> IbPorts:
    """parse_ibstatus() of an output's text; `first_line` is the file line the text starts at."""
    lines = LineCounter(text, first_line)
    devices = list(_DEVICE.finditer(text))
    if not devices:
        raise EvidenceError(display, f"expected `ibstatus` output (`Infiniband device '...' port N status:` "
                            f"blocks), got none. {_FIX}", line=first_line)
    ports: list[IbPort] = []
    for i, device in enumerate(devices):
        line = lines.line_at(device.start())
        end = devices[i + 1].start() if i + 1 < len(devices) else len(text)
        keys: dict[str, tuple[str, int]] = {}
        at = device.end() + 1
        for raw in text[device.end() + 1:end].split("\n"):
            key_line = lines.line_at(at)
            at += len(raw) + 1
            if not raw.strip():
                continue
            key, colon, value = raw.strip().partition(":")
            if not raw[:1].isspace() or not colon:
                raise EvidenceError(display, f"expected `key: value` lines under device '{device.group(1)}', got "
                                    f"{raw.strip()[:60]!r}: garbled or cut. {_FIX}", line=key_line)
            keys[key.strip()] = (value.strip(), key_line)
        missing = [k for k in _KEYS if k not in keys]
        if missing:
            raise EvidenceError(display, f"expected device '{device.group(1)}' port {device.group(2)} to show "
                                f"{', '.join(missing)}, got none: cut short or garbled. {_FIX}", line=line)
        state, physical = _word(keys["state"][0]), _word(keys["phys state"][0])
        word_of(state, STATES, "State", file=display, line=keys["state"][1], fix=_FIX)
        word_of(physical, PHYSICAL_STATES, "Physical state", file=display, line=keys["phys state"][1], fix=_FIX)
        word_of(keys["link_layer"][0], LINK_LAYERS, "Link layer", file=display, line=keys["link_layer"][1], fix=_FIX)
        rate_text, rate_line = keys["rate"]
        ports.append(IbPort(ca=device.group(1), port=int(device.group(2)), state=state, physical_state=physical,
                            rate_gbps=rate_of(rate_text, file=display, line=rate_line, fix=_FIX),
                            link_layer=keys["link_layer"][0], line=line, state_line=keys["state"][1],
                            rate_line=rate_line))
    return IbPorts(file=display, source="ibstatus", line=lines.line_at(devices[0].start()),
                   last_line=lines.line_at(len(text.rstrip("\n"))), ports=ports)
