"""What an operator sees of a run in Prefect's UI (flows/digest.py), checked on hand-made results whose every
figure is worked out here: the summary's rounding and units, the reasons per phase, the failed-check rows, the
report's address (a link under CLUSTERCERT_REPORTS_URL, else a path as text), the state's message, the tags, the
log lines; and the address `clustercert server` hands its UI."""

from __future__ import annotations

from typing import Any

import pytest

from clustercert.errors import UsageError
from clustercert.settings import load_settings
from flows.digest import (
    ReportPlace,
    escape,
    failed_check_rows,
    log_lines,
    run_tags,
    state_message,
    summary_markdown,
)
from flows.server_boot import ui_api_url

FOLDER = "/srv/reports/20260101T000000Z-abcdef12-123456"
NO_URL = ReportPlace(run_id="20260101T000000Z-abcdef12-123456", folder=FOLDER, host="cert-1")
WITH_URL = ReportPlace(run_id="20260101T000000Z-abcdef12-123456", folder=FOLDER, host="cert-1",
                       base_url="https://reports.example/cc/")


def _check(i: int, phase: str, status: str = "FAIL", severity: str = "required") -> dict[str, Any]:
    return {"id": f"{phase}.link{i}_meets_target", "phase": phase, "status": status, "severity": severity,
            "measured": 33.589999999999996 + i, "target": 42.0, "unit": "GB/s", "delta_pct": None, "ci_low": None,
            "ci_high": None}


def _reason(c: dict[str, Any]) -> dict[str, Any]:
    summary = f"link {c['id']} below target"
    return {"check": c["id"], "status": c["status"], "severity": c["severity"], "phase": c["phase"], "title": "",
            "summary": summary, "where": [f"collectives/{c['id']}.log:1-9"],
            "line": f"{c['status']} {c['phase']}: {summary}"}


def _results(failing_scaling: int = 5, outcome: str = "NOT CERTIFIED") -> dict[str, Any]:
    checks = [_check(0, "efficiency"), *(_check(i, "scaling") for i in range(1, failing_scaling + 1)),
              _check(99, "resilience", status="PASS")]
    return {"run_id": NO_URL.run_id, "started_at": "2026-01-01T00:00:00Z", "outcome": outcome,
            "cluster": {"name": "east_1 <b>"}, "catalog": {"id": "exemplar-gb200", "version": "2026.12.0"},
            "valid_until": None, "checks": checks,
            "reasons": [_reason(c) for c in checks if c["status"] == "FAIL"],
            "workloads": [
                {"workload": "grok1-314b", "precision": "bf16", "gpus": 512,
                 "step_time_s": {"mean": 7.906123456789}, "baseline": {"step_time_s": 7.324},
                 "delta_pct": -7.396211, "ci_low_pct": -7.5123, "ci_high_pct": -7.0877, "mfu": 0.441234,
                 "status": "FAIL"},
                {"workload": "tiny", "precision": "fp8", "gpus": 8, "step_time_s": {"mean": 0.0512345},
                 "baseline": {"step_time_s": 1234.5678}, "delta_pct": None, "ci_low_pct": None, "ci_high_pct": None,
                 "mfu": None, "status": "SKIPPED"}],
            "previous_run": {"run_id": "20251201T000000Z-abcdef12-654321", "outcome": "CERTIFIED", "changes": [
                {"workload": "grok1-314b/bf16", "figure": "mfu", "previous": 0.5, "current": 0.441234,
                 "regressed": True},
                {"workload": "grok1-314b/bf16", "figure": "delta_pct", "previous": -7.0, "current": -7.396211,
                 "regressed": False}]}}


def test_the_summary_opens_with_the_outcome_and_why_then_the_reasons_three_per_phase() -> None:
    lines = summary_markdown(_results(), NO_URL).splitlines()
    assert lines[:10] == [
        r"# NOT CERTIFIED: east\_1 &lt;b&gt;",
        "",
        "**Why:** 6 required checks fail",
        "",
        r"- FAIL efficiency: link efficiency.link0\_meets\_target below target "
        r"(collectives/efficiency.link0\_meets\_target.log:1-9)",
        r"- FAIL scaling: link scaling.link1\_meets\_target below target "
        r"(collectives/scaling.link1\_meets\_target.log:1-9)",
        r"- FAIL scaling: link scaling.link2\_meets\_target below target "
        r"(collectives/scaling.link2\_meets\_target.log:1-9)",
        r"- FAIL scaling: link scaling.link3\_meets\_target below target "
        r"(collectives/scaling.link3\_meets\_target.log:1-9)",
        "- and 2 more (scaling 2): the failed checks and the report list each",
        "",
    ]


def test_the_workload_rows_are_rounded_with_units() -> None:
    text = summary_markdown(_results(), NO_URL)
    assert "| grok1-314b BF16 | 512 | 7.91 s | 7.32 s | -7.4 % (-7.5 % to -7.1 %) | 44.1 % | FAIL |" in text
    # three significant digits, never an exponent; no figure where the run has none
    assert "| tiny FP8 | 8 | 0.0512 s | 1235 s | – | – | SKIPPED |" in text
    assert "- grok1\\-314b/bf16 mfu" not in text and "- grok1-314b/bf16 mfu: 50.0 % → 44.1 % **regressed**" in text
    assert "- grok1-314b/bf16 delta\\_pct: -7.0 % → -7.4 %" in text
    assert "33.58" not in text and "7.906" not in text


