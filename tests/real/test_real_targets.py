"""Every healthy real nccl-tests result in the samples passes its scope's target (issue 58).

The oracles are the files themselves: their large-message busbw (read here with a regular expression, not with
clustercert's parser), which tests abort, and the pairs whose own `# Avg bus bandwidth` is below 80 % of the median
of their collective (tests/real/test_real_sweeps.py's oracle): cluster00's pairs that are neither are healthy.
Bundles are written in tmp_path from copies of the real files; nothing is copied into the repository.
"""

from __future__ import annotations

import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import load_bundle
from clustercert.phases.evidence import parse_run
from clustercert.phases.scaling import judge_scaling
from clustercert.settings import PROJECT_ROOT
from tests.real.test_real_sweeps import NDR8, _oracle, write_sweep_bundle

_HOST = re.compile(r"#\s+Rank\s+\d+ .* on (\S+) device")
_ROW = re.compile(r"^\s*(\d+)\s+\d+\s+\w+\s+\S+\s+-?\d+\s+\S+\s+\S+\s+(\S+)\s+\S+\s+\S+\s+\S+\s+(\S+)")
_START = re.compile(r"# Collective test starting: (\w+)_perf")


def _large_busbw(path: Path) -> dict[str, float]:
    """Per collective, the highest busbw (out-of-place or in-place) at sizes >= 1 GiB, read from the text."""
    best: dict[str, float] = {}
    collective = ""
    for line in path.read_text().splitlines():
        if start := _START.search(line):
            collective = start.group(1)
        elif (row := _ROW.match(line)) and int(row.group(1)) >= 1 << 30:
            best[collective] = max(best.get(collective, 0.0), float(row.group(2)), float(row.group(3)))
    return best


