"""clustercert: certify GPU training clusters from the evidence their tools wrote."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
