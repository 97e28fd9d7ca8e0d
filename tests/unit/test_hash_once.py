"""What is signed is what was read (issue 14 item 1): each evidence file is hashed once when the run loads it, those
digests are signed, and a file that changed during the run is a refusal naming it, with no manifest written."""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from clustercert.attest.manifest import MANIFEST, evidence_subjects, write_manifest
from clustercert.attest.signing import init_keys
from clustercert.errors import EvidenceError
from clustercert.runs.folder import check_seal, load_inputs
from tests.conftest import ROOT

SAMPLE = ROOT / "evidence" / "gb200-seed"
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(SAMPLE, root)
    return root


def test_the_run_reads_each_file_once_and_keeps_its_digest(bundle: Path) -> None:
    inputs = load_inputs(bundle, ROOT / "references")
    files = ["bundle.yaml", *inputs.bundle.evidence_files()]
    assert sorted(inputs.digests) == sorted(files)
    assert all(inputs.digests[rel] == _sha(bundle / rel) for rel in files)
    # The phase subflows' loads are the same load while nothing changed on disk.
    assert load_inputs(bundle, ROOT / "references") is inputs


def test_a_changed_file_is_loaded_again_with_its_new_digest(bundle: Path) -> None:
    # unsealed: a file of another size than a seal records is refused at load (tests/hostile/test_round3_small.py)
    (bundle / "MANIFEST.sha256").unlink()
    first = load_inputs(bundle, ROOT / "references")
    rel = first.bundle.evidence_files()[0]
    with (bundle / rel).open("a", encoding="utf-8") as handle:
        handle.write("\n")
    second = load_inputs(bundle, ROOT / "references")
    assert second is not first and second.digests[rel] == _sha(bundle / rel) != first.digests[rel]


def test_a_file_replaced_by_a_same_sized_one_of_the_same_time_is_loaded_again(bundle: Path) -> None:
    """The later loads' check is a stat per file: size, modification time and inode. A file swapped for another of
    the same size and time (another inode) is a changed file; one that vanished makes the load start over."""
    import os

    first = load_inputs(bundle, ROOT / "references")
    rel = first.bundle.evidence_files()[0]
    path = bundle / rel
    data = bytearray(path.read_bytes())
    data[0] = ord("#") if data[0] != ord("#") else ord(" ")
    before = path.stat()
    replacement = path.with_name(path.name + ".new")
    replacement.write_bytes(bytes(data))
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    replacement.replace(path)
    second = load_inputs(bundle, ROOT / "references")
    assert second is not first and second.digests[rel] == _sha(path) != first.digests[rel]
    assert load_inputs(bundle, ROOT / "references") is second
    path.unlink()
    with pytest.raises(EvidenceError, match="missing"):
        load_inputs(bundle, ROOT / "references")


def test_the_signed_digests_are_the_ones_read(bundle: Path) -> None:
    inputs = load_inputs(bundle, ROOT / "references")
    files = ["bundle.yaml", *inputs.bundle.evidence_files()]
    subjects = evidence_subjects(bundle, files, inputs.digests)
    assert {s["name"]: s["digest"]["sha256"] for s in subjects} == {f"evidence/{rel}": inputs.digests[rel]
                                                                   for rel in files}


def test_a_file_swapped_after_it_was_read_is_a_refusal_naming_it(bundle: Path, tmp_path: Path) -> None:
    inputs = load_inputs(bundle, ROOT / "references")
    files = ["bundle.yaml", *inputs.bundle.evidence_files()]
    victim = next(rel for rel in files if rel.endswith(".log"))
    # Between the parse and the attestation: the same size, other bytes (a slower log, say).
    data = bytearray((bundle / victim).read_bytes())
    data[-2] = ord("7") if data[-2] != ord("7") else ord("8")
    (bundle / victim).write_bytes(bytes(data))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text("{}")
    key = init_keys(tmp_path / "keys", passphrase=None, common_name="t", dev=True, now=NOW)
    with pytest.raises(EvidenceError) as caught:
        write_manifest(run_dir, bundle, files, {"outcome": "CERTIFIED"}, key, digests=inputs.digests)
    assert str(caught.value).startswith(f"{bundle / victim}: changed during the run (sha256 ")
    assert caught.value.exit_code == 3
    assert not (run_dir / MANIFEST).exists()


