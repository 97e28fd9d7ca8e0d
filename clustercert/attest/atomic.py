"""Writing a file (a run folder's, a bundle's seal, a drafted bundle.yaml) so that a crash, a kill or a full disk
never leaves a half-written one under its real name, nor loses the one that was there."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from clustercert.errors import UsageError, unwritten
from clustercert.lifeline import signals_wait

__all__ = ["write_atomic"]


def write_atomic(path: Path, data: bytes) -> Path:
    """Write `data` to a new temporary file beside `path` (never through a link), flush it to disk, then
    rename it into place: readers see the old state or the whole new file, never part of it. A SIGINT or SIGTERM
    meanwhile waits for the file (`lifeline.signals_wait`): the command's stop ends it past any `finally`, which
    left the temporary file beside `path` (in the user's bundle, for a seal)."""
    with signals_wait():
        return _write_atomic(path, data)


def _write_atomic(path: Path, data: bytes) -> Path:
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _unwritable(path, exc) from None
    try:
        mask = os.umask(0o022)  # mkstemp makes 0600; the real file gets the mode a plain open would give it
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _unwritable(path, exc) from None
        raise
    return path


def _unwritable(path: Path, exc: OSError) -> UsageError:
    """The one-line refusal of a file that could not be written: a full disk or quota, a file system remounted
    read-only, ended the run in "internal error (OSError)", exit 4, with a traceback to read."""
    return UsageError(f"{unwritten(path, exc)}; nothing was written under its name. Free space there (or write "
                      "elsewhere) and run the command again")
