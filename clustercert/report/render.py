"""Render results into a self-contained HTML report and its PDF; nothing but the run's own files is fetched."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import jinja2

from clustercert.errors import RenderError

__all__ = ["APPENDIX_CAP", "build_context", "render_html", "render_pdf"]

APPENDIX_CAP = 200
TEMPLATE = "report.html.j2"
CSS = "report.css"


def build_context(
    results: dict[str, Any],
    *,
    meta: dict[str, Any],
    system: dict[str, Any],
    models: dict[str, str],
    sources: dict[str, dict[str, Any]],
    inventory: list[dict[str, Any]],
    software: dict[str, str],
) -> dict[str, Any]:
    """Everything the template shows, from results.json and the run's metadata (no clock, no I/O)."""
    notices = []
    if results["synthetic"]:
        notices.append("the evidence is synthetic: written by clustercert's simulator, not by a real cluster.")
    for w in results["workloads"]:
        if w["baseline"]["illustrative"]:
            notices.append(f"the {w['workload']} {w['precision'].upper()} baseline is illustrative "
                           "(derived, not published; see Methodology).")
    if meta["dev_key"]:
        notices.append("signed with a development key created automatically; run `clustercert keys init`.")
    appendix: list[dict[str, Any]] = []
    seen: set[str] = set()
    for w in results["workloads"]:
        for check in results["checks"]:
            if check["id"].endswith(f"{w['run_used']}_valid") and w["run_used"] not in seen:
                seen.add(w["run_used"])
                for e in check["evidence"]:
                    appendix.append({"anchor": f"ev-{w['run_used']}", "used_by": w["run_used"], **e})
    for check in results["checks"]:
        for e in check["evidence"]:
            appendix.append({"anchor": f"ev-check-{check['id']}", "used_by": check["id"], **e})
    windows = sorted({f"{w['step_time_s']['window'][0]}–{w['step_time_s']['window'][1]}" for w in results["workloads"]})
    phases = []
    for name in ("efficiency", "scaling", "resilience"):
        checks = [c for c in results["checks"] if c["phase"] == name]
        if checks:
            phases.append({"name": name, "checks": checks})
    return {
        "r": results,
        "meta": meta,
        "system": system,
        "models": models,
        "sources": sources,
        "inventory": inventory,
        "software": software,
        "notices": notices,
        "phases": phases,
        "window_text": ", ".join(windows) or "of each baseline's window",
        "appendix": appendix[:APPENDIX_CAP],
        "appendix_omitted": max(0, len(appendix) - APPENDIX_CAP),
    }


def render_html(context: dict[str, Any], templates_dir: Path) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    try:
        css = (templates_dir / CSS).read_text(encoding="utf-8")
        return env.get_template(TEMPLATE).render(css=css, **context)
    except (OSError, jinja2.TemplateError) as exc:
        raise RenderError(f"{templates_dir / TEMPLATE}: cannot render the report ({exc})") from None


def render_pdf(html: str, base_dir: Path) -> bytes:
    """The PDF of `html`; only data: URLs and files under `base_dir` may be fetched."""
    from weasyprint import HTML
    from weasyprint.urls import URLFetcher

    root = base_dir.resolve()

    class LocalOnly(URLFetcher):  # type: ignore[misc]
        def fetch(self, url: str, headers: Any = None) -> Any:
            if url.startswith("data:"):
                return super().fetch(url, headers)
            if url.startswith("file://"):
                path = Path(url[len("file://"):].split("?")[0]).resolve()
                if path == root or root in path.parents:
                    return super().fetch(url, headers)
            raise ValueError(f"clustercert blocks fetching {url[:80]}")

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    buffer = io.BytesIO()
    try:
        HTML(string=html, base_url=str(root) + "/", url_fetcher=LocalOnly()).write_pdf(buffer)
    except Exception as exc:  # WeasyPrint raises many kinds; the user needs one line
        raise RenderError(f"{base_dir}: cannot write the PDF ({exc.__class__.__name__}: {exc})") from None
    return buffer.getvalue()
