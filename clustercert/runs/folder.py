"""The steps of a certification that touch disk: load inputs, parse runs, write and seal the run folder."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from clustercert.attest.atomic import write_atomic
from clustercert.attest.manifest import ENVELOPE, evidence_subjects, sign_manifest
from clustercert.attest.signing import KeyPair, sign_pdf
from clustercert.attest.software import software_record
from clustercert.baselines import apply_baselines, load_baselines
from clustercert.catalog import LoadedCatalog, check_bundle_ids, choose_catalog
from clustercert.errors import CatalogError, EvidenceError, RenderError, UsageError
from clustercert.evidence.bundle import BUNDLE_FILE, LoadedBundle, load_bundle, read_seal, sealed_size_changes
from clustercert.evidence.facts import BundleFacts, bundle_facts
from clustercert.evidence.guards import (
    MAX_YAML_BYTES,
    ReadStopped,
    amount,
    digests_read,
    open_regular,
    parts_read,
    read_mark,
    read_regular,
    whole_sha256,
)
from clustercert.evidence.hashing import sha256_bytes, sha256_file
from clustercert.lifeline import follow_parent, signals_wait
from clustercert.report import Redactor, ReportInput, build_context, render_html, render_pdf
from clustercert.report.ahead import usable_cores
from clustercert.report.charts import shared_charts
from clustercert.runs.references import LoadedReference, load_references
from clustercert.runs.results import RunMeta, dump_json_bytes

# Charts drawn ahead, keyed by their data, or a call that gives them (waited for where the report needs them)
Charts = dict[str, Any] | Callable[[], dict[str, Any]] | None

__all__ = ["Charts", "GivenFiles", "Inputs", "ManifestPass", "Rendering", "RunRecord", "check_as_read", "check_seal",
           "create_run_dir", "file_digest", "load_inputs", "render_reports", "seal_problems", "write_run_folder"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunRecord:
    """What the run decided, as its folder keeps it: results.json, the run's metadata and validation.json."""

    results: dict[str, Any]
    meta: RunMeta
    validation: dict[str, Any] | None = None


@dataclass(frozen=True)
class Rendering:
    """How the reports are made: the templates, whether a redacted copy is made too, the charts drawn ahead (keyed
    by their data, or a call that gives them, made where the first chart is needed so that its wait comes after
    the run's other work), and who is told each step."""

    templates_dir: Path
    redact: bool = False
    charts: Charts = None
    progress: Callable[[str], None] | None = None


@dataclass(frozen=True)
class Inputs:
    """The loaded bundle and catalog, with the sha256 of bundle.yaml and of every evidence file as they were when
    the run loaded them: those are the digests the manifest signs (see `write_run_folder`). `read_from` is the
    mark (`guards.read_mark`) taken before the load: every read of a file since then must have had those bytes."""

    bundle: LoadedBundle
    catalog: LoadedCatalog
    digests: dict[str, str] = field(default_factory=dict, compare=False)
    read_from: int = field(default=0, compare=False)
    # the reference files judged with beside the catalog (runs.references: the node-health rules where the health
    # phase judges, the MLPerf benchmarks file where the bundle has an MLPerf run), each copied into the run folder
    references: tuple[LoadedReference[Any], ...] = ()

    @property
    def facts(self) -> BundleFacts:
        """What the catalog says about each run (FLOPs per sequence, peak, window): the validation tables' view
        of the catalog."""
        return bundle_facts(self.bundle, self.catalog)


def _signature(path: Path) -> tuple[str, int, int, int]:
    stat = path.stat()
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)


def _unchanged(signatures: tuple[tuple[str, int, int, int], ...]) -> bool:
    """Whether every file of `signatures` (their real paths) is still the file it was: the same size, modification
    time and inode. A stat each, not _signature()'s walk of every part of the path again: a cluster's bundle has
    thousands of files."""
    stat = os.stat
    try:
        for path, size, mtime_ns, inode in signatures:
            now = stat(path)
            if (now.st_size, now.st_mtime_ns, now.st_ino) != (size, mtime_ns, inode):
                return False
    except OSError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _digest(signature: tuple[str, int, int, int]) -> str:
    return sha256_file(Path(signature[0]))


def file_digest(path: Path) -> str:
    """sha256 of `path`, computed once per process for an unchanged file (same size, mtime and inode)."""
    return _digest(_signature(path))


