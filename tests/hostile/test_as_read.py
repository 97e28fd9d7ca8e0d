"""Hostile corpus, what is signed is what was judged (issue 14 item 1, strict form): a file swapped after the run
loaded it, read by the parsers while swapped, and restored before signing is a refusal naming it.

Every guarded read records the sha256 of the bytes it delivered (clustercert/evidence/guards.py); at signing every
evidence file must have been read with its load digest only (clustercert/runs/folder.py `check_as_read`).
Each case, what it attacks and the expected outcome: tests/hostile/README.md.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import yaml

from clustercert.attest.manifest import verify_run
from clustercert.attest.signing import init_keys
from clustercert.errors import CatalogError, EvidenceError
from clustercert.evidence.guards import (
    digests_read,
    forget_reads,
    open_regular,
    parts_read,
    read_mark,
    read_regular,
    whole_sha256,
)
from clustercert.evidence.hashing import sha256_file
from clustercert.evidence.parse import ParsedOnce, read_evidence
from clustercert.evidence.window import collection_window
from clustercert.parsers import FORMATS, parse_training_log
from clustercert.runs.folder import Rendering, RunRecord, check_as_read, load_inputs, write_run_folder
from clustercert.runs.meta import new_run_meta
from clustercert.runs.results import RunMeta
from tests.conftest import ROOT, mini_bundle, shared_prefect_server
from tests.hostile.helpers import write_bundle

Count = Callable[[int], None]
NOW = dt.datetime(2026, 12, 1, 9, 0, 0, tzinfo=dt.UTC)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    forget_reads()
    yield
    forget_reads()


def test_a_whole_read_records_its_bytes_and_a_peek_records_the_part_it_read(tmp_path: Path, hostile: Count) -> None:
    path = tmp_path / "a.log"
    data = bytes(range(256)) * 12_000  # 3 MB: hashed block by block
    path.write_bytes(data)
    mark = read_mark()
    with open_regular(path, limit=1 << 30) as handle:
        assert handle.read(1) == b"\x00"  # the handle's buffer read 64 KiB from the descriptor: that is the part
    assert digests_read(path, since=mark) == set()
    assert parts_read(path, since=mark) == {(0, 1 << 16, _sha(data[:1 << 16]))}
    with open_regular(path, limit=1 << 30) as handle:  # the head, then the tail after a seek: two parts
        handle.read(10)
        handle.seek(len(data) - 100)
        assert handle.read() == data[-100:]
    assert parts_read(path, since=mark) >= {(len(data) - 100, 100, _sha(data[-100:]))}
    assert read_regular(path, limit=1 << 30) == data
    assert digests_read(path, since=mark) == {_sha(data)}
    hostile(1)


def test_a_files_sha256_is_the_hash_its_guarded_read_keeps(tmp_path: Path, hostile: Count) -> None:
    """sha256_file and the as-read check hash a file once, through the guarded handle's own hash: the file's
    sha256 after a head read, a whole read, and none for a handle that seeked."""
    path = tmp_path / "a.log"
    data = bytes(range(256)) * 12_000 + b"tail"  # past 1 MiB blocks and the 64 KiB buffer
    path.write_bytes(data)
    mark = read_mark()
    assert sha256_file(path) == _sha(data)
    assert digests_read(path, since=mark) == {_sha(data)}
    with open_regular(path, limit=1 << 30) as handle:
        assert handle.read(10) == data[:10]  # the buffer read ahead; the hash holds what it read
        assert whole_sha256(handle) == _sha(data)
    with open_regular(path, limit=1 << 30) as handle:
        handle.seek(5)
        with pytest.raises(ValueError, match="not read from the file's start"):
            whole_sha256(handle)
    with path.open("rb") as plain, pytest.raises(TypeError):
        whole_sha256(plain)
    hostile(1)


def test_one_file_read_twice_with_other_bytes_is_a_refusal_naming_it(tmp_path: Path, hostile: Count) -> None:
    bundle = write_bundle(tmp_path / "b")
    log = bundle / "r1.log"
    inputs = load_inputs(bundle, ROOT / "references")
    original = log.read_bytes()
    display = str(log)
    read_evidence(parse_training_log, log, display, "nemo")  # the phases' parse: the bytes of the load
    check_as_read(inputs)  # read with its load digest only: accepted

    # Swapped (same size, a faster step time) while the validation parses it again, then restored.
    swapped = original.replace(b"train_step_timing in s: 7.6", b"train_step_timing in s: 5.6", 1)
    assert len(swapped) == len(original) and swapped != original
    log.write_bytes(swapped)
    read_evidence(parse_training_log, log, display, "nemo")
    log.write_bytes(original)
    assert _sha(log.read_bytes()) == inputs.digests["r1.log"]  # on disk it is the loaded file again

    with pytest.raises(EvidenceError) as caught:
        check_as_read(inputs)
    assert str(caught.value) == (
        f"{log}: changed while the run read it: sha256 at load {_sha(original)}, as parsed {_sha(swapped)}. "
        "Leave the bundle untouched while certifying and certify again")
    assert caught.value.exit_code == 3

    # Signing refuses before the run folder exists.
    key = init_keys(tmp_path / "keys", passphrase=None, common_name="t", dev=True, now=NOW)
    meta = RunMeta.from_json(new_run_meta(inputs.bundle, NOW, key, tmp_path / "reports", None))
    run_dir = tmp_path / "reports" / meta.run_id
    with pytest.raises(EvidenceError, match="changed while the run read it"):
        write_run_folder(run_dir, inputs, RunRecord({"outcome": "CERTIFIED"}, meta), key, Rendering(ROOT / "templates"))
    assert not run_dir.exists()
    hostile(1)


def test_the_edges_read_for_the_collection_window_are_checked_against_the_loaded_file(tmp_path: Path,
                                                                                       hostile: Count) -> None:
    bundle = write_bundle(tmp_path / "b")
    log = bundle / "r1.log"
    stamped = "".join(f"[2026-11-02 03:{i // 60 % 60:02d}:{i % 60:02d}] step {i} done\n" for i in range(6000))
    log.write_text(stamped)  # about 200 KB: the window reads its first and last 64 KB, two parts
    inputs = load_inputs(bundle, ROOT / "references")
    original = log.read_bytes()
    assert collection_window(inputs.bundle) is not None
    check_as_read(inputs)  # the parts are the loaded file's bytes: accepted

    # The last stamp moved a day on while the window is read (the validity counts from it), then put back.
    swapped = original[:-40] + original[-40:].replace(b"2026-11-02", b"2026-11-03")
    assert len(swapped) == len(original) and swapped != original
    log.write_bytes(swapped)
    window = collection_window(inputs.bundle)
    assert window is not None and window.last.day == 3
    log.write_bytes(original)
    with pytest.raises(EvidenceError) as caught:
        check_as_read(inputs)
    tail = len(original) - (1 << 16)
    assert str(caught.value) == (
        f"{log}: changed while the run read it: sha256 at load {_sha(original)}, but bytes {tail}-{len(original)} "
        f"were read with sha256 {_sha(swapped[tail:])}, not the loaded file's. Leave the bundle untouched while "
        "certifying and certify again")
    hostile(1)


def test_a_catalog_changed_during_the_run_is_refused_before_its_copy_is_signed(tmp_path: Path,
                                                                                hostile: Count) -> None:
    references = tmp_path / "references"
    references.mkdir()
    shutil.copyfile(ROOT / "references" / "exemplar-gb200.yaml", references / "exemplar-gb200.yaml")
    bundle = write_bundle(tmp_path / "b")
    inputs = load_inputs(bundle, references)
    catalog = references / "exemplar-gb200.yaml"
    judged = catalog.read_bytes()
    assert inputs.catalog.sha256 == _sha(judged)
    catalog.write_bytes(judged + b"# edited while the run judged against the loaded copy\n")
    key = init_keys(tmp_path / "keys", passphrase=None, common_name="t", dev=True, now=NOW)
    meta = RunMeta.from_json(new_run_meta(inputs.bundle, NOW, key, tmp_path / "reports", None))
    run_dir = tmp_path / "reports" / meta.run_id
    with pytest.raises(CatalogError) as caught:
        write_run_folder(run_dir, inputs, RunRecord({"outcome": "CERTIFIED"}, meta), key, Rendering(ROOT / "templates"))
    assert str(caught.value) == (
        f"{catalog}: changed while the run read it: sha256 at load {_sha(judged)}, as read "
        f"{_sha(catalog.read_bytes())}. Leave the catalog untouched while certifying and certify again")
    assert not run_dir.exists()
    hostile(1)


def test_a_remembered_parse_carries_the_digest_of_its_bytes(tmp_path: Path, hostile: Count) -> None:
    bundle = write_bundle(tmp_path / "b")
    log = bundle / "r1.log"
    parsed = ParsedOnce()  # a certification's evidence set remembers its parses so
    first = parsed(parse_training_log, log, str(log), "nemo")
    forget_reads()  # the records go, the parse stays remembered
    mark = read_mark()
    assert parsed(parse_training_log, log, str(log), "nemo") is first  # served from the memo
    assert digests_read(log, since=mark) == {_sha(log.read_bytes())}
    hostile(1)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_rank_timings_are_parsed_from_the_bytes_recorded(tmp_path: Path, kind: str, hostile: Count) -> None:
    rows = ["rank,node,gpu,step,compute_s,comm_s,timestamp"]
    rows += [f"{r},n{r // 4},{r % 4},{s},0.5,0.1,2026-11-02T03:00:{s:02d}+00:00" for r in range(8) for s in range(3)]
    path = tmp_path / "ranks.csv"
    path.write_text("\n".join(rows) + "\n")
    if kind == "parquet":
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types={"node": pa.string(), "timestamp": pa.timestamp("us", "UTC")}))
        path = tmp_path / "ranks.parquet"
        pq.write_table(table, path)
    mark = read_mark()
    parsed = read_evidence(FORMATS["rank-timings"], path, str(path))
    assert (parsed.ranks, parsed.nodes, parsed.first_step, parsed.last_step) == (8, 2, 0, 2)  # pyarrow read the copy
    assert digests_read(path, since=mark) == {_sha(path.read_bytes())}
    hostile(1)


# Run as `python DRIVER certify ...`: the real CLI, with the training log replaced when its parser first opens it
# (after the run loaded and hashed it) and put back as soon as that parse returns, long before signing: what an
# operator racing the run would do. The parser is looked up in TRAINING_FORMATS at each call, so wrapping the
# entry there reaches every parse of the log, wherever it is made.
_DRIVER = """
import os, sys
from pathlib import Path
import clustercert.parsers as parsers
target, swapped, kept = (Path(os.environ[k]) for k in ("SWAP_TARGET", "SWAP_WITH", "SWAP_KEPT"))
fmt = os.environ["SWAP_FORMAT"]
real = parsers.TRAINING_FORMATS[fmt]
def swapping(path, display, *args, **kwargs):
    if Path(path).resolve() != target.resolve() or kept.exists() or not swapped.exists():
        return real(path, display, *args, **kwargs)
    os.link(target, kept)
    os.replace(swapped, target)
    print("swapped", target, file=sys.stderr)
    try:
        return real(path, display, *args, **kwargs)
    finally:
        os.replace(kept, target)
        print("restored", target, file=sys.stderr)
