"""nccl-tests' `-J FILE.json` output, read as the text output of the same run is read.

No real `-J` file is among the samples: each test of the real text logs is written here as nccl-tests' own JSON
writer (src/util.cu, JSON_FILE_VERSION 1) writes that run, from the text's own header, rank and row lines (regular
expressions here, not the parser): one line, no spaces, doubles printed `%lf`, '/' escaped, a devices entry per
process, `nwrong` null where the text prints N/A. The JSON read must give the text read's rows, ranks, hosts and
average."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import FORMATS, detect_format
from clustercert.parsers.nccl_ranks import read_rank_lines
from tests.conftest import run_cli

_TEST = re.compile(r"# Collective test starting: (\w+)_perf\n(.*?)# Collective test concluded", re.S)
_HEAD = re.compile(r"# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+)\((factor|bytes)\) "
                   r"warmup iters: (\d+) iters: (\d+) agg iters: (\d+) validation: (\d+) graph: (\d+)")
_RANK = re.compile(r"#\s+Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]+)\]\s+(.+)")
_AVG = re.compile(r"# Avg bus bandwidth\s+:\s+(\S+)")


def _s(text: str) -> str:
    """util.cu's sanitizeJson: '"', '\\', '/' escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("/", "\\/") + '"'


def _d(text: str) -> str:
    """jsonDouble: `%lf`."""
    return f"{float(text):f}"


def _as_json(collective: str, block: str) -> str:
    """One test of a text log as nccl-tests' `-J` writer writes its run."""
    head = _HEAD.search(block)
    assert head is not None
    nthreads, ngpus, lo, hi, step, kind, warm, iters, agg, check, graph = head.groups()
    ranks = [m.groups() for m in _RANK.finditer(block)]
    per = int(nthreads) * int(ngpus)
    devices = ",".join(  # one entry per process: its first rank's line
        f'{{"rank":{r},"group":{g},"pid":{pid},"hostname":{_s(h)},"device":{d},"device_hex":{_s(x)},'
        f'"device_info":{_s(info.strip())}}}' for r, g, pid, h, d, x, info in ranks if int(r) % per == 0)
    rows = []
    for line in block.splitlines():
        cells = line.split()
        if len(cells) != 13 or not cells[0].isdigit():
            continue
        size, count, dtype, redop, root = cells[:5]
        sides = []
        for time, algbw, busbw, wrong in (cells[5:9], cells[9:13]):
            sides.append(f'{{"time":{_d(time)},"alg_bw":{_d(algbw)},"bus_bw":{_d(busbw)},'
                         f'"nwrong":{"null" if wrong == "N/A" else _d(wrong)}}}')
        rows.append(f'{{"size":{size},"count":{count},"type":{_s(dtype)},"redop":{_s(redop)},"root":{_s(f"{int(root):6d}")},'
                    f'"out_of_place":{sides[0]},"in_place":{sides[1]},"actual_iterations":{iters},"experiment_name":""}}')
    average = _AVG.search(block)
    assert average is not None
    args = ",".join(_s(a) for a in (f"/opt/nccl-tests/build/{collective}_perf", "-b", lo, "-e", hi, "-f", step,
                                    "-g", ngpus, "-J", "/scratch/out.json"))
    step_key = f'"step_factor":{step}' if kind == "factor" else f'"step_bytes":{step}'
    return (f'{{"version":1,"start_time":"2025-11-20 10:00:00","args":[{args}],"env":[{_s("PATH=/usr/bin")}],'
            f'"nccl_version":22807,"config":{{"nthreads":{nthreads},"ngpus":{ngpus},"minimum_bytes":{lo},'
            f'"maximum_bytes":{hi},{step_key},"warmup_iters":{warm},"iterations":{iters},'
            f'"aggregated_iterations":{agg},"validation":{check},"graph":{graph},"blocking_collectives":"false",'
            f'"parallel_init":"false","devices":[{devices}]}},"results":[{",".join(rows)}],'
            f'"out_of_bounds":{{"count":0,"okay":"true"}},"average_bus_bandwidth":{{"bandwidth":{_d(average.group(1))},'
            f'"okay":"unchecked"}},"errors":[""],"end_time":"2025-11-20 10:05:00"}}')


def _tests_of(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _TEST.finditer(path.read_text())]