@dataclass(frozen=True)
class GivenFiles:
    """Files a certification is given beside the bundle and catalog: a baselines file (certify --baselines: the
    targets it gives replace the catalog's), and reference files by their key (`runs.references.REFERENCES`: a
    re-run's copies; one not given is references_dir's, loaded where a phase judges with it)."""

    baselines: str | None = None
    references: Mapping[str, str] = field(default_factory=dict)


_LOADED: dict[tuple[str, str, str | None, bool, str | None, tuple[tuple[str, str], ...]],
              tuple[tuple[tuple[str, int, int, int], ...], Inputs]] = {}


def load_inputs(bundle_path: Path, references_dir: Path, catalog_override: str | None = None, *,
                described: Callable[[], object] | None = None,
                progress: Callable[[str, str], None] | None = None, in_bundle_names: bool = True,
                given: GivenFiles | None = None) -> Inputs:
    """The bundle and catalog, loaded once per process: certify's command line and its flow share one load (it is
    repeated only when bundle.yaml, the catalog or an evidence file changed on disk).

    `described` is called once bundle.yaml and the catalog are read and agree, before the evidence files are
    hashed (the load's longest part at cluster scale: gigabytes of telemetry): certify starts Prefect's server
    then. `progress` (a progress listener) is told, as stage "hash", how far the hashing is.
    `in_bundle_names`: a certification's naming of the evidence files, by their paths in the bundle (`evidence
    check` names them as the command was given them: `LoadedBundle.shown`). `given`: the baselines file and the
    reference files the run was given (`GivenFiles`)."""
    given = given or GivenFiles()
    baselines = given.baselines
    key = (str(bundle_path.resolve()), str(references_dir.resolve()), catalog_override, in_bundle_names, baselines,
           tuple(sorted(given.references.items())))
    known = _LOADED.get(key)
    if known is not None:
        signatures, inputs = known
        if _unchanged(signatures):
            if described is not None:
                described()
            return inputs
    mark = read_mark()
    bundle = load_bundle(bundle_path, in_bundle_names=in_bundle_names)
    resized = sealed_size_changes(bundle)  # not hashed: the seal's check refuses them by their size
    catalog = choose_catalog(bundle.spec, bundle.root, references_dir, catalog_override)
    if baselines is not None:  # the targets the person running certify gives (clustercert.baselines)
        catalog = apply_baselines(catalog, load_baselines(Path(baselines)))
    check_bundle_ids(bundle.spec, catalog, str(bundle.root / BUNDLE_FILE))
    if described is not None:
        described()
    files = [BUNDLE_FILE, *bundle.evidence_files()]
    digests = _digests(bundle.root, [rel for rel in files if (bundle.root / rel).is_file() and rel not in resized],
                       progress)
    references = load_references(bundle, catalog, references_dir, given.references)
    inputs = Inputs(bundle, catalog, digests, mark, references)
    paths = [bundle.root / rel for rel in files if rel in digests] + [catalog.path] + (
        [catalog.baselines_path] if catalog.baselines_path is not None else []) + [r.path for r in references]
    _LOADED[key] = (tuple(_signature(p) for p in paths), inputs)
    return inputs


def _digests(root: Path, files: list[str], progress: Callable[[str, str], None] | None = None) -> dict[str, str]:
    """file_digest() of each file, in `files`' order, hashed on two threads, largest first: a cluster's bundle is one
    telemetry file of gigabytes (hashlib and reads release the GIL) and thousands of small files (whose hashing is
    Python's own work), hashed side by side rather than one after the other. A file that cannot be hashed raises
    as it did in a loop over `files`: the first such file in their order. `progress` is told how far it is
    (`_show_hashing`)."""
    sizes = {}
    for rel in files:
        try:
            sizes[rel] = (root / rel).stat().st_size
        except OSError:
            sizes[rel] = 0  # file_digest names the problem
    order = sorted(files, key=sizes.__getitem__, reverse=True)
    with ThreadPoolExecutor(2, thread_name_prefix="clustercert-load") as pool:
        futures = {rel: pool.submit(file_digest, root / rel) for rel in order}
        try:
            if progress is not None:
                _show_hashing(futures, order, sizes, progress)
            return {rel: futures[rel].result() for rel in files}
        finally:
            for future in futures.values():
                future.cancel()  # after a failure: the files not started are not read


_HASH_LOOK = 0.25  # seconds between two looks at the load's hashing (a plain progress line is shown once a second)
_HASH_QUIET = 1.0  # a load's hashing says nothing in its first second (a refusal of the sample is one line, alone)


