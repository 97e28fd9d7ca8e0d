"""Helpers every parser shares: guarded reads, numbers with located errors, size limits."""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import check_regular, read_regular

__all__ = [
    "DEFAULT_LIMIT",
    "check_size",
    "finite",
    "json_of",
    "json_refusals",
    "plain_chunks",
    "read_json",
    "refuse_binary",
    "refuse_control_bytes",
    "to_float",
    "to_int",
    "without_escapes",
    "without_escapes_bytes",
]

DEFAULT_LIMIT = 2 * 1024**3


def check_size(path: Path, display: str, limit: int) -> int:
    """The file's size in bytes; refuses missing, unreadable, oversized files and anything but a regular file."""
    size = check_regular(path, display).st_size
    if size > limit:
        raise EvidenceError(
            display,
            f"expected at most {limit} bytes, got {size}. Split it or raise CLUSTERCERT_MAX_EVIDENCE_BYTES",
        )
    return size


# The first bytes of a file an archive compressed (gzip, xz, zstd, lz4, zip, bzip2), and the command that gives back
# the text the tool wrote; the evidence is read as written, never unpacked here
_COMPRESSED = (
    (re.compile(rb"\x1f\x8b"), "gzip", "gunzip -k"),
    (re.compile(rb"\xfd7zXZ\x00"), "xz", "unxz -k"),
    (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd", "unzstd"),
    (re.compile(rb"\x04\x22\x4d\x18"), "lz4", "unlz4"),
    (re.compile(rb"PK\x03\x04"), "zip", "unzip"),
    (re.compile(rb"BZh[1-9]1AY&SY"), "bzip2", "bunzip2 -k"),
)


def refuse_binary(head: bytes, display: str) -> None:
    """An EvidenceError when a file's first bytes `head` (its first 64 KiB) are not text: compressed data, named with
    the command that restores the file, or NUL bytes."""
    for magic, kind, command in _COMPRESSED:
        if magic.match(head) is not None:
            name = display.rsplit("/", 1)[-1]
            raise EvidenceError(display, f"expected text as the tool wrote it, got {kind}-compressed data: "
                                         f"decompress it first (`{command} {name}`) and give the decompressed file")
    if b"\x00" in head[:65536]:
        raise EvidenceError(display, "expected text, got binary data (NUL bytes)")


def refuse_control_bytes(text: str, display: str) -> None:
    """An EvidenceError at its line for the first NUL, or ESC left once the terminal's escape sequences are taken
    out (`without_escapes`), anywhere in a log's text: `refuse_binary` looks at its first 64 KiB only, and a NUL
    or a lone ESC further on is no text a tool wrote (printed, an ESC drives the reader's terminal)."""
    hits = [at for at in (text.find("\x00"), text.find("\x1b")) if at >= 0]
    if not hits:
        return
    at = min(hits)
    what = "a NUL byte" if text[at] == "\x00" else "an ESC byte that starts no complete terminal escape sequence"
    raise EvidenceError(display, f"expected text, got {what}", line=text.count("\n", 0, at) + 1)


def read_json(path: Path, display: str, *, limit: int) -> object:
    """A whole JSON document; any decoding problem is a located EvidenceError."""
    return json_of(read_regular(path, display, limit=limit), display)


def json_of(data: bytes, display: str) -> object:
    """read_json()'s document of a file's bytes `data` (for a parser that has looked at the bytes first)."""
    if not data.strip():
        raise EvidenceError(display, "expected a JSON document, got an empty file")
    refuse_binary(data[:65536], display)
    try:
        text = data.decode("utf-8-sig")  # a leading byte order mark is no text
    except UnicodeDecodeError:
        raise EvidenceError(display, "expected UTF-8 JSON text, got binary data") from None
    with json_refusals(display):
        return json.loads(text)


@contextmanager
def json_refusals(display: str) -> Iterator[None]:
    """Whatever the JSON decoding in the block cannot read, as json_of() refuses it: an EvidenceError naming
    `display` (and the line of a syntax error)."""
    try:
        yield
    except json.JSONDecodeError as exc:
        raise EvidenceError(
            display, f"expected valid JSON, got {exc.msg}. Re-export the file", line=exc.lineno
        ) from None
    except ValueError:  # an integer of more digits than Python reads (sys.get_int_max_str_digits(): 4,300)
        raise EvidenceError(
            display, "expected valid JSON, got a number too long to read. Re-export the file"
        ) from None
    except RecursionError:
        raise EvidenceError(
            display, "expected JSON of reasonable depth, got a too deeply nested document"
        ) from None


def to_float(
    value: object, *, file: str, line: int | None, field: str, hint: str, allow_nan: bool = False
) -> float:
    """A float from a text or JSON value, or a located EvidenceError."""
    if isinstance(value, bool):
        raise EvidenceError(file, f"expected a number, got {value!r}. {hint}", line=line, field=field)
    if isinstance(value, int | float):
        try:
            out = float(value)
        except OverflowError:  # an integer past float's range
            raise EvidenceError(
                file, f"expected a number, got an integer too large for a float. {hint}", line=line, field=field
            ) from None
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            raise EvidenceError(
                file, f"expected a number, got {value.strip()[:40]!r}. {hint}", line=line, field=field
            ) from None
    else:
        raise EvidenceError(
            file, f"expected a number, got {str(value)[:40]!r}. {hint}", line=line, field=field
        )
    if not allow_nan and not math.isfinite(out):
        raise EvidenceError(file, f"expected a finite number, got {out}. {hint}", line=line, field=field)
    return out


def to_int(value: object, *, file: str, line: int | None, field: str, hint: str) -> int:
    """An integer from a text or JSON value (exponent notation allowed when whole), or an EvidenceError."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    number = to_float(value, file=file, line=line, field=field, hint=hint)
    if not number.is_integer():
        raise EvidenceError(file, f"expected a whole number, got {number}. {hint}", line=line, field=field)
    return int(number)


def finite(value: float | None) -> float | None:
    """None for nan/inf so JSON output stays valid."""
    return None if value is None or not math.isfinite(value) else value


# A terminal's escape sequences (colours, cursor moves, links): a log captured from a terminal or written by a logger
# that colours its records holds them around its fields (`559.43\x1b[0m` was "expected a number"). CSI sequences,
# OSC sequences (ended by BEL or ST), the character-set ones (`tput sgr0`'s \x1b(B) and the two-character ones; none
# holds a line break, so line numbers stay those of the file.
_ESCAPES = r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[ -/]*[0-~])"
_ESCAPES_TEXT = re.compile(_ESCAPES)
_ESCAPES_BYTES = re.compile(_ESCAPES.encode())


def without_escapes(text: str) -> str:
    """`text` without a terminal's escape sequences (see _ESCAPES); itself, at C speed, when it holds none."""
    return _ESCAPES_TEXT.sub("", text) if "\x1b" in text else text


def without_escapes_bytes(data: bytes) -> bytes:
    """`without_escapes` of a file's bytes (a chunk cut at a line end)."""
    return _ESCAPES_BYTES.sub(b"", data) if b"\x1b" in data else data


def plain_chunks(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """A file's chunks (each cut at a line end) as text parsers read them: without a leading byte order mark (a file
    saved by a Windows editor) and without a terminal's escape sequences."""
    first = True
    for chunk in chunks:
        if first and chunk.startswith(codecs.BOM_UTF8):
            chunk = chunk[len(codecs.BOM_UTF8):]
        first = first and not chunk
        yield without_escapes_bytes(chunk)
