"""The terminal summary and `runs` as a person reads them at an 80-column terminal (subprocess, COLUMNS=80): the
outcome and why first, a line per workload and per phase, the notices; every figure checked against results.json."""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from pypdf import PdfReader

from clustercert.cli.summary import reason_lines, reasons
from tests.conftest import run_cli


def _long(lines: list[str], folder: Path) -> list[str]:
    """Lines over 80 columns, except the run folder's own path (printed whole, however long)."""
    return [ln for ln in lines if len(ln) > 80 and ln.strip() not in (f"in {folder}", f"bundle {folder}")]


def test_the_summary_opens_with_the_outcome_and_why(seed_certified: dict[str, Any]) -> None:
    results = seed_certified["results"]
    lines = seed_certified["stdout"].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Outcome: "))
    required = [c for c in results["checks"] if c["severity"] == "required"]
    assert all(c["status"] == "PASS" for c in required)
    assert lines[start] == (f"Outcome: CERTIFIED (valid until {results['valid_until']}): "
                            f"{results['cluster']['name']}")
    assert lines[start + 1] == f"  why: all {len(required)} required checks pass"
    assert _long(lines, seed_certified["run_dir"]) == []
    assert f"  in {seed_certified['run_dir']}" in lines


def test_one_line_per_workload_and_per_phase(seed_certified: dict[str, Any]) -> None:
    results = seed_certified["results"]
    lines = seed_certified["stdout"].splitlines()
    for w in results["workloads"]:
        name = f"  {w['workload']} {w['precision'].upper()} {w['gpus']} "
        [line] = [ln for ln in lines if ln.startswith(name)]
        assert f"{w['step_time_s']['mean']:.2f} s vs" in line and f"{w['baseline']['step_time_s']:.2f} s" in line
        assert f"{w['delta_pct']:+.1f} % ({w['ci_low_pct']:+.1f}..{w['ci_high_pct']:+.1f})" in line
        assert line.endswith(w["status"])
    by_phase: dict[str, Counter[str]] = {}
    for c in results["checks"]:
        by_phase.setdefault(c["phase"], Counter())[c["status"]] += 1
    for phase, counts in by_phase.items():
        [line] = [ln for ln in lines if ln.startswith(f"  {phase} ")]
        for status, n in counts.items():
            assert f"{n} {status.lower()}" in line


def test_the_cover_notices_are_printed(seed_certified: dict[str, Any]) -> None:
    results = seed_certified["results"]
    text = seed_certified["stdout"]
    assert results["synthetic"] and "  - synthetic evidence: written by clustercert's simulator" in text
    assert "  - signed with a development key: run `clustercert keys init`" in text
    assert "  - customer copy (report.redacted.*)" in text
    derived = [w for w in results["workloads"] if w["baseline"]["illustrative"]]
    assert derived, "the seed has an illustrative baseline (DOMAIN.md): the notice must be tested"
    for w in derived:
        assert f"  - {w['workload']} {w['precision'].upper()}: the baseline is derived" in text


def test_narrower_than_80_columns_the_summary_wraps_and_cuts_nothing(seed_certified: dict[str, Any]) -> None:
    """The lines certify prints at 40 to 70 columns (summary_lines, which it calls with the terminal's width): the
    workload's status stays on its name's line, the notices and the outcome whole, no line past the width."""
    from clustercert.cli.summary import notices, summary_lines

    results = seed_certified["results"]
    folder = seed_certified["run_dir"]
    paths = {name: str(folder / name) for name in ("report.html", "report.pdf", "results.json")}
    for width in (40, 50, 60, 70):
        lines = summary_lines(results, paths, dev_key=True, redacted=True, width=width)
        assert [ln for ln in lines if len(ln) > width and ln != f"  in {folder}"] == [], width
        joined = " ".join(ln.strip() for ln in lines)
        assert joined.startswith(f"Outcome: CERTIFIED (valid until {results['valid_until']}): "
                                 f"{results['cluster']['name']} why: all ")
        for w in results["workloads"]:
            [line] = [ln for ln in lines if ln.startswith(f"  {w['workload']} {w['precision'].upper()} {w['gpus']} ")]
            assert f" {w['status']}" in line, (width, line)
            assert f"{w['delta_pct']:+.1f} % ({w['ci_low_pct']:+.1f}..{w['ci_high_pct']:+.1f})" in joined
        for notice in notices(results, dev_key=True, redacted=True):
            assert f"- {notice}" in joined, (width, notice)


