"""The real third-party samples: found beside the checkout or through CLUSTERCERT_REAL_SAMPLES."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_DEFAULT = Path(__file__).resolve().parents[2].parent / "shared" / "samples" / "real"


@pytest.fixture(scope="session")
def real_samples() -> Path:
    """The samples folder; skips when absent, fails instead under CLUSTERCERT_REQUIRE_REAL_SAMPLES=1."""
    root = Path(os.environ.get("CLUSTERCERT_REAL_SAMPLES") or _DEFAULT)
    if not (root / "SOURCES.md").is_file():
        reason = (
            f"real samples not found at {root} (set CLUSTERCERT_REAL_SAMPLES or place them at "
            f"<repo>/../shared/samples/real)"
        )
        if os.environ.get("CLUSTERCERT_REQUIRE_REAL_SAMPLES") == "1":
            pytest.fail(reason + "; CLUSTERCERT_REQUIRE_REAL_SAMPLES=1 requires them")
        pytest.skip(reason)
    return root
