"""Versions of the software a run used (recorded in the manifest and the report)."""

from __future__ import annotations

import platform
from importlib import metadata

__all__ = ["software_record", "software_versions"]

_PACKAGES = ["clustercert", "prefect", "great-expectations", "jinja2", "weasyprint", "pydyf", "pyhanko",
             "cryptography", "pandas", "numpy", "pyarrow", "pydantic", "matplotlib", "typer"]


def _pango() -> str:
    try:
        from weasyprint.text.ffi import pango

        # WeasyPrint declares pango_version() (an int, e.g. 15012 for 1.50.12), not the string form.
        number = int(pango.pango_version())
        return f"{number // 10000}.{number // 100 % 100}.{number % 100}"
    except Exception:  # pragma: no cover - weasyprint without pango cannot render at all
        return "unknown"


def software_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["pango"] = _pango()
    return out


def software_record() -> dict[str, str]:
    """Everything a run records about its software image: packages, Pango, the report's fonts, harfbuzz."""
    from clustercert.report.render import font_versions

    return {**software_versions(), **font_versions()}
