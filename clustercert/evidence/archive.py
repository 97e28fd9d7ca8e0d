"""An `llmb-run archive` (.tar.zst) unpacked safely into a folder beside it, with the archive's own sha256 recorded."""

from __future__ import annotations

import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import zstandard

from clustercert.errors import EvidenceError, UsageError
from clustercert.evidence.guards import amount, open_regular, whole_sha256
from clustercert.evidence.hashing import sha256_file

__all__ = ["ARCHIVE_RECORD", "MAX_ARCHIVE_BYTES", "MAX_ARCHIVE_MEMBERS", "Unpacked", "is_archive", "unpack_archive"]

ARCHIVE_SUFFIXES = (".tar.zst", ".tzst")
# The sha256 of the archive a folder was unpacked from (sha256sum format), written into that folder.
ARCHIVE_RECORD = "ARCHIVE.sha256"
# A 26.08 suite's archive holds a few hundred files (logs, configs, nccl-tests outputs); these bound a hostile one.
MAX_ARCHIVE_MEMBERS = 100_000
MAX_ARCHIVE_BYTES = 64 * 1024**3
_ARCHIVE_LIMIT = 1 << 50  # the compressed file is only streamed: its bound is what it unpacks to
_TOP = "llmb-archive-"  # llmb-run puts every member under one folder `llmb-archive-<UTC timestamp>/`
_FIX = "Unpack it yourself, look at what it holds, and give the folder to `evidence init` instead"


@dataclass(frozen=True)
class Unpacked:
    """The folder an archive was unpacked into, the archive's file name and sha256, its member count, and whether
    the folder was there already (unpacked by an earlier `evidence init` from the same bytes)."""

    folder: Path
    name: str
    sha256: str
    members: int
    reused: bool = False


def is_archive(path: Path) -> bool:
    return path.name.endswith(ARCHIVE_SUFFIXES)


def unpacked_folder(archive: Path) -> Path:
    """Where `archive` is unpacked: beside it, named as it is without its suffix."""
    name = archive.name
    for suffix in ARCHIVE_SUFFIXES:
        name = name.removesuffix(suffix)
    return archive.parent / name


