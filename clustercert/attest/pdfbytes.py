"""The unsigned bytes of a report PDF: what precedes the revision that holds its first signature."""

from __future__ import annotations

import re

__all__ = ["unsigned_bytes"]

_BYTE_RANGE = re.compile(rb"/ByteRange\s*\[\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\]")
_EOF = re.compile(rb"%%EOF[ \t]*(?:\r\n|\r|\n)?")


def unsigned_bytes(data: bytes) -> bytes:
    """`data` up to the end of the revision before the first signature's (an incremental update); identity
    for a PDF without a signature."""
    match = _BYTE_RANGE.search(data)
    if match is None:
        return data
    start, first_len, second_start, second_len = (int(g) for g in match.groups())
    if start != 0 or second_start + second_len > len(data) or first_len > second_start:
        raise ValueError(f"the first signature's /ByteRange {match.group(0)!r} does not fit the file")
    # The signature dictionary sits inside the hole of its own revision; the previous revision ends at the
    # last %%EOF before that hole.
    ends = [m.end() for m in _EOF.finditer(data, 0, first_len)]
    if not ends:
        raise ValueError("the first signature is in the file's first revision: there are no unsigned bytes")
    return data[:ends[-1]]
