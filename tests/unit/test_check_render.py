"""bench/check_render.py catches the layout defects an auditor met (issue 58): a table cell that runs over a page,
a sentence said again and again (more than twice), a table without rows. Each is a small page with the defect, and
the same page without it; Chromium lays them out as it does a report."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from clustercert.settings import PROJECT_ROOT

_CHART = ('<img alt="a chart" src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8'
          'z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==">')


def _check(tmp_path: Path, body: str) -> dict[str, Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("bench/check_render.py needs chromium (scripts/bootstrap --test installs it)")
    sys.path.insert(0, str(PROJECT_ROOT / "bench"))
    try:
        from check_render import check_html
    finally:
        sys.path.remove(str(PROJECT_ROOT / "bench"))
    page = tmp_path / "report.html"
    page.write_text(f"<!doctype html><html><body>{_CHART}{body}</body></html>", encoding="utf-8")
    found: dict[str, Any] = check_html(page, chromium, 1024)
    return found


_TABLE = "<table><caption>{caption}</caption><thead><tr><th>a</th></tr></thead><tbody>{rows}</tbody></table>"


def test_a_cell_taller_than_a_page_is_caught(tmp_path: Path) -> None:
    # 3.5 pages of node names in one cell, as the real sweep's report had
    tall = _TABLE.format(caption="nodes", rows="<tr><td>" + "<br>".join(f"cnode2-{i:03d}" for i in range(300))
                         + "</td></tr>")
    found = _check(tmp_path, tall)
    assert found["tall_cells"] and not found["ok"]
    short = _TABLE.format(caption="nodes", rows="<tr><td>cnode2-001 and 299 more</td></tr>")
    assert _check(tmp_path, short)["ok"]


def test_a_sentence_said_three_times_fails_and_a_reference_passes(tmp_path: Path) -> None:
    """The rule (bench/check_render.py): a sentence of REPEAT_WORDS (8) words or more, cut after . ; : ! or ? and a
    space outside brackets, said more than twice in the prose of paragraphs, list items, data cells and figure
    captions fails; headers, captions and labels (class "label") are not prose."""
    remedy = "Check the NICs, cables and switch ports these runs cross, then re-run nccl-tests."
    found = _check(tmp_path, "".join(f"<p>Run {i} is slow. {remedy}</p>" for i in range(3)))
    assert found["repeated"] == [f"3x {remedy[:80]}"] and not found["ok"]
    # said once and then referred to passes, and so does another sentence said twice (a finding and its detail),
    # in table cells after a line break
    twice = "The NIC on gb-r3-n09 port 2 reads 200 Gb/s, half its rate."
    cells = "".join(f"<tr><td>run {i}<br>{twice}</td></tr>" for i in range(2))
    once = f"<p>Run 0 is slow. {remedy}</p>" + "".join(f"<p>Run {i} is slow (see the remedy above).</p>"
                                                      for i in (1, 2))
    assert _check(tmp_path, once + _TABLE.format(caption="checks", rows=cells))["ok"]
    # the third time fails
    third = _TABLE.format(caption="checks", rows=cells + f"<tr><td>run 2: {twice}</td></tr>")
    assert _check(tmp_path, third)["repeated"] == [f"3x {twice}"]


def test_short_sentences_labels_and_bracketed_clauses_are_not_repeats(tmp_path: Path) -> None:
    # seven words said five times: shorter than a reference to it would be worth
    short = "".join("<p>Fix bundle.yaml and run certify again.</p>" for _ in range(5))
    # a check's title is a label beside its id, however often checks of one kind repeat it
    title = "the TFLOP/s the log prints matches a known FLOPs convention"
    labels = _TABLE.format(caption="checks", rows="".join(
        f'<tr><td><code>w{i}</code><br><span class="label">{title}</span></td></tr>' for i in range(4)))
    # a formula's "domain: min(...)" is one piece with its own numbers, not a shared sentence after the colon
    formulas = "".join(f"<p>Target {i} (bound 2 domains, k = 64 of N = 128 ranks per domain: min(B_nvl 900, "
                       f"B_net 50 x (N - 1)/(N - k)) = 99.2 GB/s).</p>" for i in range(3))
    found = _check(tmp_path, short + labels + formulas)
    assert found["repeated"] == [] and found["ok"], found["repeated"]
    # the same title as prose (outside its label) is a repeat
    prose = "".join(f"<p>Workload {i}: {title}.</p>" for i in range(3))
    assert _check(tmp_path, prose)["repeated"] == [f"3x {title}."]


def test_a_table_without_rows_is_caught(tmp_path: Path) -> None:
    found = _check(tmp_path, _TABLE.format(caption="Flagged stragglers", rows=""))
    assert found["empty_tables"] == ["Flagged stragglers"] and not found["ok"]
    assert _check(tmp_path, _TABLE.format(caption="Flagged stragglers", rows="<tr><td>none flagged</td></tr>"))["ok"]
