"""Parse every file of a bundle with its run's parser, keeping each unusable file's error as a finding.

Every parse of an evidence file goes through a `Reader`: `read_evidence` parses the file now; a `ParsedOnce` (the
one a certification's evidence set owns) parses each file once and hands every later reader the same object.
What a parse read is recorded (`clustercert.evidence.guards`: the sha256 of the bytes each guarded read
delivered); a remembered parse records those reads again when it is handed out, since it is the parse of the same
bytes. A parser that opens its file by path with a library of its own (pyarrow, for the per-rank timings) is given
a private in-memory copy of the bytes read through `read_regular` instead (`_PATH_READERS`), so that what it parses
is what was recorded."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, TypeVar

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, RunKind, RunSpec
from clustercert.evidence.guards import Read, collect_reads, read_regular, record_read
from clustercert.parsers import FORMATS, RESILIENCE_FORMATS, TRAINING_FORMATS, parse_training_log
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.mlperf import listed_files, parse_mlperf_files
from clustercert.parsers.nemo_resilience import ResilienceLog

__all__ = ["ParsedBundle", "ParsedFile", "ParsedOnce", "Reader", "parse_bundle", "parse_run", "read_evidence"]

T = TypeVar("T")
# Parsers that open the file by path through a library (not through the guards): they parse a private copy.
_PATH_READERS = (FORMATS["rank-timings"],)


class Reader(Protocol):
    """How a parse reaches its file: `parser(path, display, *args, **options)`, now or as remembered."""

    def __call__(self, parser: Callable[..., T], path: Path, display: str, /, *args: Any, **options: Any) -> T: ...


def _parse_copy(parser: Callable[..., T], path: Path, display: str, *args: Any, **options: Any) -> T:
    """`parser` run on an in-memory copy (a memfd) of the bytes `read_regular` read (and recorded) from `path`:
    the library the parser uses reads exactly those bytes, whatever happens to `path` meanwhile."""
    if not hasattr(os, "memfd_create"):  # not Linux: the library reads the file itself (not recorded)
        return parser(path, display, *args, **options)
    data = read_regular(path, display, limit=int(options.get("limit", DEFAULT_LIMIT)))
    fd = os.memfd_create("clustercert-evidence", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        del data, view
        return parser(Path(f"/proc/self/fd/{fd}"), display, *args, **options)
    finally:
        os.close(fd)


def read_evidence(parser: Callable[..., T], path: Path, display: str, /, *args: Any, **options: Any) -> T:
    """`parser(path, display, *args, **options)`, parsed now (a path reader from its private copy)."""
    if parser in _PATH_READERS:
        return _parse_copy(parser, path, display, *args, **options)
    return parser(path, display, *args, **options)


class ParsedOnce:
    """A `Reader` that remembers: each file is parsed once for this object, known by what it is on disk now
    (device, inode, size and modification time, whatever path reaches it), and a changed file is parsed again. The
    second reader gets the first one's result, and the records of what the first one read are made again. Errors
    are not remembered (they are raised again by a fresh parse). Nothing is dropped until `clear()`: a cluster's
    bundle has thousands of files, and the validation reads the telemetry the resilience phase parsed."""

    def __init__(self) -> None:
        self._parsed: dict[tuple[Any, ...], tuple[Any, tuple[tuple[str, Read], ...]]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._parsed)

    def __call__(self, parser: Callable[..., T], path: Path, display: str, /, *args: Any, **options: Any) -> T:
        stat = path.stat()
        frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()))
        key = (getattr(parser, "__module__", ""), getattr(parser, "__qualname__", repr(parser)), stat.st_dev,
               stat.st_size, stat.st_mtime_ns, stat.st_ino, display, args, frozen)
        with self._lock:
            known = self._parsed.get(key)
        if known is not None:
            remembered, seen = known
            for read in seen:
                record_read(*read)
            return remembered  # type: ignore[no-any-return]
        with collect_reads() as reads:
            result = read_evidence(parser, path, display, *args, **options)
        with self._lock:
            self._parsed[key] = (result, tuple(reads))
        return result

    def clear(self) -> None:
        """Drop every remembered parse; the records of what was read stay (the run folder's last check)."""
        with self._lock:
            self._parsed.clear()


@dataclass(frozen=True)
class ParsedFile:
    """One evidence file of one run: what its parser read, or the error that makes it unusable."""

    run: str
    kind: RunKind
    rel: str
    display: str
    result: object | None
    error: EvidenceError | None = None
    resilience: ResilienceLog | None = None

    @property
    def usable(self) -> bool:
        return self.error is None


ParsedBundle = dict[str, list[ParsedFile]]


def parse_run(bundle: LoadedBundle, run: RunSpec, limit: int = DEFAULT_LIMIT,
              read: Reader = read_evidence) -> list[ParsedFile]:
    """Every file of `run`, parsed with the run's format (sacct in the bundle's timezone, MLPerf's ruleset) through
    `read`."""
    out: list[ParsedFile] = []
    if run.format == "mlperf" and len(run.files) > 1:
        return [_parse_mlperf_listed(bundle, run, limit)]
    for rel in run.files:
        display = bundle.shown(rel)
        parser = FORMATS.get(run.format)
        if parser is None:
            error = EvidenceError(
                f"{bundle.shown('bundle.yaml')} run '{run.id}'",
                f"expected a format in ({', '.join(sorted(FORMATS))}), got '{run.format}'. Fix bundle.yaml",
                field="format",
            )
            out.append(ParsedFile(run.id, run.kind, rel, display, None, error))
            continue
        options: dict[str, object] = {"limit": limit}
        if run.format == "sacct":
            options["timezone"] = bundle.spec.timezone
            options["fields"] = run.fields
        if run.format == "mlperf" and run.ruleset is not None:
            options["ruleset"] = run.ruleset
        try:
            path = bundle.resolve(rel, entry=f"run '{run.id}' files")
            if run.format in TRAINING_FORMATS:  # the call the phases make: one parse serves both
                result = read(parse_training_log, path, display, run.format, limit=limit)
            else:
                result = read(parser, path, display, **options)
            resilience = (read(RESILIENCE_FORMATS[run.format], path, display, limit=limit)
                          if run.format in RESILIENCE_FORMATS else None)
        except EvidenceError as exc:
            out.append(ParsedFile(run.id, run.kind, rel, display, None, exc))
            continue
        out.append(ParsedFile(run.id, run.kind, rel, display, result, None, resilience))
    return out


def _parse_mlperf_listed(bundle: LoadedBundle, run: RunSpec, limit: int) -> ParsedFile:
    """An MLPerf result listed file by file is one result: every run scored together (named by its folder)."""
    parents = {str(PurePosixPath(f).parent) for f in run.files}
    rel = parents.pop() if len(parents) == 1 else run.files[0]
    display = bundle.shown(rel)
    try:
        listed = listed_files([(bundle.resolve(f, entry=f"run '{run.id}' files"), bundle.shown(f)) for f in run.files])
        result = parse_mlperf_files(listed, display, ruleset=run.ruleset, limit=limit)
    except EvidenceError as exc:
        return ParsedFile(run.id, run.kind, rel, display, None, exc)
    return ParsedFile(run.id, run.kind, rel, display, result)


def parse_bundle(bundle: LoadedBundle, limit: int = DEFAULT_LIMIT, read: Reader = read_evidence) -> ParsedBundle:
    """Every run's files parsed through `read`, by run id in bundle order."""
    return {run.id: parse_run(bundle, run, limit, read) for run in bundle.spec.runs}
