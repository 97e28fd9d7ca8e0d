"""Hostile corpus, run folders: concurrent ids, exclusive folders, atomic writes, what is signed, what verifies,
crash logs, output and key checks before work, redaction (issue 14 items 3, 5, 7, 8, 10; "also seen": links).

Each case, what it attacks and the expected outcome: tests/hostile/README.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from clustercert.attest.atomic import write_atomic
from clustercert.attest.manifest import ENVELOPE, MANIFEST, verify_run, write_manifest
from clustercert.attest.signing import (
    DEV_MARKER,
    MANIFEST_KEY,
    MANIFEST_PUB,
    PDF_CERT,
    PDF_KEY,
    KeyPair,
    ensure_dev_key,
    fingerprint,
    init_keys,
    load_pdf_signer,
    load_signing_key,
)
from clustercert.cli import safety
from clustercert.errors import SigningError, UsageError
from clustercert.evidence.bundle import load_bundle
from clustercert.report import Redactor
from clustercert.runs.folder import create_run_dir
from clustercert.runs.meta import new_run_meta
from tests.conftest import ROOT
from tests.hostile.helpers import write_bundle

Count = Callable[[int], None]
NOW = dt.datetime(2026, 12, 1, 9, 0, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return init_keys(tmp_path_factory.mktemp("keys") / "k", passphrase=None, common_name="t", dev=True, now=NOW)


def _signed(run_dir: Path, bundle: Path, key: KeyPair) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text('{"outcome": "CERTIFIED"}\n')
    write_manifest(run_dir, bundle, ["r1.log"], {"run": {"bundle_path": str(bundle)}}, key,
                   run_files=["results.json"])
    return run_dir


def test_two_runs_of_one_bundle_in_the_same_second_get_distinct_ids(tmp_path: Path, key: KeyPair,
                                                                   hostile: Count) -> None:
    bundle = load_bundle(write_bundle(tmp_path / "b"))
    ids = {new_run_meta(bundle, NOW, key, tmp_path / "r")["run_id"]
           for _ in range(50)}
    hostile(50)
    assert len(ids) == 50
    assert all(i.startswith("20261201T090000Z-") for i in ids)
    # a recorded id is replayed as given (rerun), never redrawn
    assert new_run_meta(bundle, NOW, key, tmp_path / "r", nonce="abc123")[
        "run_id"].endswith("-abc123")


def test_run_folder_is_created_exclusively(tmp_path: Path, hostile: Count) -> None:
    create_run_dir(tmp_path / "reports" / "run")
    hostile(1)
    with pytest.raises(UsageError, match="expected a new run folder, got one that exists"):
        create_run_dir(tmp_path / "reports" / "run")


def test_only_files_this_run_wrote_are_signed(tmp_path: Path, key: KeyPair, hostile: Count) -> None:
    """Another run's error.log dropped into the folder is not signed: the folder then fails verify."""
    bundle = write_bundle(tmp_path / "b")
    run_dir = tmp_path / "reports" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text("{}\n")
    (run_dir / "error.log").write_text("Traceback (most recent call last):\n")  # written by a concurrent run
    write_manifest(run_dir, bundle, ["r1.log"], {"run": {"bundle_path": str(bundle)}}, key,
                   run_files=["results.json"])
    hostile(1)
    names = [s["name"] for s in json.loads((run_dir / MANIFEST).read_text())["subject"]]
    assert names == ["run/results.json", "evidence/r1.log"]
    result = verify_run(run_dir, key_dir=key.key_dir, trust=None, bundle=bundle, pdf=False)
    assert result.problems == [f"{run_dir / 'error.log'}: not listed in the manifest"]


@pytest.mark.parametrize("trick", ["symlink", "folder", "leftover"])
def test_run_folder_holds_regular_files_only(tmp_path: Path, key: KeyPair, trick: str, hostile: Count) -> None:
    bundle = write_bundle(tmp_path / "b")
    run_dir = _signed(tmp_path / "reports" / "run", bundle, key)
    assert verify_run(run_dir, key_dir=key.key_dir, trust=None, bundle=bundle).ok
    hostile(1)
    if trick == "symlink":  # an identical file behind a link passed before
        copy = tmp_path / "elsewhere.json"
        copy.write_bytes((run_dir / "results.json").read_bytes())
        (run_dir / "results.json").unlink()
        (run_dir / "results.json").symlink_to(copy)
        expected = f"{run_dir / 'results.json'}: a symbolic link; a run folder holds regular files only"
    elif trick == "folder":
        (run_dir / "extra").mkdir()
        expected = f"{run_dir / 'extra'}: not listed in the manifest"
    else:  # a temporary file of an interrupted atomic write
        (run_dir / ".report.pdf.x1.tmp").write_bytes(b"%PDF")
        expected = f"{run_dir / '.report.pdf.x1.tmp'}: not listed in the manifest"
    result = verify_run(run_dir, key_dir=key.key_dir, trust=None, bundle=bundle)
    assert result.problems[0] == expected


