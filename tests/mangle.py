"""Hypothesis strategies that mangle evidence lines: cut, splice, corrupt, reorder, add binary noise."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from clustercert.errors import EvidenceError
from clustercert.parsers import FORMATS

NOISE = st.text(alphabet=st.sampled_from(list("0123456789.-+eE:|# naN/{}\"',[]()\t")), max_size=12)
OPTIONS: dict[str, dict[str, Any]] = {
    "sacct": {"fields": ["JobID", "State", "Elapsed", "Start", "End"]},
    "dcgm": {"start_time": datetime(2025, 1, 1, tzinfo=UTC), "interval_s": 1.0},
    "mlperf": {"ruleset": "4.0.0"},
}


@st.composite
def mangled(draw: st.DrawFn, lines: list[str]) -> bytes:
    """A file made of real-looking lines, some of them damaged."""
    picked = draw(st.lists(st.sampled_from(lines), min_size=0, max_size=25))
    out: list[str] = []
    for line in picked:
        op = draw(st.integers(0, 5))
        if op == 1 and line:
            line = line[: draw(st.integers(0, len(line)))]
        elif op == 2 and line:
            at = draw(st.integers(0, len(line) - 1))
            line = line[:at] + draw(NOISE) + line[at + 1 :]
        elif op == 3:
            at = draw(st.integers(0, len(line)))
            line = line[:at] + draw(NOISE) + line[at:]
        elif op == 4:
            line = line.replace(draw(st.sampled_from(["1", "0", ".", "|", ":", "e"])), draw(NOISE))
        out.append(line)
    data = "\n".join(out).encode()
    if draw(st.booleans()) and draw(st.integers(0, 9)) == 0:
        data += draw(st.binary(max_size=20))
    return data


def check_only_evidence_error(path: Path, fmt: str, data: bytes) -> None:
    """Parse mangled bytes; anything but success or EvidenceError fails the test."""
    path.write_bytes(data)
    parser = FORMATS[fmt]
    try:
        result = parser(path, "f", **OPTIONS.get(fmt, {}))
        result.to_json()
    except EvidenceError as exc:
        assert "\n" not in str(exc)
