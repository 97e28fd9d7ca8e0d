"""Keys, the DSSE envelope of the run manifest, the PAdES signature of the PDF, and their verification."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import logging
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from clustercert.errors import EvidenceError, SigningError, unwritten
from clustercert.evidence.guards import read_regular
from clustercert.lifeline import signals_wait

__all__ = [
    "DSSE_PAYLOAD_TYPE",
    "KeyExistsError",
    "KeyPair",
    "PdfSignatureCheck",
    "Trust",
    "check_key_dir_private",
    "dsse_pae",
    "ensure_dev_key",
    "fingerprint",
    "init_keys",
    "load_pdf_signer",
    "load_signing_key",
    "load_trust",
    "sign_envelope",
    "sign_pdf",
    "signer_identity",
    "verify_envelope",
    "verify_pdf_signature",
]

DSSE_PAYLOAD_TYPE = "application/vnd.in-toto+json"
PDF_FIELD = "clustercert-signature"

MANIFEST_KEY = "manifest_ed25519.pem"
MANIFEST_PUB = "manifest_ed25519.pub"
PDF_KEY = "pdf_signer.key.pem"
PDF_CERT = "pdf_signer.cert.pem"
DEV_MARKER = "DEVELOPMENT_KEY"
# A key or certificate file is a few hundred bytes; a trusted file larger than this is not one.
_KEY_FILE_BYTES = 1024**2


@dataclass(frozen=True)
class KeyPair:
    private: ed25519.Ed25519PrivateKey
    fingerprint: str
    dev_key: bool
    key_dir: Path
    passphrase: str | None = field(default=None, repr=False)

    def redaction_secret(self) -> bytes:
        """A secret derived from the private key: redaction pseudonyms are stable per key and not guessable."""
        raw = self.private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                         serialization.NoEncryption())
        return hashlib.sha256(b"clustercert-redaction\0" + raw).digest()


def fingerprint(public: ed25519.Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "SHA256:" + hashlib.sha256(raw).hexdigest()


class KeyExistsError(SigningError):
    """The key directory already holds a key, or another process is creating one there."""


def _write_new(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _encryption(passphrase: str | None) -> serialization.KeySerializationEncryption:
    if passphrase:
        return serialization.BestAvailableEncryption(passphrase.encode())
    return serialization.NoEncryption()


def init_keys(key_dir: Path, *, passphrase: str | None, common_name: str, dev: bool, now: dt.datetime,
              organisation: str = "clustercert", email: str | None = None) -> KeyPair:
    """Create the manifest key (Ed25519) and the PDF signer (P-256 key + self-signed X.509 whose subject names the
    signer: common name, organisation and, when given, e-mail) in `key_dir`.

    Created exclusively, so that two first certifications at once cannot mix their keys: every file is written
    complete in a private staging folder inside `key_dir`, then hard-linked into place, never replacing a file;
    the public key first (whoever links it owns the creation: the other gets a KeyExistsError) and the private
    manifest key last (a key directory with it is complete)."""
    if (key_dir / MANIFEST_KEY).exists():
        raise KeyExistsError(f"{key_dir / MANIFEST_KEY}: a key already exists. Remove the key directory first.")
    check_key_dir_private(key_dir)
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    enc = _encryption(passphrase)
    private = ed25519.Ed25519PrivateKey.generate()
    pdf_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, organisation),
                      *([x509.NameAttribute(NameOID.EMAIL_ADDRESS, email)] if email else [])])
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
    files = [  # in the order they are linked into place
        (MANIFEST_PUB, private.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo), 0o644),
        (PDF_KEY, pdf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc), 0o600),
        (PDF_CERT, cert.public_bytes(serialization.Encoding.PEM), 0o644),
    ]
    if dev:
        files.append((DEV_MARKER, b"Created automatically by `clustercert certify`; run `clustercert keys init` "
                      b"for a real key.\n", 0o644))
    files.append((MANIFEST_KEY, private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      enc), 0o600))
    stage: Path | None = None
    # Written and linked into place with SIGINT and SIGTERM waiting (milliseconds: the keys are made above): the
    # command's stop ends it past any `finally`, and one that came between two links left half a key (the next run
    # waited for the rest, then told the user to remove the key directory) and the staging folder in the key directory
    with signals_wait():
        try:
            try:
                stage = Path(tempfile.mkdtemp(prefix=".creating-", dir=key_dir))
                for file, data, mode in files:
                    _write_new(stage / file, data, mode)
            except OSError as exc:  # a full disk: no key is linked into place, none half written
                raise SigningError(f"{unwritten(key_dir, exc)}; no key was made. Free space there, or set "
                                   "CLUSTERCERT_KEY_DIR to another folder") from None
            for n, (file, _, _) in enumerate(files):
                try:
                    os.link(stage / file, key_dir / file)
                except FileExistsError:
                    if n == 0:
                        raise KeyExistsError(f"{key_dir / file}: a key already exists or is being created. "
                                             "Remove the key directory first.") from None
                    raise SigningError(f"{key_dir / file}: expected a key directory without it, got one. "
                                       "Remove the key directory and create the key again") from None
        finally:
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)
    return KeyPair(private, fingerprint(private.public_key()), dev, key_dir, passphrase)


def ensure_dev_key(key_dir: Path, *, passphrase: str | None, now: dt.datetime, wait_s: float = 30.0) -> bool:
    """A key in `key_dir`, a development key created when there is none: True when this call created it.

    When another process is creating one at the same moment, its key is the one used: this call waits (at most
    `wait_s`) until that key directory is complete and creates nothing."""
    if (key_dir / MANIFEST_KEY).exists():
        check_key_dir_private(key_dir)
        return False
    try:
        init_keys(key_dir, passphrase=passphrase, common_name="clustercert development key", dev=True, now=now)
        return True
    except KeyExistsError:
        deadline = time.monotonic() + wait_s
        while not (key_dir / MANIFEST_KEY).exists():
            if time.monotonic() > deadline:
                raise SigningError(
                    f"{key_dir}: expected the key another run was creating there, got {MANIFEST_PUB} without "
                    f"{MANIFEST_KEY} after {wait_s:.0f} s (an interrupted creation). Remove the key directory "
                    "and certify again") from None
            time.sleep(0.05)
        return False


def check_key_dir_private(key_dir: Path) -> None:
    """Refuse a key directory (or the folder a link to it names) that anyone may write into: verify trusts every
    public key there, so a key another user drops in would be trusted, and a signing key there could be swapped."""
    try:
        mode = os.stat(key_dir).st_mode
    except FileNotFoundError:
        return  # made by `keys init` or the first certification, mode 0700
    except OSError as exc:
        raise SigningError(f"{key_dir}: expected a readable key directory, got {exc.strerror}") from None
    if mode & stat.S_IWOTH:
        raise SigningError(f"{key_dir}: expected a key directory only its owner may write into, got one anyone may "
                           f"write into (mode {stat.S_IMODE(mode):04o}). Run: chmod o-w {key_dir}, or set "
                           "CLUSTERCERT_KEY_DIR to a folder of your own")


def _check_private_mode(path: Path) -> None:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SigningError(
            f"{path}: expected a private key readable by its owner only (mode 0600), got {stat.S_IMODE(mode):04o}. "
            f"Run: chmod 600 {path}"
        )


def load_signing_key(key_dir: Path, passphrase: str | None) -> KeyPair:
    check_key_dir_private(key_dir)
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
    return KeyPair(key, fingerprint(key.public_key()), (key_dir / DEV_MARKER).exists(), key_dir, passphrase)


def load_public_key(path: Path) -> ed25519.Ed25519PublicKey:
    return _public_key(path, _read_key_file(path))


def _read_key_file(path: Path) -> bytes:
    """A key or certificate file's bytes, through the evidence files' guards (a FIFO or device is refused before
    it is opened, a large file before it is read)."""
    try:
        return read_regular(path, limit=_KEY_FILE_BYTES, fix="Name a PEM key or certificate file")
    except EvidenceError as exc:
        raise SigningError(f"{path}: cannot read the key or certificate: {exc.message}") from None


def _public_key(path: Path, data: bytes) -> ed25519.Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(data)
    except UnsupportedAlgorithm as exc:
        raise SigningError(f"{path}: expected an Ed25519 public key in PEM, got a key of an algorithm this "
                           f"software does not know ({exc})") from None
    except (ValueError, OSError) as exc:
        raise SigningError(f"{path}: expected an Ed25519 public key in PEM, got an unreadable file ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise SigningError(f"{path}: expected an Ed25519 public key, got {type(key).__name__}")
    return key


# --- DSSE envelope (https://github.com/secure-systems-lab/dsse/blob/master/protocol.md) ---


def dsse_pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is actually signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign_envelope(pair: KeyPair, payload: bytes, payload_type: str = DSSE_PAYLOAD_TYPE) -> dict[str, Any]:
    """A DSSE envelope over `payload`, signed with the Ed25519 manifest key."""
    sig = pair.private.sign(dsse_pae(payload_type, payload))
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": pair.fingerprint, "sig": base64.b64encode(sig).decode()}],
    }


def verify_envelope(envelope: dict[str, Any], trusted: dict[str, ed25519.Ed25519PublicKey]) -> tuple[str, bytes]:
    """(signer fingerprint, payload) when a trusted key signed the envelope; raises SigningError otherwise."""
    payload_type = envelope.get("payloadType")
    if payload_type != DSSE_PAYLOAD_TYPE:
        raise SigningError(f"expected payloadType {DSSE_PAYLOAD_TYPE}, got {payload_type!r}")
    try:
        payload = base64.b64decode(str(envelope.get("payload", "")), validate=True)
    except ValueError:
        raise SigningError("the payload is not base64") from None
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise SigningError("the envelope holds no signature")
    pae = dsse_pae(DSSE_PAYLOAD_TYPE, payload)
    untrusted = []
    for entry in signatures:
        keyid = str(entry.get("keyid", "")) if isinstance(entry, dict) else ""
        key = trusted.get(keyid)
        if key is None:
            untrusted.append(keyid or "an unnamed key")
            continue
        try:
            key.verify(base64.b64decode(str(entry.get("sig", ""))), pae)
        except (InvalidSignature, ValueError):
            raise SigningError(f"the signature by {keyid} does not match the payload") from None
        return keyid, payload
    raise SigningError(f"signed by {', '.join(untrusted)}, which is not a trusted key")


# --- trust: Ed25519 keys for the envelope, X.509 certificates for the PDF ---


@dataclass(frozen=True)
class Trust:
    keys: dict[str, ed25519.Ed25519PublicKey]
    certs: list[x509.Certificate]


def _read_trust_file(path: Path) -> ed25519.Ed25519PublicKey | x509.Certificate:
    data = _read_key_file(path)
    if b"BEGIN CERTIFICATE" in data:
        try:
            cert = x509.load_pem_x509_certificate(data)
            cert.public_key()  # its key's algorithm is read lazily: an unknown one is refused here, not later
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise SigningError(f"{path}: expected an X.509 certificate in PEM with a key this software knows, got "
                               f"an unreadable one ({exc})") from None
        return cert
    return _public_key(path, data)


def load_trust(key_dir: Path, trust: list[Path] | None) -> Trust:
    """Trusted keys and certificates: the `trust` files when given, else the key directory's *.pub and cert."""
    if trust:
        paths = list(trust)
    elif key_dir.is_dir():
        check_key_dir_private(key_dir)
        paths = sorted(key_dir.glob("*.pub")) + sorted(key_dir.glob("*.cert.pem"))
    else:
        paths = []
    keys: dict[str, ed25519.Ed25519PublicKey] = {}
    certs: list[x509.Certificate] = []
    for path in paths:
        item = _read_trust_file(path)
        if isinstance(item, x509.Certificate):
            certs.append(item)
            public = item.public_key()
            if isinstance(public, ed25519.Ed25519PublicKey):
                keys[fingerprint(public)] = public
        else:
            keys[fingerprint(item)] = item
    return Trust(keys, certs)


