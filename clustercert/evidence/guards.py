"""Guards every read of user-supplied input goes through: regular files only, a size bound before reading,
never a blocking open, and bounds on what a file expands to (YAML aliases and depth, Parquet rows).

What was read is recorded (what is signed is what was judged, issue 14 item 1). Every handle `open_regular`
yields hashes the bytes it delivers as they come off the descriptor; when the file was read to its end, the
sha256 of those exact bytes is recorded under the file's resolved path in a per-process, thread-safe registry
(`read_regular` reads through such a handle, so every parse of a whole file is recorded; so does `read_chunks`,
which hands a large file over in pieces cut at line ends and records one whole read with the whole file's sha256
once its last piece was read). A read that stops
before the end or skips (a one-byte peek, format sniffing, a file's first and last 64 KB) records each stretch
it read as a part: offset, length and the sha256 of those bytes. Each record carries a sequence number:
`read_mark()` before a load; at signing `digests_read(path, since=mark)` gives every sha256 the file was read
whole with since then, `parts_read` every part: a whole read that is not the load's digest, or a part whose
bytes are not those of the loaded file at that offset, means the file changed while the run read it
(`clustercert.runs.folder.check_as_read`). `collect_reads()` also hands the records made inside it to the
caller (the parse memo keeps them with the parse it remembers, and records them again when it serves it: a
remembered parse is the same bytes). `forget_reads()` empties the registry (the end of a
certification, with the parse memo). Only reads made in this process are seen: with `--dask` the phases parse in
worker processes, and what is compared is what this process read (every evidence file is parsed here again by
the validation step)."""

from __future__ import annotations

import contextvars
import functools
import hashlib
import io
import itertools
import os
import reprlib
import stat
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
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
    "Read",
    "ReadStopped",
    "amount",
    "check_parquet_bounds",
    "check_regular",
    "collect_reads",
    "digests_read",
    "file_kind",
    "forget_reads",
    "open_regular",
    "parts_read",
    "read_chunks",
    "read_mark",
    "read_regular",
    "reading_told",
    "record_read",
    "short_repr",
    "told_reading",
]

# bundle.yaml and catalogs are written by `evidence init` or by hand: a 1,024-node bundle with a run per
# workload, repeat and pair is a fraction of this, and a file this large still loads in seconds
# (bench/bench_hostile.py).
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


# The registry of what was read: resolved path -> {(sha256, offset, length or None for the whole file): sequence
# number of its latest read}.
Read = tuple[str, int, int | None]
_READS: dict[str, dict[Read, int]] = {}
_READS_LOCK = threading.Lock()
_SEQUENCE = itertools.count(1)
_COLLECTING: contextvars.ContextVar[list[tuple[str, Read]] | None] = contextvars.ContextVar("collecting",
                                                                                           default=None)
_BUFFER = 1 << 16


def read_mark() -> int:
    """A sequence number: the records made after this call are those `digests_read(..., since=mark)` returns."""
    return next(_SEQUENCE)


def record_read(key: str, read: Read) -> None:
    """Record that the file at resolved path `key` was read: `read` is (sha256, offset, length), length None for
    the whole file (also into the innermost `collect_reads` of this context)."""
    with _READS_LOCK:
        _READS.setdefault(key, {})[read] = next(_SEQUENCE)
    collected = _COLLECTING.get()
    if collected is not None:
        collected.append((key, read))


def _reads(path: Path, since: int) -> list[Read]:
    key = str(path.resolve())
    with _READS_LOCK:
        return [read for read, seq in _READS.get(key, {}).items() if seq > since]


def digests_read(path: Path, *, since: int = 0) -> set[str]:
    """Every sha256 `path` was read whole with after the mark `since` (empty when it was not read whole)."""
    return {digest for digest, _, length in _reads(path, since) if length is None}


def parts_read(path: Path, *, since: int = 0) -> set[tuple[int, int, str]]:
    """Every (offset, length, sha256) of a part of `path` read after the mark `since` (a peek, a file's edges)."""
    return {(offset, length, digest) for digest, offset, length in _reads(path, since) if length is not None}


def forget_reads() -> None:
    """Empty the registry (the end of a certification: the next one starts from nothing)."""
    with _READS_LOCK:
        _READS.clear()


