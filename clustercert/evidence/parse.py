"""Parse every file of a bundle with its run's parser, keeping each unusable file's error as a finding.

Every parse of an evidence file goes through `read_evidence`: within one certification a file is parsed once and the
phases and the validation suites read the same parsed object (it is parsed again only when the file changed on disk,
or after `forget_parsed`). Within `holding_parsed()` (the certify flow) every parse is kept, whatever the number of
files, and all are dropped at its end; outside it the memo keeps the latest 512.

What a parse read is recorded (`clustercert.evidence.guards`: the sha256 of the bytes each guarded read delivered),
and the memo keeps those records with the parse: serving a remembered parse records them again, since it is the
parse of the same bytes. A parser that opens its file by path with a library of its own (pyarrow, for the per-rank
timings) is given a private in-memory copy of the bytes read through `read_regular` instead (`_PATH_READERS`), so
that what it parses is what was recorded."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, RunKind, RunSpec
from clustercert.evidence.guards import Read, collect_reads, forget_reads, read_regular, record_read
from clustercert.parsers import FORMATS, RESILIENCE_FORMATS, TRAINING_FORMATS, parse_training_log
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.mlperf import parse_mlperf_files
from clustercert.parsers.nemo_resilience import ResilienceLog

__all__ = ["ParsedBundle", "ParsedFile", "forget_parsed", "holding_parsed", "parse_bundle", "parse_run",
           "read_evidence", "release_parsed"]

T = TypeVar("T")
_MEMO_SIZE = 512
_MEMO: OrderedDict[tuple[Any, ...], tuple[Any, tuple[tuple[str, Read], ...]]] = OrderedDict()
_MEMO_LOCK = threading.Lock()
_HOLDING = [0]  # certifications in progress in this process: while any is, the memo is not trimmed
# Parsers that open the file by path through a library (not through the guards): they parse a private copy.
_PATH_READERS = (FORMATS["rank-timings"],)


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


def read_evidence(parser: Callable[..., T], path: Path, display: str, *args: Any, **options: Any) -> T:
    """`parser(path, display, *args, **options)`, remembered for this file as it is on disk now (device,
    inode, size and modification time): the second reader of a file gets the first one's result, and the records of
    what the first one read are made again. Errors are not remembered (they are raised again by a fresh parse)."""
    stat = path.stat()
    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()))
    # the file by its device and inode (whatever path reaches it), not by its resolved path: no realpath per file
    key = (getattr(parser, "__module__", ""), getattr(parser, "__qualname__", repr(parser)), stat.st_dev,
           stat.st_size, stat.st_mtime_ns, stat.st_ino, display, args, frozen)
    with _MEMO_LOCK:
        known = _MEMO.get(key)
        if known is not None:
            _MEMO.move_to_end(key)
    if known is not None:
        remembered, seen = known
        for read in seen:
            record_read(*read)
        return remembered  # type: ignore[no-any-return]
    with collect_reads() as reads:
        if parser in _PATH_READERS:
            result = _parse_copy(parser, path, display, *args, **options)
        else:
            result = parser(path, display, *args, **options)
    with _MEMO_LOCK:
        _MEMO[key] = (result, tuple(reads))
        while not _HOLDING[0] and len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return result


@contextlib.contextmanager
def holding_parsed() -> Iterator[None]:
    """Within it every parse is remembered (a cluster's bundle has thousands of files: a bounded memo dropped the
    telemetry parsed by the resilience phase before the validation read it, which parsed it again, a second copy
    of its columns in memory); at its end, when no other holder is left, everything is forgotten."""
    with _MEMO_LOCK:
        _HOLDING[0] += 1
    try:
        yield
    finally:
        with _MEMO_LOCK:
            _HOLDING[0] -= 1
            last = not _HOLDING[0]
        if last:
            forget_parsed()


def release_parsed() -> None:
    """Drop every remembered parse but keep the records of what was read: the phases and the validation are done,
    the run folder's last check still compares those records with the files (a cluster's telemetry columns are
    not kept through the rendering)."""
    with _MEMO_LOCK:
        _MEMO.clear()


def forget_parsed() -> None:
    """Drop every remembered parse and every record of what was read (the end of a certification: a long-lived
    process keeps no evidence, and the next certification compares only its own reads)."""
    release_parsed()
    forget_reads()


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


def parse_run(bundle: LoadedBundle, run: RunSpec, limit: int = DEFAULT_LIMIT) -> list[ParsedFile]:
    """Every file of `run`, parsed with the run's format (sacct in the bundle's timezone, MLPerf's ruleset)."""
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
                result = read_evidence(parse_training_log, path, display, run.format, limit=limit)
            else:
                result = read_evidence(parser, path, display, **options)
            resilience = (read_evidence(RESILIENCE_FORMATS[run.format], path, display, limit=limit)
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
        listed = [(bundle.resolve(f, entry=f"run '{run.id}' files"), bundle.shown(f)) for f in run.files]
        result = parse_mlperf_files(listed, display, ruleset=run.ruleset, limit=limit)
    except EvidenceError as exc:
        return ParsedFile(run.id, run.kind, rel, display, None, exc)
    return ParsedFile(run.id, run.kind, rel, display, result)


def parse_bundle(bundle: LoadedBundle, limit: int = DEFAULT_LIMIT) -> ParsedBundle:
    """Every run's files parsed, by run id in bundle order."""
    return {run.id: parse_run(bundle, run, limit) for run in bundle.spec.runs}