def test_a_file_removed_after_it_was_read_is_a_refusal_naming_it(bundle: Path) -> None:
    inputs = load_inputs(bundle, ROOT / "references")
    files = ["bundle.yaml", *inputs.bundle.evidence_files()]
    (bundle / files[1]).unlink()
    with pytest.raises(EvidenceError, match="was read by this run but is gone now"):
        evidence_subjects(bundle, files, inputs.digests)


def test_unchanged_evidence_is_signed_and_the_manifest_lists_it(bundle: Path, tmp_path: Path) -> None:
    inputs = load_inputs(bundle, ROOT / "references")
    check_seal(inputs.bundle, inputs.digests)  # the shipped sample is sealed: its seal agrees with what was read
    files = ["bundle.yaml", *inputs.bundle.evidence_files()]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    key = init_keys(tmp_path / "keys", passphrase=None, common_name="t", dev=True, now=NOW)
    write_manifest(run_dir, bundle, files, {"outcome": "CERTIFIED"}, key, digests=inputs.digests)
    statement = json.loads((run_dir / MANIFEST).read_text())
    signed = {s["name"]: s["digest"]["sha256"] for s in statement["subject"] if s["name"].startswith("evidence/")}
    assert signed == {f"evidence/{rel}": _sha(bundle / rel) for rel in files}


