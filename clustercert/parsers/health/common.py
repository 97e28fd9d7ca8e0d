"""What the node-health parsers share: the guarded read of a tool's text, line numbers and located values."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import read_regular
from clustercert.parsers.common import refuse_binary, without_escapes

__all__ = [
    "NOT_SHOWN",
    "LineCounter",
    "Reading",
    "read_tool_text",
    "to_count",
    "to_flag",
    "to_measure",
]

# What nvidia-smi, DCGM and NVML print where a value does not apply or could not be read: a reading of nothing,
# never a zero (a counter that could not be read is not a clean counter)
NOT_SHOWN = frozenset({"N/A", "[N/A]", "Unknown", "[Unknown]", "Not Supported", "[Not Supported]", "Unknown Error",
                       "Insufficient Permissions", "[Insufficient Permissions]", "GPU requires reset",
                       "[GPU requires reset]", "Requested functionality has been deprecated", "None"})


@dataclass(frozen=True)
class Reading:
    """One value a tool printed, as typed here (None: the tool printed N/A or the like), with its line."""

    value: int | float | bool | str | None
    line: int
    text: str

    def to_json(self) -> dict[str, object]:
        return {"value": self.value, "line": self.line, "text": self.text}


def read_tool_text(path: Path, display: str, *, limit: int, what: str) -> str:
    """A tool's output as text: refuses a missing, special, oversized, empty or binary file with a located error;
    a byte order mark, a terminal's escape sequences and CR line ends are dropped (line numbers stay the file's)."""
    data = read_regular(path, display, limit=limit)
    if not data.strip():
        raise EvidenceError(display, f"expected {what}, got an empty file")
    refuse_binary(data[:65536], display)
    text = without_escapes(data.decode("utf-8-sig", errors="replace"))
    if "\r" in text:  # a file saved on Windows: CRLF is one line end, a lone CR one too (as splitlines reads it)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


class LineCounter:
    """The 1-based line of an offset into one text, counted at C speed from the last offset asked for (offsets
    are asked for in increasing order as a parser walks the text; an earlier one counts from the start)."""

    __slots__ = ("_at", "_first", "_line", "_text")

    def __init__(self, text: str, first_line: int = 1) -> None:
        self._text, self._first = text, first_line
        self._at, self._line = 0, first_line

    def line_at(self, offset: int) -> int:
        if offset < self._at:
            self._at, self._line = 0, self._first
        self._line += self._text.count("\n", self._at, offset)
        self._at = offset
        return self._line


def to_count(text: str, *, file: str, line: int, field: str, fix: str) -> int | None:
    """A counter as printed (`0`, `353`, `2560 bank(s)`): an int, None for N/A; anything else is located."""
    value = text.strip()
    if value in NOT_SHOWN:
        return None
    number, _, unit = value.partition(" ")
    if number.isdigit() and len(number) <= 20 and unit in ("", "bank(s)"):
        return int(number)
    raise EvidenceError(file, f"expected a count or N/A, got {value[:40]!r}. {fix}", line=line, field=field)


_FLAGS = {"Yes": True, "No": False, "Active": True, "Not Active": False, "True": True, "False": False,
          "Enabled": True, "Disabled": False}


def to_flag(text: str, *, file: str, line: int, field: str, fix: str) -> bool | None:
    """A yes/no as printed (`Yes`, `Active`, `Not Active`, `True`): a bool, None for N/A; anything else located."""
    value = text.strip()
    if value in NOT_SHOWN:
        return None
    flag = _FLAGS.get(value)
    if flag is None:
        raise EvidenceError(file, f"expected Yes/No, Active/Not Active or N/A, got {value[:40]!r}. {fix}",
                            line=line, field=field)
    return flag


def to_measure(text: str, unit: str, *, file: str, line: int, field: str, fix: str) -> float | None:
    """A measure with its unit as printed (`67.74 W`, `0 %`): a float, None for N/A; anything else located."""
    value = text.strip()
    if value in NOT_SHOWN:
        return None
    number = value.removesuffix(unit).strip()
    if len(number) <= 40 and number.replace(".", "", 1).isdigit():
        return float(number)
    raise EvidenceError(file, f"expected a number in {unit.strip()} or N/A, got {value[:40]!r}. {fix}", line=line,
                        field=field)
