"""unsigned_bytes: the bytes before the first PAdES signature's incremental update, against real pyHanko output."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest

from clustercert.attest.pdfbytes import unsigned_bytes
from clustercert.attest.signing import PDF_CERT, PDF_KEY, init_keys


def _blank_pdf() -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def _sign(data: bytes, key_dir: Path, field: str) -> bytes:
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.sign import signers

    signer = signers.SimpleSigner.load(str(key_dir / PDF_KEY), str(key_dir / PDF_CERT))
    assert signer is not None
    out = signers.sign_pdf(IncrementalPdfFileWriter(io.BytesIO(data)), signers.PdfSignatureMetadata(field_name=field),
                           signer=signer)
    return out.getvalue()


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys")
    init_keys(path, passphrase=None, common_name="test", dev=True, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    return path


def test_an_unsigned_pdf_is_returned_as_is() -> None:
    data = _blank_pdf()
    assert unsigned_bytes(data) == data


def test_a_signed_pdf_gives_back_the_exact_original(key_dir: Path) -> None:
    original = _blank_pdf()
    signed = _sign(original, key_dir, "Sig1")
    assert len(signed) > len(original) and signed.startswith(original)
    assert unsigned_bytes(signed) == original


def test_a_second_signature_still_gives_the_bytes_before_the_first(key_dir: Path) -> None:
    original = _blank_pdf()
    twice = _sign(_sign(original, key_dir, "Sig1"), key_dir, "Sig2")
    assert unsigned_bytes(twice) == original


def test_a_byte_range_that_does_not_fit_is_refused() -> None:
    data = _blank_pdf() + b"\n/ByteRange [0 10 999999 5]\n%%EOF\n"
    with pytest.raises(ValueError, match="does not fit the file"):
        unsigned_bytes(data)