def test_verbose_narrower_than_80_columns_lists_every_check_with_words_whole(
        seed_certified: dict[str, Any]) -> None:
    """Below 80 columns the check table's columns would break words ('measure d'): certify lists the checks."""
    from clustercert.cli.summary import check_list_lines

    results = seed_certified["results"]
    for width in (40, 60, 79):
        lines = check_list_lines(results, width)
        ids = {c["id"] for c in results["checks"]}
        assert [ln for ln in lines if len(ln) > width and ln not in ids] == [], width  # an id is one word, whole
        for c in results["checks"]:
            at = lines.index(c["id"])
            assert lines[at + 1].startswith(f"  {c['status']}  "), (width, lines[at:at + 2])
            if c["measured"] is not None and c["target"] is not None:
                figures = f"{c['measured']:.4g} / {c['target']:.4g}"
                assert figures in " ".join(ln.strip() for ln in lines[at + 1:at + 4]), (width, c["id"])


def test_verbose_adds_the_check_table_within_80_columns(seed_certified: dict[str, Any]) -> None:
    lines = seed_certified["stdout"].splitlines()
    table = lines[:next(i for i, ln in enumerate(lines) if ln.startswith("Outcome: "))]
    assert table and all(len(ln) <= 80 for ln in table)
    statuses = Counter(c["status"] for c in seed_certified["results"]["checks"])
    cells = Counter(cell.strip() for ln in table for cell in ln.split("│"))
    assert all(cells[status] == n for status, n in statuses.items()), (cells, statuses)


def test_reasons_are_the_judges_each_with_where() -> None:
    """The reasons results.json holds, as the judge writes them (`outcome_reasons`), read back and printed."""
    from clustercert.evidence.provenance import Span
    from clustercert.verdicts import Check, Severity, Status, outcome_reasons

    def check(cid: str, status: Status, severity: Severity, message: str, *spans: Span) -> Check:
        return Check(id=cid, title=cid, phase=cid.split(".")[0], severity=severity, status=status, measured=None,
                     target=None, unit="", message=message, evidence=spans)

    checks = [check("efficiency.a", Status.FAIL, Severity.REQUIRED, "slow by 6 %. Re-run it",
                    Span("training/a/r1.log", 40, 49, 10)),
              check("scaling.b", Status.PASS, Severity.REQUIRED, "fine"),
              check("validation.c", Status.ERROR, Severity.REQUIRED,
                    "training/c.log line 3: required expectation failed", Span("training/c.log", 3, 3, 1)),
              check("scaling.d", Status.FAIL, Severity.ADVISORY, "low"),
              check("scaling.e", Status.ERROR, Severity.REQUIRED,
                    "no usable run at 128 GPUs: training/e.log: expected log text, got an empty file",
                    Span("training/e.log", 0, 0, 0))]
    results = {"reasons": [r.to_json() for r in outcome_reasons(checks)]}  # named in the bundle, as a run names them
    found = reasons(json.loads(json.dumps(results)))
    assert [(r["check"], r["summary"], r["where"]) for r in found] == [
        ("efficiency.a", "slow by 6 %", ["training/a/r1.log:40-49"]),  # the finding's first clause
        ("validation.c", "training/c.log line 3: required expectation failed", ["training/c.log:3"]),
        ("scaling.e", "no usable run at 128 GPUs: training/e.log: expected log text, got an empty file",
         ["training/e.log"]),
        ("scaling.d", "low", []),
    ]
    assert reason_lines(found, 80) == [
        "  FAIL efficiency: slow by 6 % [training/a/r1.log:40-49]",
        "  ERROR validation: training/c.log line 3: required expectation failed",  # it names its file already
        "  ERROR scaling: no usable run at 128 GPUs: training/e.log: expected log text,",  # ... inside it too
        "       got an empty file",
        "  FAIL scaling (advisory): low",
    ]
    assert reasons({"checks": [c.to_json() for c in checks], "reasons": []}) == []  # a CERTIFIED run has none


