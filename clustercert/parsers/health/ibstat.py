"""`ibstat` output (infiniband-diags): every CA and port with its state, rate and link layer; an `ibpanic` that
stopped it half-way keeps the CAs printed before it and is reported."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import LineCounter, read_tool_text

__all__ = ["LINK_LAYERS", "PHYSICAL_STATES", "STATES", "IbPort", "IbPorts", "parse_ibstat", "parse_ibstat_of",
           "rate_of", "word_of"]

_FIX = "Re-run `ibstat` on the node and add its whole output"
_CA = re.compile(r"^CA '([^'\n]{1,64})'[ \t]*$", re.MULTILINE)
_PANIC = re.compile(r"^ibpanic: ([^\n]*)$", re.MULTILINE)
_PORT_KEYS = ("State", "Physical state", "Rate", "Link layer")
# the words infiniband-diags prints (ibstat's port_state_str, port_phy_state_str, link layer); another word is a
# garbled or cut line, not a state
STATES = ("Down", "Initializing", "Init", "Armed", "Active", "Active_defer", "Unknown")
PHYSICAL_STATES = ("Sleep", "Polling", "Disabled", "PortConfigurationTraining", "LinkUp", "LinkErrorRecovery",
                   "PhyTest", "Unknown")
LINK_LAYERS = ("InfiniBand", "Ethernet", "Unknown")


@dataclass(frozen=True)
class IbPort:
    """One port of one CA (`ca` the device, mlx5_0) as the tool shows it; `rate_gbps` in Gb/s."""

    ca: str
    port: int
    state: str
    physical_state: str
    rate_gbps: float | None
    link_layer: str
    line: int
    ca_type: str | None = None
    firmware: str | None = None
    # the lines its state and rate were printed on, where the output gives them lines of their own; else `line`
    state_line: int | None = None
    rate_line: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"ca": self.ca, "port": self.port, "state": self.state, "physical_state": self.physical_state,
                "rate_gbps": self.rate_gbps, "link_layer": self.link_layer, "line": self.line,
                "ca_type": self.ca_type, "firmware": self.firmware}


@dataclass(frozen=True)
class IbPorts:
    """The ports one `ibstat` or `ibstatus` run showed; `failure` is the tool's own error line when it stopped
    before the end (ibstat's `ibpanic`), then the ports are those it printed before."""

    file: str
    source: str
    line: int
    last_line: int
    ports: list[IbPort]
    failure: str | None = None
    failure_line: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "source": self.source, "line": self.line, "last_line": self.last_line,
                "failure": self.failure, "failure_line": self.failure_line,
                "ports": [p.to_json() for p in self.ports]}


def word_of(value: str, words: tuple[str, ...], what: str, *, file: str, line: int, fix: str) -> str:
    """`value` when it is one of the tool's `words` for `what`; anything else is a located error."""
    if value in words:
        return value
    raise EvidenceError(file, f"expected a {what.lower()} ({', '.join(words)}), got {value[:40]!r}: garbled or cut. "
                        f"{fix}", line=line, field=what)


def rate_of(text: str, *, file: str, line: int, fix: str) -> float | None:
    """A port rate as printed (`400`, `200 Gb/sec (4X HDR)`, `2.5 Gb/sec (1X SDR)`), in Gb/s."""
    number = text.strip().split(" ", 1)[0]
    if number in ("N/A", "Unknown"):
        return None
    if len(number) <= 12 and number.replace(".", "", 1).isdigit():
        return float(number)
    raise EvidenceError(file, f"expected a rate in Gb/s, got {text.strip()[:40]!r}. {fix}", line=line,
                        field="rate")


