"""nccl-tests' device lines (`#  Rank  0 Group  0 Pid 1 on host device  0 [0x..] NVIDIA H100 80GB HBM3`): who ran."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import read_regular
from clustercert.parsers.common import DEFAULT_LIMIT, json_of
from clustercert.parsers.nccl_tests import JSON_HEAD, entry_lines, json_devices
from clustercert.parsers.training import text_of

__all__ = ["RankLine", "read_rank_lines"]

_RANK_LINE = re.compile(
    r"#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*?)\s*$"
)


@dataclass(frozen=True)
class RankLine:
    """One rank of one test as nccl-tests printed it: its host, local device and GPU name, with its line."""

    rank: int
    host: str
    device: int
    gpu: str
    line: int


def read_rank_lines(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> list[RankLine]:
    """Every rank line of the file (each test of a file prints its own), in file order; of a `-J` JSON output, its
    config's devices (below)."""
    data = read_regular(path, display, limit=limit)
    if JSON_HEAD.match(data[:4096].decode("utf-8", errors="replace").lstrip()) is not None:
        return _json_ranks(data, display)
    out: list[RankLine] = []
    for number, raw in enumerate(text_of(data, display).splitlines(), start=1):
        match = _RANK_LINE.search(raw)
        if match is not None:
            out.append(RankLine(int(match.group(1)), match.group(2), int(match.group(3)), match.group(4), number))
    return out


def _json_ranks(data: bytes, display: str) -> list[RankLine]:
    """The ranks of nccl-tests' JSON (`json_devices`), each at the line its devices entry starts on (line 1 in the
    one line nccl-tests writes); none from a run cut short, which the parser reads as an aborted test."""
    try:
        doc = json_of(data, display)
    except EvidenceError:
        return []
    config = doc.get("config") if isinstance(doc, dict) else None
    devices = json_devices(config, display)
    if not devices:
        return []
    assert isinstance(config, dict)  # json_devices found its devices list
    lines = entry_lines(data.decode("utf-8-sig"), "devices", config["devices"])
    return [RankLine(rank, host, device, gpu, lines[entry]) for rank, host, device, gpu, entry in devices]
