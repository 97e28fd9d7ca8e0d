"""What a scheduled run certifies: a bundle, or the newest sealed bundle in a folder of bundles."""

from __future__ import annotations

from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import BUNDLE_FILE, MANIFEST_NAME

__all__ = ["newest_sealed_bundle", "resolve_source"]


def newest_sealed_bundle(folder: Path) -> Path:
    """The bundle folder in `folder` whose MANIFEST.sha256 was written last (ties: the later name)."""
    sealed = [p for p in folder.iterdir() if (p / MANIFEST_NAME).is_file() and (p / BUNDLE_FILE).is_file()]
    if not sealed:
        raise EvidenceError(str(folder), "expected a bundle or a folder of sealed bundles (each with "
                            f"{BUNDLE_FILE} and {MANIFEST_NAME}), found none. Seal one with "
                            "`clustercert evidence seal`")
    return max(sealed, key=lambda p: ((p / MANIFEST_NAME).stat().st_mtime_ns, p.name))


def resolve_source(source: Path) -> Path:
    """`source` itself when it is a bundle (folder or bundle.yaml), else its newest sealed bundle."""
    if source.is_file() or (source / BUNDLE_FILE).is_file():
        return source
    if not source.is_dir():
        raise EvidenceError(str(source), "expected a bundle or a folder of sealed bundles, got a missing path")
    return newest_sealed_bundle(source)
