"""nccl-tests' device lines (`#  Rank  0 Group  0 Pid 1 on host device  0 [0x..] NVIDIA H100 80GB HBM3`): who ran."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.training import read_text_lines

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
    """Every rank line of the file (each test of a file prints its own), in file order."""
    out: list[RankLine] = []
    for number, raw in enumerate(read_text_lines(path, display, limit=limit), start=1):
        match = _RANK_LINE.search(raw)
        if match is not None:
            out.append(RankLine(int(match.group(1)), match.group(2), int(match.group(3)), match.group(4), number))
    return out