def _show_hashing(futures: dict[str, Future[str]], order: list[str], sizes: dict[str, int],
                  progress: Callable[[str, str], None]) -> None:
    """Tell `progress` (stage "hash"), once the hashing has taken `_HASH_QUIET`, and until every file is hashed or
    one cannot be, the largest file still being hashed and how many files and bytes of how many are done: at a look
    (`_HASH_LOOK`) that finds more files done than the last line said (a plain line is shown at most once a second)
    and every `_WAIT_SHOWN` seconds while one large file is hashed (a cluster's telemetry: gigabytes in one
    file)."""
    lock, ended = threading.Lock(), threading.Event()
    finished = [0, 0]  # files, bytes

    def done(future: Future[str], size: int) -> None:
        with lock:
            finished[0] += 1
            finished[1] += size
            if finished[0] == len(order) or (not future.cancelled() and future.exception() is not None):
                ended.set()  # all hashed, or one cannot be (the caller raises the first in the bundle's order)

    for rel in order:
        futures[rel].add_done_callback(functools.partial(done, size=sizes[rel]))
    total, started = sum(sizes.values()), time.monotonic()
    shown_at, shown_files, at = started, -1, 0
    while not ended.wait(_HASH_LOOK):  # a look every quarter second, not one per file (a sweep's thousands)
        with lock:
            files, hashed = finished
        now = time.monotonic()
        if now - started < _HASH_QUIET or (files == shown_files and now - shown_at < _WAIT_SHOWN):
            continue
        while at < len(order) and futures[order[at]].done():
            at += 1  # to the largest file not yet hashed (the threads take the files in this order)
        if at < len(order):
            progress("hash", f"sha256 of the evidence: {order[at]} ({amount(sizes[order[at]])}); {files:,} of "
                     f"{len(order):,} files ({amount(hashed)} of {amount(total)}) hashed")
        shown_at, shown_files = now, files


def seal_problems(bundle: LoadedBundle, digests: dict[str, str] | None = None) -> list[EvidenceError]:
    """Each file of a sealed bundle that no longer matches its seal (missing, or other bytes), in the seal's
    order; none for an unsealed bundle. `digests` (an `Inputs`' own) are the hashes the run read the files with."""
    sealed = read_seal(bundle)
    if sealed is None:
        return []
    found: list[EvidenceError] = []
    resized = sealed_size_changes(bundle, sealed)
    for rel, digest in sealed.digests.items():
        path = bundle.root / rel
        if not path.is_file():
            found.append(EvidenceError(str(path), "listed in MANIFEST.sha256 but missing. Restore it or re-seal the "
                                       "bundle"))
        elif rel in resized:  # never hashed: its size says it changed
            now, size = resized[rel]
            found.append(EvidenceError(str(path), f"changed since the bundle was sealed ({now} bytes, {size} in "
                                       "MANIFEST.sha256)"))
        elif ((digests or {}).get(rel) or file_digest(path)) != digest:
            found.append(EvidenceError(str(path), "changed since the bundle was sealed (sha256 differs from "
                                       "MANIFEST.sha256)"))
    return found


def check_seal(bundle: LoadedBundle, digests: dict[str, str] | None = None) -> None:
    """When the bundle is sealed, every listed file must still match (`seal_problems`); an unsealed bundle is
    accepted. The error names the first file that does not, and counts the others (each was found only once the
    one before was mended: a run refused again for the next)."""
    found = seal_problems(bundle, digests)
    if not found:
        return
    first = found[0]
    if len(found) == 1:
        raise first
    more = len(found) - 1
    raise EvidenceError(first.file, f"{first.message}; and {more} more file{'s' if more > 1 else ''} changed or "
                        "missing since the bundle was sealed (`clustercert evidence check` names each)")


