"""Validation end to end: a failed required expectation makes certify INCOMPLETE, naming expectation, file and line;
the `evidence` commands as a user runs them."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustercert.evidence.bundle import load_bundle, seal_bundle
from tests.conftest import ROOT, mini_bundle, run_cli, run_cli_on_terminal

SAMPLE = ROOT / "evidence" / "gb200-seed"
pytestmark = pytest.mark.slow
# Prefect's temporary server needs more than its default 20 s to start on a loaded 2-CPU machine
SLOW_START = {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
LLAMA = "training/llama3-70b/fp8/512"


def nccl_log(busbw: float, ranks: int = 8) -> str:
    """A small nccl-tests all_reduce output; the 1 GiB row carries `busbw` out of place (0.97 x in place)."""
    rank_lines = "".join(f"#  Rank {r:2d} Group  0 Pid {1000 + r} on gb-r1-n01 device {r % 4}\n" for r in range(ranks))
    rows = [(268435456, 400.0), (536870912, 600.0), (1073741824, busbw)]
    body = "".join(
        f"  {size:12d}  {size // 4:12d}     float     sum      -1   {size / 1e3 / busbw:9.2f}  {busbw / 1.75:7.2f}"
        f"  {bw:7.2f}       0   {size / 1e3 / busbw:9.2f}  {busbw / 1.75:7.2f}  {0.97 * bw:7.2f}       0\n"
        for size, bw in rows
    )
    avg = sum(1.97 * bw for _, bw in rows) / (2 * len(rows))
    return (
        "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902\n"
        "# Collective test starting: all_reduce_perf\n"
        "# nThread 1 nGpus 1 minBytes 268435456 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20\n"
        "#\n# Using devices\n" + rank_lines + "#\n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw"
        "   busbw  #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)"
        "  (GB/s)\n" + body + f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {avg:.3f}\n#\n"
        "# Collective test concluded: all_reduce_perf\n"
    )


def _bundle(tmp_path: Path, edit: Callable[[Path, dict[str, Any]], None]) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    doc = yaml.safe_load((bundle / "bundle.yaml").read_text())
    edit(bundle, doc)
    (bundle / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    seal_bundle(load_bundle(bundle))
    return bundle


def _add_collective(busbw: float, gpus: int, ranks: int = 8) -> Callable[[Path, dict[str, Any]], None]:
    def edit(bundle: Path, doc: dict[str, Any]) -> None:
        (bundle / "nccl").mkdir(exist_ok=True)
        (bundle / "nccl" / "all_reduce_8.log").write_text(nccl_log(busbw, ranks))
        doc["runs"].append({"id": "nccl-all-reduce-8", "phase": "scaling", "kind": "collective",
                            "format": "nccl-tests", "gpus": gpus, "scope": "nvlink-domain",
                            "files": ["nccl/all_reduce_8.log"]})

    return edit


def _log_iteration_20_twice(log: Path) -> None:
    lines = log.read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if "iteration 20/49" in ln)
    log.write_text("".join([*lines[:at + 1], lines[at], *lines[at + 1:]]))


def _duplicate_iteration(bundle: Path, doc: dict[str, Any]) -> None:
    _log_iteration_20_twice(bundle / LLAMA / "r1.log")


def _declare_256_gpus(bundle: Path, doc: dict[str, Any]) -> None:
    run = next(r for r in doc["runs"] if r["files"] == [f"{LLAMA}/r2.log"])
    run["gpus"] = 256


def _step_lines(path: Path) -> list[str]:
    """A NeMo or Megatron-LM log's step lines, found by their step time field (the oracle of the steps a parser
    reads)."""
    return [ln for ln in path.read_text().splitlines()
            if "train_step_timing in s:" in ln or "elapsed time per iteration (ms):" in ln]


def _line_of(path: Path, text: str, nth: int = 1) -> int:
    hits = [i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln]
    return hits[nth - 1]


CASES: dict[str, tuple[Callable[[Path, dict[str, Any]], None], str, str, Callable[[Path], int]]] = {
    # name: (edit, expectation, file, line of the offending row)
    "duplicated-iteration": (_duplicate_iteration, "iterations_strictly_increasing", f"{LLAMA}/r1.log",
                             lambda f: _line_of(f, "iteration 20/49", 2)),
    "busbw-above-ceiling": (_add_collective(1850.0, 8), "busbw_oop_below_ceiling", "nccl/all_reduce_8.log",
                            lambda f: _line_of(f, " 1073741824  ")),
    "gpu-counts-disagree": (_declare_256_gpus, "gpu_count_implied_by_log", f"{LLAMA}/r2.log",
                            lambda f: _line_of(f, "iteration 0/49")),
}


RUN_OF = {"duplicated-iteration": "llama3-70b-fp8-512-r1", "busbw-above-ceiling": "nccl-all-reduce-8",
          "gpu-counts-disagree": "llama3-70b-fp8-512-r2"}


GROK = "training/grok1-314b/bf16/512"
GROK_RUNS = [f"grok1-314b-bf16-512-r{n}" for n in (1, 2, 3)]


def _duplicate_iteration_in_every_repeat(bundle: Path, doc: dict[str, Any]) -> None:
    for r in ("r1", "r2", "r3"):
        _log_iteration_20_twice(bundle / GROK / f"{r}.log")


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One certification of the sample with every case of CASES applied, each to its own run, and every repeat of
    grok1-314b with a duplicated iteration (the runs and files are distinct, so the cases share one certification:
    each costs about a minute)."""
    tmp = tmp_path_factory.mktemp("gated")

    def every_case(bundle: Path, doc: dict[str, Any]) -> None:
        for name in sorted(CASES):
            CASES[name][0](bundle, doc)
        _duplicate_iteration_in_every_repeat(bundle, doc)

    bundle = _bundle(tmp, every_case)
    proc = run_cli("certify", str(bundle), "--json", "--reports-dir", str(tmp / "reports"), env=SLOW_START)
    out = json.loads(proc.stdout) if proc.returncode == 3 else {}
    run_dir = Path(out["run_dir"]) if out else None
    return {"bundle": bundle, "proc": proc, "out": out, "run_dir": run_dir,
            "results": json.loads((run_dir / "results.json").read_text()) if run_dir else {},
            "validation": json.loads((run_dir / "validation.json").read_text()) if run_dir else {}}


