"""Keys are private to their owner; signatures verify only with a trusted key over the exact bytes."""

from __future__ import annotations

import base64
import datetime as dt
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from clustercert.attest.signing import (
    MANIFEST_KEY,
    PDF_KEY,
    PdfSignatureCheck,
    dsse_pae,
    init_keys,
    load_signing_key,
    load_trust,
    pdf_signer_cert,
    sign_envelope,
    sign_pdf,
    verify_envelope,
    verify_pdf_signature,
)
from clustercert.errors import SigningError
from tests.conftest import ROOT

NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)


def test_private_parts_are_0600_and_passphrase_protects(tmp_path: Path) -> None:
    pair = init_keys(tmp_path / "k", passphrase="s3cret", common_name="t", dev=False, now=NOW)
    for name in (MANIFEST_KEY, PDF_KEY):
        assert stat.S_IMODE((tmp_path / "k" / name).stat().st_mode) == 0o600
    assert b"ENCRYPTED" in (tmp_path / "k" / MANIFEST_KEY).read_bytes()
    with pytest.raises(SigningError, match="CLUSTERCERT_KEY_PASSPHRASE"):
        load_signing_key(tmp_path / "k", None)
    assert load_signing_key(tmp_path / "k", "s3cret").fingerprint == pair.fingerprint


def test_group_readable_key_is_refused(tmp_path: Path) -> None:
    init_keys(tmp_path, passphrase=None, common_name="t", dev=False, now=NOW)
    (tmp_path / MANIFEST_KEY).chmod(0o640)
    with pytest.raises(SigningError, match=r"\(mode 0600\), got 0640"):
        load_signing_key(tmp_path, None)


def test_keys_init_refuses_to_overwrite(tmp_path: Path) -> None:
    init_keys(tmp_path, passphrase=None, common_name="t", dev=False, now=NOW)
    with pytest.raises(SigningError, match="already exists"):
        init_keys(tmp_path, passphrase=None, common_name="t", dev=False, now=NOW)


# SIGTERM as the first of the new key's files is linked into place, in a command that stops on it (cli.safety)
_STOPPED_MIDWAY = """
import datetime as dt, os, signal, sys
from pathlib import Path
from clustercert.attest.signing import ensure_dev_key
from clustercert.cli import safety

safety.install_signal_handlers()
link = os.link


def linked(source, target):
    link(source, target)
    if not signalled:
        signalled.append(target)
        os.kill(os.getpid(), signal.SIGTERM)


signalled = []
os.link = linked
ensure_dev_key(Path(sys.argv[1]), passphrase=None, now=dt.datetime(2026, 11, 29, tzinfo=dt.UTC))
print("not stopped", flush=True)
"""


def test_a_signal_between_the_keys_files_leaves_a_whole_key_and_no_staging_folder(tmp_path: Path) -> None:
    """A first certification stopped (Ctrl-C, SIGTERM) while it put its development key in place: the key is put
    in place whole, then the command stops (exit 143). Before, it stopped after the first file: half a key, which
    the next run waited 30 s for and then refused, and the staging folder left in the key directory."""
    keys = tmp_path / "keys"
    keys.mkdir()
    run = subprocess.run([sys.executable, "-c", _STOPPED_MIDWAY, str(keys)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert run.returncode == 143, run.stdout + run.stderr
    assert "not stopped" not in run.stdout
    assert run.stderr.startswith("stopped by SIGTERM"), run.stderr
    assert not [p.name for p in keys.iterdir() if p.name.startswith(".creating-")]
    pair = load_signing_key(keys, None)  # whole: the next run signs with it
    assert pair.dev_key


def test_dsse_pae_matches_the_specification_example() -> None:
    # The DSSE protocol's own test vector (secure-systems-lab/dsse, protocol.md).
    assert dsse_pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world")


def test_envelope_binds_payload_type_and_key(tmp_path: Path) -> None:
    mine = init_keys(tmp_path / "a", passphrase=None, common_name="a", dev=False, now=NOW)
    other = init_keys(tmp_path / "b", passphrase=None, common_name="b", dev=False, now=NOW)
    trusted = load_trust(tmp_path / "a", None).keys
    envelope = sign_envelope(mine, b'{"_type": "x"}')
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert verify_envelope(envelope, trusted) == (mine.fingerprint, b'{"_type": "x"}')
    # The signature is over the PAE, not the bare payload: an Ed25519 check over the PAE must succeed.
    mine.private.public_key().verify(base64.b64decode(envelope["signatures"][0]["sig"]),
                                     dsse_pae("application/vnd.in-toto+json", b'{"_type": "x"}'))
    changed = dict(envelope, payload=base64.b64encode(b'{"_type": "y"}').decode())
    with pytest.raises(SigningError, match="does not match the payload"):
        verify_envelope(changed, trusted)
    with pytest.raises(SigningError, match=re.escape("expected payloadType application/vnd.in-toto+json")):
        verify_envelope(dict(envelope, payloadType="text/plain"), trusted)
    with pytest.raises(SigningError, match=f"signed by {other.fingerprint}, which is not a trusted key"):
        verify_envelope(sign_envelope(other, b"{}"), trusted)


def _tiny_pdf() -> bytes:
    from clustercert.report import render_pdf

    html = '<html><head><meta name="dcterms.created" content="2026-12-01T09:00:00Z"><title>t</title></head>' \
           "<body><h1>t</h1><p>text</p></body></html>"
    return render_pdf(html, Path("/nonexistent-run-folder"))


def test_pdf_signature_covers_the_whole_file_and_needs_a_trusted_cert(tmp_path: Path) -> None:
    import io

    from pyhanko.pdf_utils import generic
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter

    pair = init_keys(tmp_path / "k", passphrase="pw", common_name="auditor", dev=False, now=dt.datetime.now(dt.UTC))
    pair = load_signing_key(tmp_path / "k", "pw")
    unsigned = _tiny_pdf()
    signed = sign_pdf(pair, unsigned, reason="r", location="l")
    assert signed.startswith(unsigned)  # an incremental update: the first revision is the unsigned PDF
    cert = pdf_signer_cert(tmp_path / "k")
    assert verify_pdf_signature(signed, [cert]) == PdfSignatureCheck(True, "", "Organization: clustercert, "
                                                                               "Common Name: auditor")
    assert "not a trusted certificate" in verify_pdf_signature(signed, []).problem
    writer = IncrementalPdfFileWriter(io.BytesIO(signed))
    writer.root["/Lang"] = generic.pdf_string("fr")
    writer.update_root()
    out = io.BytesIO()
    writer.write(out)
    assert "does not cover the whole file" in verify_pdf_signature(out.getvalue(), [cert]).problem
    flipped = bytearray(signed)
    flipped[len(unsigned) // 2] ^= 1
    assert not verify_pdf_signature(bytes(flipped), [cert]).ok
    assert verify_pdf_signature(unsigned, [cert]).problem == "expected one PDF signature, got 0"


def test_group_readable_pdf_key_is_refused_at_signing(tmp_path: Path) -> None:
    pair = init_keys(tmp_path, passphrase=None, common_name="t", dev=False, now=NOW)
    (tmp_path / PDF_KEY).chmod(0o604)
    with pytest.raises(SigningError, match=r"\(mode 0600\), got 0604"):
        sign_pdf(pair, b"%PDF-1.7", reason="r", location="l")
