"""The report: a model built from results, rendered to HTML with Jinja2 and to PDF with WeasyPrint."""

from clustercert.report.redact import Redactor
from clustercert.report.render import ReportInput, build_context, font_versions, render_html, render_pdf

__all__ = ["Redactor", "ReportInput", "build_context", "font_versions", "render_html", "render_pdf"]