def _failed(validation: dict[str, Any]) -> list[dict[str, Any]]:
    failed = [r for t in validation["tables"] for r in t["results"] if r["status"] == "FAIL"]
    return failed + [r for r in validation["cross_source"] if r["status"] == "FAIL"]


def test_failed_required_expectations_make_certify_incomplete(gated: dict[str, Any]) -> None:
    proc, out = gated["proc"], gated["out"]
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "progress [" not in proc.stderr  # --json: no progress lines
    assert out["outcome"] == "INCOMPLETE"
    assert gated["results"]["outcome"] == "INCOMPLETE" and gated["results"]["checks"] == out["checks"]
    # One gate check per failed required expectation, each ERROR and required: nothing else failed.
    gate = [c for c in out["checks"] if c["phase"] == "validation"]
    expected = [f"validation.{RUN_OF[n]}_{CASES[n][1]}" for n in CASES]
    expected += [f"validation.{run}_iterations_strictly_increasing" for run in GROK_RUNS]
    assert sorted(c["id"] for c in gate) == sorted(expected)
    assert {c["status"] for c in gate} == {"ERROR"} and {c["severity"] for c in gate} == {"required"}
    validation = gated["validation"]
    assert validation["summary"]["required_failed"] == len(expected) and validation["summary"]["errors"] == 0
    assert sorted(r["expectation"] for r in _failed(validation)) == sorted(
        [CASES[n][1] for n in CASES] + ["iterations_strictly_increasing"] * len(GROK_RUNS))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_failed_required_expectation_is_named_with_its_file_and_line(gated: dict[str, Any], name: str) -> None:
    _, expectation, rel, line_of = CASES[name]
    line = line_of(gated["bundle"] / rel)
    check = next(c for c in gated["out"]["checks"] if c["id"] == f"validation.{RUN_OF[name]}_{expectation}")
    # named by its path in the bundle, as results and validation.json name every evidence file
    assert check["message"].startswith(f"{rel} line {line}: required expectation '{expectation}' failed: 1 of ")
    assert check["evidence"] == [{"file": str(rel), "line": line, "last": line, "count": 1}]
    mine = [r for r in _failed(gated["validation"])
            if r["expectation"] == expectation and r["sample"][0]["file"] == str(rel)]
    assert len(mine) == 1 and mine[0]["sample"][0]["line"] == line


