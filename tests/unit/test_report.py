"""The report renders the same bytes from the same inputs, links every number, escapes evidence, and redacts."""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

import markupsafe
import pytest

from clustercert.report import Redactor, ReportInput, build_context, render_html, render_pdf
from clustercert.report.charts import shared_charts, step_time_charts
from clustercert.report.render import APPENDIX_CAP, _phase_context, local_only_fetcher
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
TEMPLATES = ROOT / "templates"
REGEN = os.environ.get("CLUSTERCERT_REGEN_GOLDEN") == "1"

OUTLINE = [
    "GPU cluster certification",
    "Summary",
    "Phase: efficiency",
    "Phase: scaling",
    "Phase: resilience",
    "Evidence validation",
    "Cross-source consistency",
    "System description",
    "Methodology",
    "Formulas and conventions",
    "Thresholds applied",
    "Catalog sources",
    "Evidence inventory",
    "Reproducibility",
    "How to verify this report",
    "Limitations",
    "Appendix: evidence spans",
    "Signature",
]


def _input() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / "report_input.json").read_text(encoding="utf-8"))
    return data


# The charts `_context` drew, keyed by their data (`shared_charts`): the tests of this module build the golden
# input's context over and over (2.5-4 s of drawing each time); a chart of the same data is drawn once. That the same
# data gives the same bytes is test_html_matches_the_golden_file_byte_for_byte's, which draws afresh.
_DRAWN: dict[str, Any] = {}


def _context(data: dict[str, Any], *, redacted: bool = False, fresh: bool = False) -> dict[str, Any]:
    with contextlib.nullcontext() if fresh else shared_charts(_DRAWN):
        return build_context(ReportInput(**data), redacted=redacted)


@pytest.fixture(scope="module")
def html() -> str:
    return render_html(_context(_input()), TEMPLATES)


@pytest.fixture(scope="module")
def pdf(html: str, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return render_pdf(html, tmp_path_factory.mktemp("pdf"))


def _compare_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGEN:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path}: no golden file; run with CLUSTERCERT_REGEN_GOLDEN=1 once and review it"
    assert text == path.read_text(encoding="utf-8"), (
        f"{path}: the rendered report changed; if intended, regenerate with CLUSTERCERT_REGEN_GOLDEN=1 and review")


def test_html_matches_the_golden_file_byte_for_byte(html: str) -> None:
    assert render_html(_context(_input(), fresh=True), TEMPLATES) == html  # same inputs, same bytes, in one process
    _compare_golden("report.html", html)


def test_html_is_self_contained_and_accessible(html: str) -> None:
    assert not re.search(r"""(?:src|href)=["'](?:https?:|//|file:)""", html)
    assert "<link" not in html and "<script" not in html and "@import" not in html
    images = re.findall(r"<img [^>]*>", html)
    assert len(images) == 4 + 3 + 1 + 3  # 4 step-time, scaling + 2 busbw, pair heat map, goodput + stragglers + events
    for img in images:
        assert re.search(r'src="data:image/png;base64,', img) and re.search(r'alt="[^"]{40,}"', img)
    assert html.count("<th scope=") > 50 and '<html lang="en">' in html


def test_every_link_lands_on_an_anchor(html: str) -> None:
    ids = set(re.findall(r'\sid="([^"]+)"', html))
    targets = set(re.findall(r'href="#([^"]+)"', html))
    assert targets - ids == set()
    # Numbers in the summary, phase tables and checks link to evidence groups of the appendix.
    expected = {"ev-phase-scaling", "ev-phase-resilience", "ev-check-efficiency.grok1-314b-bf16-512_meets_baseline"}
    assert expected <= targets


def test_evidence_text_is_escaped(html: str) -> None:
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "grad_norm: &lt;nan&gt; &amp; more" in html


def test_absent_sections_are_said_not_drawn() -> None:
    data = _input()
    del data["results"]["phases"]["scaling"]
    data["validation"] = None
    out = render_html(_context(data), TEMPLATES)
    assert "results.json has no <code>scaling</code> section for this run: nothing is drawn for this phase" in out
    assert "This run has no validation.json" in out
    assert 'id="chart-scaling"' not in out and 'id="chart-goodput"' in out


@pytest.mark.parametrize("extra_checks", [0, 80])
def test_appendix_is_capped_and_says_what_it_left_out(extra_checks: int) -> None:
    data = _input()
    checks = data["results"]["checks"]
    checks += [dict(checks[0], id=f"efficiency.extra{i}_valid") for i in range(extra_checks)]
    for check in checks:
        check["evidence"] = [{"file": "training/x.log", "line": i, "last": i, "count": 1} for i in range(1, 6)]
    assert all(c["phase"] == "efficiency" for c in checks)
    workloads, n = len(data["results"]["workloads"]), len(checks)
    # Groups: one per workload (its run's 5 spans), one per check (5), one per phase (efficiency: 5 per check).
    given = 5 * workloads + 5 * n + 5 * n
    kept_uncapped = 3 * (workloads + n + 1)
    kept = min(APPENDIX_CAP, kept_uncapped)
    context = _context(data)
    assert sum(len(g["spans"]) for g in context["appendix"]) == kept
    assert len(context["appendix"]) == workloads + n + 3  # every group keeps its anchor, even when emptied
    assert context["appendix_omitted"] == given - kept
    out = render_html(context, TEMPLATES)
    assert f"{given - kept} further spans are left out to keep this appendix readable" in out