@pytest.mark.parametrize("log", ["nccl_N2_G1_cnode2-001_cnode2-002.log", "nccl_N1_G8_cnode3-002.log",
                                 "cluster00-pairwise-g4/nccl_N2_G4_cnode2-001_cnode2-002.log"])
def test_each_real_test_as_json_reads_as_its_text(real_samples: Path, tmp_path: Path, log: str) -> None:
    source = real_samples / "nccl-tests" / log
    text_tests = FORMATS["nccl-tests"](source, source.name).tests
    blocks = _tests_of(source)
    assert [c for c, _ in blocks] == [t.collective for t in text_tests] and blocks
    for (collective, block), text in zip(blocks, text_tests, strict=True):
        path = tmp_path / f"{collective}.json"
        path.write_text(_as_json(collective, block) + "\n")
        json.loads(path.read_text())  # the mirror writes valid JSON
        assert detect_format(path) == "nccl-tests"
        (read,) = FORMATS["nccl-tests"](path, path.name).tests
        assert (read.collective, read.ranks, read.hosts, read.reported_avg_busbw, read.error) == (
            text.collective, text.ranks, text.hosts, text.reported_avg_busbw, None)
        raw = [line.split() for line in block.splitlines()]
        raw = [c for c in raw if len(c) == 13 and c[0].isdigit()]  # the text's own rows, by hand
        assert [(r.size_bytes, r.busbw_oop, r.busbw_ip) for r in read.rows] == [
            (int(c[0]), float(c[7]), float(c[11])) for c in raw]
        assert len(read.rows) == len(text.rows) > 0
        for mine, theirs in zip(read.rows, text.rows, strict=True):
            assert mine._replace(line=0) == theirs._replace(line=0)  # every value
        assert {r.line for r in read.rows} == {1} and (read.line, read.last_line) == (1, 1)  # the one line written
        assert read.computed_avg_busbw == pytest.approx(text.computed_avg_busbw)
        # pretty-printed since (`jq . FILE`, here Python's indent): each row at the line its result starts on,
        # found by hand as the line before its "size" key's
        pretty = tmp_path / f"{collective}-pretty.json"
        pretty.write_text(json.dumps(json.loads(path.read_text()), indent=2) + "\n")
        (spread,) = FORMATS["nccl-tests"](pretty, pretty.name).tests
        lines = pretty.read_text().splitlines()
        starts = [n - 1 for n, line in enumerate(lines, 1) if line.lstrip().startswith('"size": ')]
        assert [lines[n - 1].strip() for n in starts] == ["{"] * len(read.rows)
        assert [r.line for r in spread.rows] == starts and spread.rows[0].line > 1
        assert [r._replace(line=0) for r in spread.rows] == [r._replace(line=0) for r in read.rows]
        assert spread.last_line == len(lines)
        # and each rank at the line its devices entry starts on, the '{' before its "rank" key (found by hand);
        # in the one line written, line 1
        firsts = {int(ln.split(":")[1].strip(" ,")): n - 1 for n, ln in enumerate(lines, 1)
                  if ln.lstrip().startswith('"rank": ')}
        assert all(lines[n - 1].strip() == "{" for n in firsts.values())
        ranked = read_rank_lines(pretty, pretty.name)
        assert len(ranked) == read.ranks and [r.line for r in ranked] == [
            firsts[max(f for f in firsts if f <= r.rank)] for r in ranked]
        assert {r.line for r in read_rank_lines(path, path.name)} == {1}


def test_a_cut_short_json_run_is_an_aborted_test(real_samples: Path, tmp_path: Path) -> None:
    """nccl-tests closes the document at the run's end: an aborted run leaves it unfinished, as a text test without
    its average line, which reads as aborted, not as a file error."""
    source = real_samples / "nccl-tests" / "nccl_N2_G1_cnode2-001_cnode2-002.log"
    collective, block = _tests_of(source)[0]
    whole = _as_json(collective, block)
    cut = tmp_path / "cut.json"
    cut.write_text(whole[:whole.index('"results":[') + 400])  # inside the third row
    (test,) = FORMATS["nccl-tests"](cut, cut.name).tests
    assert (test.collective, test.rows, test.error) == (
        "alltoall", [], "aborted: the JSON output ends before its average_bus_bandwidth (the run was cut short)")
    broken = tmp_path / "broken.json"
    broken.write_text(whole.replace('"results":[', '"results":[}', 1))  # not cut short: broken
    with pytest.raises(EvidenceError, match=r"broken.json line 1: expected valid JSON"):
        FORMATS["nccl-tests"](broken, broken.name)