@contextmanager
def collect_reads() -> Iterator[list[tuple[str, Read]]]:
    """The (resolved path, read) of every read recorded inside the block, in this context (a parse)."""
    collected: list[tuple[str, Read]] = []
    outer = _COLLECTING.get()
    token = _COLLECTING.set(collected)
    try:
        yield collected
    finally:
        _COLLECTING.reset(token)
        if outer is not None:
            outer.extend(collected)


class _HashingReader(io.RawIOBase):
    """The raw reader of an open descriptor that hashes every byte it delivers, as contiguous stretches (a seek
    starts a new one). At close each stretch is recorded under `key`: the whole file when it ran from the start to
    the end of the file, else as a part (offset, length)."""

    def __init__(self, fd: int, key: str) -> None:
        super().__init__()
        self._fd, self._key = fd, key
        self._pos = 0
        self._start, self._count, self._ended = 0, 0, False
        self._hash = hashlib.sha256()
        self._stretches: list[Read] = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = os.readv(self._fd, [view])
        if n == 0:
            self._ended = True
        else:
            self._hash.update(view[:n])
            self._count += n
            self._pos += n
        return n

    def whole_digest(self) -> str | None:
        """The sha256 of the file as read, once it was read from its start to its end without a seek (else None):
        what a caller that hashes the whole file would compute again from the same bytes."""
        return self._hash.hexdigest() if self._start == 0 and self._ended else None

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        position = os.lseek(self._fd, offset, whence)
        if position != self._pos:
            self._end_stretch()
            self._start = self._pos = position
        return position

    def tell(self) -> int:
        return self._pos

    def _end_stretch(self) -> None:
        if self._count or self._ended:
            whole = self._start == 0 and self._ended
            self._stretches.append((self._hash.hexdigest(), self._start, None if whole else self._count))
        self._count, self._ended = 0, False
        self._hash = hashlib.sha256()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._end_stretch()
            for read in self._stretches:
                record_read(self._key, read)
        finally:
            os.close(self._fd)
            super().close()


class ReadStopped(Exception):
    """A read given up between two blocks because its caller said to stop (`whole_sha256`'s `stopped`)."""


def whole_sha256(handle: BinaryIO, *, block: int = 1 << 20, stopped: threading.Event | None = None) -> str:
    """Read to its end a handle of `open_regular` read so far only from its start (or not at all) and return the
    file's sha256 as read: the hash the handle keeps of every byte it delivers (its buffer's read-ahead included),
    not a second one. With `stopped`, ReadStopped is raised at the first block after it is set."""
    raw = getattr(handle, "raw", None)
    if not isinstance(raw, _HashingReader):
        raise TypeError("whole_sha256: expected a handle of open_regular")
    # No larger than the file and one byte more (its end is seen by the next read): a buffer is zeroed when made, and
    # a manifest's large block made for each of a sweep's thousands of small files would zero gigabytes
    size = os.fstat(raw.fileno()).st_size
    buffer = memoryview(bytearray(max(1, min(block, size + 1))))
    while raw.readinto(buffer):
        if stopped is not None and stopped.is_set():
            raise ReadStopped
    digest = raw.whole_digest()
    if digest is None:
        raise ValueError("whole_sha256: the handle was not read from the file's start")
    return digest


@contextmanager
def open_regular(path: Path, display: str | None = None, *, limit: int, fix: str | None = None
                 ) -> Iterator[BinaryIO]:
    """`path` opened for reading, only when it is a regular file of at most `limit` bytes.

    The type is checked before opening (a FIFO would block open(2)) and again on the open descriptor
    (O_NONBLOCK, so a file swapped for a FIFO in between cannot block either). The handle hashes what it reads;
    read to its end, the file's sha256 as read is recorded (see the module's docstring)."""
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
    try:
        key = _opened_path(fd, st) or str(path.resolve())
    except OSError:
        os.close(fd)
        raise EvidenceError(shown, "expected a readable regular file, got a path that cannot be resolved") from None
    with io.BufferedReader(_HashingReader(fd, key), buffer_size=_BUFFER) as handle:
        yield handle


def _opened_path(fd: int, st: os.stat_result) -> str | None:
    """The resolved path of the file open on `fd` (`st` its fstat) as the kernel names it (Linux's
    /proc/self/fd): one readlink and one stat instead of realpath's lstat of every part of the path (six for a
    file of a cluster's sweep, 8,141 files). None where the kernel gives no path that names that same file (no
    /proc, a deleted file, a memfd): Path.resolve() answers then."""
    try:
        named = os.readlink(f"/proc/self/fd/{fd}")
        there = os.stat(named)
    except OSError:
        return None
    if not named.startswith("/") or (there.st_dev, there.st_ino) != (st.st_dev, st.st_ino):
        return None
    return named