def test_the_report_lists_every_expectation_that_did_not_pass_cross_source_ones_too(gated: dict[str, Any]) -> None:
    """The cross-source expectations (the evidence against each other and bundle.yaml) were printed as raw
    key-value lists, and one that failed was missing from "Expectations that did not pass" (only the per-table
    results were): the auditor saw a FAIL counted and could not find it. Each failed expectation has its row
    there, the cross-source ones as "cross_source on bundle", and the cross-source section is a table."""
    from html import unescape

    assert gated["run_dir"] is not None, gated["proc"].stderr
    html = unescape((gated["run_dir"] / "report.html").read_text().replace("<wbr>", ""))
    failed = html[html.index("<caption>Expectations that did not pass</caption>"):]
    failed = failed[:failed.index("</table>")]
    rows = failed.split("<tr>")[2:]  # after the header's row
    validation = gated["validation"]
    not_passed = [r for t in validation["tables"] for r in t["results"] if r["status"] != "PASS"] + [
        r for r in validation["cross_source"] if r["status"] != "PASS"]
    assert len(rows) == len(not_passed) and any(r in validation["cross_source"] for r in not_passed)
    implied = next(r for r in rows if "<code>gpu_count_implied_by_log</code>" in r)
    assert "cross_source on bundle" in implied and "FAIL" in implied
    cross = html[html.index("<h3>Cross-source consistency</h3>"):]
    cross = cross[:cross.index("</table>")]
    assert cross.count("<tr><td><code>") == len(gated["validation"]["cross_source"])
    assert "<strong>expectation</strong>" not in html


def test_gated_check_names_the_expectation_when_its_run_is_used(gated: dict[str, Any]) -> None:
    """Every repeat of grok1-314b has a duplicated iteration: whichever is judged, its baseline check is ERROR with
    the expectation named."""
    judged = next(c for c in gated["out"]["checks"] if c["id"] == "efficiency.grok1-314b-bf16-512_meets_baseline")
    assert judged["status"] == "ERROR"
    assert "required expectation 'iterations_strictly_increasing' failed" in judged["message"]
    assert judged["message"].endswith("the check cannot be judged on this evidence")
    assert sum(1 for c in gated["out"]["checks"]
               if c["phase"] == "validation" and any(run in c["id"] for run in GROK_RUNS)) == 3


# ---- the evidence commands ----------------------------------------------------------------------------------