def test_the_report_is_linked_under_the_reports_url_else_named_by_its_path() -> None:
    linked = summary_markdown(_results(), WITH_URL)
    assert f"**Report:** [report.pdf](https://reports.example/cc/{NO_URL.run_id}/report.pdf)" in linked
    assert f"every check in [results.json](https://reports.example/cc/{NO_URL.run_id}/results.json)" in linked
    plain = summary_markdown(_results(), NO_URL)
    assert f"**Report:** `{FOLDER}/report.pdf` on cert-1 (set CLUSTERCERT_REPORTS_URL to link it)\n" in plain
    assert f"**Checks:** 6 FAIL, 1 PASS; every check in `{FOLDER}/results.json` on cert-1\n" in plain
    assert "file:" not in plain and "](" not in plain
    assert WITH_URL.url("report.pdf") == f"https://reports.example/cc/{NO_URL.run_id}/report.pdf"
    assert NO_URL.url("report.pdf") is None


def test_the_failed_checks_are_a_short_table_of_rounded_figures() -> None:
    rows = failed_check_rows(_results(failing_scaling=30), limit=25)
    assert len(rows) == 26
    assert rows[0] == {"check": "efficiency.link0_meets_target", "status": "FAIL", "severity": "required",
                       "measured / target": "33.59 / 42 GB/s", "delta": "",
                       "finding": "link efficiency.link0_meets_target below target"}
    assert rows[-1] == {"check": "and 6 more", "status": "", "severity": "", "measured / target": "", "delta": "",
                        "finding": "every check is in results.json and the report"}
    assert failed_check_rows(_results(failing_scaling=0, outcome="CERTIFIED") | {"reasons": []}) == []


def test_the_state_message_tags_and_log_lines_say_the_outcome() -> None:
    results = _results()
    assert state_message(results) == ("east_1 <b>: NOT CERTIFIED (6 required checks fail); FAIL efficiency: link "
                                      "efficiency.link0_meets_target below target (and 5 more)")
    assert run_tags(results) == ["clustercert", "outcome:not-certified", "cluster:east-1-b"]
    assert log_lines(results, FOLDER) == [
        "east_1 <b>: NOT CERTIFIED (6 required checks fail)",
        f"run folder: {FOLDER}",
        "FAIL efficiency: link efficiency.link0_meets_target below target "
        "[collectives/efficiency.link0_meets_target.log:1-9]",
        "FAIL scaling: link scaling.link1_meets_target below target [collectives/scaling.link1_meets_target.log:1-9]",
        "FAIL scaling: link scaling.link2_meets_target below target [collectives/scaling.link2_meets_target.log:1-9]",
        f"and 3 more reasons in {FOLDER}/results.json"]
    certified = {**_results(failing_scaling=0, outcome="CERTIFIED"), "reasons": []}
    certified["checks"] = [c | {"status": "PASS"} for c in certified["checks"]]
    assert state_message(certified) == "east_1 <b>: CERTIFIED (all 2 required checks pass)"


def test_a_profile_is_named_when_results_carry_one() -> None:
    assert "; profile Full certification." in summary_markdown({**_results(), "profile": {"id": "full",
                                                               "title": "Full certification"}}, NO_URL)
    assert "; profile smoke." in summary_markdown({**_results(), "profile": "smoke"}, NO_URL)
    assert "profile" not in summary_markdown(_results(), NO_URL)


def test_evidence_text_cannot_write_links_or_markup() -> None:
    assert escape("a_b*c [x](javascript:alert(1)) <img src=x> `code` | ~") == \
        r"a\_b\*c \[x\](javascript:alert(1)) &lt;img src=x&gt; \`code\` \| \~"


@pytest.mark.parametrize(("url", "ok"), [("https://reports.example/cc", True), ("http://10.0.0.5:8080/r/", True),
                                         ("file:///srv/reports", False), ("reports.example/cc", False),
                                         ("https://", False)])
def test_the_reports_url_is_an_http_address(monkeypatch: pytest.MonkeyPatch, url: str, ok: bool) -> None:
    monkeypatch.setenv("CLUSTERCERT_REPORTS_URL", url)
    if ok:
        assert load_settings().reports_url == url
        return
    with pytest.raises(UsageError) as raised:
        load_settings()
    assert str(raised.value) == (f"CLUSTERCERT_REPORTS_URL: expected the http(s) URL where the run folders of "
                                 f"CLUSTERCERT_REPORTS_DIR are published, got {url!r}. Fix or unset it (the report "
                                 f"is then named by its path)")


@pytest.mark.parametrize(("host", "api"), [("127.0.0.1", "http://127.0.0.1:4411/api"),
                                           ("0.0.0.0", "http://127.0.0.1:4411/api"),
                                           ("::", "http://[::1]:4411/api"), ("fe80::1", "http://[fe80::1]:4411/api"),
                                           ("cert-1.example", "http://cert-1.example:4411/api")])
def test_the_ui_is_handed_the_address_a_browser_here_reaches(host: str, api: str) -> None:
    assert ui_api_url(host, 4411) == api