def test_reason_lines_wrap_whole_and_count_what_the_same_files_fail_again() -> None:
    def reason(phase: str, summary: str, where: str) -> dict[str, Any]:
        return {"check": f"{phase}.{summary}", "status": "FAIL", "severity": "required", "phase": phase,
                "summary": summary, "where": [where]}

    long = "cross-rack all_reduce below target: nccl-cross-rack-128gpus-2 304.1 < 597.6 GB/s"
    found = [reason("scaling", long, "c/128gpus-2.log:1-160"),
             reason("scaling", "alltoall below target", "c/128gpus-2.log:469-619"),  # the same file again
             reason("scaling", "pair slow", "p/a-b.log:1-34"),
             reason("scaling", "full-scale slow", "f/512.log:1"),
             reason("scaling", "another pair slow", "p/c-d.log:1-34"),  # a fourth file: past the three per phase
             reason("resilience", "straggler", "r/t.parquet")]
    lines = reason_lines(found, 40, per_phase=3)
    assert all(len(ln) <= 40 for ln in lines)
    # 40 columns, 33 after the hanging indent; words whole, hyphenated names too
    assert lines[:5] == ["  FAIL scaling: cross-rack all_reduce",
                         "       below target:",
                         "       nccl-cross-rack-128gpus-2 304.1 <",
                         "       597.6 GB/s",
                         "       [c/128gpus-2.log:1-160]"]
    joined = " ".join(ln.strip() for ln in lines)
    assert f"FAIL scaling: {long} [c/128gpus-2.log:1-160]" in joined
    assert "alltoall" not in joined and "another pair" not in joined
    assert "FAIL scaling: pair slow [p/a-b.log:1-34]" in joined and "FAIL resilience: straggler [r/t.parquet]" in joined
    assert joined.endswith("and 2 more, 1 on the files above and 1 on 1 other file (scaling 2): --verbose lists "
                           "every one, report.html explains each")
    # a word longer than a line (a deep path) stays whole on a line of its own, as a path is copied
    deep = "collectives/pair/node-with-a-long-name-a-b.log:1-34"
    assert reason_lines([reason("scaling", "slow", deep)], 40) == [
        "  FAIL scaling: slow", "       [collectives/pair/node-with-a-long-name-a-b.log:1-34]"]
    # --verbose: every one, nothing counted
    every = " ".join(ln.strip() for ln in reason_lines(found, 40))
    assert "alltoall below target [c/128gpus-2.log:469-619]" in every and "another pair slow" in every
    assert " more" not in every


def test_one_absent_file_failing_many_checks_is_one_line_with_its_count() -> None:
    """A bundle without its resilience log fails four checks with the same finding on no file: one line says it
    with "(4 checks)", and a finding repeated past the three per phase is counted once per check, "on no file"."""
    def reason(phase: str, summary: str, check: str) -> dict[str, Any]:
        return {"check": f"{phase}.{check}", "status": "FAIL", "severity": "required", "phase": phase,
                "summary": summary, "where": []}

    absent = "the bundle has no resilience training log: the cluster did not show a long run"
    found = [reason("resilience", "the bundle has no run of phase resilience", "evidence_present"),
             *(reason("resilience", absent, name) for name in ("goodput", "stalls", "lost_work", "restarts")),
             reason("resilience", "the bundle has no job event log", "no_admin_action"),
             reason("resilience", "the bundle has no per-rank step timings", "stragglers"),
             reason("scaling", "no target", "pair-a"), reason("scaling", "b", "b"), reason("scaling", "c", "c"),
             reason("scaling", "d", "d"), reason("scaling", "d", "e")]  # "d" twice, past the three shown
    lines = reason_lines(found, 200, per_phase=3)
    assert lines == [
        "  FAIL resilience: the bundle has no run of phase resilience",
        f"  FAIL resilience: {absent} (4 checks)",
        "  FAIL resilience: the bundle has no job event log",
        "  FAIL scaling: no target", "  FAIL scaling: b", "  FAIL scaling: c",
        "  and 3 more, 3 on no file (resilience 1, scaling 2): --verbose lists every one, report.html explains each",
    ]
    # --verbose: every check on its own line, none counted together
    assert sum(absent in line for line in reason_lines(found, 200)) == 4