def test_evidence_seal_writes_the_manifest(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    (bundle / "MANIFEST.sha256").unlink()
    proc = run_cli("evidence", "seal", str(bundle))
    assert proc.returncode == 0, proc.stderr
    lines = (bundle / "MANIFEST.sha256").read_text().splitlines()
    count = len(load_bundle(bundle).evidence_files()) + 1
    hashes = [ln for ln in lines if not ln.startswith("#")]  # each file's size follows in comment lines
    assert len(hashes) == count == len(lines) - count and proc.stdout.startswith(f"sealed {count} files: ")
    digest, rel = lines[0].split("  ")
    assert digest == hashlib.sha256((bundle / rel).read_bytes()).hexdigest()
    assert (bundle / "MANIFEST.sha256").read_text() == (SAMPLE / "MANIFEST.sha256").read_text()


# `clustercert evidence seal` as a user runs it, SIGTERM arriving while the seal's temporary file is flushed to disk
_SEAL_SIGNALLED = """
import os, signal, sys
from clustercert.cli.app import main

flush = os.fsync


def fsync(fd):
    flush(fd)
    os.kill(os.getpid(), signal.SIGTERM)


os.fsync = fsync
raise SystemExit(main(["evidence", "seal", sys.argv[1]]))
"""


def test_a_seal_stopped_midway_leaves_no_temporary_file_in_the_bundle(tmp_path: Path) -> None:
    """The user's bundle holds its files and a whole seal after a stopped `evidence seal`, never the seal's
    temporary file: SIGTERM ends the command past write_atomic's clean-up, so the write is let finish first."""
    import os
    import subprocess
    import sys

    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    (bundle / "MANIFEST.sha256").unlink()
    run = subprocess.run([sys.executable, "-c", _SEAL_SIGNALLED, str(bundle)], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300, check=False)
    assert run.returncode == 143, run.stdout + run.stderr
    assert run.stderr.startswith("stopped by SIGTERM"), run.stderr
    assert sorted(p.name for p in bundle.iterdir()) == sorted(p.name for p in SAMPLE.iterdir())
    assert (bundle / "MANIFEST.sha256").read_text() == (SAMPLE / "MANIFEST.sha256").read_text()


def test_evidence_check_accepts_the_shipped_sample(tmp_path: Path) -> None:
    proc = run_cli("evidence", "check", str(SAMPLE), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["usable"] and out["sealed"] and out["problems"] == []
    assert [r["run"] for r in out["runs"]] == [r.id for r in load_bundle(SAMPLE).spec.runs]
    assert all(f["usable"] for r in out["runs"] for f in r["files"])
    llama = next(r for r in out["runs"] if r["run"] == "llama3-70b-fp8-512-r1")
    assert llama["files"][0]["found"] == "50 steps (iterations 0..49)"
    # counts past a thousand read as the summary's totals do (1,347, not 1347): the log's own step lines
    [long_run] = [r for r in out["runs"] if r["kind"] == "resilience"]
    steps = len(_step_lines(SAMPLE / "resilience" / "training.log"))
    assert steps >= 1000 and long_run["files"][0]["found"].startswith(f"{steps:,} steps (iterations 0..")
    assert out["validation"]["summary"]["required_failed"] == 0 and out["validation"]["summary"]["errors"] == 0
    # The text form of a passing check is read in test_evidence_check_writes_data_docs_only_on_request (the
    # smallest bundle), of a failing one in test_evidence_check_lists_every_problem_and_exits_3.


def test_evidence_check_lists_every_problem_and_exits_3(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, _add_collective(500.0, 16))
    (bundle / LLAMA / "r3.log").write_bytes(b"\x00\x01garbage")
    proc = run_cli("evidence", "check", str(bundle), "--json")
    assert proc.returncode == 3
    out = json.loads(proc.stdout)
    rank_line = _line_of(bundle / "nccl" / "all_reduce_8.log", "nccl-tests version")
    # gpu_counts rows judged: 150 nccl-tests tests, the rank-timings table's distinct ranks and its fewest ranks
    # of any one step (the shrink-mid-run row)
    problems = [
        f"{bundle / LLAMA / 'r3.log'}: changed since the bundle was sealed (sha256 differs from MANIFEST.sha256)",
        f"{bundle / LLAMA / 'r3.log'}: expected text, got binary data (NUL bytes)",
        f"{bundle / 'nccl' / 'all_reduce_8.log'} line {rank_line}: required expectation 'gpu_counts_agree' failed: "
        "1 of 152 rows outside the expectation (collective runs and per-rank timings must show "
        "exactly the GPU count bundle.yaml declares)",
    ]
    assert out["problems"] == problems
    assert proc.stderr.strip() == f"error: {bundle}: 3 problem(s); the evidence cannot be used as it is"
    # As a person reads it at 80 columns: the files by kind, the unusable one named, the expectation that failed,
    # each problem whole (wrapped under a two-space hang), every line within 80 columns but a path longer than one
    text = run_cli("evidence", "check", str(bundle), env={"COLUMNS": "80"})
    assert text.returncode == 3 and text.stderr == proc.stderr
    lines = text.stdout.splitlines()
    # a path is printed whole, however long: the bundle's in the first line, one longer than a line on its own
    assert [ln for ln in lines if len(ln) > 80 and " " in ln.strip() and not ln.startswith(f"{bundle}: ")] == []
    files = [f for r in load_bundle(bundle).spec.runs for f in r.files]
    assert lines[0] == f"{bundle}: sealed"
    assert lines[1].startswith(f"Files ({len(files) - 1} of {len(files)} read;")
    assert f"  UNUSABLE {LLAMA}/r3.log (run llama3-70b-fp8-512-r3)" in lines
    training = [f for r in load_bundle(bundle).spec.runs if r.kind.value == "training" for f in r.files]
    steps = sum(len(_step_lines(bundle / f)) for f in training if not f.endswith(f"{LLAMA}/r3.log"))
    assert any(re.fullmatch(rf"  training +{len(training) - 1}/{len(training)}  {steps:,} steps", ln)
               for ln in lines), lines
    # the nccl-tests outputs' tests, counted by their own start lines (the sample's 149 and the one added)
    collective = [f for r in load_bundle(bundle).spec.runs if r.kind.value == "collective" for f in r.files]
    tests = sum((bundle / f).read_text().count("# Collective test starting:") for f in collective)
    assert f"  collective    {len(collective)}/{len(collective)}  {tests} tests" in lines, lines
    [at] = [i for i, ln in enumerate(lines) if "gpu_counts_agree*" in ln]
    failed = " ".join([lines[at].strip(), *(ln.strip() for ln in itertools.takewhile(
        lambda ln: ln.startswith(" " * 6), lines[at + 1:]))])
    assert failed == f"gpu_counts_agree* FAIL (gpu_counts, run bundle, {bundle / 'bundle.yaml'})", failed
    told: list[str] = []
    for ln in lines[at + 1:]:
        if ln.startswith("problem:"):
            told.append(ln[len("problem:"):].strip())
        elif ln.startswith("  ") and told:
            told[-1] = f"{told[-1]} {ln.strip()}".strip()
    assert told == problems
    assert "evidence usable" not in text.stdout and "validation (expectation suites" not in text.stdout


def test_evidence_check_writes_data_docs_only_on_request(tmp_path: Path) -> None:
    """On the smallest bundle: with Data Docs every table is validated on its own (`stack=False`, the path that
    tests/unit/test_validation.py holds equal to the stacked one), 27 s of CPU on the sample against 6 s here."""
    docs = tmp_path / "docs"
    bundle = mini_bundle(tmp_path)
    proc = run_cli("evidence", "check", str(bundle), "--data-docs", str(docs), "--verbose")
    assert proc.returncode == 0, proc.stderr
    # --verbose: a row per file and per validated table before the summary
    assert proc.stdout.startswith(f"{bundle}: not sealed (run `clustercert evidence seal`)")
    assert "validation (expectation suites" in proc.stdout
    assert proc.stdout.rstrip().endswith("evidence usable") and "UNUSABLE" not in proc.stdout
    for f in (f for r in load_bundle(bundle).spec.runs for f in r.files):
        assert f" {f} " in proc.stdout, f
    assert (docs / "index.html").is_file() and (docs / "validations").is_dir()
    assert f"data docs: {docs / 'index.html'}" in proc.stdout
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text("{}")
    refused = run_cli("evidence", "check", str(bundle), "--data-docs", str(run_dir / "docs"))
    assert refused.returncode == 2 and "never go inside a signed run folder" in refused.stderr
    assert not (run_dir / "docs").exists()


def test_evidence_parse_names_the_detected_format(tmp_path: Path) -> None:
    log = tmp_path / "all_reduce.log"
    log.write_text(nccl_log(500.0))
    proc = run_cli("evidence", "parse", str(log), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["format"] == "nccl-tests" and out["tests"][0]["collective"] == "all_reduce"
    assert out["tests"][0]["ranks"] == 8 and [r["busbw_oop"] for r in out["tests"][0]["rows"]] == [400.0, 600.0, 500.0]
    assert [r["busbw_ip"] for r in out["tests"][0]["rows"]] == [388.0, 582.0, 485.0]
    assert out["tests"][0]["rows"][2]["line"] == _line_of(log, " 1073741824  ")
    text = run_cli("evidence", "parse", str(log))
    assert text.returncode == 0 and text.stdout.startswith(f"{log}: format nccl-tests (detected)")


def test_evidence_parse_passes_options_to_the_parser(tmp_path: Path) -> None:
    dump = tmp_path / "sacct.txt"
    dump.write_text("845|OUT_OF_MEMORY|00:05:01|2022-07-05T16:17:52|2022-07-05T16:22:53\n"
                    "845.batch|CANCELLED by 1234|00:05:01|2022-07-05T16:17:52|2022-07-05T16:22:53\n")
    proc = run_cli("evidence", "parse", str(dump), "--format", "sacct", "--fields", "JobID,State,Elapsed,Start,End",
                   "--timezone", "Europe/Paris", "--json")
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["jobs"][0]
    assert (job["job_id"], job["state"], job["elapsed_s"], job["start"]) == (
        "845", "OUT_OF_MEMORY", 301, "2022-07-05T16:17:52+02:00")
    assert job["steps"][0]["state"] == "CANCELLED" and job["steps"][0]["state_raw"] == "CANCELLED by 1234"


def test_evidence_parse_errors_are_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\xff" * 100)
    proc = run_cli("evidence", "parse", str(junk), "--format", "nemo")
    assert proc.returncode == 3
    assert proc.stderr == f"error: {junk}: expected text, got binary data (NUL bytes)\n"
    usage = run_cli("evidence", "parse", str(junk), "--format", "nope")
    assert usage.returncode == 2 and usage.stderr.startswith("error: unknown format 'nope'")
    option = run_cli("evidence", "parse", str(junk), "--format", "nemo", "--ruleset", "4.0.0")
    assert option.returncode == 2 and "takes no option ruleset" in option.stderr
    missing = run_cli("evidence", "check", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_evidence_check_shows_live_progress_on_a_terminal_and_nothing_on_a_pipe(tmp_path: Path) -> None:
    """A cluster's bundle takes minutes to read and validate: on a terminal (stderr a pseudo-terminal here) a live
    line names the stage and the run being read; on a pipe stderr stays empty and stdout is the same."""
    bundle = mini_bundle(tmp_path)
    piped = run_cli("evidence", "check", str(bundle), env={"COLUMNS": "80"})
    assert (piped.returncode, piped.stderr) == (0, "")
    proc, shown = run_cli_on_terminal("evidence", "check", str(bundle))
    assert proc.returncode == 0
    assert proc.stdout == piped.stdout
    # drawn 12.5 times a second: the mini bundle's load and parse steps may pass between two frames, its
    # validation (seconds) is drawn; the stages in order, the clock never going back, every frame one line
    frames = re.findall(r"\[\s*([\d.]+) s\] (load|parse|validate): ", shown)
    assert frames and frames[-1][1] == "validate", shown
    order = ["load", "parse", "validate"]
    assert [order.index(stage) for _, stage in frames] == sorted(order.index(stage) for _, stage in frames)
    assert [float(t) for t, _ in frames] == sorted(float(t) for t, _ in frames)
    assert "validate: expectation suites over every table" in shown and "done in " in shown
    assert all(len(line) <= 80 for line in re.split(r"[\r\n]", shown)), shown
