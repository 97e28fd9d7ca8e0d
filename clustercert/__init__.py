"""clustercert: certify GPU training clusters from the evidence their tools wrote."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

__all__ = ["PROJECT_ROOT", "__version__"]

# The project's folder (references/, checks/, templates/, evidence/ beside the package): here, not in
# clustercert.settings, so that the command line knows it without importing pydantic-settings (`--help` and a usage
# error import no settings model: half of their start-up)
PROJECT_ROOT = Path(__file__).resolve().parent.parent
