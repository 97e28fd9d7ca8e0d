"""`nvidia-smi topo -m`: how each GPU and NIC pair connects (NV18, PIX, SYS, ...), and each GPU's CPU affinity."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import read_tool_text

__all__ = ["TopoMatrix", "TopoRow", "parse_topo", "parse_topo_of"]

_FIX = "Re-run `nvidia-smi topo -m` on the node and add its whole output"
_DEVICE = re.compile(r"^(?:GPU|NIC|NVS|mlx\d_|CPU)\d{1,4}$")
_CELL = re.compile(r"^(?:X|SYS|NODE|PHB|PXB|PIX|PCI|SOC|NV\d{1,3}|NVB\d{0,3})$")
_NIC = re.compile(r"^\s+(NIC\d{1,4}): (\S{1,64})\s*$")


@dataclass(frozen=True)
class TopoRow:
    """One device's row: its connection to each device of the header, and a GPU's CPU and NUMA affinity."""

    device: str
    line: int
    cells: list[str]
    cpu_affinity: str | None = None
    numa_affinity: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"device": self.device, "line": self.line, "cells": self.cells, "cpu_affinity": self.cpu_affinity,
                "numa_affinity": self.numa_affinity}


@dataclass(frozen=True)
class TopoMatrix:
    """The matrix in the header's device order, and the NIC legend (NIC0 -> mlx5_0) where printed."""

    file: str
    line: int
    last_line: int
    devices: list[str]
    rows: list[TopoRow]
    nics: dict[str, str]

    def link(self, a: str, b: str) -> str:
        """How device `a` connects to `b`, as its row prints it."""
        row = next(r for r in self.rows if r.device == a)
        return row.cells[self.devices.index(b)]

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "last_line": self.last_line, "devices": self.devices,
                "nics": self.nics, "rows": [r.to_json() for r in self.rows]}


def parse_topo(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> TopoMatrix:
    """The matrix `nvidia-smi topo -m` printed."""
    text = read_tool_text(path, display, limit=limit, what="`nvidia-smi topo -m` output")
    return parse_topo_of(text, display)


def parse_topo_of(text: str, display: str, *, first_line: int = 1) -> TopoMatrix:
    """parse_topo_of() of an output's text (tabs as nvidia-smi writes them, or spaces as pasted); `first_line` is
    the file line the text starts at."""
    devices: list[str] = []
    rows: list[TopoRow] = []
    nics: dict[str, str] = {}
    header = 0
    line = first_line - 1
    legend = False
    for raw in text.split("\n"):
        line += 1
        tokens = raw.split()
        if not tokens:
            continue
        if not header:
            if _DEVICE.match(tokens[0]) is None:
                continue  # what a wrapper printed before the matrix (`NVIDIA Topology:`)
            devices = [t for t in tokens if _DEVICE.match(t) is not None]
            if tokens[:len(devices)] != devices:
                raise EvidenceError(display, f"expected the header's device names first (GPU0 GPU1 ...), got "
                                    f"{raw.strip()[:60]!r}. {_FIX}", line=line)
            header = line
            continue
        if tokens[0] in ("Legend:", "NIC"):
            legend = True
        if legend:
            nic = _NIC.match(raw)
            if nic is not None:
                nics[nic.group(1)] = nic.group(2)
            continue
        if len(rows) == len(devices):
            break  # after the matrix, before a legend: a wrapper's own lines
        expected = devices[len(rows)]
        cells = tokens[1:1 + len(devices)]
        if tokens[0] != expected or len(cells) < len(devices) or any(_CELL.match(c) is None for c in cells):
            raise EvidenceError(display, f"expected the row of {expected} with {len(devices)} connections (X, NV18, "
                                f"PIX, SYS, ...), got {raw.strip()[:80]!r}: garbled or cut. {_FIX}", line=line)
        rest = tokens[1 + len(devices):]
        rows.append(TopoRow(expected, line, cells, cpu_affinity=rest[0] if rest else None,
                            numa_affinity=rest[1] if len(rest) > 1 else None))
    if not header:
        raise EvidenceError(display, f"expected `nvidia-smi topo -m` output (a header of GPU0 GPU1 ...), got none. "
                            f"{_FIX}", line=first_line)
    if len(rows) != len(devices):
        raise EvidenceError(display, f"expected a row for each of the {len(devices)} devices of the header, got "
                            f"{len(rows)}: the output looks cut short. {_FIX}", line=line)
    for i, row in enumerate(rows):
        if row.cells[i] != "X":
            raise EvidenceError(display, f"expected X where {row.device} meets itself, got {row.cells[i]!r}. {_FIX}",
                                line=row.line)
    return TopoMatrix(file=display, line=header, last_line=line, devices=devices, rows=rows, nics=nics)