def test_charts_are_deterministic_pngs_without_metadata() -> None:
    series = _input()["results"]["phases"]["efficiency"]["step_series"]
    first, second = step_time_charts(series), step_time_charts(series)
    assert [c.uri for c in first] == [c.uri for c in second]
    png = base64.b64decode(first[0].uri.split(",", 1)[1])
    assert png.startswith(b"\x89PNG") and b"tEXt" not in png and b"tIME" not in png and b"matplotlib" not in png


def test_pdf_is_deterministic_with_text_outline_and_fixed_dates(html: str, pdf: bytes, tmp_path: Path) -> None:
    from pypdf import PdfReader

    assert render_pdf(html, tmp_path) == pdf
    reader = PdfReader(io.BytesIO(pdf))
    outline = [item.title for item in _flatten(reader.outline)]
    assert outline == OUTLINE
    meta = reader.metadata
    assert meta is not None and meta.title == "clustercert report 20261201T090000Z-1d57944d – example-cloud-gb200-east"
    assert str(meta.get("/CreationDate", "")).startswith("D:20261201090000")
    text = "\n".join(page.extract_text() for page in reader.pages)
    for phrase in ("CERTIFIED", "Valid until", "2027-11-02", "Evidence collected", "Pass rule", "synthetic",
                   "illustrative", "development key",
                   "Grok-1 314B", "Weak scaling", "Flagged stragglers", "gb-r2-n03", "Resilience events",
                   "System description", "Methodology", "Evidence inventory", "Reproducibility", "Limitations",
                   "Appendix: evidence spans", "Signature"):
        assert phrase in text, phrase
    pages = len(reader.pages)
    assert re.search(rf"Page 1 of {pages}", text) and re.search(rf"Page {pages} of {pages}", text)
    assert "clustercert · example-cloud-gb200-east · CERTIFIED" in reader.pages[1].extract_text()


def test_pdf_breaks_check_ids_only_where_breakable_allows(pdf: bytes) -> None:
    """Each check id printed in the PDF (40 in the golden report, many wrapped in narrow cells) is cut only after one
    of `breakable`'s characters or a hyphen. With <wbr> elements, WeasyPrint missed some of those opportunities and
    cut inside words ("step_time_stab" / "le")."""
    from pypdf import PdfReader

    text = "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)
    found, cut = 0, []
    for check in _input()["results"]["checks"]:
        for match in re.finditer("\n?".join(re.escape(ch) for ch in check["id"]), text):
            found += 1
            printed = match.group(0)
            if any(ch == "\n" and printed[k - 1] not in "._/,:-" for k, ch in enumerate(printed)):
                cut.append(printed.replace("\n", "|"))
    assert found >= len(_input()["results"]["checks"])
    assert cut == []


def test_the_fixed_inventory_and_appendix_columns_keep_cluster_sized_numbers_whole_and_inside() -> None:
    """The inventory's and the appendix's columns are fixed (no per-cell measuring): at a cluster's sizes (a 99 GB
    file, a span of 9-digit lines holding 99,999,999 of them) every number stays on one line, a span broken only
    after its dash, and every text lies inside its cell. Narrower Bytes or Count columns cut the numbers."""
    import weasyprint
    from weasyprint.formatting_structure import boxes

    data = _input()
    data["inventory"] = [{"path": f"telemetry/dcgm/gb-r{i}-n{i:02d}.prom", "bytes": 99_999_999_999 - i,
                          "sha256": f"{i:064x}"} for i in range(30)]
    for check in data["results"]["checks"]:
        check["evidence"] = [{"file": "resilience/long-run/nemo-24h.log", "line": 123_456_789, "last": 123_456_799,
                              "count": 99_999_999}]
    html = render_html(_context(data), TEMPLATES).replace("<wbr>", "\u200b")  # as render_pdf() gives it
    document = weasyprint.HTML(string=html).render()

    def cells(box: Any, table: str | None = None) -> Any:
        if isinstance(box, boxes.TableBox):
            table = box.element.get("class")
        if isinstance(box, boxes.TableCellBox):
            yield table, box
            return
        for child in getattr(box, "children", None) or []:
            yield from cells(child, table)

    numbers = outside = 0
    for page in document.pages:
        for table, cell in cells(page._page_box):
            if table not in ("grid inventory", "grid appendix"):
                continue
            right = cell.content_box_x() + cell.width
            outside += sum(text.position_x + text.width > right + 0.01 for text in _descendants(cell, boxes.TextBox))
            if "num" not in (cell.element.get("class") or "") or cell.element.tag != "td":
                continue
            lines = ["".join(text.text for text in _descendants(line, boxes.TextBox))
                     for line in _descendants(cell, boxes.LineBox)]
            numbers += 1
            assert lines in [[str(99_999_999_999 - i)] for i in range(30)] + [
                ["99999999"], ["123456789–123456799"], ["123456789–", "123456799"]], lines
    assert numbers >= 30 + 2 * 20 and outside == 0


