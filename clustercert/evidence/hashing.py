"""sha256 of files and bytes, streamed; only regular files are read (a FIFO or device never blocks or streams)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from clustercert.evidence.guards import open_regular, whole_sha256

__all__ = ["sha256_bytes", "sha256_file"]

# Hashing reads in blocks and holds none of the file, so its bound is only against a file that never ends.
_HASH_LIMIT = 1 << 50


def sha256_file(path: Path, display: str | None = None, *, block: int = 1 << 20,
                stopped: threading.Event | None = None) -> str:
    """The sha256 of a regular file, read in blocks of `block` bytes; anything else is an EvidenceError naming it.
    With `stopped`, the read is given up (ReadStopped) at the first block after it is set."""
    with open_regular(path, display, limit=_HASH_LIMIT) as handle:
        # the hash the guarded handle keeps anyway: one pass, not two
        return whole_sha256(handle, block=block, stopped=stopped)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
