"""The redacted copy's PDF rendered by a second process (`clustercert.runs.folder._SecondProcess`): the same bytes as
rendered here, and every way the second process can fail leaves the PDF to this one, except the document's own
error, which is the user's to see."""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import logging
from pathlib import Path

import pytest

from clustercert.errors import RenderError
from clustercert.report import render_pdf
from clustercert.runs.folder import _SecondProcess

HTML = ("<!doctype html><title>t</title><style>p { break-after: page; }</style>"
        "<p>first page</p><p>second page</p>")


def test_a_pdf_from_the_second_process_is_the_pdf_rendered_here(tmp_path: Path) -> None:
    aside = _SecondProcess.start()
    assert aside is not None
    try:
        assert aside.submit("report.redacted", HTML, tmp_path)
        told: list[str] = []
        got = aside.result("report.redacted", told.append)
    finally:
        aside.close()
    assert got == render_pdf(HTML, tmp_path)
    assert told in ([], ["report.redacted.pdf: wait for the second process"])
    assert aside.result("report", None) is None  # not given to it: rendered here


def _done(exc: BaseException) -> concurrent.futures.Future[bytes]:
    future: concurrent.futures.Future[bytes] = concurrent.futures.Future()
    future.set_exception(exc)
    return future


def test_a_second_process_that_died_leaves_the_pdf_to_this_one(caplog: pytest.LogCaptureFixture) -> None:
    aside = _SecondProcess(pool=None)
    aside.futures["report.redacted"] = _done(concurrent.futures.process.BrokenProcessPool("killed"))
    with caplog.at_level(logging.WARNING):
        assert aside.result("report.redacted", None) is None
    assert "report.redacted.pdf: the second process failed (BrokenProcessPool: killed); rendered here" in caplog.text


def test_the_documents_own_error_is_the_users_not_rendered_again() -> None:
    aside = _SecondProcess(pool=None)
    aside.futures["report.redacted"] = _done(RenderError("/run: cannot write the PDF (ValueError: bad)"))
    with pytest.raises(RenderError, match="cannot write the PDF"):
        aside.result("report.redacted", None)


def test_where_no_process_can_start_the_pdfs_are_rendered_here(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refused)
    with caplog.at_level(logging.WARNING):
        assert _SecondProcess.start() is None
    assert "no second process ([Errno 11] Resource temporarily unavailable)" in caplog.text