def test_the_load_says_when_the_description_is_read_before_hashing_the_evidence(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """certify starts Prefect's server at `described`: once bundle.yaml and the catalog are read and agree, before
    the evidence is hashed (3 GB at cluster scale), and never for a bundle.yaml it cannot use."""
    import clustercert.runs.folder as folder

    hashed: list[str] = []
    real = folder.sha256_file
    monkeypatch.setattr(folder, "sha256_file", lambda path: hashed.append(path.name) or real(path))
    told: list[int] = []
    inputs = load_inputs(bundle, ROOT / "references", described=lambda: told.append(len(hashed)))
    assert told == [0] and len(hashed) == len(inputs.digests) > 1
    assert load_inputs(bundle, ROOT / "references", described=lambda: told.append(len(hashed))) is inputs
    assert told == [0, len(hashed)]  # the same load, unchanged on disk: said at once, nothing hashed again

    broken = bundle.parent / "broken"
    shutil.copytree(bundle, broken)
    (broken / "bundle.yaml").write_text("runs: [\n")
    with pytest.raises(EvidenceError):
        load_inputs(broken, ROOT / "references", described=lambda: told.append(-1))
    assert told == [0, len(hashed)]


@pytest.mark.parametrize("large", [1, 2000, 1 << 40])
def test_the_manifest_pass_on_its_thread_signs_what_a_pass_at_the_end_signs(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, large: int
) -> None:
    """write_run_folder hashes the evidence's large files for the manifest on a thread while the reports render (a
    cluster's 3 GB overlap WeasyPrint's layout), the others after; unchanged evidence gives the subjects a pass at
    the end gives, in bundle order, whichever files count as large."""
    import clustercert.runs.folder as folder

    monkeypatch.setattr(folder, "_LARGE", large)
    inputs = load_inputs(bundle, ROOT / "references")
    files = ["bundle.yaml", *inputs.bundle.evidence_files()]
    manifest_pass = folder.ManifestPass(inputs)
    if large == 2000:
        assert 0 < len(manifest_pass._large) < len(files)  # some files on the thread, the others after
    assert manifest_pass.subjects() == evidence_subjects(bundle, files, inputs.digests)


@pytest.mark.parametrize("change", ["touched", "rewritten alike", "replaced alike", "swapped"])
def test_a_file_changed_after_the_pass_hashed_it_is_a_refusal_naming_it(
    bundle: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass runs before the signing, so a file written, replaced or touched after its hash (its status moved:
    size, inode, modification or change time) is refused when the subjects are taken, as a pass at the end would
    have refused other bytes; same bytes written again are refused too (nobody may write the bundle meanwhile)."""
    import os
    import time

    import clustercert.runs.folder as folder

    monkeypatch.setattr(folder, "_LARGE", 1)  # every file hashed on the pass's thread
    inputs = load_inputs(bundle, ROOT / "references")
    files = ["bundle.yaml", *inputs.bundle.evidence_files()]
    victim = bundle / next(rel for rel in files if rel.endswith(".log"))
    manifest_pass = folder.ManifestPass(inputs)
    for hashed in manifest_pass._large.values():
        hashed.exception()  # the pass has hashed every file
    time.sleep(0.01)  # a coarse file-system clock still moves
    data = victim.read_bytes()
    if change == "touched":
        os.utime(victim)
    elif change == "rewritten alike":
        victim.write_bytes(data)
    elif change == "replaced alike":
        (bundle / "new").write_bytes(data)
        os.replace(bundle / "new", victim)
    else:
        victim.write_bytes(data.replace(b"1", b"2", 1))
    with pytest.raises(EvidenceError) as caught:
        manifest_pass.subjects()
    assert str(caught.value) == (f"{victim}: changed while the run wrote its report, after it was hashed for the "
                                 "manifest. Leave the bundle untouched while certifying and certify again")


def test_a_run_that_fails_while_rendering_leaves_no_pass_reading_the_bundle(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import clustercert.runs.folder as folder
    from clustercert.runs.meta import new_run_meta
    from clustercert.runs.results import RunMeta

    inputs = load_inputs(bundle, ROOT / "references")

    def fails(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the renderer failed")

    monkeypatch.setattr(folder, "render_reports", fails)
    key = init_keys(tmp_path / "keys", passphrase=None, common_name="t", dev=True, now=NOW)
    meta = RunMeta.from_json(new_run_meta(inputs.bundle, NOW, key, tmp_path / "reports", None))
    with pytest.raises(RuntimeError, match="the renderer failed"):
        folder.write_run_folder(tmp_path / "reports" / meta.run_id, inputs, folder.RunRecord({"outcome": "CERTIFIED"},
                                meta), key, folder.Rendering(ROOT / "templates"))
    assert not [t for t in threading.enumerate() if t.name.startswith("clustercert-manifest")]


def test_the_load_hashes_on_two_threads_and_names_the_first_file_it_cannot_hash(
    bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """load_inputs hashes the evidence on two threads, largest first (a cluster's telemetry beside its thousands of
    small files); the digests are each file's, in bundle order, and of two files that cannot be hashed the one
    first in bundle order is named, even when the other fails first."""
    import threading
    import time

    import clustercert.runs.folder as folder
    from clustercert.evidence.bundle import load_bundle

    (bundle / "MANIFEST.sha256").unlink()  # unsealed: the files changed below are hashed, not refused by size
    files = ["bundle.yaml", *load_bundle(bundle).evidence_files()]
    threads: set[str] = set()
    real = folder.file_digest

    def recorded(path: Path) -> str:
        threads.add(threading.current_thread().name)
        time.sleep(0.01)  # long enough for the second thread to take the next file meanwhile
        return real(path)

    monkeypatch.setattr(folder, "file_digest", recorded)
    inputs = load_inputs(bundle, ROOT / "references")
    assert list(inputs.digests) == files
    assert inputs.digests == {rel: _sha(bundle / rel) for rel in files}
    assert len(threads) == 2

    first, second = files[1], files[-1]

    def failing(path: Path) -> str:
        if path == bundle / first:
            time.sleep(0.3)
            raise EvidenceError(str(path), "cannot be read (first)")
        if path == bundle / second:
            raise EvidenceError(str(path), "cannot be read (second)")
        return real(path)

    monkeypatch.setattr(folder, "file_digest", failing)
    (bundle / files[2]).write_bytes((bundle / files[2]).read_bytes() + b"\n")  # a new load, not the one remembered
    with pytest.raises(EvidenceError, match=r"\(first\)"):
        load_inputs(bundle, ROOT / "references")


def test_the_wait_for_the_manifests_hash_is_told_file_by_file(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's evidence takes longer to hash again than the reports take to render: while the manifest waits
    for a large file's hash, the progress is told which file, where it stands among the large ones and how long it
    has waited, again every _WAIT_SHOWN seconds; the subjects are the ones a pass without progress gives."""
    import threading

    import clustercert.runs.folder as folder

    monkeypatch.setattr(folder, "_LARGE", 2000)
    monkeypatch.setattr(folder, "_WAIT_SHOWN", 0.02)
    inputs = load_inputs(bundle, ROOT / "references")
    files = ["bundle.yaml", *inputs.bundle.evidence_files()]
    release = threading.Event()
    real = folder.ManifestPass._hash

    def held(self: folder.ManifestPass, rel: str) -> list[dict[str, object]]:
        release.wait(timeout=60)  # the first large file's hash waits until the progress was told of it twice
        return real(self, rel)

    monkeypatch.setattr(folder.ManifestPass, "_hash", held)
    manifest_pass = folder.ManifestPass(inputs)
    large = [rel for rel in files if rel in manifest_pass._large]
    assert len(large) >= 2
    told: list[str] = []

    def tell(what: str) -> None:
        told.append(what)
        if len(told) == 2:
            release.set()

    subjects = manifest_pass.subjects(tell)
    assert subjects == evidence_subjects(bundle, files, inputs.digests)
    assert len(told) >= 2
    first = f"the evidence hashed again for the manifest: {large[0]} (1 of {len(large)} large files, waited "
    assert told[0].startswith(first) and told[1].startswith(first)
    assert all(re.fullmatch(r"the evidence hashed again for the manifest: \S+ \(\d+ of \d+ large files, waited "
                            r"\d+ s\)", line) for line in told)
    # the files named are large ones, in bundle order, each numbered as it stands among them
    named = [line.split(": ", 1)[1].split(" (", 1)[0] for line in told]
    assert [large.index(rel) + 1 for rel in named] == [int(line.split("(", 1)[1].split(" ", 1)[0]) for line in told]
    assert named == sorted(named, key=large.index)


def test_the_report_stage_tells_each_of_its_steps(bundle: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """write_run_folder tells the progress what it does, in order: render, sign each PDF, (wait for the manifest's
    hash), write the manifest. The reports are a one-page document here (their content is not this test's)."""
    import clustercert.runs.folder as folder
    from clustercert.report import render_pdf
    from clustercert.runs.meta import new_run_meta
    from clustercert.runs.results import RunMeta

    def one_page(*args: object, base_dir: Path, **kwargs: object) -> dict[str, tuple[str, bytes]]:
        html = "<!doctype html><title>t</title><p>one page</p>"
        return {"report": (html, render_pdf(html, base_dir))}

    monkeypatch.setattr(folder, "render_reports", one_page)
    inputs = load_inputs(bundle, ROOT / "references")
    key = init_keys(tmp_path / "keys", passphrase=None, common_name="t", dev=True, now=NOW)
    meta = RunMeta.from_json(new_run_meta(inputs.bundle, NOW, key, tmp_path / "reports", None))
    told: list[str] = []
    results = {"outcome": "CERTIFIED", "valid_until": "2027-12-01T00:00:00+00:00"}
    paths = folder.write_run_folder(tmp_path / "reports" / meta.run_id, inputs, folder.RunRecord(results, meta), key,
                                    folder.Rendering(ROOT / "templates", progress=told.append))
    steps = [line for line in told if not line.startswith("the evidence hashed again")]
    assert steps == ["render the HTML and PDF reports", "sign report.pdf", "write and sign the manifest"]
    assert paths["manifest.dsse.json"].is_file()


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 20])
def test_parts_are_checked_across_the_blocks_the_file_is_read_in(tmp_path: Path, block: int) -> None:
    """_check_parts hashes each part read from the blocks of one pass: a part that starts, ends or lies within a
    block, or spans several, is checked against the sha256 it was read with (hashlib of the slice, the oracle)."""
    from clustercert.runs.folder import _check_parts

    data = bytes(range(256)) * 3 + b"tail"
    path = tmp_path / "f.log"
    path.write_bytes(data)
    parts = [(0, 5), (5, 100), (63, 2), (200, 572), (len(data) - 4, 4), (10, 0)]
    pieces = [(offset, length, hashlib.sha256(data[offset:offset + length]).hexdigest()) for offset, length in parts]
    loaded = hashlib.sha256(data).hexdigest()
    assert _check_parts(path, loaded, pieces, block=block) == loaded
    wrong = hashlib.sha256(data[201:773]).hexdigest()  # read one byte later than it says
    with pytest.raises(EvidenceError, match=r"but bytes 200-772 were read with sha256 "):
        _check_parts(path, loaded, [*pieces[:3], (200, 572, wrong)], block=block)
    with pytest.raises(EvidenceError, match=rf"but bytes {len(data) - 4}-{len(data) + 1} were read"):
        _check_parts(path, loaded, [(len(data) - 4, 5, pieces[4][2])], block=block)  # past the end


def _slow_hash(monkeypatch: pytest.MonkeyPatch, slow: str, until: threading.Event) -> None:
    """The load's hash of the file named `slow` waits for `until` (10 s at most: then the test fails)."""
    import clustercert.runs.folder as folder

    real = folder.sha256_file

    def hashed(path: Path) -> str:
        if path.name == slow and not until.wait(10):
            raise AssertionError(f"{slow}: never released by the progress the test waited for")
        return real(path)

    monkeypatch.setattr(folder, "sha256_file", hashed)


def _files(root: Path, sizes: dict[str, int]) -> list[str]:
    root.mkdir()
    for name, size in sizes.items():
        (root / name).write_bytes(b"x" * size)
    return list(sizes)


def test_the_load_tells_how_far_its_hashing_is_while_a_large_file_is_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4,096-GPU bundle's 22 GB telemetry file takes 20 s to hash: the operator is told which large file is still
    being hashed and how many files and bytes of how many are done, as they get done."""
    import clustercert.runs.folder as folder

    monkeypatch.setattr(folder, "_HASH_QUIET", 0.0)
    root = tmp_path / "evidence"
    files = _files(root, {"a.log": 1000, "telemetry.csv": 3 * 1024**2 + 512 * 1024, "b.log": 24})
    released = threading.Event()
    _slow_hash(monkeypatch, "telemetry.csv", released)
    told: list[tuple[str, str]] = []
    last = "sha256 of the evidence: telemetry.csv (3.5 MiB); 2 of 3 files (1.0 KiB of 3.5 MiB) hashed"

    def sink(stage: str, what: str) -> None:
        told.append((stage, what))
        if what == last:
            released.set()  # both small files are done (1,024 bytes: 1.0 KiB): the large one may finish

    digests = folder._digests(root, files, sink)
    assert digests == {rel: _sha(root / rel) for rel in files}
    assert told[-1] == ("hash", last)
    assert all(stage == "hash" and what.startswith("sha256 of the evidence: telemetry.csv (3.5 MiB); ")
               for stage, what in told)
    counts = [int(what.split("; ")[1].split(" of ")[0]) for _, what in told]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)  # a line when a file is done, not a look


def test_a_long_hash_of_one_file_is_told_again_every_few_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing else done meanwhile: the same line again every `_WAIT_SHOWN` seconds (5 s; here shortened), so a
    scheduler's log shows the run is alive, not one line a look (four a second)."""
    import clustercert.runs.folder as folder

    monkeypatch.setattr(folder, "_HASH_QUIET", 0.0)
    monkeypatch.setattr(folder, "_WAIT_SHOWN", 0.2)
    monkeypatch.setattr(folder, "_HASH_LOOK", 0.01)
    root = tmp_path / "evidence"
    files = _files(root, {"telemetry.csv": 2048})
    released = threading.Event()
    _slow_hash(monkeypatch, "telemetry.csv", released)
    told: list[tuple[float, str]] = []

    def sink(stage: str, what: str) -> None:
        told.append((time.monotonic(), what))
        if len(told) == 3:
            released.set()

    assert folder._digests(root, files, sink) == {"telemetry.csv": _sha(root / "telemetry.csv")}
    assert [what for _, what in told] == [
        "sha256 of the evidence: telemetry.csv (2.0 KiB); 0 of 1 files (0 B of 2.0 KiB) hashed"] * 3
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(told)]
    assert all(gap >= 0.2 for gap in gaps), gaps  # not one a look (0.01 s)