def test_the_fixed_pair_event_suite_and_collective_columns_keep_words_whole_and_inside() -> None:
    """The node pairs, resilience events, suites per table and collectives are laid out in fixed columns (no
    per-cell measuring). With a real cluster's names in them (nccl-tests run ids and host names of the real H100
    sweep, reduce_scatter, SKIPPED, a failed pair's cause) no word is cut inside (a line breaks at a space, or after
    one of `breakable`'s characters or a hyphen), every text lies inside its cell, and each table ends where the
    report's other full-width tables end (widths that add up past the page push a table into the margin)."""
    import weasyprint
    from weasyprint.formatting_structure import boxes

    data = _input()
    scaling = data["results"]["phases"]["scaling"]
    hosts = [f"cnode3-{n:03d}" for n in range(2, 12)]
    scaling["pairs"] = [{"nodes": [a, b], "domains": [a, b], "collective": coll, "ranks_per_node": 8,
                         "busbw_gbps": None if a == hosts[0] else 39.1, "cause": "timeout after 600 s",
                         "fraction_of_median": 1.012, "median_gbps": 372.4, "degraded": a == hosts[0]}
                        for a, b in itertools.pairwise(hosts) for coll in ("reduce_scatter", "sendrecv")]
    scaling["collectives"] = [{**c, "run": "nccl_n1_g8_cnode3-002", "collective": "reduce_scatter",
                               "status": "SKIPPED"} for c in scaling["collectives"]]
    data["results"]["phases"]["resilience"]["events"] = [
        {"time_s": 86_399.0 + i, "type": kind, "node": hosts[i % 10], "by": "straggler-detector",
         "detail": "relative GPU performance 0.87 below threshold 0.90"}
        for i, kind in enumerate(("straggler_detected", "checkpoint-saved", "node-replaced", "job-started"))]
    for table in data["validation"]["tables"]:
        # 352,935,936 rows: the telemetry of the 4,096-GPU bundle (bench/results/scale.json)
        table.update(suite="scheduler_records.v1", run="megatron-lm-via-ms-swift-qwen2-0.5b-2gpu-bf16-120iters",
                     file="training/megatron-lm-via-ms-swift-qwen2-0.5b-2gpu-bf16-120iters.log", rows=352_935_936)
    html = render_html(_context(data), TEMPLATES).replace("<wbr>", "\u200b")  # as render_pdf() gives it
    document = weasyprint.HTML(string=html).render()
    fixed = ("grid pairs", "grid events", "grid validation suites", "grid collectives")

    def tables(box: Any) -> Any:
        if isinstance(box, boxes.TableBox):
            yield box
            return
        for child in getattr(box, "children", None) or []:
            yield from tables(child)

    rights: dict[str, float] = {}
    seen: dict[str, int] = dict.fromkeys(fixed, 0)
    cut, outside = [], 0
    for page in document.pages:
        for table in tables(page._page_box):
            name = table.element.get("class") or ""
            rights[name] = max(rights.get(name, 0.0), table.position_x + table.margin_width())
            if name not in fixed:
                continue
            for cell in _descendants(table, boxes.TableCellBox):
                seen[name] += 1
                right = cell.content_box_x() + cell.width
                texts = list(_descendants(cell, boxes.TextBox))
                outside += sum(text.position_x + text.width > right + 0.01 for text in texts)
                lines = ["".join(text.text for text in _descendants(line, boxes.TextBox)).strip()
                         for line in _descendants(cell, boxes.LineBox)]
                said = "".join(cell.element.itertext()).replace("\u200b", "")
                for first, then in itertools.pairwise(lines):
                    if first and then and first[-1].isalnum() and then[0].isalnum() \
                            and first.split()[-1] + then.split()[0] in said:
                        cut.append(f"{first}|{then}")
    assert all(count >= 5 for count in seen.values()), seen
    assert (cut, outside) == ([], 0)
    full = rights["grid checks"]  # fixed, 98 % wide as every table of the report
    assert all(abs(rights[name] - full) < 0.5 for name in fixed), rights


def test_a_messages_long_words_get_break_opportunities_and_its_numbers_none() -> None:
    from clustercert.report.render import breakable_words

    path = "/data/run7/training/megatron-lm-via-ms-swift-qwen2-0.5b-2gpu-bf16-120iters.log"
    got = str(breakable_words(f"score 0.87 below 0.90 in {path} line 4, <b>&"))
    assert got == ("score 0.87 below 0.90 in /<wbr>data/<wbr>run7/<wbr>training/<wbr>"
                   "megatron-lm-via-ms-swift-qwen2-0.<wbr>5b-2gpu-bf16-120iters.<wbr>log line 4, &lt;b&gt;&amp;")
    assert got.replace("<wbr>", "") == str(markupsafe.escape(f"score 0.87 below 0.90 in {path} line 4, <b>&"))
    assert str(breakable_words("nccl_n2_g8_cnode3-004_cnode3-006 46.3, 1234567890.123456789")) == (
        "nccl_<wbr>n2_<wbr>g8_<wbr>cnode3-004_<wbr>cnode3-006 46.3, 1234567890.123456789")


def test_the_pdf_tells_its_layout_then_how_many_pages_it_writes(tmp_path: Path) -> None:
    """render_pdf tells WeasyPrint's two steps as each starts; the page count is the PDF's own (three pages the HTML
    breaks into), and the bytes are those of a render without a listener."""
    from pypdf import PdfReader

    html = ("<!doctype html><title>t</title><style>p { break-after: page; }</style>"
            "<p>one</p><p>two</p><p>three</p>")
    told: list[str] = []
    pdf = render_pdf(html, tmp_path, told.append)
    assert len(PdfReader(io.BytesIO(pdf)).pages) == 3
    assert told == ["lay out the pages", "write 3 pages"]
    assert render_pdf(html, tmp_path) == pdf


def _descendants(box: Any, kind: type) -> Any:
    """The boxes of `kind` under a WeasyPrint box (not looking inside one)."""
    if isinstance(box, kind):
        yield box
        return
    for child in getattr(box, "children", None) or []:
        yield from _descendants(child, kind)


def _flatten(items: list[Any]) -> list[Any]:
    out = []
    for item in items:
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


