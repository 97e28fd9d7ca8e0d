"""Hostile corpus, third round (issue 55 items 5 and 6): the key folder and verify's own inputs.

A key directory anyone may write into (or a link to one) is refused by verify and by signing: verify trusted every
public key dropped there. verify compares a file's hash before it parses the PDF (a crafted PDF exited 4); a
`--trust` key of an algorithm it does not know, or a FIFO, is a clean usage error; a manifest subject that climbs
out of the bundle (`evidence/../x`, even in a manifest re-signed by the run's key) is invalid."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clustercert.attest.manifest import sign_manifest
from clustercert.attest.signing import load_signing_key
from clustercert.evidence.hashing import sha256_file
from tests.conftest import run_cli
from tests.hostile.helpers import write_bundle
from tests.hostile.test_round3_files import BOUND_S, one_line

Count = Callable[[int], None]
KEY_DIR = Path(os.environ["CLUSTERCERT_TEST_KEY_DIR"])


def _copy(seed: dict[str, Any], dest: Path) -> tuple[Path, Path]:
    run_dir, bundle = dest / "run", dest / "bundle"
    shutil.copytree(seed["run_dir"], run_dir)
    shutil.copytree(seed["bundle"], bundle)
    return run_dir, bundle


def _shared_keys(tmp_path: Path, *, link: bool) -> Path:
    """A copy of the session's keys in a folder anyone may write into (mode 0777), or a link to one."""
    shared = tmp_path / "shared-keys"
    shutil.copytree(KEY_DIR, shared)
    shared.chmod(0o777)
    if not link:
        return shared
    (tmp_path / "mine").symlink_to(shared)
    return tmp_path / "mine"


@pytest.mark.parametrize("link", [False, True])
def test_verify_refuses_a_key_folder_anyone_may_write_into(seed_certified: dict[str, Any], tmp_path: Path,
                                                           link: bool, hostile: Count) -> None:
    run_dir, bundle = _copy(seed_certified, tmp_path)
    keys = _shared_keys(tmp_path, link=link)
    hostile(1)
    one_line(run_cli("verify", str(run_dir), "--bundle", str(bundle), env={"CLUSTERCERT_KEY_DIR": str(keys)},
                     timeout=BOUND_S), 2, f"{keys}: expected a key directory only its owner may write into",
             "(mode 0777)")


@pytest.mark.parametrize("link", [False, True])
def test_signing_refuses_a_key_folder_anyone_may_write_into(tmp_path: Path, link: bool, hostile: Count) -> None:
    keys = _shared_keys(tmp_path, link=link)
    root = write_bundle(tmp_path / "b")
    reports = tmp_path / "r"
    hostile(2)
    one_line(run_cli("certify", str(root), "--reports-dir", str(reports), env={"CLUSTERCERT_KEY_DIR": str(keys)},
                     timeout=BOUND_S), 2, f"{keys}: expected a key directory only its owner may write into")
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o777)
    empty.chmod(0o777)
    one_line(run_cli("keys", "init", env={"CLUSTERCERT_KEY_DIR": str(empty)}, timeout=BOUND_S), 2,
             f"{empty}: expected a key directory only its owner may write into")
    assert list(empty.iterdir()) == [] and (not reports.exists() or list(reports.iterdir()) == [])


def test_an_empty_key_dir_variable_is_a_usage_error(tmp_path: Path, hostile: Count) -> None:
    """`CLUSTERCERT_KEY_DIR=` meant the current folder: private keys were written where the command ran."""
    root = write_bundle(tmp_path / "b")
    for command in (["keys", "init"], ["certify", str(root), "--reports-dir", str(tmp_path / "r")]):
        hostile(1)
        one_line(run_cli(*command, env={"CLUSTERCERT_KEY_DIR": ""}, cwd=tmp_path, timeout=BOUND_S), 2,
                 "CLUSTERCERT_KEY_DIR: expected a folder, got an empty value")
    assert not list(tmp_path.glob("*.pem")) and not list(tmp_path.glob("*.pub"))


# Small PDFs made to break a PDF reader, each with a cross-reference table so that the reader gets to the trick.
def _pdf(*objects: str, root: str = "1 0 R") -> bytes:
    out = b"%PDF-1.7\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root {root} >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


