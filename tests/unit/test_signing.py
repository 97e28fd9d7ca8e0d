"""Keys are private to their owner; signatures verify only with a trusted key over the exact bytes."""

from __future__ import annotations

import datetime as dt
import stat
from pathlib import Path

import pytest

from clustercert.errors import SigningError
from clustercert.signing import (
    MANIFEST_KEY,
    PDF_KEY,
    init_keys,
    load_signing_key,
    load_trusted_keys,
    sign_bytes,
    verify_signature,
)

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


def test_signature_binds_bytes_and_key(tmp_path: Path) -> None:
    mine = init_keys(tmp_path / "a", passphrase=None, common_name="a", dev=False, now=NOW)
    other = init_keys(tmp_path / "b", passphrase=None, common_name="b", dev=False, now=NOW)
    trusted = load_trusted_keys(tmp_path / "a", None)
    sig = sign_bytes(mine, b"manifest")
    assert verify_signature(sig, b"manifest", trusted) == mine.fingerprint
    with pytest.raises(SigningError, match="does not match"):
        verify_signature(sig, b"manifesT", trusted)
    with pytest.raises(SigningError, match="not a trusted key"):
        verify_signature(sign_bytes(other, b"manifest"), b"manifest", trusted)


def test_keys_init_refuses_to_overwrite(tmp_path: Path) -> None:
    init_keys(tmp_path, passphrase=None, common_name="t", dev=False, now=NOW)
    with pytest.raises(SigningError, match="already exists"):
        init_keys(tmp_path, passphrase=None, common_name="t", dev=False, now=NOW)