def test_an_envelope_behind_a_link_is_refused(tmp_path: Path, key: KeyPair, hostile: Count) -> None:
    bundle = write_bundle(tmp_path / "b")
    run_dir = _signed(tmp_path / "reports" / "run", bundle, key)
    os.replace(run_dir / ENVELOPE, tmp_path / "env.json")
    (run_dir / ENVELOPE).symlink_to(tmp_path / "env.json")
    hostile(1)
    assert verify_run(run_dir, key_dir=key.key_dir, trust=None, bundle=bundle).problems == [
        f"{run_dir / ENVELOPE}: a symbolic link; a run folder holds regular files only"]


def test_unfinished_folder_never_verifies(tmp_path: Path, key: KeyPair, hostile: Count) -> None:
    """Killed after the manifest but before its envelope (written last): the folder does not verify."""
    bundle = write_bundle(tmp_path / "b")
    run_dir = _signed(tmp_path / "reports" / "run", bundle, key)
    (run_dir / ENVELOPE).unlink()
    hostile(1)
    assert verify_run(run_dir, key_dir=key.key_dir, trust=None, bundle=bundle).problems == [
        f"{run_dir / ENVELOPE}: missing (the signed manifest)"]
    assert safety.discard_unfinished(run_dir).endswith(f"the unfinished run folder {run_dir} was removed")
    assert not run_dir.exists()


def test_atomic_write_replaces_whole_and_never_follows_a_link(tmp_path: Path, hostile: Count) -> None:
    target = tmp_path / "victim"
    target.write_text("keep")
    link = tmp_path / "results.json"
    link.symlink_to(target)
    hostile(1)
    write_atomic(link, b"new")
    assert target.read_text() == "keep" and not link.is_symlink() and link.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_crash_log_gets_a_new_name_and_never_follows_a_link(tmp_path: Path, hostile: Count,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "clustercert-error.log").symlink_to(victim)  # the old fixed name, planted by another user
    hostile(1)
    first = safety.write_crash_log("trace 1", None, "clustercert")
    second = safety.write_crash_log("trace 2", None, "clustercert")
    assert first is not None and second is not None and first != second
    assert first.parent == tmp_path and first.read_text() == "trace 1" and second.read_text() == "trace 2"
    assert not first.is_symlink() and (first.stat().st_mode & 0o077) == 0
    assert victim.read_text() == "precious"