def _judge(root: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    bundle = load_bundle(root)
    catalog = load_catalog("exemplar-h100", PROJECT_ROOT / "references")
    parsed = {r.id: parse_run(bundle, r, 1 << 30) for r in bundle.spec.runs}
    result = judge_scaling(bundle, catalog, parsed)
    return {c.id: c for c in result.checks}, result.section["collectives"]


@pytest.fixture(scope="module")
def h100_runs(real_samples: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One node of 8 (nvlink-domain), 10 nodes x 8 and 10 nodes x 1 (cross-rack), as declared: 8 NDR NICs."""
    root = tmp_path_factory.mktemp("h100") / "b"
    (root / "nccl").mkdir(parents=True)
    runs, nodes = [], []
    logs = {"n1-g8": ("nccl_N1_G8_cnode3-002.log", "nvlink-domain", 8),
            "n10-g8": ("nccl_N10_G8.log", "cross-rack", 80), "n10-g1": ("nccl_N10_G1.log", "cross-rack", 10)}
    for run_id, (name, scope, gpus) in logs.items():
        source = real_samples / "nccl-tests" / name
        shutil.copyfile(source, root / "nccl" / name)
        hosts = list(dict.fromkeys(_HOST.findall(source.read_text())))
        nodes += [h for h in hosts if h not in nodes]
        runs.append({"id": run_id, "phase": "scaling", "kind": "collective", "format": "nccl-tests",
                     "scope": scope, "gpus": gpus, "nodes": hosts, "files": [f"nccl/{name}"]})
    doc = {"schema_version": 1, "cluster": {"name": "cluster01", "provider": "xxrjun/nccl-tests-cluster"},
           "system": {"gpu": "h100-sxm", "gpus_per_node": 8, "nodes": sorted(nodes), "interconnect": NDR8},
           "catalog": "exemplar-h100", "recipe_version": "none", "runs": runs}
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    checks, rows = _judge(root)
    files = {run_id: _large_busbw(real_samples / "nccl-tests" / name) for run_id, (name, _, _) in logs.items()}
    return {"checks": checks, "rows": rows, "files": files}


def test_every_real_h100_result_passes_its_scopes_target(h100_runs: dict[str, Any]) -> None:
    rows = h100_runs["rows"]
    assert len(rows) == 15  # five collectives in each of the three files
    for row in rows:
        measured = h100_runs["files"][row["run"]][row["collective"]]
        assert row["large_busbw_gbps"] == pytest.approx(measured), row["run"]
        assert row["status"] == "PASS" and row["target_gbps"] <= measured, (row["run"], row["collective"], row)
        # an authority, not the model alone: the healthy real H100 results the catalog lists
        assert row["target_source"] == "reference: real-h100-nccl", row
    for scope in ("nvlink-domain", "cross-rack"):
        for collective in ("all_reduce", "alltoall", "sendrecv"):
            assert h100_runs["checks"][f"scaling.{scope}-{collective}_busbw_meets_target"].status.value == "PASS"


def test_each_busbw_check_cites_the_line_that_prints_its_number(h100_runs: dict[str, Any],
                                                                real_samples: Path) -> None:
    """A check's first evidence span is the one line its number was read from (issue 58: spans were whole tests,
    "line 1-31"): open the real file, read that line, find the value. The oracle is the file's own row, read with a
    regular expression: its size at or above 1 GiB, and the check's busbw the higher of its two busbw columns."""
    cited = 0
    for check in h100_runs["checks"].values():
        if check.unit != "GB/s" or check.measured is None:
            continue
        span = check.evidence[0]
        assert (span.last, span.count) == (span.first, 1), (check.id, span)
        line = (real_samples / "nccl-tests" / Path(span.file).name).read_text().splitlines()[span.first - 1]
        row = _ROW.match(line)
        assert row is not None and int(row.group(1)) >= 1 << 30, (check.id, line)
        assert check.measured == max(float(row.group(2)), float(row.group(3))), (check.id, line)
        assert f"{span.file} line {span.first}" in check.message or check.status.value == "PASS", check.message
        cited += 1
    assert cited == 10  # five collectives at each of the two scopes
    for row_shown in h100_runs["rows"]:  # the report's table cites the same line
        text = (real_samples / "nccl-tests" / Path(row_shown["file"]).name).read_text().splitlines()
        assert f"{row_shown['large_busbw_gbps']:.2f}" in text[row_shown["line"] - 1].split(), row_shown["run"]


def test_the_ten_node_ring_sendrecv_is_no_longer_failed_by_the_link_model(h100_runs: dict[str, Any]) -> None:
    """The link model alone expected 0.80 x 50 GB/s of a sendrecv ring of 80 ranks, which reaches 15.24: its
    target (32) failed a healthy cluster. Its own result is now the expected value: target 0.8 x 15.24."""
    (row,) = [r for r in h100_runs["rows"] if (r["run"], r["collective"]) == ("n10-g8", "sendrecv")]
    assert row["target_gbps"] == pytest.approx(0.8 * 15.24)


def test_cluster01_every_pair_passes_its_target(real_samples: Path, tmp_path: Path) -> None:
    logs = sorted((real_samples / "nccl-tests" / "cluster01-pairwise").glob("nccl_N2_G*.log"))
    checks, rows = _judge(write_sweep_bundle(tmp_path / "cluster01", logs, gpus_per_node=8, interconnect=NDR8))
    assert len(rows) == 360
    failing = [(r["run"], r["collective"], r["large_busbw_gbps"], r["target_gbps"]) for r in rows
               if r["status"] != "PASS"]
    assert not failing
    assert checks["scaling.pair-alltoall_busbw_meets_target"].status.value == "PASS"
    assert checks["scaling.pair-sendrecv_busbw_meets_target"].status.value == "PASS"


def test_cluster00_healthy_pairs_pass_and_its_bad_ones_do_not(real_samples: Path, tmp_path: Path) -> None:
    """cluster00 declares no scale-out network: no absolute figure applies, so each pair is held to 80 % of the
    median of its peers. The healthy pairs pass; the aborted and the slow ones (by the files' own averages) do not."""
    logs = sorted((real_samples / "nccl-tests" / "cluster00-pairwise-g4").glob("nccl_N2_G4_*.log"))
    oracle = _oracle(logs)
    _, rows = _judge(write_sweep_bundle(tmp_path / "cluster00", logs, gpus_per_node=4))
    # a capture cut short with nothing printed why is neither healthy nor bad: unusable evidence (issue 56)
    cut_files = oracle["truncated_files"]
    cut = [r for r in rows if Path(r["file"]).name in cut_files]
    assert cut and all(r["status"] == "ERROR" for r in cut), cut[:3]
    healthy = [r for r in rows if Path(r["file"]).name not in oracle["bad_files"] | oracle["truncated_files"]]
    assert len(healthy) > 200
    assert all(r["status"] == "PASS" for r in healthy), [r for r in healthy if r["status"] != "PASS"][:3]
    assert all(r["target_source"] == "peer median of this sweep" for r in rows)
    # slow by the file's own average: below 80 % of the median average of the same collective
    slow_tests = set()
    for collective, values in oracle["avg"].items():
        median = statistics.median(v for _, v in values)
        slow_tests |= {(name, collective) for name, v in values if v < 0.8 * median}
    slow = [r for r in rows if (Path(r["file"]).name, r["collective"]) in slow_tests]
    assert slow and all(r["status"] == "FAIL" for r in slow)
    aborted = [r for r in rows if r["large_busbw_gbps"] is None and Path(r["file"]).name not in cut_files]
    assert len(aborted) == oracle["aborted"] and all(r["status"] == "ERROR" for r in aborted)