def test_the_hashing_says_nothing_in_its_first_second(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample's few megabytes hash in milliseconds: no line (its refusal at the seal is one line, alone on
    stderr). A hash that takes longer is told from its first second on (`_HASH_QUIET`), never before it."""
    import clustercert.runs.folder as folder

    assert folder._HASH_QUIET == 1.0
    monkeypatch.setattr(folder, "_HASH_LOOK", 0.01)
    root = tmp_path / "evidence"
    files = _files(root, {"telemetry.csv": 2048, "a.log": 10})
    told: list[float] = []
    with monkeypatch.context() as quiet:
        quiet.setattr(folder, "_HASH_QUIET", 60.0)  # a hash of milliseconds, however busy the machine: no line
        assert folder._digests(root, files, lambda stage, what: told.append(time.monotonic())) == {
            rel: _sha(root / rel) for rel in files}
    assert told == []
    released = threading.Event()
    _slow_hash(monkeypatch, "telemetry.csv", released)
    folder._digest.cache_clear()  # hashed again, slowly: until the first line is told

    def sink(stage: str, what: str) -> None:
        told.append(time.monotonic())
        released.set()

    started = time.monotonic()
    folder._digests(root, files, sink)
    assert told and all(at - started >= 1.0 for at in told), told


def test_a_file_that_cannot_be_hashed_ends_the_progress_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small file turns out unreadable (a FIFO) while the large one is still hashed for a second: the progress
    stops at once (not a line every look until the large file is done: about 20 here) and the load names the
    file. At most the look under way when the file failed may still tell a line."""
    import os

    import clustercert.runs.folder as folder

    monkeypatch.setattr(folder, "_HASH_QUIET", 0.0)
    monkeypatch.setattr(folder, "_WAIT_SHOWN", 0.05)
    monkeypatch.setattr(folder, "_HASH_LOOK", 0.01)
    root = tmp_path / "evidence"
    os.mkfifo(tmp_path / "pipe.log")
    files = ["pipe.log", *_files(root, {"telemetry.csv": 4096, "a.log": 10})]
    (tmp_path / "pipe.log").rename(root / "pipe.log")
    released = threading.Event()
    _slow_hash(monkeypatch, "telemetry.csv", released)
    failed: list[float] = []
    real = folder.file_digest

    def digest(path: Path) -> str:
        try:
            return real(path)
        except EvidenceError:
            failed.append(time.monotonic())
            raise

    monkeypatch.setattr(folder, "file_digest", digest)
    timer = threading.Timer(1.0, released.set)
    timer.start()
    told: list[tuple[float, str]] = []
    try:
        with pytest.raises(EvidenceError, match=re.escape(str(root / "pipe.log"))):
            folder._digests(root, files, lambda stage, what: told.append((time.monotonic(), what)))
    finally:
        timer.cancel()
    assert len(failed) == 1
    assert len([at for at, _ in told if at > failed[0]]) <= 1, (failed, told)
    assert all(what.startswith("sha256 of the evidence: telemetry.csv (4.0 KiB); ") for _, what in told)