def check_as_read(inputs: Inputs, *, parts: bool = True) -> None:
    """Every evidence file (and bundle.yaml) was read, by its parsers and anything else since the load, with the
    bytes it had at the load (`guards.digests_read`, `guards.parts_read`): a whole read's sha256 must be the load's,
    and each part read (a peek, a file's edges) must be the loaded file's bytes at that offset (checked in one pass
    over the file, whose sha256 must be the load's; `parts=False` skips this pass). A file read with other bytes
    (swapped while the run read it, even if restored since) is an EvidenceError naming it; a file nothing read is
    left to the manifest's check against its load digest."""
    bundle = inputs.bundle
    for rel in [BUNDLE_FILE, *bundle.evidence_files()]:
        loaded = inputs.digests.get(rel)
        if loaded is None:
            continue  # not a regular file at load: the manifest refuses it
        path = bundle.root / rel
        try:
            other = sorted(digests_read(path, since=inputs.read_from) - {loaded})
            pieces = parts_read(path, since=inputs.read_from) if parts else set()
        except OSError:
            continue  # gone: the manifest says so
        if other:
            raise EvidenceError(str(path), f"changed while the run read it: sha256 at load {loaded}, as parsed "
                                f"{other[0]}. {_UNTOUCHED}")
        if pieces:
            _check_parts(path, loaded, sorted(pieces))


_UNTOUCHED = "Leave the bundle untouched while certifying and certify again"


def _parts_wanted(inputs: Inputs) -> dict[str, tuple[str, list[tuple[int, int, str]]]]:
    """By path: the load's sha256 and the parts read since the load, of each file that had parts read."""
    wanted: dict[str, tuple[str, list[tuple[int, int, str]]]] = {}
    for rel in [BUNDLE_FILE, *inputs.bundle.evidence_files()]:
        loaded = inputs.digests.get(rel)
        path = inputs.bundle.root / rel
        if loaded is not None:
            with contextlib.suppress(OSError):  # gone: the manifest says so
                pieces = parts_read(path, since=inputs.read_from)
                if pieces:
                    wanted[str(path)] = (loaded, sorted(pieces))
    return wanted


def _hashing(wanted: dict[str, tuple[str, list[tuple[int, int, str]]]], *,
             block: int = 1 << 20, stopped: threading.Event | None = None) -> Callable[[Path], str]:
    """sha256_file() for the manifest, which also checks, in the same pass, the parts read of each file since the
    load (`_parts_wanted`: `check_as_read`'s check of them); given up (ReadStopped) once `stopped` is set."""
    def hash_file(path: Path) -> str:
        found = wanted.get(str(path))
        if found is None:
            return sha256_file(path, block=block, stopped=stopped)
        return _check_parts(path, *found, block=block, stopped=stopped)

    return hash_file