def test_fetcher_serves_only_data_urls_and_the_run_folder(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a.txt").write_text("ok")
    (tmp_path / "secret.txt").write_text("no")
    fetcher = local_only_fetcher(tmp_path / "run")
    for url in ("https://example.com/x.png", "http://127.0.0.1/", f"file://{tmp_path}/secret.txt",
                f"file://{tmp_path}/run/../secret.txt"):
        with pytest.raises(ValueError, match="clustercert blocks fetching"):
            fetcher.fetch(url)
    assert fetcher.fetch(f"file://{tmp_path}/run/a.txt") is not None


def test_redacted_copy_uses_stable_pseudonyms_and_the_auditor_copy_keeps_names(html: str) -> None:
    data = _input()
    nodes = [f"gb-r{r}-n{n:02d}" for r in (1, 2) for n in range(1, 5)]
    redactor = Redactor(b"k" * 32, data["system"]["nodes"])
    again = Redactor(b"k" * 32, data["system"]["nodes"])
    other = Redactor(b"z" * 32, data["system"]["nodes"])
    redacted = {**redactor(copy.deepcopy(data)), "validation": redactor(data["validation"])}
    out = render_html(_context(redacted, redacted=True), TEMPLATES)
    for name in [*nodes, "alice", "48213"]:
        assert name in html
        assert not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", out), name
    host = redactor.replaced["gb-r2-n03"]
    assert re.fullmatch(r"host-[0-9a-f]{6}", host) and again.pseudonym("host", "gb-r2-n03") == host
    assert other.pseudonym("host", "gb-r2-n03") != host
    assert redactor.text("pid 48213 user=alice /home/alice/x") == (
        f"pid {redactor.replaced['48213']} user={redactor.replaced['alice']} /home/{redactor.replaced['alice']}/x")
    assert f"{host}" in out and "customer copy" in out


def test_the_redacted_copy_redraws_only_the_charts_redaction_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    from clustercert.report import charts

    data = _input()
    redacted = {**Redactor(b"k" * 32, data["system"]["nodes"])(copy.deepcopy(data))}
    drawn: list[str] = []
    png = charts._png
    monkeypatch.setattr(charts, "_png", lambda fig: drawn.append("x") or png(fig))

    def uris(source: dict[str, Any]) -> dict[str, str]:
        """The resilience phase's charts (goodput, straggler map, event timeline): one shared, one naming hosts."""
        return {c.id: c.uri for c in _phase_context("resilience", source["results"], [])["charts"]}

    alone = uris(data), uris(redacted)
    every = len(drawn)
    assert every == len(alone[0]) + len(alone[1])
    drawn.clear()
    with charts.shared_charts():
        together = uris(data), uris(redacted)
    assert together == alone  # the same bytes as drawn apart
    # The charts that name hosts (the straggler map) differ between the copies; every other is shared.
    differing = [k for k in alone[0] if alone[0][k] != alone[1].get(k)]
    assert differing and len(differing) < len(alone[0])
    # drawn once each, and again only where redaction changed a chart's data (every differing image among them)
    assert len(alone[0]) + len(differing) <= len(drawn) < every
    drawn.clear()
    uris(data)
    assert len(drawn) == len(alone[0])  # outside shared_charts() nothing is kept


def test_methodology_prints_the_mlp_term_of_the_judged_models() -> None:
    data = _input()
    assert "+ 18 L f h k + 6 V h]" in render_html(_context(data), TEMPLATES)  # the golden's models are SwiGLU
    html = render_html(_context({**data, "mlps": {k: "non-gated" for k in data["mlps"]}}), TEMPLATES)
    assert "+ 12 L f h k (non-gated MLP, two h × f matrices) + 6 V h]" in html and "18 L f h k" not in html
    mixed = _context({**data, "mlps": {**data["mlps"], "llama3-70b": "non-gated"}})
    assert mixed["mlp_term"].startswith("M L f h k (M = 18 for a gated (SwiGLU) MLP")


def test_the_original_command_is_what_the_user_typed() -> None:
    data = _input()
    typed = _context({**data, "meta": {**data["meta"], "catalog_arg": "my catalogs/a100.yaml"}})
    assert typed["command"] == "clustercert certify /home/alice/evidence/gb200-seed --catalog 'my catalogs/a100.yaml'"
    plain = _context({**data, "meta": {**data["meta"], "catalog_arg": None}})
    assert plain["command"] == "clustercert certify /home/alice/evidence/gb200-seed"

def test_tables_show_no_raw_python_values_or_keys(html: str) -> None:
    cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", html, re.S)
    text = [re.sub(r"<[^>]+>", "", c) for c in cells]
    assert text, "no table cells"
    assert not [t for t in text if t.strip() in ("True", "False")]
    assert not [t for t in text if re.search(r"\['|\[\d|\{'|\b[a-z]+_s\b", t)], "a raw list, dict or key"
    # the golden fault and stall records (time_s, lost_work_s, detected: true) read as headings and words
    assert "<th scope=\"col\">Lost work (s)</th>" in html and "<th scope=\"col\">Start (s)</th>" in html
    assert "<td>yes</td>" in html


def test_record_cells_read_as_text() -> None:
    from clustercert.report.render import _cell, heading

    assert heading("time_to_restart_s") == "Time to restart (s)" and heading("busbw_gbps") == "Busbw (GB/s)"
    assert _cell(True) == "yes" and _cell(False) == "no" and _cell(None) == "–"
    assert _cell(["a", "b"]) == "a, b" and _cell([]) == "none"
    assert _cell([f"n{i}" for i in range(32)]) == "32: n0, n1, …, n31"
    assert _cell(0.123456) == "0.1235"


def test_goodput_kinds_get_distinct_colours_and_productive_keeps_green() -> None:
    from clustercert.report.charts import BADPUT_COLORS, _distinct_colors

    kinds = ["checkpoint_save", "lost_work", "productive", "reschedule", "resume", "startup", "other"]
    colours = _distinct_colors(kinds)
    assert len(set(colours.values())) == len(kinds)
    assert colours["productive"] == BADPUT_COLORS["productive"]
    assert BADPUT_COLORS["productive"] not in _distinct_colors(["resume", "reschedule"]).values()


def test_the_render_check_counts_each_chart_the_pdf_embeds_once(html: str, pdf: bytes, tmp_path: Path) -> None:
    """bench/check_render.py's image count (hashing the image streams as stored) equals the distinct charts of
    the HTML the PDF was laid out from."""
    import sys

    from pypdf import PdfReader

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from check_render import _image_digests
    finally:
        sys.path.remove(str(ROOT / "bench"))
    charts = set(re.findall(r'src="(data:image/png;base64,[^"]+)"', html))
    assert len(charts) == 11
    assert len(_image_digests(PdfReader(io.BytesIO(pdf)))) == len(charts)


def test_a_cluster_scale_run_folds_the_per_file_tables() -> None:
    """A cluster's sweep is a table and a file per pair (8,168 files at 512 GPUs): past APPENDIX_CAP the
    validation table lists the tables with a finding and one row per suite for the others, and the inventory
    the first files, pointing to manifest.json; every finding is still in the table of what did not pass."""
    import copy
    import re

    from clustercert.report.render import APPENDIX_CAP

    data = _input()
    others = data["validation"]["tables"]  # the golden run's one table, with a finding
    assert [t["suite"] for t in others] == ["training_steps.v1"]
    assert any(r["status"] != "PASS" for r in others[0]["results"])
    many = []
    for i in range(APPENDIX_CAP + 50):
        t = {**copy.deepcopy(others[0]), "suite": "collective_results", "table": "collective_results",
             "run": f"nccl-pair-{i:04d}", "file": f"collectives/pair/{i:04d}.log", "rows": 20}
        for r in t["results"]:
            r["status"] = "FAIL" if i in (7, 99, 230) and r is t["results"][-1] else "PASS"
        many.append(t)
    data["validation"]["tables"] = others + many
    collective = many[0]
    data["inventory"] = [{"path": f"collectives/pair/{i:04d}.log", "bytes": 100 + i, "sha256": f"{i:064x}"}
                         for i in range(APPENDIX_CAP + 100)]
    html = render_html(_context(data), TEMPLATES)
    section = html[html.index('<section id="validation">'):html.index('<section id="reproducibility">')]
    listing = section[:section.index("</table>")]
    rows = re.findall(r"<tr(?: class=\"compact\")?><td>([a-z_.0-9]+)</td>", listing)
    # the four tables with a finding, each on its own row, then one row for the others of the suite
    assert rows == ["training_steps.v1"] + ["collective_results"] * 3 + ["collective_results"]
    folded = re.search(r'<tr class="compact"><td>collective_results</td><td>(\d+) more tables</td><td>each in '
                       r'validation.json</td><td class="num">(\d+)</td><td class="num">(\d+) of (\d+)</td>', listing)
    assert folded is not None
    n = len(collective["results"])
    assert folded.groups() == (str(APPENDIX_CAP + 47), str(20 * (APPENDIX_CAP + 47)), str(n * (APPENDIX_CAP + 47)),
                               str(n * (APPENDIX_CAP + 47)))
    assert section.count("nccl-pair-0007") >= 2 and "nccl-pair-0230" in section  # listed and in the findings
    assert f"The first {APPENDIX_CAP} of the {APPENDIX_CAP + 100} evidence files" in section
    assert section.count('<code class="hash">') == APPENDIX_CAP
    assert f"{APPENDIX_CAP - 1:064x}" in section and f"{APPENDIX_CAP:064x}" not in section


def test_a_failed_cross_source_expectation_of_a_cluster_shows_its_host_list_shortened() -> None:
    """A cluster's host_in_system failure carries the value set of every host (512 at 4,096 GPUs) in its
    arguments: the report lists it with the findings, its first and last hosts and how many more are in
    validation.json, not a page of names."""
    import copy
    from html import unescape

    data = _input()
    hosts = [f"gb-r{i // 18:02d}-n{i % 18:02d}" for i in range(512)]
    failed = copy.deepcopy(next(x for x in data["validation"]["cross_source"] if x["expectation"] == "host_in_system"))
    failed.update(status="FAIL", unexpected_count=1, unexpected_percent=0.2, message="1 of 513 rows",
                  kwargs={**failed["kwargs"], "value_set": hosts},
                  sample=[{"file": "nccl/pair/x.log", "line": 4, "value": "gb-spare-01"}])
    data["validation"]["cross_source"] = [failed]
    html = unescape(render_html(_context(data), TEMPLATES).replace("<wbr>", ""))
    findings = html[html.index("<caption>Expectations that did not pass</caption>"):]
    row = findings[findings.index("<code>host_in_system</code>"):]
    row = row[:row.index("</tr>")]
    assert "cross_source on bundle" in row and "nccl/pair/x.log</code> line 4: <code>gb-spare-01</code>" in row
    shown = [h for h in hosts if f'"{h}"' in row]
    assert shown == [*hosts[:10], hosts[-1]]
    assert '"... 501 more in validation.json ..."' in row


def test_a_bus_bandwidth_charts_message_sizes_read_in_binary_units() -> None:
    """The x axis ticks at powers of two and prints them as nccl-tests users read sizes (64 MiB, not 2^26); plain
    text, so no label goes through mathtext (whose parse per distinct label was a fifth of the charts' drawing)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from clustercert.report.charts import _bus_figure, _bytes_label, _rc

    assert [_bytes_label(v) for v in (0.5, 8, 1023, 1024, 1536, 1 << 26, 3 << 29, 1 << 34)] == [
        "0.5 B", "8 B", "1023 B", "1 KiB", "1.5 KiB", "64 MiB", "1.5 GiB", "16 GiB"]
    run = {"run": "r", "collective": "all_reduce", "ranks": 16, "scope": "nvlink", "status": "PASS",
           "sizes_bytes": [8, 1 << 10, 1 << 20, 1 << 30], "busbw_gbps": [0.1, 10.0, 400.0, 700.0],
           "target_gbps": 560.0, "expected_gbps": 700.0, "ceiling_gbps": 1800.0}
    with _rc():
        fig = _bus_figure(run)
        fig.draw(FigureCanvasAgg(fig).get_renderer())
        (ax,) = fig.axes
        low, high = ax.get_xlim()
        shown = [t.label1.get_text() for t in ax.xaxis.get_major_ticks() if low <= t.get_loc() <= high]
        minor = [t.label1.get_text() for t in ax.xaxis.get_minor_ticks()]
    # every fourth power of two across 8 B to 1 GiB, and one beyond the first point in the axis's margin
    assert shown == ["4 B", "64 B", "1 KiB", "16 KiB", "256 KiB", "4 MiB", "64 MiB", "1 GiB"], shown
    assert all(text.split()[1] in ("B", "KiB", "MiB", "GiB") for text in shown) and not any(minor)
    assert ax.xaxis.label.get_text() == "message size"


@pytest.mark.parametrize("busbw", [(0.05, 0.4), (0.5, 2.4), (431.0, 952.0), (880.0, 1120.0), (12000.0, 52000.0),
                                   (95000.0, 870000.0)])
def test_a_bus_bandwidth_charts_measured_margins_hold_every_text_inside_and_apart(busbw: tuple[float, float]) -> None:
    """The bus-bandwidth charts are laid out from their texts' measured sizes (the constrained layout drew each
    figure once more to measure them, half of its drawing): at any scale of busbw, every title, label and tick label
    lies inside the figure, and the y label clears the y tick labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from clustercert.report.charts import _bus_figure, _rc

    low, high = busbw
    run = {"run": "r", "collective": "reduce_scatter", "ranks": 512, "scope": "nvlink-domain", "status": "ERROR",
           "sizes_bytes": [1 << 25, 1 << 26, 1 << 27, 1 << 34], "busbw_gbps": [low, (low + high) / 2, high, high],
           "target_gbps": high * 0.8, "expected_gbps": high * 0.9, "ceiling_gbps": high * 1.02}
    with _rc():
        fig = _bus_figure(run)
        renderer = FigureCanvasAgg(fig).get_renderer()  # as savefig's PNG draws it
        fig.draw(renderer)
        (ax,) = fig.axes
        page = fig.bbox
        shown = [t.label1 for t in ax.yaxis.get_major_ticks()
                 if t.label1.get_text() and ax.get_ylim()[0] <= t.get_loc() <= ax.get_ylim()[1]]
        texts = [ax.title, ax.xaxis.label, ax.yaxis.label, *shown,
                 *(t.label1 for t in ax.xaxis.get_major_ticks()  # the ticks drawn: those within the view
                   if t.label1.get_text() and ax.get_xlim()[0] <= t.get_loc() <= ax.get_xlim()[1])]
        assert shown and len(texts) > len(shown) + 3
        for text in texts:
            box = text.get_window_extent(renderer)
            assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1, \
                (text.get_text(), box, page)
        ylabel = ax.yaxis.label.get_window_extent(renderer)
        assert all(ylabel.x1 < t.get_window_extent(renderer).x0 for t in shown), [t.get_text() for t in shown]