def parse_ibstat(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> IbPorts:
    """Every port `ibstat` printed, and the failure that stopped it if one did."""
    text = read_tool_text(path, display, limit=limit, what="`ibstat` output")
    return parse_ibstat_of(text, display)


def parse_ibstat_of(text: str, display: str, *, first_line: int = 1) -> IbPorts:
    """parse_ibstat() of an output's text; `first_line` is the file line the text starts at."""
    lines = LineCounter(text, first_line)
    panic = _PANIC.search(text)
    end = len(text) if panic is None else panic.start()
    cas = list(_CA.finditer(text, 0, end))
    if not cas:
        if panic is not None:  # it failed before printing any CA: nothing was examined
            at = lines.line_at(panic.start())
            return IbPorts(file=display, source="ibstat", line=at, last_line=at, ports=[],
                           failure=panic.group(1).strip()[:400], failure_line=at)
        raise EvidenceError(display, f"expected `ibstat` output (`CA 'mlx5_0'` blocks), got none. {_FIX}",
                            line=first_line)
    if text[:cas[0].start()].strip():
        raise EvidenceError(display, f"expected `ibstat` output to start with a `CA '...'` line, got "
                            f"{text.lstrip()[:60]!r}. {_FIX}", line=lines.line_at(len(text) - len(text.lstrip())))
    ports: list[IbPort] = []
    for i, ca in enumerate(cas):
        block_end = cas[i + 1].start() if i + 1 < len(cas) else end
        ports.extend(_ca(text, display, lines, ca, block_end))
    failure_line = None if panic is None else lines.line_at(panic.start())
    return IbPorts(file=display, source="ibstat", line=lines.line_at(cas[0].start()),
                   last_line=lines.line_at(len(text.rstrip("\n"))), ports=ports,
                   failure=None if panic is None else panic.group(1).strip()[:400], failure_line=failure_line)


def _ca(text: str, display: str, lines: LineCounter, ca: re.Match[str], end: int) -> list[IbPort]:
    """The ports of one CA block: its own keys (one tab in), then `Port N:` with the port's keys (two tabs in)."""
    name = ca.group(1)
    ca_line = lines.line_at(ca.start())
    own: dict[str, str] = {}
    blocks: list[tuple[int, int, dict[str, tuple[str, int]]]] = []
    at = ca.end() + 1
    for raw in text[ca.end() + 1:end].split("\n"):
        line = lines.line_at(at)
        at += len(raw) + 1
        if not raw.strip():
            continue
        key, colon, value = raw.strip().partition(":")
        if not raw[:1].isspace() or not colon:
            raise EvidenceError(display, f"expected `key: value` lines under CA '{name}', got {raw.strip()[:60]!r}: "
                                f"garbled or cut. {_FIX}", line=line)
        if key.startswith("Port ") and not value.strip():
            digits = key[5:]
            if not digits.isdigit() or len(digits) > 4:
                raise EvidenceError(display, f"expected `Port N:`, got {raw.strip()[:40]!r}. {_FIX}", line=line)
            blocks.append((int(digits), line, {}))
        elif blocks:
            blocks[-1][2][key.strip()] = (value.strip(), line)
        else:
            own[key.strip()] = value.strip()
    declared = own.get("Number of ports", "")
    if not declared.isdigit() or int(declared) != len(blocks):
        raise EvidenceError(display, f"expected CA '{name}' to show its {declared or 'declared'} port(s), got "
                            f"{len(blocks)}: cut short or garbled. {_FIX}", line=ca_line)
    ports = []
    for number, line, keys in blocks:
        missing = [k for k in _PORT_KEYS if k not in keys]
        if missing:
            raise EvidenceError(display, f"expected port {number} of CA '{name}' to show {', '.join(missing)}, "
                                f"got none: cut short or garbled. {_FIX}", line=line)
        for key, words in (("State", STATES), ("Physical state", PHYSICAL_STATES), ("Link layer", LINK_LAYERS)):
            word_of(keys[key][0], words, key, file=display, line=keys[key][1], fix=_FIX)
        rate_text, rate_line = keys["Rate"]
        ports.append(IbPort(ca=name, port=number, state=keys["State"][0], physical_state=keys["Physical state"][0],
                            rate_gbps=rate_of(rate_text, file=display, line=rate_line, fix=_FIX),
                            link_layer=keys["Link layer"][0], line=line, ca_type=own.get("CA type"),
                            firmware=own.get("Firmware version"), state_line=keys["State"][1],
                            rate_line=rate_line))
    return ports