def unpack_archive(archive: Path, *, member_limit: int, max_members: int = MAX_ARCHIVE_MEMBERS,
                   max_bytes: int = MAX_ARCHIVE_BYTES) -> Unpacked:
    """Unpack `archive` into the folder beside it (`unpacked_folder`), streaming: every member is checked before
    it is written (a relative path without '..', a regular file or folder, at most `member_limit` bytes, at most
    `max_members` members and `max_bytes` in all) and the first that is not is refused by name (EvidenceError),
    leaving nothing behind. A folder already there is used again only when it records this archive's sha256."""
    shown = str(archive)
    if not archive.exists():
        raise UsageError(f"{archive}: no such archive. Give the llmb-archive_*.tar.zst that `llmb-run archive` wrote")
    dest = unpacked_folder(archive)
    if dest.exists() or dest.is_symlink():
        return _reused(archive, dest)
    partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    try:
        partial.mkdir()
    except OSError as exc:
        raise UsageError(f"{archive.parent}: cannot unpack {archive.name} beside it ({exc.strerror}). Copy the "
                         "archive to a folder you can write to") from None
    try:
        with open_regular(archive, shown, limit=_ARCHIVE_LIMIT) as handle:
            members = _extract(handle, partial, shown, member_limit, max_members, max_bytes)
            digest = whole_sha256(handle)  # the rest of the file past the tar's end, hashed as it is read
        (partial / ARCHIVE_RECORD).write_text(f"{digest}  {archive.name}\n", encoding="utf-8")
        os.rename(partial, dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # only the folder this call made
        raise
    return Unpacked(dest, archive.name, digest, members)


def _reused(archive: Path, dest: Path) -> Unpacked:
    record = dest / ARCHIVE_RECORD
    digest = sha256_file(archive)
    recorded = record.read_text(encoding="utf-8").split()[0] if record.is_file() and not dest.is_symlink() else None
    if recorded != digest:
        raise UsageError(f"{dest}: the folder `evidence init` unpacks {archive.name} into is already there and was "
                         "not unpacked from this archive. Move it away, or give the folder itself to `evidence init`")
    return Unpacked(dest, archive.name, digest, sum(1 for _ in dest.rglob("*")), reused=True)


def _member_path(name: str, top: str | None, shown: str) -> PurePosixPath | None:
    """The member's path inside the unpacked folder (llmb-run's top folder left out), refused when it could land
    outside it; None for the top folder itself."""
    pure = PurePosixPath(name)
    if name.startswith("/") or pure.is_absolute() or "\\" in name:
        raise EvidenceError(shown, f"member '{name}': expected a relative path, got an absolute one. {_FIX}")
    if ".." in pure.parts or any(ord(c) < 32 for c in name):
        raise EvidenceError(shown, f"member '{name}': expected a path inside the archive, got one that climbs out "
                            f"with '..' or holds control characters. {_FIX}")
    parts = [p for p in pure.parts if p != "."]
    if top is not None and parts and parts[0] == top:
        parts = parts[1:]
    return PurePosixPath(*parts) if parts else None


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link (to '{member.linkname}')"
    if member.islnk():
        return f"a hard link (to '{member.linkname}')"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    if member.issparse():
        return "a sparse file"
    return f"a member of tar type {member.type!r}"


def _extract(handle: BinaryIO, into: Path, shown: str, member_limit: int, max_members: int, max_bytes: int) -> int:
    """Every member of the zstd-compressed tar stream `handle` checked and written under `into`; their count."""
    reader = zstandard.ZstdDecompressor().stream_reader(handle, read_across_frames=True, closefd=False)
    count, total = 0, 0
    seen: set[str] = set()
    top: str | None = None
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for member in tar:
                count += 1
                if count > max_members:
                    raise EvidenceError(shown, f"expected at most {max_members} members, got more (member "
                                        f"'{member.name}'). {_FIX}")
                if count == 1 and member.isdir() and PurePosixPath(member.name).name.startswith(_TOP) \
                        and len(PurePosixPath(member.name).parts) == 1:
                    top = PurePosixPath(member.name).name
                rel = _member_path(member.name, top, shown)
                if not (member.isdir() or (member.isreg() and not member.issparse())):
                    raise EvidenceError(shown, f"member '{member.name}': expected a regular file or folder, got "
                                        f"{_kind(member)}. {_FIX}")
                if rel is None:
                    continue
                key = rel.as_posix()
                if key in seen:
                    raise EvidenceError(shown, f"member '{member.name}': expected each path once, got it twice "
                                        f"(the second would replace the first). {_FIX}")
                seen.add(key)
                total += 0 if member.isdir() else member.size
                if member.size > member_limit:
                    raise EvidenceError(shown, f"member '{member.name}': expected at most {amount(member_limit)}, "
                                        f"got {amount(member.size)}. {_FIX}")
                if total > max_bytes:
                    raise EvidenceError(shown, f"expected at most {amount(max_bytes)} unpacked, got more by member "
                                        f"'{member.name}'. {_FIX}")
                try:
                    _write_member(tar, member, into / key)
                except OSError as exc:  # a file where a folder of another member goes, or the disk is full
                    raise EvidenceError(shown, f"member '{member.name}': cannot be written ({exc.strerror}). "
                                        f"{_FIX}") from None
    except (zstandard.ZstdError, tarfile.TarError, EOFError) as exc:
        raise EvidenceError(shown, f"expected a zstd-compressed tar archive (`llmb-run archive`), got one that "
                            f"cannot be read ({exc.__class__.__name__}: {str(exc)[:120]})") from None
    return count


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    source = tar.extractfile(member)
    if source is None:  # a regular member always has its data; kept for the type checker
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    # O_EXCL | O_NOFOLLOW: a path the checks let through can still never write through a link or over a file
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