parsers.TRAINING_FORMATS[fmt] = swapping
from clustercert.cli.app import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_log_swapped_during_certify_and_restored_before_signing_is_refused(tmp_path: Path,
                                                                               hostile: Count) -> None:
    bundle = mini_bundle(tmp_path)
    run = yaml.safe_load((bundle / "bundle.yaml").read_text())["runs"][0]
    target = bundle / run["files"][0]
    original = target.read_bytes()
    # The log the run judges instead: every step 5% faster.
    faster = re.sub(rb"(elapsed time per iteration \(ms\): )([0-9.]+)",
                    lambda m: m.group(1) + f"{float(m.group(2)) * 0.95:.1f}".encode(), original)
    assert faster != original
    (tmp_path / "faster.log").write_bytes(faster)
    keys = tmp_path / "keys"
    init_keys(keys, passphrase=None, common_name="t", dev=True, now=NOW)
    (tmp_path / "driver.py").write_text(_DRIVER)
    reports = tmp_path / "reports"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "CLUSTERCERT_KEY_DIR": str(keys),
           "PREFECT_API_URL": shared_prefect_server().api_url, "SWAP_TARGET": str(target),
           "SWAP_WITH": str(tmp_path / "faster.log"), "SWAP_KEPT": str(tmp_path / "kept.log"),
           "SWAP_FORMAT": run["format"]}
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), "certify", str(bundle), "--reports-dir",
                           str(reports)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False)
    hostile(1)
    assert f"swapped {target}" in proc.stderr and f"restored {target}" in proc.stderr, proc.stderr
    assert target.read_bytes() == original  # on disk at signing: the file that was loaded and hashed
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {target}: changed while the run read it: sha256 at load {_sha(original)}, as parsed "
        f"{_sha(faster)}. Leave the bundle untouched while certifying and certify again"), proc.stderr
    folders = [p for p in reports.iterdir() if p.is_dir()] if reports.is_dir() else []
    assert not [p for p in folders if verify_run(p, key_dir=keys, trust=None, bundle=bundle).ok]
    assert folders == [], "a refused run left a folder"


