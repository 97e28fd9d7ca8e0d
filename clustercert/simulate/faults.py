"""Faults the simulator injects, parsed from `--fault KIND:key=value,...` specifications."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from clustercert.errors import UsageError

__all__ = ["Fault", "FaultKind", "parse_duration", "parse_fault"]


class FaultKind(StrEnum):
    """What goes wrong."""

    SLOW_GPU = "slow-gpu"  # node, gpu, pct (x % slower), at
    BAD_LINK = "bad-link"  # a, b (the link's two nodes), pct (bandwidth lost)
    NODE_FAIL = "node-fail"  # node, at: the node dies; the job restarts on a spare
    HANG = "hang"  # at, duration: no step for that long
    LOST_STEPS = "lost-steps"  # at, steps: the job silently skips step numbers


@dataclass(frozen=True)
class Fault:
    """One fault; `at_s` is seconds after the resilience job's start, `reported` whether monitoring saw it."""

    kind: FaultKind
    node: str | None = None
    gpu: int | None = None
    peer: str | None = None
    pct: float = 0.0
    at_s: float = 0.0
    duration_s: float = 0.0
    steps: int = 0
    reported: bool = True

    @property
    def slowdown(self) -> float:
        """Step-time factor of a slow GPU (1 + x)."""
        return 1.0 + self.pct / 100.0


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")
_KEYS = {
    FaultKind.SLOW_GPU: ({"node", "gpu", "pct"}, {"at", "reported"}),
    FaultKind.BAD_LINK: ({"a", "b", "pct"}, {"reported"}),
    FaultKind.NODE_FAIL: ({"node", "at"}, {"reported"}),
    FaultKind.HANG: ({"at", "duration"}, {"reported"}),
    FaultKind.LOST_STEPS: ({"at", "steps"}, {"reported"}),
}
_HINT = "Write --fault KIND:key=value,... (see `clustercert simulate --help`)."


def parse_duration(text: str) -> float:
    """`90s`, `15m`, `2.5h` or plain seconds -> seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise UsageError(f"--fault: expected a duration such as 90s, 15m or 2h, got {text!r}. {_HINT}")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]


def parse_fault(spec: str) -> Fault:
    """`slow-gpu:node=gb-r3-n07,gpu=2,pct=12,at=1h,reported=no` -> a Fault."""
    kind_text, _, rest = spec.partition(":")
    try:
        kind = FaultKind(kind_text.strip())
    except ValueError:
        raise UsageError(
            f"--fault {spec!r}: expected a kind ({', '.join(k.value for k in FaultKind)}), got {kind_text!r}"
        ) from None
    values: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise UsageError(f"--fault {spec!r}: expected key=value, got {item!r}. {_HINT}")
        values[key.strip()] = value.strip()
    required, optional = _KEYS[kind]
    missing = sorted(required - values.keys())
    unknown = sorted(values.keys() - required - optional)
    if missing or unknown:
        raise UsageError(f"--fault {spec!r}: missing keys {missing}, unknown keys {unknown}. {_HINT}")
    try:
        pct = float(values.get("pct", "0"))
        gpu = int(values["gpu"]) if "gpu" in values else None
        steps = int(values.get("steps", "0"))
    except ValueError as exc:
        raise UsageError(f"--fault {spec!r}: expected numbers, got {exc}. {_HINT}") from None
    reported = values.get("reported", "yes").lower()
    if reported not in {"yes", "no"}:
        raise UsageError(f"--fault {spec!r}: expected reported=yes or reported=no, got {reported!r}")
    return Fault(
        kind=kind,
        node=values.get("node") or values.get("a"),
        gpu=gpu,
        peer=values.get("b"),
        pct=pct,
        at_s=parse_duration(values["at"]) if "at" in values else 0.0,
        duration_s=parse_duration(values["duration"]) if "duration" in values else 0.0,
        steps=steps,
        reported=reported == "yes",
    )
