"""Where a number came from: spans of lines or rows in evidence files."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Span", "spans_from_lines"]


@dataclass(frozen=True)
class Span:
    """A run of lines (text files) or rows (tables) of one evidence file, both ends included."""

    file: str
    first: int
    last: int
    count: int

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.first, "last": self.last, "count": self.count}


def spans_from_lines(file: str, lines: Iterable[int]) -> list[Span]:
    """Group line numbers of one file into contiguous-by-order spans (first, last, count)."""
    ordered = sorted(set(lines))
    if not ordered:
        return []
    return [Span(file, ordered[0], ordered[-1], len(ordered))]
