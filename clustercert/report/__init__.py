"""The report: a model built from results, rendered to HTML with Jinja2 and to PDF with WeasyPrint."""

from clustercert.report.render import build_context, render_html, render_pdf

__all__ = ["build_context", "render_html", "render_pdf"]
