"""Findings by root cause: several failing checks that one path between NVLink domains (or one node) explains are
one line with their count and the bad runs' own files; checks that lack evidence are one line per phase."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clustercert.evidence.provenance import Span
from clustercert.runs.findings import group_findings
from clustercert.verdicts import Check, Severity, Status, lacking
from tests.unit.phase_bundles import write_bundle

# rack1: n1, n2; rack2: n3, n4, n5, n6 (phase_bundles.RACKS)
RUNS = {"a": ("pair", ["n1", "n3"], "FAIL"), "b": ("cross-rack", ["n1", "n2", "n3", "n4"], "FAIL"),
        "c": ("nvlink-domain", ["n1", "n2"], "PASS"), "e": ("nvlink-domain", ["n3", "n4", "n5", "n6"], "PASS")}


def _bundle(tmp_path: Path) -> Any:
    runs = [{"id": rid, "phase": "scaling", "kind": "collective", "format": "nccl-tests", "scope": scope,
             "gpus": len(nodes), "nodes": nodes, "files": [f"nccl/{rid}.log"]}
            for rid, (scope, nodes, _) in RUNS.items()]
    return write_bundle(tmp_path / "b", runs, {f"nccl/{rid}.log": "x\n" for rid in RUNS})


def _section() -> dict[str, Any]:
    return {"scaling": {"collectives": [
        {"run": rid, "scope": scope, "collective": "all_reduce", "nodes": nodes, "file": f"nccl/{rid}.log",
         "line": 40 + i, "status": status} for i, (rid, (scope, nodes, status)) in enumerate(RUNS.items())]}}


def _fail(check_id: str, *files: str, phase: str = "scaling") -> Check:
    return Check(check_id, "t", phase, Severity.REQUIRED, Status.FAIL, None, None, "", f"{check_id} fails",
                 evidence=tuple(Span(f, 1, 60, 60) for f in files))


def test_a_path_every_bad_run_crosses_is_one_finding_with_its_count(tmp_path: Path) -> None:
    checks = [_fail("scaling.pair-all_reduce_busbw_meets_target", "nccl/c.log", "nccl/a.log"),
              _fail("scaling.cross-rack-all_reduce_busbw_meets_target", "nccl/b.log"),
              _fail("scaling.cross-rack-all_reduce-4ranks_no_run_below_peers", "nccl/e.log", "nccl/b.log"),
              _fail("efficiency.w_meets_baseline", "training/w.log", phase="efficiency")]
    found = group_findings(checks, _bundle(tmp_path), _section())
    assert [f["count"] for f in found] == [3, 1]
    path = found[0]
    # by hand: the bad runs a (n1, n3) and b (n1-n4) both span rack1 and rack2; no passing run does, while node n1
    # is in passing run c and n3 in passing run e
    assert path["line"] == ("the rack1–rack2 path between NVLink domains explains 3 failing checks: every bad run "
                            "they judge crosses it (pair n1 – n3, cross-rack run b); no passing run crosses it")
    # the narrowest bad run's own file and line first, never the passing run the check cited first
    assert path["where"] == ["nccl/a.log:40", "nccl/b.log:41"]
    assert path["checks"] == [c.id for c in checks[:3]]
    assert found[1]["line"] == "efficiency.w_meets_baseline fails" and found[1]["where"] == ["training/w.log:1-60"]


def test_checks_without_evidence_are_one_line_per_phase(tmp_path: Path) -> None:
    checks = [lacking(_fail(f"resilience.x{i}", phase="resilience")) for i in range(3)]
    [found] = group_findings(checks, _bundle(tmp_path), _section())
    assert found["count"] == 3 and found["line"].startswith("3 checks without evidence: the bundle holds none")


def test_a_single_failing_run_is_not_called_a_root_cause(tmp_path: Path) -> None:
    found = group_findings([_fail("scaling.cross-rack-all_reduce_busbw_meets_target", "nccl/b.log")],
                           _bundle(tmp_path), _section())
    assert [f["count"] for f in found] == [1] and "path" not in found[0]["line"]
    assert found[0]["where"] == ["nccl/b.log:41"]