def _step_series(values: list[float]) -> list[dict[str, Any]]:
    return [{"workload": "llama3-70b", "precision": "fp8", "gpus": 512, "run": f"r{r}", "window": [3, 8],
             "iterations": list(range(1, len(values) + 1)), "step_time_s": [v * (1 + 0.01 * r) for v in values],
             "baseline_step_s": values[-1]} for r in (1, 2)]


def _untitled_inverted(charts: Any) -> str:
    """A figure whose tick labels sit at the ends of both inverted axes and with no title above: each end's label
    reaches past the axes by half its size, the margins must hold it."""
    with charts._rc():
        fig = charts._draw(4.0, 2.0, constrained=False)
        ax = fig.add_subplot()
        ax.plot([0, 1000], [0, 10])
        ax.set_xlim(1000, 0)
        ax.set_ylim(10, 0)
        ax.set_xlabel("x")
        charts._fit_margins(fig, ax)
        return str(charts._png(fig))


# Each chart of one axes, at scales that change its tick labels' widths (and one with long category names)
ONE_AXES_CHARTS: dict[str, Any] = {
    "step, sub-second": lambda c: c.step_time_charts(_step_series([0.91, 0.752, 0.75, 0.749, 0.751, 0.748])),
    "step, thousands": lambda c: c.step_time_charts(_step_series([9100.0, 7520.0, 7500.0, 7490.0, 7510.0, 7480.0])),
    "scaling": lambda c: c.scaling_chart(
        [{"workload": "llama3-70b", "precision": "fp8",
          "points": [{"gpus": g, "efficiency": e} for g, e in ((8, 1.0), (64, 0.97), (512, 0.93), (4096, 0.41))]}],
        0.9),
    "bus, GiB sizes": lambda c: c.bus_bandwidth_charts([{
        "run": "r", "collective": "all_gather", "ranks": 4096, "scope": "scale-out", "status": "FAIL",
        "sizes_bytes": [8, 1 << 20, 1 << 30, 1 << 34], "busbw_gbps": [0.01, 3.0, 41.0, 44.5],
        "target_gbps": 40.0, "expected_gbps": 45.0, "ceiling_gbps": 50.0}]),
    "inverted, ticks at the ends, no title": lambda c: _untitled_inverted(c),
    "events": lambda c: c.event_timeline_chart(
        [{"type": t, "time_s": 60.0 * i} for i, t in enumerate(
            ["node_failure_detected_by_health_check", "job_requeued", "restart", "resumed_from_checkpoint"])]),
}