def cert_sha256(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def signer_identity(key_dir: Path) -> dict[str, str]:
    """Who signs with the keys in `key_dir`, as the PDF certificate's subject names them (common name,
    organisation, e-mail where given), and that certificate's SHA-256 fingerprint (of its DER bytes, as
    `openssl x509 -noout -fingerprint -sha256` prints it, without the colons)."""
    cert = pdf_signer_cert(key_dir)

    def field(oid: x509.ObjectIdentifier) -> str:
        found = cert.subject.get_attributes_for_oid(oid)
        return str(found[0].value) if found else ""

    return {"common_name": field(NameOID.COMMON_NAME), "organisation": field(NameOID.ORGANIZATION_NAME),
            "email": field(NameOID.EMAIL_ADDRESS), "cert_sha256": cert_sha256(cert)}


# --- the PDF signature: PAdES baseline B-B with a visible block, as an incremental update ---

# Where the visible block goes on the last page (PDF points from the bottom-left of an A4 page): the report's
# last page is the signature page, whose reserved box sits below its heading (templates/report.css #signature).
SIGNATURE_BOX = (57, 470, 538, 640)


def pdf_signer_cert(key_dir: Path) -> x509.Certificate:
    path = key_dir / PDF_CERT
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise SigningError(f"{path}: expected the PDF signing certificate in PEM ({exc}). "
                           "Run `clustercert keys init`.") from None


def load_pdf_signer(pair: KeyPair) -> Any:
    """The pyHanko signer of the PDF key and certificate; a SigningError when either cannot be used (checked
    by `certify` before any work, and again when signing)."""
    from pyhanko.sign import signers

    key_path, cert_path = pair.key_dir / PDF_KEY, pair.key_dir / PDF_CERT
    if not key_path.exists():
        raise SigningError(f"{key_path}: no PDF signing key. Run `clustercert keys init`.")
    _check_private_mode(key_path)
    pdf_signer_cert(pair.key_dir)
    signer = signers.SimpleSigner.load(  # type: ignore[no-untyped-call]
        str(key_path), str(cert_path), key_passphrase=pair.passphrase.encode() if pair.passphrase else None)
    if signer is None:
        raise SigningError(f"{key_path}: cannot load the PDF signing key with {cert_path}. "
                           "Set CLUSTERCERT_KEY_PASSPHRASE if it is encrypted.")
    return signer


def sign_pdf(pair: KeyPair, pdf: bytes, *, reason: str, location: str) -> bytes:
    """`pdf` signed (PAdES B-B, visible block on the last page) as an incremental update: its first revision
    is `pdf` byte for byte."""
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign import fields, signers
    from pyhanko.stamp import TextStampStyle

    signer = load_pdf_signer(pair)
    last_page = len(PdfFileReader(io.BytesIO(pdf)).root["/Pages"]["/Kids"]) - 1
    meta = signers.PdfSignatureMetadata(
        field_name=PDF_FIELD, md_algorithm="sha256", subfilter=fields.SigSeedSubFilter.PADES,
        reason=reason, location=location)
    text = "Signed by %(signer)s\nTime: %(ts)s\nclustercert manifest key:\n" + pair.fingerprint
    style = TextStampStyle(stamp_text=text, border_width=1)
    pdf_signer = signers.PdfSigner(
        meta, signer=signer, stamp_style=style,
        new_field_spec=fields.SigFieldSpec(PDF_FIELD, on_page=last_page, box=SIGNATURE_BOX))
    out = pdf_signer.sign_pdf(IncrementalPdfFileWriter(io.BytesIO(pdf)))
    return bytes(out.getbuffer())


@dataclass(frozen=True)
class PdfSignatureCheck:
    ok: bool
    problem: str
    signer: str = ""


def verify_pdf_signature(pdf: bytes, trusted_certs: list[x509.Certificate]) -> PdfSignatureCheck:
    """The PDF's one signature must be intact, by a trusted certificate, and cover the whole file."""
    from asn1crypto import x509 as asn1_x509
    from pyhanko.pdf_utils.misc import PdfReadError
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko.sign.validation.status import SignatureCoverageLevel
    from pyhanko_certvalidator import ValidationContext

    for name in ("pyhanko", "pyhanko_certvalidator"):  # findings are returned, not logged with tracebacks
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        reader = PdfFileReader(io.BytesIO(pdf), strict=False)
        signatures = reader.embedded_signatures
    except PdfReadError as exc:
        return PdfSignatureCheck(False, f"not a readable PDF ({exc})")
    except Exception as exc:  # a crafted file (/AcroForm a number, /Root no dictionary, deep arrays) breaks pyHanko
        return PdfSignatureCheck(False, f"not a readable PDF ({exc.__class__.__name__}: {str(exc)[:200]})")
    if len(signatures) != 1:
        return PdfSignatureCheck(False, f"expected one PDF signature, got {len(signatures)}")
    roots = [asn1_x509.Certificate.load(c.public_bytes(serialization.Encoding.DER)) for c in trusted_certs]
    context = ValidationContext(trust_roots=roots, allow_fetching=False)
    try:
        status = validate_pdf_signature(signatures[0], context)
    except Exception as exc:  # pyHanko raises several kinds for malformed signatures
        return PdfSignatureCheck(False, f"the PDF signature cannot be validated ({exc.__class__.__name__}: {exc})")
    signer = str(status.signing_cert.subject.human_friendly) if status.signing_cert is not None else ""
    if not status.intact or not status.valid:
        return PdfSignatureCheck(False, "the PDF signature does not match the document (changed after signing)",
                                 signer)
    if status.coverage is not SignatureCoverageLevel.ENTIRE_FILE:
        return PdfSignatureCheck(False, "the PDF signature does not cover the whole file "
                                 "(something was appended after signing, e.g. an incremental update)", signer)
    if not status.trusted:
        return PdfSignatureCheck(False, f"the PDF is signed by {signer or 'an unknown certificate'}, "
                                 "which is not a trusted certificate", signer)
    return PdfSignatureCheck(True, "", signer)