def read_regular(path: Path, display: str | None = None, *, limit: int, fix: str | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (a file that grows past it while read is refused);
    `fix` replaces the size error's advice."""
    shown = display or str(path)
    with open_regular(path, shown, limit=limit, fix=fix) as handle:
        # Ask for the size fstat gave (plus one byte, to see growth), never for `limit`: a buffer is made that big.
        data = handle.read(min(os.fstat(handle.fileno()).st_size, limit) + 1)
    _check_size(len(data), shown, limit, fix)
    return data


# A long read (`read_chunks`) tells how far it is every this many seconds, where somebody listens (`told_reading`).
_READ_SHOWN = 5.0
_READING: contextvars.ContextVar[Callable[[int, int], None] | None] = contextvars.ContextVar("reading", default=None)


@contextmanager
def told_reading(listener: Callable[[int, int], None]) -> Iterator[None]:
    """While the block runs (in this context: the thread that calls `read_chunks`), a `read_chunks` started there
    tells `listener` (bytes read so far, the file's size) every `_READ_SHOWN` seconds of its read: a large
    cluster's telemetry file takes minutes to read."""
    token = _READING.set(listener)
    try:
        yield
    finally:
        _READING.reset(token)


def reading_told(progress: Callable[[str, str], None], stage: str, said: str) -> Callable[[int, int], None]:
    """A `told_reading` listener that tells `progress` (a progress listener) under `stage` how far the read of what
    `said` names is: "`said`: 2.1 GiB of 2.9 GiB read"."""
    return functools.partial(_read_so_far, progress, stage, said)


def _read_so_far(progress: Callable[[str, str], None], stage: str, said: str, done: int, size: int) -> None:
    progress(stage, f"{said}: {amount(done)} of {amount(size)} read")


def amount(size: int) -> str:
    """A number of bytes as a person reads it: 812 B, 4.2 MiB, 22.0 GiB."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def read_chunks(path: Path, display: str | None = None, *, limit: int, chunk_bytes: int,
                fix: str | None = None) -> Generator[bytes, None, None]:
    """The bytes of a regular file of at most `limit` bytes, in pieces of about `chunk_bytes` that each end
    with a line end (b"\\n"), the last with the file's last byte; a line longer than `chunk_bytes` makes its
    piece longer. The checks and the record are read_regular's: read to its end, the whole file's sha256 is
    recorded once (a reader that stops early records the part it read). Close the generator when stopping
    early (`contextlib.closing`), so the file is closed and recorded at once. The listener of `told_reading`
    where this is called (not where the pieces are taken) is told how far the read is."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    return _chunks(path, display or str(path), limit, chunk_bytes, fix, _READING.get())


def _chunks(path: Path, shown: str, limit: int, chunk_bytes: int, fix: str | None,
            told: Callable[[int, int], None] | None) -> Generator[bytes, None, None]:
    # The next block is read (and hashed: both release the GIL) on a thread of its own while the caller works on
    # this one; stopped early, the read in flight is waited for before the file is closed.
    with open_regular(path, shown, limit=limit, fix=fix) as handle, \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="clustercert-read-ahead") as reader:
        carried: list[bytes] = []  # the start of a line that did not end in the pieces read so far
        total = 0
        size, told_at = os.fstat(handle.fileno()).st_size, time.monotonic()
        ahead = reader.submit(handle.read, chunk_bytes)
        while True:
            block = ahead.result()
            if not block:
                break
            ahead = reader.submit(handle.read, chunk_bytes)
            total += len(block)
            _check_size(total, shown, limit, fix)  # a file that grows past the bound while read is refused
            if told is not None and time.monotonic() - told_at >= _READ_SHOWN:
                told(total, size)
                told_at = time.monotonic()
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                carried.append(block)
                continue
            piece = block if cut == len(block) else block[:cut]
            if carried:
                carried.append(piece)
                piece = b"".join(carried)
                carried = []
            if cut < len(block):
                carried.append(block[cut:])
            del block
            yield piece
            del piece
        if carried:
            yield b"".join(carried)
