"""The one exception tree of clustercert: every error a user can act on."""

from __future__ import annotations

__all__ = [
    "CatalogError",
    "ChecksError",
    "ClusterCertError",
    "EvidenceError",
    "RenderError",
    "SigningError",
    "UsageError",
    "located",
    "unwritten",
]


MAX_MESSAGE = 800  # characters of one error line


class ClusterCertError(Exception):
    """Root of every error clustercert raises on purpose; its message is one line for the user."""

    exit_code = 4

    def __str__(self) -> str:
        if not self.args:
            return self.__class__.__name__
        text = " ".join(str(self.args[0]).split())
        # A message quotes the input it refuses; hostile input can make that quote huge. Keep where and the fix.
        if len(text) > MAX_MESSAGE:
            text = text[:MAX_MESSAGE - 200] + " [...] " + text[-190:]
        return text


class UsageError(ClusterCertError):
    """The command line or configuration cannot be used as given."""

    exit_code = 2


class CatalogError(ClusterCertError):
    """A reference catalog is missing, malformed or inconsistent."""

    exit_code = 2


class ChecksError(ClusterCertError):
    """An expectation suite in checks/ is missing or malformed."""

    exit_code = 2


class SigningError(ClusterCertError):
    """A key cannot be created, read or used."""

    exit_code = 2


class EvidenceError(ClusterCertError):
    """Evidence cannot be read or used: names the file, and the line and field where known."""

    exit_code = 3

    def __init__(self, file: str, message: str, *, line: int | None = None, field: str | None = None) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.message = message
        super().__init__(f"{where(file, line, field)}: {message}")

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled when a task result is persisted or crosses to a Dask worker: rebuild from the parts.
        return (_rebuild_evidence_error, (self.file, self.message, self.line, self.field))


def _rebuild_evidence_error(file: str, message: str, line: int | None, field: str | None) -> EvidenceError:
    return EvidenceError(file, message, line=line, field=field)


class RenderError(ClusterCertError):
    """The report could not be rendered."""

    exit_code = 4


def where(file: str, line: int | None = None, field: str | None = None) -> str:
    """'file line N field 'x'' as used at the start of every located message."""
    out = file if line is None else f"{file} line {line}"
    return out if field is None else f"{out} field '{field}'"


def located(
    cls: type[ClusterCertError], file: str, message: str, *, line: int | None = None, field: str | None = None
) -> ClusterCertError:
    """An error of kind `cls` whose message starts with file, line and field."""
    if issubclass(cls, EvidenceError):
        return cls(file, message, line=line, field=field)
    return cls(f"{where(file, line, field)}: {message}")


def unwritten(where: object, exc: OSError) -> str:
    """How every refusal of a write the machine refused (a full disk or quota, `ulimit -f`, a read-only file system)
    begins: `WHERE: could not be written (REASON)`; each caller says what was left and what to do."""
    return f"{where}: could not be written ({exc.strerror or exc.__class__.__name__})"