def _doc(**changes: Any) -> dict[str, Any]:
    side = {"time": 10.0, "alg_bw": 2.0, "bus_bw": 3.0, "nwrong": 0.0}
    doc: dict[str, Any] = {
        "version": 1, "start_time": "2025-11-20 10:00:00", "args": ["./build/all_gather_perf", "-g", "8"],
        "env": [], "nccl_version": 22807,
        "config": {"nthreads": 1, "ngpus": 8, "devices": [{"rank": 0, "hostname": "h1"}]},
        "results": [{"size": 1024, "out_of_place": dict(side), "in_place": {**side, "nwrong": None}}],
        "average_bus_bandwidth": {"bandwidth": 3.0, "okay": "unchecked"}, "errors": [""]}
    doc.update(changes)
    return doc


def test_version_2_with_per_iteration_timing_reads_as_version_1(real_samples: Path, tmp_path: Path) -> None:
    """nccl-tests' current util.cu writes JSON_FILE_VERSION 2: its config adds "per_iter_timing" and
    "parallel_init" (booleans written as strings), and with per-iteration timing each result holds
    "out_of_place_per_iter" and "in_place_per_iter" objects after its out-of-place body. A real test written so
    reads as the same test written as version 1 (it was refused: "expected nccl-tests JSON version 1, got 2")."""
    source = real_samples / "nccl-tests" / "nccl_N2_G1_cnode2-001_cnode2-002.log"
    collective, block = _tests_of(source)[0]
    one = json.loads(_as_json(collective, block))
    two = json.loads(_as_json(collective, block))
    two["version"] = 2
    two["config"] = {**two["config"], "per_iter_timing": "true", "parallel_init": "false"}
    stats = {"min_us": 1.0, "max_us": 2.0, "avg_us": 1.5, "p50_us": 1.5, "p95_us": 2.0, "p99_us": 2.0,
             "stdev_us": 0.5, "cv_pct": 33.3, "times_us": [1.0, 2.0]}
    two["results"] = [{**{k: v for k, v in r.items() if k not in ("in_place", "actual_iterations",
                                                                  "experiment_name")},
                       "out_of_place_per_iter": stats, "in_place": r["in_place"], "in_place_per_iter": stats,
                       "actual_iterations": r["actual_iterations"], "experiment_name": r["experiment_name"]}
                      for r in one["results"]]
    read = []
    for name, doc in (("v1.json", one), ("v2.json", two)):
        path = tmp_path / name
        path.write_text(json.dumps(doc, separators=(",", ":")))
        (test,) = FORMATS["nccl-tests"](path, "x.json").tests
        read.append(test)
    assert read[0] == read[1] and read[1].error is None and len(read[1].rows) == len(one["results"]) > 0


def test_one_process_driving_eight_gpus_and_what_is_refused(tmp_path: Path) -> None:
    """`-g 8` in one process: its one devices entry names rank 0, and the run has 8 ranks on its host. A value that
    is not a number (nccl-tests prints an undefined one as "nan"), another version or no results: a located error."""
    path = tmp_path / "g8.json"
    path.write_text(json.dumps(_doc(), separators=(",", ":")))
    (test,) = FORMATS["nccl-tests"](path, path.name).tests
    assert (test.collective, test.ranks, test.hosts) == ("all_gather", 8, ("h1",) * 8)
    assert (test.rows[0].busbw_oop, test.rows[0].wrong_oop, test.rows[0].wrong_ip) == (3.0, 0, None)
    nan = _doc()
    nan["results"][0]["in_place"]["bus_bw"] = "nan"
    cases = {
        "results[0].in_place.bus_bw": nan,
        "version": _doc(version=3),
        "results": {"results": 5},
        "config.devices": _doc(config={"nthreads": 1, "ngpus": 1, "devices": [{"rank": 0}]}),
    }
    for field, doc in cases.items():
        path.write_text(json.dumps(doc))
        with pytest.raises(EvidenceError) as caught:
            FORMATS["nccl-tests"](path, path.name)
        assert caught.value.field == field, str(caught.value)
        # a row's value is named at its result's line (the one line json.dumps writes)
        assert caught.value.line == (1 if field.startswith("results[") else None), str(caught.value)
    pretty = _doc()
    pretty["results"].append(json.loads(json.dumps(pretty["results"][0])))
    pretty["results"][1]["out_of_place"]["alg_bw"] = -1.0
    path.write_text(json.dumps(pretty, indent=1))
    starts = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line == "  {"]  # each result's '{'
    with pytest.raises(EvidenceError) as caught:
        FORMATS["nccl-tests"](path, path.name)
    assert (caught.value.line, caught.value.field) == (starts[1], "results[1].out_of_place.alg_bw")
    path.write_text(json.dumps(_doc(results=[], errors=["remote process exited"])))
    (empty,) = FORMATS["nccl-tests"](path, path.name).tests
    assert (empty.error, empty.cause, empty.rows) == ("aborted: no results", "remote process exited", [])