@pytest.mark.parametrize(("size", "said"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (4_404_019, "4.2 MiB"),
                                            (22 * 1024**3 + 52 * 1024**2, "22.1 GiB")])
def test_an_amount_of_bytes_reads_as_a_person_reads_it(size: int, said: str) -> None:
    from clustercert.evidence.guards import amount

    assert amount(size) == said


class _StopsAfter(threading.Event):
    """A stop that reads as set from its `after`th look on (each look is one block of a hash)."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.looks = after, 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks >= self.after


def test_a_hash_stopped_midway_gives_up_at_the_next_block(tmp_path: Path) -> None:
    """A run that fails while the manifest's pass hashes a cluster's telemetry does not wait for the hash's end:
    the read is given up at the first block after the stop (whole-file hashes and the parts-checking pass)."""
    import clustercert.runs.folder as folder
    from clustercert.evidence.guards import ReadStopped
    from clustercert.evidence.hashing import sha256_file

    path = tmp_path / "dcgm.prom"
    data = bytes(range(256)) * 4096 * 10  # ten blocks of 1 MiB and a bit
    path.write_bytes(data)
    stop = _StopsAfter(3)
    with pytest.raises(ReadStopped):
        sha256_file(path, block=1 << 20, stopped=stop)
    assert stop.looks == 3  # one look a block: given up at the third, not after the tenth
    parts = [(0, 10, hashlib.sha256(data[:10]).hexdigest())]
    stop = _StopsAfter(2)
    with pytest.raises(ReadStopped):
        folder._check_parts(path, hashlib.sha256(data).hexdigest(), parts, block=1 << 20, stopped=stop)
    assert stop.looks == 2
    # never set: the whole file, as without a stop
    assert sha256_file(path, stopped=threading.Event()) == hashlib.sha256(data).hexdigest()
    assert folder._check_parts(path, hashlib.sha256(data).hexdigest(), parts,
                               stopped=threading.Event()) == hashlib.sha256(data).hexdigest()


def test_certify_starts_the_manifest_pass_when_the_phases_end_and_ends_it_when_the_run_fails(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """certify's flow starts the manifest's pass over the evidence once the phases have read it (a cluster's
    telemetry is hashed again while the run validates), and a run that fails before the report ends it: no thread
    is left reading the bundle. The phases and the validation are stand-ins here; the whole flow certifies and
    verifies in tests/e2e."""
    import clustercert.runs.folder as folder
    import flows.certify as certify
    import flows.tactics as tactics
    from clustercert.runs.evidence import EvidenceSet
    from flows.request import CertifyRequest

    monkeypatch.setattr(folder, "_LARGE", 1)  # every file hashed on the pass's thread
    inputs = load_inputs(bundle, ROOT / "references")
    events: list[str] = []

    class Recorded(folder.ManifestPass):
        def __init__(self, given: folder.Inputs) -> None:
            events.append("pass started")
            super().__init__(given)

        def stop(self) -> None:
            events.append("pass stopped")
            super().stop()

    def phase(name: str) -> object:
        def run(*args: object) -> dict[str, object]:
            events.append(name)
            return {"section": {}, "checks": [], "workloads": []}
        return run

    phases = iter(["efficiency", "scaling", "resilience"])

    def validate(*args: object) -> None:
        events.append("validate")
        raise RuntimeError("the validation broke")

    monkeypatch.setattr(tactics, "ManifestPass", Recorded)
    monkeypatch.setattr(tactics, "usable_cores", lambda: 1)  # no chart process: not this test's
    monkeypatch.setattr(certify, "load_task", lambda *args: EvidenceSet(inputs, 1 << 30))
    monkeypatch.setattr(certify, "on_runner", lambda flow, address: phase(next(phases)))
    monkeypatch.setattr(certify, "validate_task", validate)
    meta = {"run_id": "r", "started_at": "2026-12-06T10:00:00Z", "bundle_path": str(bundle), "signer": "s",
            "dev_key": True}
    request = CertifyRequest(bundle_path=str(bundle), run_dir=str(tmp_path / "run"), run_meta=meta,
                             key_dir=str(tmp_path / "keys"), references_dir=str(ROOT / "references"),
                             templates_dir=str(ROOT / "templates"), limit=1 << 30)
    with pytest.raises(RuntimeError, match="the validation broke"):
        certify.certify_flow.fn(request)
    assert events == ["efficiency", "scaling", "resilience", "pass started", "validate", "pass stopped"]
    assert not [t for t in threading.enumerate() if t.name.startswith("clustercert-manifest")]
    assert not (tmp_path / "run").exists()
