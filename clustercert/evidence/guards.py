"""Guards every read of user-supplied input goes through: regular files only, a size bound before reading,
never a blocking open, and bounds on what a file expands to (YAML aliases and depth, Parquet rows)."""

from __future__ import annotations

import os
import reprlib
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from clustercert.errors import EvidenceError

__all__ = [
    "MAX_NESTING",
    "MAX_TABLE_BYTES",
    "MAX_TABLE_ROWS",
    "MAX_YAML_ALIASES",
    "MAX_YAML_BYTES",
    "MAX_YAML_NODES",
    "check_parquet_bounds",
    "check_regular",
    "file_kind",
    "open_regular",
    "read_regular",
    "short_repr",
]

# bundle.yaml and catalogs are written by `evidence init` or by hand: a 1,024-node bundle with a run per
# workload, repeat and pair is about 150 KB; 2 MiB (about 17,000 runs) loads in seconds (bench/bench_hostile.py).
MAX_YAML_BYTES = 2 * 1024**2
# Anchors and aliases are legal YAML, but each alias can multiply what is built (billion laughs).
MAX_YAML_ALIASES = 1000
# What the document holds once every alias is expanded (a 1,024-node bundle with a run per pair: ~200,000).
MAX_YAML_NODES = 2_000_000
# Containers nested deeper than this are refused before anything recursive reads them (RecursionError).
MAX_NESTING = 100
# Per-rank timings: 512 ranks x 100,000 steps; a day of 1 Hz telemetry on 512 GPUs is 44 M rows.
MAX_TABLE_ROWS = 100_000_000
# What a Parquet file's metadata says it decompresses to (Arrow needs about as much memory).
MAX_TABLE_BYTES = 16 * 1024**3

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60
_short.maxlist = _short.maxdict = _short.maxtuple = _short.maxset = 4
_short.maxlevel = 2


def check_parquet_bounds(metadata: Any, display: str) -> None:
    """Refuse a Parquet file whose footer says it expands past the row or byte bound, before any row is read."""
    rows = int(metadata.num_rows)
    if rows > MAX_TABLE_ROWS:
        raise EvidenceError(display, f"expected at most {MAX_TABLE_ROWS} rows, got a Parquet file that declares "
                            f"{rows}. Split the table by time or by node")
    expanded = sum(int(metadata.row_group(i).total_byte_size) for i in range(metadata.num_row_groups))
    if expanded > MAX_TABLE_BYTES:
        raise EvidenceError(display, f"expected at most {MAX_TABLE_BYTES} bytes once decompressed, got a Parquet "
                            f"file that declares {expanded}. Split the table by time or by node")


def short_repr(value: object) -> str:
    """A repr that never walks more than a few items of `value` (an expanded YAML alias tree can be huge)."""
    return _short.repr(value)


def file_kind(mode: int) -> str:
    """What a file is, in words, from its st_mode."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def check_regular(path: Path, display: str | None = None) -> os.stat_result:
    """The stat of `path` (links followed), refusing anything that is not a regular file without opening it."""
    shown = display or str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise EvidenceError(shown, "expected a regular file, got nothing at this path") from None
    except OSError as exc:
        raise EvidenceError(shown, f"expected a readable regular file, got {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise EvidenceError(shown, f"expected a regular file, got {file_kind(st.st_mode)}. "
                            "List regular files only in bundle.yaml")
    return st


def _check_size(size: int, shown: str, limit: int, fix: str | None = None) -> None:
    if size > limit:
        raise EvidenceError(shown, f"expected at most {limit} bytes, got {size}. "
                            f"{fix or 'Split it or raise CLUSTERCERT_MAX_EVIDENCE_BYTES'}")


@contextmanager
def open_regular(path: Path, display: str | None = None, *, limit: int, fix: str | None = None
                 ) -> Iterator[BinaryIO]:
    """`path` opened for reading, only when it is a regular file of at most `limit` bytes.

    The type is checked before opening (a FIFO would block open(2)) and again on the open descriptor
    (O_NONBLOCK, so a file swapped for a FIFO in between cannot block either)."""
    shown = display or str(path)
    _check_size(check_regular(path, shown).st_size, shown, limit, fix)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise EvidenceError(shown, f"expected a readable regular file, got {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise EvidenceError(shown, f"expected a regular file, got {file_kind(st.st_mode)}")
    try:
        _check_size(st.st_size, shown, limit, fix)
    except EvidenceError:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        yield handle


def read_regular(path: Path, display: str | None = None, *, limit: int, fix: str | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (a file that grows past it while read is refused);
    `fix` replaces the size error's advice."""
    shown = display or str(path)
    with open_regular(path, shown, limit=limit, fix=fix) as handle:
        # Ask for the size fstat gave (plus one byte, to see growth), never for `limit`: a buffer is made that big.
        data = handle.read(min(os.fstat(handle.fileno()).st_size, limit) + 1)
    _check_size(len(data), shown, limit, fix)
    return data