def _runs(seed_certified: dict[str, Any], columns: int) -> tuple[list[str], str]:
    """`runs` of the seed's reports folder at a terminal of `columns` columns: its lines and its whole output."""
    proc = run_cli("runs", "--reports-dir", str(seed_certified["run_dir"].parent), env={"COLUMNS": str(columns)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines(), proc.stdout


def test_runs_is_compact_at_80_columns(seed_certified: dict[str, Any]) -> None:
    lines, shown = _runs(seed_certified, 80)
    results = seed_certified["results"]
    assert len(lines) <= 6, lines  # a header and one run in at most five lines
    assert lines[1].startswith(f"{results['started_at']}  CERTIFIED")
    assert f"  bundle {seed_certified['bundle']}" in lines
    assert [ln for ln in lines if len(ln) > 80 and not ln.startswith("  bundle ")] == []
    for w in results["workloads"]:
        assert f"{w['workload']}/{w['precision']} {w['delta_pct']:+.1f} % {w['mfu']:.3f}" in shown


def test_runs_at_50_columns_cuts_no_name(seed_certified: dict[str, Any]) -> None:
    """Narrower than a run's first line: the cluster's name goes on a line of its own, whole; nothing is cut."""
    lines, _ = _runs(seed_certified, 50)
    results = seed_certified["results"]
    cluster = results["cluster"]["name"]
    assert len(f"{results['started_at']}  CERTIFIED     {cluster}") > 50  # the line this test is about
    assert lines[2:5] == [f"{results['started_at']}  CERTIFIED", f"  cluster {cluster}", f"  run {results['run_id']}"]
    assert [ln for ln in lines if len(ln) > 50 and not ln.startswith("  bundle ")] == []
    assert " ".join(lines[:2]) == "clustercert runs, oldest first (per workload: delta vs baseline %, MFU)"


def test_progress_names_each_stage_and_run_with_elapsed_time(seed_certified: dict[str, Any]) -> None:
    """Not a terminal: plain lines on stderr, in the order the stages ran, the elapsed time never going back."""
    lines = [ln for ln in seed_certified["stderr"].splitlines() if ln.startswith("progress [")]
    # and clustercert's own notes, nothing else: no library's log line (WeasyPrint's "No anchor ..." reached the
    # terminal so)
    assert [ln for ln in seed_certified["stderr"].splitlines() if not ln.startswith(("progress [", "note: "))] == []
    stages = [_stage(ln) for ln in lines]
    order = ["start", "load", "efficiency", "scaling", "resilience", "validate", "judge", "report", "publish"]
    assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s] == order
    elapsed = [_elapsed(ln) for ln in lines]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0
    # Within a stage, the file being parsed is shown at most once a second (a cluster's sweep is thousands of files):
    # the seed's 20 training logs parse in well under a second, so at most a line or two of them per phase. A line
    # shown names one of the bundle's runs and its file (and, for a task of many runs, where it stands among them).
    for previous, line in itertools.pairwise(lines):
        if ": parse " in line and _stage(previous) == _stage(line):
            assert _elapsed(line) - _elapsed(previous) >= 0.9, (previous, line)  # printed to 0.1 s
    bundle = yaml.safe_load((seed_certified["bundle"] / "bundle.yaml").read_text())
    files = {r["id"]: r["files"][0] for r in bundle["runs"]}
    for line in (ln for ln in lines if ": parse " in ln):
        said = re.fullmatch(r".*: parse (\S+) \((\S+)\)(?:, (\d+) of (\d+))?", line)
        assert said is not None and files.get(said[1]) == said[2], line
        assert said[3] is None or 1 <= int(said[3]) <= int(said[4]), line
    assert not any("progress" in ln for ln in seed_certified["stdout"].splitlines())
    # the report's PDF tells how many pages it writes once it has laid them out (seconds after the step before)
    pages = len(PdfReader(seed_certified["run_dir"] / "report.pdf").pages)
    assert any(re.fullmatch(rf"progress \[ *[0-9.]+ s\] report: report\.pdf: write {pages} pages", ln) for ln in lines)


def _elapsed(line: str) -> float:
    """The seconds a progress line says it was printed at."""
    return float(line[len("progress ["):].split(" s]", 1)[0])


def _stage(line: str) -> str:
    """The stage a progress line names."""
    return line.split("] ", 1)[1].split(":", 1)[0]
