"""A write the machine refuses (a full disk or quota, a file-size limit, a read-only file system) is one line naming
what could not be written, exit 2, and leaves what was there as it was: it was "internal error (OSError)", exit 4,
a re-seal that failed half way lost the bundle's seal, and `simulate` left half a bundle.

The refusal here is the kernel's own: each command runs under a file-size limit (RLIMIT_FSIZE, as `ulimit -f`
sets it), so a write past it fails with EFBIG where a full disk fails with ENOSPC. Checked by hand on a full
600 KiB tmpfs (`mount -t tmpfs -o size=600k`): the same lines with "No space left on device"."""

from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

SAMPLE = ROOT / "evidence" / "gb200-seed"


def _limited(limit_bytes: int, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`clustercert ARGS` as a user runs it, no file it writes allowed past `limit_bytes`."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-m", "clustercert", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})},
                          preexec_fn=limit, timeout=300, check=False)


def test_a_reseal_that_cannot_be_written_keeps_the_seal_there(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    seal = bundle / "MANIFEST.sha256"
    before = seal.read_bytes()
    assert len(before) > 4096
    proc = _limited(4096, "evidence", "seal", str(bundle))
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stdout + proc.stderr
    assert proc.stderr == (f"error: {seal}: could not be written (File too large); nothing was written under its "
                           "name. Free space there (or write elsewhere) and run the command again\n")
    assert seal.read_bytes() == before
    assert sorted(p.name for p in bundle.iterdir()) == sorted(p.name for p in SAMPLE.iterdir())  # no temporary file


def test_simulate_that_cannot_write_its_bundle_leaves_none(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    proc = _limited(100_000, "simulate", "--out", str(out))
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stdout + proc.stderr
    assert proc.stderr == (f"error: {out}: could not be written (File too large); the partial bundle was removed. "
                           "Free space there, or choose another --out\n")
    assert list(tmp_path.iterdir()) == []


def test_keys_that_cannot_be_written_are_not_half_made(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    proc = _limited(64, "keys", "init", env={"CLUSTERCERT_KEY_DIR": str(keys)})
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stdout + proc.stderr
    assert proc.stderr == (f"error: {keys}: could not be written (File too large); no key was made. Free space there, "
                           "or set CLUSTERCERT_KEY_DIR to another folder\n")
    assert list(keys.iterdir()) == []


def test_any_other_write_the_machine_refuses_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    """Where no command names the file itself (a write deep in a library), the one line names it as the system
    did, and says what to do; any other OSError stays an internal error (exit 4, its traceback in a log)."""
    from clustercert.cli.app import main
    from clustercert.evidence import init

    target = tmp_path / "bundle.yaml"
    raised = [OSError(errno.ENOSPC, "No space left on device", str(target))]

    def failing(*args: object, **kwargs: object) -> None:
        raise raised[0]

    monkeypatch.setattr(init, "write_draft", failing)
    assert main(["evidence", "init", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: {target}: could not be written (No space left on device). Free "
                                       "space there (or write elsewhere) and run the command again\n")
    raised[0] = OSError(errno.EBADF, "Bad file descriptor")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the crash log's folder: not the machine's /tmp
    assert main(["evidence", "init", str(tmp_path)]) == 4
    assert capsys.readouterr().err.startswith(f"error: internal error (OSError); traceback written to {tmp_path}/")