def _status(path: Path) -> tuple[int, int, int, int, int] | None:
    """What changes when a file is written, replaced or touched (its ctime moves with any change), or None."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


# A file this large is hashed for the manifest on the pass's thread, in blocks this large. The thread needs the GIL
# back after each read and each hash update, and a thread that wants it waits up to the switch interval (5 ms) while
# the main thread lays out the report: thousands of small files (or 1 MB blocks) would starve the thread (a pass
# beside a busy main thread took tens of times as long as alone), so those are hashed on the main thread.
_LARGE = 64 * 1024**2
_BLOCK = 64 * 1024**2  # kept apart from _LARGE: a test that moves every file to the thread keeps large blocks
_WAIT_SHOWN = 5.0  # seconds between two reports of a wait for a large file's hash, the load's or the manifest's


class ManifestPass:
    """The manifest's pass over the evidence (`evidence_subjects`, with each file's parts read checked in the same
    read: `_hashing`), its large files on a thread of their own, started once the phases have read the evidence
    (certify's flow: hashing a cluster's telemetry again then overlaps the validation and the reports, rather than
    following them) or, by default, before the reports render (hashlib and file reads release the GIL: WeasyPrint's
    layout holds it). The other files are
    hashed at `subjects`, in bundle order with the large ones' results (the first file that cannot be signed is
    named, as before). What a pass at the end checked is still checked then: each large file's status is taken
    before it is hashed and must be the same (a file written, replaced or touched after its hash is refused), and
    parts read after the pass took its list are checked; every whole read since the load is checked against the
    load's digest (`check_as_read`) at the end as before, whenever the pass began."""

    def __init__(self, inputs: Inputs) -> None:
        self._inputs, self._evidence = inputs, [BUNDLE_FILE, *inputs.bundle.evidence_files()]
        self._wanted = _parts_wanted(inputs)
        self._before: dict[str, tuple[int, int, int, int, int] | None] = {}
        self._stopped = threading.Event()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="clustercert-manifest")
        root = inputs.bundle.root
        large = [rel for rel in self._evidence
                 if (status := _status(root / rel)) is not None and status[2] >= _LARGE]
        self._large = {rel: self._pool.submit(self._hash, rel) for rel in large}

    def _hash(self, rel: str) -> list[dict[str, Any]]:
        if self._stopped.is_set():  # the run failed: nothing will be signed
            return []
        root = self._inputs.bundle.root
        self._before[rel] = _status(root / rel)
        try:  # a run that fails while a cluster's telemetry is hashed does not wait for the hash's end
            return evidence_subjects(root, [rel], self._inputs.digests or None,
                                     _hashing(self._wanted, block=_BLOCK, stopped=self._stopped))
        except ReadStopped:
            return []

    def subjects(self, progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
        """The evidence subjects to sign (an EvidenceError of the pass is raised here, the first in bundle order),
        once nothing changed since each large file was hashed. While a large file's hash is waited for, `progress`
        is told which one, and how long it has been waited for, every `_WAIT_SHOWN` seconds (a cluster's telemetry
        can take longer to hash again than the reports take to render)."""
        root = self._inputs.bundle.root
        digests, hash_file = self._inputs.digests or None, _hashing(self._wanted)
        subjects: list[dict[str, Any]] = []
        waited, started = 0, time.monotonic()
        for rel in self._evidence:
            found = self._large.get(rel)
            if found is None:
                subjects += evidence_subjects(root, [rel], digests, hash_file)
                continue
            waited += 1
            while progress is not None and not found.done():
                progress(f"the evidence hashed again for the manifest: {rel} ({waited:,} of {len(self._large):,} "
                         f"large files, waited {time.monotonic() - started:.0f} s)")
                wait([found], timeout=_WAIT_SHOWN)
            subjects += found.result()
        self._pool.shutdown()
        on_thread = {str(root / rel) for rel in self._before}
        for path, (loaded, pieces) in _parts_wanted(self._inputs).items():
            checked = set(self._wanted.get(path, (loaded, []))[1])
            if path in on_thread:
                # read since its hash began (the judge's collection window reads a file's edges): only the parts
                # are read again, the status check below says the rest (the file is the one hashed, unchanged)
                _check_ranges(Path(path), loaded, [piece for piece in pieces if piece not in checked])
            elif self._wanted.get(path) != (loaded, pieces):  # read since the pass began: hashed whole again
                _check_parts(Path(path), loaded, pieces)
        for rel, before in self._before.items():
            if _status(root / rel) != before:
                raise EvidenceError(str(root / rel), f"changed while the run wrote its report, after it was hashed "
                                    f"for the manifest. {_UNTOUCHED}")
        return subjects

    def stop(self) -> None:
        """End the pass without its result (the run failed); returns once no thread reads the bundle."""
        self._stopped.set()
        self._pool.shutdown(wait=True)


def _check_parts(path: Path, loaded: str, pieces: list[tuple[int, int, str]], *, block: int = 1 << 20,
                 stopped: threading.Event | None = None) -> str:
    """The parts read of `path` are the bytes at their offsets of the file as loaded: one pass over the file now
    hashes the whole (it must be the load's, which is returned) and each part from the same bytes. Given up
    (ReadStopped) at the first block after `stopped` is set."""
    hashers = [hashlib.sha256() for _ in pieces]
    at = 0
    with open_regular(path, limit=1 << 50) as handle:
        for data in iter(lambda: handle.read(block), b""):
            if stopped is not None and stopped.is_set():
                raise ReadStopped
            end = at + len(data)
            for (offset, length, _), hasher in zip(pieces, hashers, strict=True):
                lo, hi = max(offset, at), min(offset + length, end)
                if lo < hi:
                    hasher.update(data[lo - at:hi - at])
            at = end
        whole = whole_sha256(handle, block=block)  # the guarded handle's own hash of the bytes just read
    if whole != loaded:
        raise EvidenceError(str(path), f"changed while the run read it: sha256 at load {loaded}, now "
                            f"{whole}. {_UNTOUCHED}")
    for (offset, length, digest), hasher in zip(pieces, hashers, strict=True):
        if offset + length > at or hasher.hexdigest() != digest:
            raise _part_changed(path, loaded, offset, length, digest)
    return whole


def _part_changed(path: Path, loaded: str, offset: int, length: int, digest: str) -> EvidenceError:
    """The refusal of a part read with other bytes than the loaded file's at its offset."""
    return EvidenceError(str(path), f"changed while the run read it: sha256 at load {loaded}, but bytes "
                         f"{offset}-{offset + length} were read with sha256 {digest}, not the loaded file's. "
                         f"{_UNTOUCHED}")


def _check_ranges(path: Path, loaded: str, pieces: list[tuple[int, int, str]]) -> None:
    """The parts read of `path` are the bytes at their offsets of the file now: for a file hashed whole (as loaded)
    whose status is then checked unchanged since (`ManifestPass`), the loaded file's bytes."""
    if not pieces:
        return
    with open_regular(path, limit=1 << 50) as handle:
        for offset, length, digest in pieces:
            handle.seek(offset)
            data = handle.read(length)
            if len(data) != length or hashlib.sha256(data).hexdigest() != digest:
                raise _part_changed(path, loaded, offset, length, digest)


def _baselines_as_judged(inputs: Inputs) -> bytes:
    """The baselines file's bytes for the run folder's copy: those whose sha256 the run loaded it with."""
    catalog = inputs.catalog
    assert catalog.baselines_path is not None and catalog.baselines is not None
    data = read_regular(catalog.baselines_path, limit=MAX_YAML_BYTES)
    if sha256_bytes(data) != catalog.baselines["sha256"]:
        raise CatalogError(f"{catalog.baselines_path}: changed while the run read it. Leave the baselines file "
                           "untouched while certifying and certify again")
    return data


def _as_judged(inputs: Inputs, path: Path, sha256: str, what: str) -> bytes:
    """The bytes of `path` (the catalog, or a reference file) for the run folder's copy: those whose sha256 the
    run recorded at load (and signs), and which every read of the file since had; a file that changed meanwhile is
    a CatalogError."""
    data = read_regular(path, limit=MAX_YAML_BYTES)
    seen = sorted((digests_read(path, since=inputs.read_from) | {sha256_bytes(data)}) - {sha256})
    if seen:
        raise CatalogError(f"{path}: changed while the run read it: sha256 at load {sha256}, as read {seen[0]}. "
                           f"Leave {what} untouched while certifying and certify again")
    return data


def _copies_as_judged(inputs: Inputs) -> dict[str, bytes]:
    """The run folder's copies of the catalog and of the reference files judged with, by their names there."""
    catalog = inputs.catalog
    return {"catalog.yaml": _as_judged(inputs, catalog.path, catalog.sha256, "the catalog"),
            **{r.reference.name: _as_judged(inputs, r.path, r.sha256, r.reference.what) for r in inputs.references}}


def render_reports(inputs: Inputs, record: RunRecord, software: dict[str, str], rendering: Rendering, *,
                   redaction_secret: bytes | None, base_dir: Path) -> dict[str, tuple[str, bytes]]:
    """The HTML and unsigned PDF of the report ("report") and, given a secret, of its redacted copy
    ("report.redacted"): the same arguments give the same bytes (what `rerun` compares). Charts drawn ahead
    (`rendering.charts`) are taken where their data is the same; any other is drawn here. `rendering.progress` is
    told each PDF's steps ("report.pdf: lay out the pages", "report.pdf: write 52 pages")."""
    copies = _report_inputs(inputs, record, software, redaction_secret)
    progress = rendering.progress
    # The redacted copy's PDF is rendered by a second process, on a machine with a core for it, while this one
    # renders the auditor's: its HTML is made first and handed over, and the second process has imported the
    # renderer meanwhile. The bytes are the same either way (the same renderer, the same HTML), and a copy's charts
    # are drawn alike in either order.
    aside = _SecondProcess.start() if len(copies) > 1 and usable_cores() > 1 else None
    try:
        htmls: dict[str, str] = {}
        charts = rendering.charts
        drawn = charts() if callable(charts) else charts
        with shared_charts(dict(drawn or {})):  # the redacted copy draws again only the charts redaction changed
            for stem, (report, redacted) in (list(copies.items())[::-1] if aside is not None else copies.items()):
                htmls[stem] = render_html(build_context(report, redacted=redacted), rendering.templates_dir)
                if aside is not None and stem != "report" and aside.submit(stem, htmls[stem], base_dir) \
                        and progress is not None:
                    progress(f"{stem}.pdf: rendered by a second process meanwhile")
        pdfs: dict[str, bytes] = {}
        for stem in copies:
            told = None if progress is None else functools.partial(_told, progress, f"{stem}.pdf: ")
            pdf = aside.result(stem, progress) if aside is not None else None
            pdfs[stem] = pdf if pdf is not None else render_pdf(htmls[stem], base_dir, told)
    finally:
        if aside is not None:
            aside.close()
    return {stem: (htmls[stem], pdfs[stem]) for stem in copies}


def _report_inputs(inputs: Inputs, record: RunRecord, software: dict[str, str],
                   redaction_secret: bytes | None) -> dict[str, tuple[ReportInput, bool]]:
    """What each report shows, by its file stem, and whether it is the redacted copy: the auditor's "report", and
    given a secret "report.redacted", whose results, metadata, system, inventory and validation are redacted."""
    bundle, catalog = inputs.bundle, inputs.catalog
    inventory = [
        {"path": rel, "bytes": (bundle.root / rel).stat().st_size,
         "sha256": inputs.digests.get(rel) or sha256_file(bundle.root / rel)}
        for rel in bundle.evidence_files()
    ]
    system = bundle.spec.system.model_dump()
    report = ReportInput(
        results=record.results, meta=record.meta.to_json(), system=system,
        models={k: v.name for k, v in catalog.spec.models.items()},
        sources={k: v.model_dump() for k, v in catalog.spec.sources.items()}, inventory=inventory,
        software=software, validation=record.validation,
        mlps={k: v.mlp.value for k, v in catalog.spec.models.items()},
    )
    copies = {"report": (report, False)}
    if redaction_secret is not None:
        redactor = Redactor(redaction_secret, [str(n) for n in system.get("nodes", [])])
        shown = redactor({"results": report.results, "meta": report.meta, "system": report.system,
                          "inventory": report.inventory, "validation": report.validation})
        copies["report.redacted"] = (replace(report, **shown), True)
    return copies


def _told(progress: Callable[[str], None], prefix: str, what: str) -> None:
    progress(prefix + what)


class _SecondProcess:
    """A spawned process that renders PDFs (`render_pdf`) beside this one. It imports the renderer as soon as it
    starts; a PDF it cannot give (no process could start, it died) is None from `result`, rendered here instead."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.futures: dict[str, Any] = {}

    @classmethod
    def start(cls) -> _SecondProcess | None:
        import concurrent.futures
        import multiprocessing

        try:  # spawned, never forked: the run has Prefect's threads
            # the process ends with this one, also when this one is killed outright (clustercert.lifeline)
            pool = concurrent.futures.ProcessPoolExecutor(max_workers=1,
                                                          mp_context=multiprocessing.get_context("spawn"),
                                                          initializer=follow_parent, initargs=(os.getpid(),))
            with signals_wait():  # its process starts here: a SIGINT or SIGTERM meanwhile stops it with the run
                pool.submit(_import_renderer)
        except OSError as exc:  # no process or pipe left to this user: the PDFs are rendered here
            log.warning("the report's PDFs: no second process (%s); rendered one after the other", exc)
            return None
        return cls(pool)

    def submit(self, stem: str, html: str, base_dir: Path) -> bool:
        try:
            self.futures[stem] = self.pool.submit(render_pdf, html, base_dir)
        except Exception as exc:  # the process is gone (BrokenProcessPool): rendered here
            log.warning("%s.pdf: no second process (%s); rendered here", stem, exc)
            return False
        return True

    def result(self, stem: str, progress: Callable[[str], None] | None) -> bytes | None:
        future = self.futures.get(stem)
        if future is None:
            return None
        if progress is not None and not future.done():
            progress(f"{stem}.pdf: wait for the second process")
        try:
            return bytes(future.result())
        except RenderError:
            raise  # the document's own error: rendering it here would meet it again
        except Exception as exc:  # the process died (memory, a signal): rendered here instead
            log.warning("%s.pdf: the second process failed (%s: %s); rendered here", stem, exc.__class__.__name__,
                        exc)
            return None

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _import_renderer() -> None:
    """What a PDF needs imported (WeasyPrint, seconds of imports), while the report's HTML is made."""
    import weasyprint  # noqa: F401


def create_run_dir(run_dir: Path) -> None:
    """Create the run folder exclusively (never an existing one: a concurrent run owns it)."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(run_dir)
    except FileExistsError:
        raise UsageError(f"{run_dir}: expected a new run folder, got one that exists (another run's). "
                         "Certify again: every run gets a new id") from None
    except OSError as exc:
        raise UsageError(f"{run_dir}: cannot create the run folder ({exc.strerror}). "
                         "Give a writable --reports-dir or CLUSTERCERT_REPORTS_DIR") from None


def write_run_folder(run_dir: Path, inputs: Inputs, record: RunRecord, key: KeyPair, rendering: Rendering,
                     manifest_pass: ManifestPass | None = None) -> dict[str, Path]:
    """results.json, catalog copy, report.html, report.pdf (signed), the redacted copy when asked, then
    manifest.json and its DSSE envelope; `rendering.progress` is told each step (render, sign, the manifest's wait).
    Refused (EvidenceError, no folder left) when a file was read with other bytes than it had at the load
    (`check_as_read`) or than its seal says (`check_seal`).

    The parts read (a file's edges) are checked in the manifest's own pass over the evidence, which hashes each
    file anyway (one pass over the evidence instead of two), on a thread while the reports render
    (`ManifestPass`; `manifest_pass` when the caller started it earlier: it is ended here, whatever happens); a
    mismatch there removes the folder."""
    try:
        check_as_read(inputs, parts=False)  # before any work: a run judged on other bytes is never written
        copies = _copies_as_judged(inputs)
        create_run_dir(run_dir)
    except BaseException:
        if manifest_pass is not None:
            manifest_pass.stop()
        raise
    if manifest_pass is None:
        manifest_pass = ManifestPass(inputs)  # hashes the evidence while the reports render
    try:
        return _write_run_files(run_dir, inputs, record, key, rendering, copies, manifest_pass)
    finally:
        manifest_pass.stop()


def _write_run_files(run_dir: Path, inputs: Inputs, record: RunRecord, key: KeyPair, rendering: Rendering,
                     copies: dict[str, bytes], manifest_pass: ManifestPass) -> dict[str, Path]:
    bundle, catalog, results, meta = inputs.bundle, inputs.catalog, record.results, record.meta
    progress = rendering.progress
    tell = progress or (lambda what: None)
    software = software_record()
    written: list[str] = []

    def put(name: str, data: bytes) -> Path:
        # Each file under a temporary name, then renamed: a kill leaves no half-written file under its name.
        written.append(name)
        return write_atomic(run_dir / name, data)

    put("results.json", dump_json_bytes(results))
    if record.validation is not None:
        put("validation.json", dump_json_bytes(record.validation))
    for name, data in copies.items():  # the catalog and the reference files that judged, which a re-run judges with
        put(name, data)
    if catalog.baselines_path is not None:  # the targets that judged, beside the catalog they replaced
        put("baselines.yaml", _baselines_as_judged(inputs))
    tell("render the HTML and PDF reports" + (" and their redacted copies" if rendering.redact else ""))
    rendered = render_reports(inputs, record, software, rendering,
                              redaction_secret=key.redaction_secret() if rendering.redact else None, base_dir=run_dir)
    signing = {"reason": f"clustercert certification {results['outcome']} of {bundle.spec.cluster.name}",
               "location": f"run {meta.run_id}"}
    paths = {}
    for stem, (html, unsigned) in rendered.items():
        tell(f"sign {stem}.pdf")
        paths[f"{stem}.html"] = put(f"{stem}.html", html.encode())
        paths[f"{stem}.pdf"] = put(f"{stem}.pdf", sign_pdf(key, unsigned, **signing))
    predicate = {
        "outcome": results["outcome"],
        "valid_until": results["valid_until"],
        "validity_basis": results.get("validity_basis"),
        "evidence_window": results.get("evidence_window"),
        "catalog": {"id": catalog.spec.id, "sha256": catalog.sha256},
        **{r.reference.key: r.edition() for r in inputs.references},
        "software": software,
        "run": meta.to_json(),
        "bundle_path": meta.bundle_path,
        "cluster": bundle.spec.cluster.name,
        "redacted_copy": rendering.redact,
    }
    try:
        # The manifest and its envelope last: only the files this run wrote are signed, and the evidence digests
        # signed are those the run loaded the evidence with, which every read since had; a file that changed (or
        # was read with other bytes, or disagrees with its seal) is a refusal.
        check_as_read(inputs, parts=False)
        check_seal(bundle, inputs.digests)
        evidence = manifest_pass.subjects(progress)
        tell("write and sign the manifest")
        sign_manifest(run_dir, predicate, key, evidence, run_files=written)
    except EvidenceError:
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing of a refused run is left to look certified
        raise
    return {**paths, "results.json": run_dir / "results.json", "manifest.json": run_dir / "manifest.json",
            "manifest.dsse.json": run_dir / ENVELOPE}