@pytest.mark.parametrize("chart", list(ONE_AXES_CHARTS))
def test_a_chart_of_one_axes_gets_the_margins_the_constrained_layout_finds(
        chart: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Charts of one axes are laid out from the measured sizes of their texts (`_fit_margins`), not by the
    constrained layout, which drew each figure once more to measure them: the axes land where the constrained
    layout, run on the same figure afterwards, puts them (within a tenth of a point)."""
    from clustercert.report import charts

    drawn: list[Any] = []
    real = charts._png

    def keep(fig: Any) -> str:
        drawn.append(fig)
        return real(fig)

    monkeypatch.setattr(charts, "_png", keep)
    assert ONE_AXES_CHARTS[chart](charts)
    (fig,) = drawn
    assert fig.get_layout_engine() is None  # laid out by the measured margins
    (ax,) = fig.axes
    fitted = ax.get_position().bounds
    with charts._rc():
        fig.set_layout_engine("constrained")
        fig.draw_without_rendering()
    width, height = (inches * 72.0 for inches in fig.get_size_inches())
    found = ax.get_position().bounds
    assert fitted != found or fitted != (0.125, 0.11, 0.775, 0.77)  # not the default subplot place
    for mine, theirs, points in zip(fitted, found, (width, height, width, height), strict=True):
        assert abs(mine - theirs) * points < 0.1, (chart, fitted, found)


def test_a_chart_its_margins_cannot_be_measured_for_keeps_the_constrained_layout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Step times that differ only in their last digits get an offset above the y axis (`+1e3`), a text the measured
    margins do not count: that chart is laid out by the constrained layout, as before."""
    from clustercert.report import charts

    drawn: list[Any] = []
    real = charts._png
    monkeypatch.setattr(charts, "_png", lambda fig: drawn.append(fig) or real(fig))
    values = [1000.0003, 1000.0001, 1000.0002, 1000.0001, 1000.0002]
    (chart,) = charts.step_time_charts([{"workload": "w", "precision": "bf16", "gpus": 8, "run": "r1", "window": [2, 4],
                                         "iterations": list(range(1, 6)), "step_time_s": values}])
    (fig,) = drawn
    assert fig.axes[0].yaxis.get_major_formatter().get_offset()  # the offset the margins do not count
    assert fig.get_layout_engine() is not None and chart.uri.startswith("data:image/png;base64,")


def test_page_one_names_the_profile_the_signer_and_how_to_verify() -> None:
    """The cover names the profile and what it leaves out, the signer as the certificate names them with its
    SHA-256, and the report carries its own verification commands; a network acceptance is titled as one."""
    data = _input()
    data["meta"]["signer_identity"] = {"common_name": "Jane Auditor", "organisation": "Example Audit Ltd",
                                       "email": "jane@example.com", "cert_sha256": "ab" * 32}
    out = render_html(_context(data), TEMPLATES)
    cover = out[out.index('<section id="cover"'):out.index('<section id="summary">')]
    assert "<h1>GPU cluster certification</h1>" in cover and "Full certification" in cover
    assert "<strong>Jane Auditor</strong>, Example Audit Ltd &lt;jane@example.com&gt;" in cover
    assert f"PDF certificate SHA-256 <code class=\"hash\">{'ab' * 32}</code>" in cover
    assert "health: not submitted; the full profile decides on it when submitted" in cover
    # page one's order: outcome and profile, system, window, signer, headline table, findings
    marks = ['class="outcome', 'id="profile"', "System under test", "Evidence collected", 'id="signer"',
             "Headline: each workload", 'id="why"']
    assert [cover.index(m) for m in marks] == sorted(cover.index(m) for m in marks)
    verify = out[out.index('<h3 id="verify">'):]
    for command in ("clustercert verify reports/", "openssl x509 -in pdf_signer.cert.pem -noout -subject "
                    "-fingerprint -sha256", "pyhanko sign validate --pretty-print --trust pdf_signer.cert.pem "
                    "report.pdf", "openssl pkeyutl -verify -pubin -inkey manifest_ed25519.pub -rawin"):
        assert command in verify, command
    data["results"]["profile"] = dict(data["results"]["profile"], id="network", title="Network acceptance",
                                      not_covered="training efficiency: this is not a full certification")
    data["meta"]["profile"] = "network"
    network = render_html(_context(data), TEMPLATES)
    command = "clustercert certify /home/alice/evidence/gb200-seed --catalog exemplar-gb200 --profile network"
    assert f"<code>{command}</code>" in network
    assert "<h1>GPU cluster network acceptance</h1>" in network
    assert "CERTIFIED<span class=\"outcome-profile\"> · Network acceptance</span>" in network
    assert "this is not a full certification" in network


def test_undeclared_nvlink_domains_are_said_never_counted_as_none() -> None:
    # issue 56: a bundle.yaml without nvlink_domains read "0 NVLink domains" on page one, a fact nobody stated
    data = _input()
    data["system"]["nvlink_domains"] = []
    nodes = len(data["system"]["nodes"])
    out = render_html(_context(data), TEMPLATES)
    assert "0 NVLink domains" not in out
    assert (f"{nodes} nodes × 4 GPUs = {nodes * 4} GPUs, NVLink domains not declared (each node counted as its own)"
            in out)
    assert f"<td>not declared</td><td>each of the {nodes} nodes counted as its own domain</td>" in out


def test_a_long_sentence_an_earlier_check_said_is_a_reference_in_the_report() -> None:
    """The report says a remedy or a formula once and refers to it after (issue 58: the link-model formula and its
    remedy were repeated per check); short sentences stay; results.json keeps every message whole. A reference ends
    its sentence, so that the render check does not read it and the next one as one."""
    from clustercert.report.render import _findings_shown, _said_once, sentences

    remedy = "Check the NICs, cables and switch ports these runs cross, then re-run nccl-tests"
    formula = "Target = 0.8 x expected 91.3 GB/s (bound 2 domains, k = 64 of N = 128 ranks per domain: min(a, b));"
    # cut after . ; : ! or ? and a space, never inside brackets
    assert sentences(f"1 of 4 run(s) below their target: x. {formula} {remedy}") == [
        "1 of 4 run(s) below their target:", "x.", formula, remedy]
    checks = [{"id": f"scaling.c{i}", "phase": "scaling", "message": f"run {i} below: x{i}. {formula} {remedy}"}
              for i in range(3)]
    checks.insert(0, {"id": "efficiency.w", "phase": "efficiency", "message": f"Fix it. {remedy}"})
    shown = _said_once(checks)
    # in the report's order: the efficiency phase says the remedy first, the scaling checks refer to it, and the
    # formula, said first by scaling.c0, is a reference after; one reference for a run of referred sentences
    assert shown[0]["message"] == f"Fix it. {remedy}"
    assert shown[1]["message"] == f"run 0 below: x0. {formula} (as in efficiency.w)."
    assert [c["message"] for c in shown[2:]] == [f"run {i} below: x{i}. (as in scaling.c0). (as in efficiency.w)."
                                                 for i in (1, 2)]
    assert checks[1]["message"].endswith(remedy)  # the input (results.json's) is untouched

    # page one: findings that say the same of the same evidence are one line with their checks; a sentence an
    # earlier finding said is "(as above)"
    none = "the bundle holds none of what they judge (the cluster did not show it);"
    findings = [{"status": "FAIL", "phase": p, "check": f"{p}.x", "checks": [f"{p}.x"], "where": [],
                 "line": f"2 checks without evidence: {none} first: {p} x"} for p in ("efficiency", "scaling")]
    findings += [{"status": "ERROR", "phase": "scaling", "check": c, "checks": [c], "where": ["a.log:3"],
                  "line": "no link bound: expected the scale-out network, got none"} for c in ("s.a", "s.b")]
    shown_findings = _findings_shown(findings)
    assert [f["line"] for f in shown_findings] == [
        findings[0]["line"], "2 checks without evidence: (as above). first: scaling x", findings[2]["line"]]
    assert (shown_findings[2]["merged"], shown_findings[2]["checks"]) == (2, ["s.a", "s.b"])


def test_configurations_render_as_key_value_tables_with_dotted_keys() -> None:
    """A configuration is two columns, key (nested keys dotted) and value, not one string (issue 58): a recipe
    check's values under its summary (the same values again refer to the first), a rule's nested values, and
    bundle.yaml's declared interconnect and description in the system description."""
    from clustercert.report.sources import system_rows

    data = copy.deepcopy(_input())
    results = data["results"]
    settings = {"GBS (gbs)": "256 (training/r1.log:12)", "TP (tp)": "4 (declared)"}
    checks = [{"id": f"efficiency.w-r{i}_recipe_conforms", "title": "Run follows its baseline's recipe",
               "phase": "efficiency", "severity": "required", "status": "PASS", "measured": 0.0, "target": 0.0,
               "unit": "differences", "message": "GBS 256 (training/r1.log:12), TP 4 (declared) match the "
               "baseline's", "summary": "2 recipe values match the baseline's", "evidence": [],
               "settings": settings} for i in (1, 2)]
    results["checks"] = results["checks"] + checks
    results["rules"] = {**results["rules"], "collective_model": {"target_fraction": 0.8,
                                                                 "efficiency": {"nvlink": {"all_reduce": 1.07}}}}
    page = render_html(_context(data), TEMPLATES)
    rows = re.findall(r"<tr><td><code>([^<]*(?:<wbr>[^<]*)*)</code></td><td>([^<]*)</td></tr>", page)
    shown = {key.replace("<wbr>", ""): value.replace("<wbr>", "") for key, value in rows}
    assert shown["GBS (gbs)"] == "256 (training/r1.log:12)" and shown["TP (tp)"] == "4 (declared)"
    assert shown["efficiency.nvlink.all_reduce"] == "1.07" and shown["target_fraction"] == "0.8"
    # the first check's values are a table; the second says whose they are
    assert page.count("The values efficiency.") == 1
    assert "2 recipe values match the baseline&#39;s (values as in efficiency.w-r1_recipe_conforms)" in page.replace(
        "<wbr>", "")
    sut = {"declared": {"gpu": "gb200-nvl72", "interconnect": {"scale_out": "infiniband-ndr", "nics_per_node": 4},
                        "description": {"software": {"driver": "570.86", "nccl": "2.26.5"}, "notes": "as built"}}}
    declared = {r["item"]: r["value"] for r in system_rows(sut) if r["origin"] == "declared in bundle.yaml"}
    assert {k: v for k, v in declared.items() if k.startswith("system.")} == {
        "system.interconnect.scale_out": "infiniband-ndr", "system.interconnect.nics_per_node": 4,
        "system.description.software.driver": "570.86", "system.description.software.nccl": "2.26.5",
        "system.description.notes": "as built"}