def test_unusable_output_folder_and_key_directory_are_refused_before_work(tmp_path: Path, hostile: Count) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    hostile(3)
    with pytest.raises(UsageError, match="expected a folder for run folders, cannot create it"):
        safety.check_reports_dir(blocker / "reports")
    with pytest.raises(UsageError, match="expected a folder for run folders, got a file"):
        safety.check_reports_dir(blocker)
    with pytest.raises(SigningError, match="expected the key directory, got a file"):
        safety.check_key_dir(blocker)
    safety.check_reports_dir(tmp_path / "new" / "reports")  # a missing folder is created
    assert (tmp_path / "new" / "reports").is_dir()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_read_only_output_folder_is_refused(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir(mode=0o555)
    with pytest.raises(UsageError, match="expected a writable folder for run folders"):
        safety.check_reports_dir(reports)


# The output folder's check as a command makes it, SIGTERM arriving as its probe file is closed (before its removal)
_PROBE_SIGNALLED = """
import os, signal, sys
from pathlib import Path
from clustercert.cli import safety

safety.install_signal_handlers()
close = os.close


def closed(fd):
    close(fd)
    os.close = close
    os.kill(os.getpid(), signal.SIGTERM)


os.close = closed
safety.check_reports_dir(Path(sys.argv[1]))
print("not stopped", flush=True)
"""


def test_a_command_stopped_while_it_checks_the_output_folder_leaves_no_probe_there(tmp_path: Path) -> None:
    """The probe file that shows the folder writable is removed before a signal stops the command: stopped in
    between, the command left `.clustercert-probe-*` in the user's output folder."""
    import subprocess
    import sys

    reports = tmp_path / "reports"
    run = subprocess.run([sys.executable, "-c", _PROBE_SIGNALLED, str(reports)], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)
    assert run.returncode == 143, run.stdout + run.stderr
    assert "not stopped" not in run.stdout
    assert list(reports.iterdir()) == []


def test_redaction_reaches_hostnames_inside_run_ids_and_file_paths(hostile: Count) -> None:
    nodes = ["gb-r1-n02", "gb-r2-n02", "gb-r4-n10", "gb-r7-n10", "gb-r4-n1"]
    redactor = Redactor(b"k" * 32, nodes)
    texts = ["nccl-pair-gb-r4-n10-gb-r7-n10", "collectives/pair/gb-r1-n02-gb-r2-n02.log",
             "gb-r4-n10_gpu3", "host gb-r4-n1 and gb-r4-n10."]
    hostile(len(texts))
    out = [redactor.text(t) for t in texts]
    assert not any(n in o for n in nodes for o in out), out
    p = {n: redactor.pseudonym("host", n) for n in nodes}
    assert out[0] == f"nccl-pair-{p['gb-r4-n10']}-{p['gb-r7-n10']}"
    assert out[1] == f"collectives/pair/{p['gb-r1-n02']}-{p['gb-r2-n02']}.log"
    assert out[3] == f"host {p['gb-r4-n1']} and {p['gb-r4-n10']}."
    assert redactor.text("gb-r4-n100 xgb-r4-n10") == "gb-r4-n100 xgb-r4-n10"  # other names are left alone


def _first_run(key_dir: Path, start: threading.Barrier, created: list[bool], failures: list[BaseException]) -> None:
    start.wait()
    try:
        created.append(ensure_dev_key(key_dir, passphrase=None, now=NOW))
    except BaseException as exc:  # every failure is the finding
        failures.append(exc)


def test_first_certifications_at_once_create_one_development_key(tmp_path: Path, hostile: Count) -> None:
    # Eight first-ever certifications at the same moment against one empty key directory, ten times over.
    for round_ in range(10):
        key_dir = tmp_path / f"keys{round_}"
        start = threading.Barrier(8)
        created: list[bool] = []
        failures: list[BaseException] = []
        threads = [threading.Thread(target=_first_run, args=(key_dir, start, created, failures)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        hostile(8)
        assert failures == [] and sorted(created) == [False] * 7 + [True]
        # The files are one key set: the public key is the private key's, the certificate the PDF key's.
        key = load_signing_key(key_dir, None)
        public = serialization.load_pem_public_key((key_dir / MANIFEST_PUB).read_bytes())
        assert fingerprint(public) == key.fingerprint  # type: ignore[arg-type]
        signer = load_pdf_signer(key)
        assert signer is not None and key.dev_key
        pdf_key = serialization.load_pem_private_key((key_dir / PDF_KEY).read_bytes(), None)
        cert = x509.load_pem_x509_certificate((key_dir / PDF_CERT).read_bytes())
        assert cert.public_key().public_numbers() == pdf_key.public_key().public_numbers()  # type: ignore[union-attr]
        assert sorted(p.name for p in key_dir.iterdir()) == sorted(
            [MANIFEST_KEY, MANIFEST_PUB, PDF_KEY, PDF_CERT, DEV_MARKER])  # no staging folder left
        assert stat.S_IMODE((key_dir / MANIFEST_KEY).stat().st_mode) == 0o600


def test_an_interrupted_key_creation_is_a_located_refusal(tmp_path: Path, hostile: Count) -> None:
    key_dir = tmp_path / "keys"
    key_dir.mkdir()
    (key_dir / MANIFEST_PUB).write_text("left by a creation that was killed\n")
    with pytest.raises(SigningError, match=f"{key_dir}: expected the key another run was creating there, got "
                       f"{MANIFEST_PUB} without {MANIFEST_KEY} after 0 s"):
        ensure_dev_key(key_dir, passphrase=None, now=NOW, wait_s=0.2)
    hostile(1)
