"""Keys, the signed manifest of a run, and verification of a run folder."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from clustercert.errors import SigningError

__all__ = [
    "KeyPair",
    "fingerprint",
    "init_keys",
    "load_signing_key",
    "load_trusted_keys",
    "sign_bytes",
    "verify_signature",
]

MANIFEST_KEY = "manifest_ed25519.pem"
MANIFEST_PUB = "manifest_ed25519.pub"
PDF_KEY = "pdf_signer.key.pem"
PDF_CERT = "pdf_signer.cert.pem"
DEV_MARKER = "DEVELOPMENT_KEY"


@dataclass(frozen=True)
class KeyPair:
    private: ed25519.Ed25519PrivateKey
    fingerprint: str
    dev_key: bool
    key_dir: Path


def fingerprint(public: ed25519.Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "SHA256:" + hashlib.sha256(raw).hexdigest()


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _encryption(passphrase: str | None) -> serialization.KeySerializationEncryption:
    if passphrase:
        return serialization.BestAvailableEncryption(passphrase.encode())
    return serialization.NoEncryption()


def init_keys(key_dir: Path, *, passphrase: str | None, common_name: str, dev: bool, now: dt.datetime) -> KeyPair:
    """Create the manifest key (Ed25519) and the PDF signer (P-256 key + self-signed X.509) in `key_dir`."""
    if (key_dir / MANIFEST_KEY).exists():
        raise SigningError(f"{key_dir / MANIFEST_KEY}: a key already exists. Remove the key directory first.")
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    enc = _encryption(passphrase)
    private = ed25519.Ed25519PrivateKey.generate()
    _write_private(key_dir / MANIFEST_KEY, private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc))
    (key_dir / MANIFEST_PUB).write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    pdf_key = ec.generate_private_key(ec.SECP256R1())
    _write_private(key_dir / PDF_KEY, pdf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "clustercert")])
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(pdf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=True, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(pdf_key, hashes.SHA256())
    )
    (key_dir / PDF_CERT).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if dev:
        (key_dir / DEV_MARKER).write_text(
            "Created automatically by `clustercert certify`; run `clustercert keys init` for a real key.\n")
    return KeyPair(private, fingerprint(private.public_key()), dev, key_dir)


def _check_private_mode(path: Path) -> None:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SigningError(
            f"{path}: expected a private key readable by its owner only (mode 0600), got {stat.S_IMODE(mode):04o}. "
            f"Run: chmod 600 {path}"
        )


def load_signing_key(key_dir: Path, passphrase: str | None) -> KeyPair:
    path = key_dir / MANIFEST_KEY
    if not path.exists():
        raise SigningError(f"{path}: no signing key. Run `clustercert keys init`.")
    _check_private_mode(path)
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), passphrase.encode() if passphrase else None)
    except (ValueError, TypeError) as exc:
        raise SigningError(
            f"{path}: cannot load the key ({exc}). Set CLUSTERCERT_KEY_PASSPHRASE if it is encrypted.") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise SigningError(f"{path}: expected an Ed25519 private key, got {type(key).__name__}")
    return KeyPair(key, fingerprint(key.public_key()), (key_dir / DEV_MARKER).exists(), key_dir)


def sign_bytes(pair: KeyPair, data: bytes) -> dict[str, Any]:
    return {"keyid": pair.fingerprint, "sig": base64.b64encode(pair.private.sign(data)).decode()}


def load_public_key(path: Path) -> ed25519.Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (ValueError, OSError) as exc:
        raise SigningError(f"{path}: expected an Ed25519 public key in PEM, got an unreadable file ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise SigningError(f"{path}: expected an Ed25519 public key, got {type(key).__name__}")
    return key


def load_trusted_keys(key_dir: Path, trust: Path | None) -> dict[str, ed25519.Ed25519PublicKey]:
    """Trusted manifest keys by fingerprint: `trust` when given, else every *.pub in the key directory."""
    paths = [trust] if trust is not None else sorted(key_dir.glob("*.pub")) if key_dir.is_dir() else []
    keys = {}
    for path in paths:
        key = load_public_key(path)
        keys[fingerprint(key)] = key
    return keys


def verify_signature(signature: dict[str, Any], data: bytes, trusted: dict[str, ed25519.Ed25519PublicKey]) -> str:
    """The signer's fingerprint when `signature` over `data` is by a trusted key; raises SigningError otherwise."""
    keyid = str(signature.get("keyid", ""))
    key = trusted.get(keyid)
    if key is None:
        raise SigningError(f"signed by {keyid or 'an unnamed key'}, which is not a trusted key")
    try:
        key.verify(base64.b64decode(str(signature.get("sig", ""))), data)
    except (InvalidSignature, ValueError):
        raise SigningError(f"the signature by {keyid} does not match the manifest") from None
    return keyid


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