def test_evidence_parse_shows_a_json_run_as_its_text(real_samples: Path, tmp_path: Path) -> None:
    source = real_samples / "nccl-tests" / "nccl_N2_G1_cnode2-001_cnode2-002.log"
    collective, block = _tests_of(source)[0]
    path = tmp_path / "alltoall.json"
    path.write_text(_as_json(collective, block))
    proc = run_cli("evidence", "parse", str(path), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    text = run_cli("evidence", "parse", str(source), env={"COLUMNS": "200"})
    # the text's test line, at the JSON's one line (the test and its largest size's row all on line 1)
    shown = next(line for line in text.stdout.splitlines() if line.startswith("  alltoall:"))
    expected = re.sub(r"lines \d+-\d+", "line 1", re.sub(r"\(line \d+\)", "(line 1)", shown))
    assert text.stdout.splitlines()[1].startswith("  2 tests; ")  # alltoall and sendrecv: the JSON holds one run
    assert proc.stdout.splitlines()[:3] == [
        f"{path}: format nccl-tests (detected)",
        "  1 test; busbw in GB/s at the largest size, out of place / in place; the average as printed / as computed",
        expected]


def test_init_drafts_the_same_system_and_runs_from_json_as_from_text(real_samples: Path, tmp_path: Path) -> None:
    """A pair's run as text and as `-J` JSON: the same GPU, GPUs per node, nodes, scope and ranks (each devices
    entry is a rank here: one process per GPU, as the real sweeps ran), and the JSON bundle checks clean."""
    import yaml

    source = real_samples / "nccl-tests" / "cluster00-pairwise-g4" / "nccl_N2_G4_cnode2-001_cnode2-002.log"
    as_text, as_json = tmp_path / "text", tmp_path / "json"
    as_text.mkdir()
    as_json.mkdir()
    (as_text / source.name).write_bytes(source.read_bytes())
    for collective, block in _tests_of(source):
        (as_json / f"{collective}.json").write_text(_as_json(collective, block))
    drafts = []
    for folder in (as_text, as_json):
        proc = run_cli("evidence", "init", str(folder))
        assert proc.returncode == 0 and "nothing to fill in" in proc.stdout, proc.stdout + proc.stderr
        drafts.append(yaml.safe_load((folder / "bundle.yaml").read_text()))
    text, json_draft = drafts
    assert json_draft["system"] == text["system"] == {
        "gpu": "h100-sxm", "gpus_per_node": 4, "nodes": ["cnode2-001", "cnode2-002"]}
    shape = {(r["format"], r["scope"], tuple(r["nodes"]), r["gpus"]) for r in text["runs"]}
    assert {(r["format"], r["scope"], tuple(r["nodes"]), r["gpus"]) for r in json_draft["runs"]} == shape == {
        ("nccl-tests", "pair", ("cnode2-001", "cnode2-002"), 8)}
    assert sorted(r["files"][0] for r in json_draft["runs"]) == ["alltoall.json", "sendrecv.json"]
    assert run_cli("evidence", "seal", str(as_json)).returncode == 0
    checked = run_cli("evidence", "check", str(as_json), "--json")
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert report["usable"] is True and report["problems"] == []
