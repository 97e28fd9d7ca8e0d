"""Hostile corpus through the command line: each bad input ends with one located line, exit 2 or 3, no
traceback and no run folder, before any flow starts (issue 14 items 4, 8).

Each case, what it attacks and the expected outcome: tests/hostile/README.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from clustercert.attest.signing import PDF_KEY, init_keys
from tests.conftest import run_cli
from tests.hostile.helpers import write_bundle

Count = Callable[[int], None]
BOUND_S = 30  # the "within 30 s"


def _one_line(proc: object, code: int, *needles: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out
    assert "Traceback" not in out, out
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("trick", ["fifo", "folder", "laughs"])
def test_certify_and_evidence_refuse_hostile_bundles_at_once(tmp_path: Path, trick: str, hostile: Count) -> None:
    root = tmp_path / "b"
    root.mkdir()
    if trick == "fifo":
        os.mkfifo(root / "r1.log")
        write_bundle(root)
        needle = "got a named pipe (FIFO)"
    elif trick == "folder":
        (root / "r1.log").mkdir()
        write_bundle(root)
        needle = "got a folder"
    else:
        lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
        write_bundle(root, text="\n".join(lines) + "\n")
        needle = "once aliases are expanded"
    reports = tmp_path / "reports"
    for command in (["certify", str(root), "--reports-dir", str(reports)], ["evidence", "check", str(root)],
                    ["evidence", "seal", str(root)]):
        hostile(1)
        _one_line(run_cli(*command, timeout=BOUND_S), 3, needle)
    assert not reports.exists() or list(reports.iterdir()) == []
    assert not (root / "MANIFEST.sha256").exists()


def test_unusable_outputs_and_keys_are_refused_before_any_work(tmp_path: Path, hostile: Count) -> None:
    root = write_bundle(tmp_path / "b")
    blocker = tmp_path / "file"
    blocker.write_text("")
    hostile(1)
    _one_line(run_cli("certify", str(root), "--reports-dir", str(blocker / "reports"), timeout=BOUND_S), 2,
              "expected a folder for run folders")
    hostile(1)
    _one_line(run_cli("certify", str(root), "--reports-dir", str(tmp_path / "r"), timeout=BOUND_S,
                      env={"CLUSTERCERT_KEY_DIR": str(blocker)}), 2, "expected the key directory, got a file")
    keys = tmp_path / "keys"
    init_keys(keys, passphrase=None, common_name="t", dev=True, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    (keys / PDF_KEY).chmod(0o644)
    hostile(1)
    _one_line(run_cli("certify", str(root), "--reports-dir", str(tmp_path / "r"), timeout=BOUND_S,
                      env={"CLUSTERCERT_KEY_DIR": str(keys)}), 2, "readable by its owner only (mode 0600), got 0644")
    assert list((tmp_path / "r").iterdir()) == []  # no partial folder


def test_rerun_refuses_unusable_outputs_and_keys_before_any_work(tmp_path: Path, hostile: Count) -> None:
    # A run folder whose bundle is gone: a re-run that got past its early checks would end at the evidence (exit 3).
    run_id = "20261201T090000Z-0123abcd-5f5f5f"
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def manifest(rid: str) -> None:
        (run_dir / "manifest.json").write_text(json.dumps({
            "subject": [{"name": "evidence/bundle.yaml", "digest": {"sha256": "0" * 64}}],
            "predicate": {"run": {"run_id": rid, "bundle_path": str(tmp_path / "gone")}}}))

    manifest(run_id)
    blocker = tmp_path / "file"
    blocker.write_text("")
    keys = tmp_path / "keys"
    init_keys(keys, passphrase=None, common_name="t", dev=True, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    nowhere = {"PREFECT_API_URL": "http://127.0.0.1:9/api"}  # never contacted: every case ends before a flow

    def rerun(*extra: str, key_dir: Path = keys) -> object:
        return run_cli("rerun", str(run_dir), *extra, timeout=BOUND_S,
                       env={**nowhere, "CLUSTERCERT_KEY_DIR": str(key_dir)})

    hostile(6)
    _one_line(rerun(key_dir=blocker), 2, f"{blocker}: expected the key directory, got a file")
    _one_line(rerun(key_dir=tmp_path / "empty"), 2, "no signing key. Run `clustercert keys init`")
    _one_line(rerun("--keep", str(blocker / "out")), 2, f"{blocker / 'out'}: expected a folder for run folders")
    (tmp_path / "out" / run_id).mkdir(parents=True)
    _one_line(rerun("--keep", str(tmp_path / "out")), 2,
              f"{tmp_path / 'out' / run_id}: expected a new folder for the re-run, got one that exists")
    (keys / PDF_KEY).chmod(0o644)
    _one_line(rerun("--keep", str(tmp_path / "new")), 2, "readable by its owner only (mode 0600), got 0644")
    assert not (tmp_path / "new").exists()  # refused before the output folder was made
    (keys / PDF_KEY).chmod(0o600)
    manifest("../escape")
    _one_line(rerun(), 2, "expected a run id that names a folder, got '../escape'")
    manifest(run_id)
    # Past the early checks, the evidence check is the first work: the bundle is gone (exit 3), nothing written.
    _one_line(rerun("--keep", str(tmp_path / "new")), 3, f"{tmp_path / 'gone' / 'bundle.yaml'}: missing")
    assert list((tmp_path / "new").iterdir()) == []