PAGES = "<< /Type /Pages /Kids [] /Count 0 >>"
CRAFTED = {
    "acroform-number": _pdf("<< /Type /Catalog /Pages 2 0 R /AcroForm 5 >>", PAGES),
    "field-value-number": _pdf("<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [3 0 R] >> >>", PAGES,
                               "<< /FT /Sig /T (clustercert-signature) /V 7 >>"),
    "deep-array": _pdf("<< /Type /Catalog /Pages 2 0 R /X " + "[" * 50_000 + "]" * 50_000 + " >>", PAGES),
    "root-not-a-dictionary": _pdf("42", PAGES),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_crafted_pdf_is_invalid_never_an_internal_error(seed_certified: dict[str, Any], tmp_path: Path,
                                                          name: str, hostile: Count) -> None:
    """As it lies (its hash differs: refused before it is parsed) and in a manifest re-signed over it by the run's
    own key (parsed then: whatever the parser meets is a finding, exit 1)."""
    run_dir, bundle = _copy(seed_certified, tmp_path)
    pdf = run_dir / "report.pdf"
    pdf.write_bytes(CRAFTED[name])
    hostile(1)
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle), timeout=BOUND_S)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"invalid: {pdf}: changed (sha256 differs from the manifest)"), proc.stderr
    _resign(run_dir, bundle)
    hostile(1)
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle), timeout=BOUND_S)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"invalid: {pdf}: "), proc.stderr


def _resign(run_dir: Path, bundle: Path, extra: list[dict[str, Any]] | None = None) -> None:
    """What an insider holding the run's key does: the manifest signed again over the run folder as it is now."""
    statement = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").unlink()
    (run_dir / "manifest.dsse.json").unlink()
    evidence = [s for s in statement["subject"] if s["name"].startswith("evidence/")]
    predicate = {k: v for k, v in statement["predicate"].items() if k not in ("schema_version", "pdf_signer")}
    sign_manifest(run_dir, predicate, load_signing_key(KEY_DIR, None), evidence + (extra or []))


def test_a_manifest_subject_outside_the_bundle_is_invalid_even_re_signed(seed_certified: dict[str, Any],
                                                                         tmp_path: Path, hostile: Count) -> None:
    run_dir, bundle = _copy(seed_certified, tmp_path)
    outside = tmp_path / "x"
    outside.write_text("a file beside the bundle\n")
    _resign(run_dir, bundle, [{"name": "evidence/../x", "digest": {"sha256": sha256_file(outside)}}])
    hostile(1)
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle), timeout=BOUND_S)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"invalid: {run_dir / 'manifest.json'}: subject 'evidence/../x' is not a file "
                                  "inside the bundle"), proc.stderr


def _unknown_algorithm_pem() -> str:
    """A PEM public key whose algorithm (OID 1.2.3.4) no library knows: SubjectPublicKeyInfo by hand."""
    import base64

    algorithm = bytes([0x30, 0x05, 0x06, 0x03, 0x2A, 0x03, 0x04])
    key = bytes([0x03, 0x21, 0x00]) + bytes(range(32))
    der = bytes([0x30, len(algorithm) + len(key)]) + algorithm + key
    return f"-----BEGIN PUBLIC KEY-----\n{base64.b64encode(der).decode()}\n-----END PUBLIC KEY-----\n"


def test_trust_of_an_unknown_algorithm_or_a_fifo_is_a_usage_error(seed_certified: dict[str, Any], tmp_path: Path,
                                                                  hostile: Count) -> None:
    """An unknown algorithm exited 4; a FIFO named by --trust hung verify."""
    run_dir = seed_certified["run_dir"]
    odd = tmp_path / "odd.pub"
    odd.write_text(_unknown_algorithm_pem())
    fifo = tmp_path / "trust.pub"
    os.mkfifo(fifo)
    hostile(2)
    one_line(run_cli("verify", str(run_dir), "--trust", str(odd), timeout=BOUND_S), 2,
             f"{odd}: expected an Ed25519 public key in PEM, got a key of an algorithm this software does not know")
    one_line(run_cli("verify", str(run_dir), "--trust", str(fifo), timeout=BOUND_S), 2, str(fifo),
             "got a named pipe (FIFO)")