@pytest.mark.parametrize("large", [1, 1 << 40])  # the file hashed on the pass's thread, or after the render
def test_edges_read_with_other_bytes_refuse_the_manifest_in_its_own_hashing_pass(
    tmp_path: Path, hostile: Count, monkeypatch: pytest.MonkeyPatch, large: int
) -> None:
    """write_run_folder checks the parts read (the collection window's edges) in the manifest's own pass over the
    evidence (`ManifestPass`): a window read from other bytes is refused there, naming the file and the bytes,
    before any manifest is written; the loaded bytes pass with the load's digest."""
    import clustercert.runs.folder as folder

    monkeypatch.setattr(folder, "_LARGE", large)
    bundle = write_bundle(tmp_path / "b")
    log = bundle / "r1.log"
    log.write_text("".join(f"[2026-11-02 03:{i // 60 % 60:02d}:{i % 60:02d}] step {i} done\n" for i in range(6000)))
    inputs = load_inputs(bundle, ROOT / "references")
    original = log.read_bytes()
    assert collection_window(inputs.bundle) is not None  # the loaded bytes
    signed = {s["name"]: s["digest"]["sha256"] for s in folder.ManifestPass(inputs).subjects()}
    assert signed["evidence/r1.log"] == inputs.digests["r1.log"]

    log.write_bytes(original[:-40] + original[-40:].replace(b"2026-11-02", b"2026-11-03"))
    assert collection_window(inputs.bundle) is not None  # read from the swapped bytes
    log.write_bytes(original)
    with pytest.raises(EvidenceError, match=rf"{log}: changed while the run read it: .* but bytes \d+-{len(original)}"):
        folder.ManifestPass(inputs).subjects()
    hostile(1)


