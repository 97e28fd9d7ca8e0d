"""Keys are private to their owner; signatures verify only with a trusted key over the exact bytes."""

from __future__ import annotations

import base64
import datetime as dt
import re
import stat
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
