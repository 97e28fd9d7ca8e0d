"""nccl-tests' device lines (`#  Rank  0 Group  0 Pid 1 on host device  0 [0x..] NVIDIA H100 80GB HBM3`): who ran."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import read_regular
from clustercert.parsers.common import DEFAULT_LIMIT, json_of
from clustercert.parsers.nccl_tests import JSON_HEAD
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
    """The ranks of nccl-tests' JSON: each process's devices entry is its first rank's line (nccl-tests parses one
    line of the process's lines); the process's other threads x GPUs ranks follow it on its host's next devices,
    the name of the first's GPU taken for theirs. All at line 1 (the file is one line); none from a run cut short."""
    try:
        doc = json_of(data, display)
    except EvidenceError:
        return []  # unfinished: the parser reads it as an aborted test, without ranks
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict) or not isinstance(config.get("devices"), list):
        return []
    each = 1
    for key in ("nthreads", "ngpus"):
        each *= config[key] if isinstance(config.get(key), int) and config[key] > 0 else 1
    out: list[RankLine] = []
    for device in config["devices"]:
        if not isinstance(device, dict):
            continue
        rank, host, local, gpu = (device.get(k) for k in ("rank", "hostname", "device", "device_info"))
        if isinstance(rank, int) and isinstance(host, str) and isinstance(local, int):
            out += [RankLine(rank + i, host, local + i, gpu if isinstance(gpu, str) else "", 1) for i in range(each)]
    return out