def test_edges_read_after_the_pass_hashed_a_large_file_are_checked_by_their_bytes_alone(
    tmp_path: Path, hostile: Count, monkeypatch: pytest.MonkeyPatch
) -> None:
    """certify starts the manifest's pass when the phases end and the judge then reads the collection window's
    edges: those parts of a file the pass's thread hashed are checked by reading their bytes again (the file's
    status, unchanged since its hash, says the rest), not by hashing the file again (25 s of a cluster's 23 GB);
    a window read from other bytes in between is refused, naming the bytes, before any manifest is written."""
    import clustercert.runs.folder as folder

    monkeypatch.setattr(folder, "_LARGE", 1)  # every file on the pass's thread
    bundle = write_bundle(tmp_path / "b")
    log = bundle / "r1.log"
    log.write_text("".join(f"[2026-11-02 03:{i // 60 % 60:02d}:{i % 60:02d}] step {i} done\n" for i in range(6000)))
    inputs = load_inputs(bundle, ROOT / "references")
    original = log.read_bytes()
    whole = []
    real = folder._check_parts
    monkeypatch.setattr(folder, "_check_parts", lambda path, *a, **k: whole.append(path) or real(path, *a, **k))

    def hashed() -> folder.ManifestPass:
        manifest_pass = folder.ManifestPass(inputs)
        for future in manifest_pass._large.values():
            future.exception()  # every file hashed: what follows is read after
        return manifest_pass

    manifest_pass = hashed()
    assert collection_window(inputs.bundle) is not None  # the loaded bytes, read after the pass hashed them
    signed = {s["name"]: s["digest"]["sha256"] for s in manifest_pass.subjects()}
    assert signed["evidence/r1.log"] == inputs.digests["r1.log"] and whole == []

    manifest_pass = hashed()  # its thread checks the parts read so far in its own read of the file
    hashed_whole = len(whole)
    log.write_bytes(original[:-40] + original[-40:].replace(b"2026-11-02", b"2026-11-03"))
    assert collection_window(inputs.bundle) is not None  # read from the swapped bytes
    log.write_bytes(original)
    with pytest.raises(EvidenceError, match=rf"{log}: changed while the run read it: .* but bytes \d+-{len(original)}"):
        manifest_pass.subjects()
    assert len(whole) == hashed_whole  # the swapped edges caught by their bytes alone
    hostile(1)
