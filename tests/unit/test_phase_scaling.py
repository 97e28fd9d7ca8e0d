"""The scaling judge on hand-written bundles: weak scaling, busbw per scope, ceiling, aborts, degraded pairs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from clustercert.catalog import Profile
from clustercert.phases.scaling import judge_scaling
from clustercert.verdicts import Severity, Status
from tests.unit.phase_bundles import by_id, gb200, nccl_output, nemo_log, parse_all, with_profiles, write_bundle

GIB = 1 << 30


def _training(gpus: int, step_s: float, *, gbs: int | None = None, phase: str = "scaling") -> tuple[
    dict[str, Any], str, str
]:
    rel = f"training/llama3-70b/{gpus}.log"
    run = {"id": f"llama3-70b-fp8-{gpus}", "phase": phase, "kind": "training", "format": "nemo",
           "workload": "llama3-70b", "precision": "fp8", "gpus": gpus, "gbs": gbs or 4 * gpus, "seq_len": 8192,
           "files": [rel]}
    return run, rel, nemo_log(dict.fromkeys(range(50), step_s))


def _weak(tmp_path: Path, times: dict[int, float], **kw: Any) -> dict[str, Any]:
    runs, files = [], {}
    for gpus, t in times.items():
        run, rel, text = _training(gpus, t, phase="efficiency" if gpus == 512 else "scaling",
                                   gbs=kw.get("gbs", {}).get(gpus))
        runs.append(run)
        files[rel] = text
    bundle = write_bundle(tmp_path / "b", runs, files)
    result = judge_scaling(bundle, gb200(), parse_all(bundle))
    return {"checks": by_id(result.checks), "section": result.section}


def test_weak_scaling_passes_at_hand_computed_efficiency(tmp_path: Path) -> None:
    out = _weak(tmp_path, {128: 7.0, 256: 7.2, 512: 7.4})
    check = out["checks"]["scaling.llama3-70b-fp8_weak_scaling_efficiency"]
    # GBS / GPU is constant, so efficiency = t(128) / t(N): 7.0 / 7.4 is the lowest
    assert check.status is Status.PASS and check.severity is Severity.REQUIRED
    assert check.measured == pytest.approx(7.0 / 7.4, rel=1e-12)
    (entry,) = [w for w in out["section"]["weak_scaling"] if w["workload"] == "llama3-70b"]
    assert [p["gpus"] for p in entry["points"]] == [128, 256, 512]
    assert [p["gbs"] for p in entry["points"]] == [512, 1024, 2048]
    assert [p["efficiency"] for p in entry["points"]] == pytest.approx([1.0, 7.0 / 7.2, 7.0 / 7.4], rel=1e-12)
    assert entry["points"][0]["tokens_per_s_per_gpu"] == pytest.approx(8192 * 512 / 7.0 / 128, rel=1e-12)
    assert entry["points"][2]["step_time_s"] == pytest.approx(7.4)
    assert check.evidence and check.evidence[0].first > 0


def test_weak_scaling_fails_below_the_minimum(tmp_path: Path) -> None:
    check = _weak(tmp_path, {128: 7.0, 256: 7.2, 512: 8.0})["checks"]["scaling.llama3-70b-fp8_weak_scaling_efficiency"]
    assert check.status is Status.FAIL
    assert check.measured == pytest.approx(7.0 / 8.0, rel=1e-12)
    assert "lowest 0.875 at 512 GPUs" in check.message


def test_suite_workload_without_scaling_runs_fails_as_absent(tmp_path: Path) -> None:
    checks = _weak(tmp_path, {128: 7.0, 512: 7.0})["checks"]
    grok = checks["scaling.grok1-314b-bf16_weak_scaling_efficiency"]
    assert grok.status is Status.FAIL and "the cluster did not show it" in grok.message
    # the workload first: the reasons of several absent workloads are told apart by their first clause
    assert grok.message.startswith("grok1-314b BF16: weak scaling needs usable training runs at 2 or more GPU "
                                   "counts, got none: the cluster did not show it")
    one = _weak(tmp_path / "one", {512: 7.0})["checks"]["scaling.llama3-70b-fp8_weak_scaling_efficiency"]
    assert one.status is Status.FAIL
    assert one.message.startswith("llama3-70b FP8: weak scaling needs usable training runs at 2 or more GPU counts, "
                                  "got 512 GPUs only: ")
    assert checks["scaling.cross-rack-all_reduce_busbw_meets_target"].status is Status.FAIL


def test_gbs_not_proportional_to_gpus_is_an_error(tmp_path: Path) -> None:
    checks = _weak(tmp_path, {128: 7.0, 256: 7.2}, gbs={128: 512, 256: 512 * 3})["checks"]
    check = checks["scaling.llama3-70b-fp8_weak_scaling_efficiency"]
    assert check.status is Status.ERROR and "GBS proportional to GPUs" in check.message


def test_unreadable_scaling_log_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    run, rel, text = _training(128, 7.0)
    other, rel2, text2 = _training(256, 7.0)
    lines = text.splitlines(keepends=True)
    lines[40] = lines[40].replace("train_step_timing in s: 7.0", "train_step_timing in s: 7.O")
    bundle = write_bundle(tmp_path / "b", [run, other], {rel: "".join(lines), rel2: text2})
    check = by_id(judge_scaling(bundle, gb200(), parse_all(bundle)).checks)[
        "scaling.llama3-70b-fp8_weak_scaling_efficiency"]
    assert check.status is Status.ERROR
    assert f"{bundle.root / rel} line 41 field 'train_step_timing in s': expected a number" in check.message


def _collectives(tmp_path: Path, outputs: dict[str, tuple[str, list[str] | None, str]]) -> dict[str, Any]:
    runs, files = [], {}
    for run_id, (scope, nodes, text) in outputs.items():
        rel = f"nccl/{run_id}.log"
        run: dict[str, Any] = {"id": run_id, "phase": "scaling", "kind": "collective", "format": "nccl-tests",
                               "scope": scope, "gpus": 8 if scope != "pair" else 2, "files": [rel]}
        if nodes:
            run["nodes"] = nodes
        runs.append(run)
        files[rel] = text
    bundle = write_bundle(tmp_path / "b", runs, files)
    result = judge_scaling(bundle, gb200(), parse_all(bundle))
    return {"checks": by_id(result.checks), "section": result.section, "root": bundle.root}


NVL = "scaling.nvlink-domain-all_reduce_busbw_meets_target"


def test_a_scope_whose_only_run_cannot_be_read_is_unjudged_not_failed(tmp_path: Path) -> None:
    """The one NVLink-domain run's log is empty: which collectives it ran is unknown, so each the catalog requires
    there was 'the bundle has no usable ... run: the cluster did not show it' (FAIL, NOT CERTIFIED). It cannot be
    judged: ERROR naming the file. Where no run of the scope exists at all, it is still not shown (FAIL)."""
    out = _collectives(tmp_path, {"rack1": ("nvlink-domain", None, ""),
                                  "cross": ("cross-rack", None, nccl_output("all_reduce", 8, {GIB: 700.0}))})
    log = out["root"] / "nccl" / "rack1.log"
    check = out["checks"][NVL]
    assert check.status is Status.ERROR and check.severity is Severity.REQUIRED
    assert check.summary == f"all_reduce at scope nvlink-domain cannot be judged: {log}: expected log text, got an " \
                            "empty file"
    unjudged = {c.id for c in out["checks"].values() if c.id.startswith("scaling.nvlink-domain-")
                and c.id.endswith("_busbw_meets_target")}
    assert unjudged and all(out["checks"][c].status is Status.ERROR for c in unjudged)
    absent = out["checks"]["scaling.full-scale-all_reduce_busbw_meets_target"]  # no full-scale run in the bundle
    assert absent.status is Status.FAIL and "the cluster did not show it" in absent.message


def test_nvlink_domain_busbw_meets_target(tmp_path: Path) -> None:
    out = _collectives(tmp_path, {"ar-rack1": ("nvlink-domain", None, nccl_output(
        "all_reduce", 8, {GIB // 4: 900.0, GIB: 800.0, 2 * GIB: 810.0}))})
    check = out["checks"][NVL]
    # gate on large messages only: max over sizes >= 1 GiB is 810, not the 900 at 256 MiB.
    # One NVLink domain: bound = B_nvl 900; expected 1.07 x 900 = 963; target 0.8 x 963 = 770.4
    assert check.status is Status.PASS and check.measured == pytest.approx(810.0)
    assert check.target == pytest.approx(770.4)
    (row,) = out["section"]["collectives"]
    assert row["sizes_bytes"] == [GIB // 4, GIB, 2 * GIB] and row["busbw_gbps"] == [900.0, 800.0, 810.0]
    assert row["large_busbw_gbps"] == 810.0 and row["ceiling_gbps"] == 1800.0 and row["ranks"] == 8
    assert row["peak_busbw_gbps"] == 900.0 and row["avg_busbw_gbps"] == pytest.approx(836.667, abs=1e-3)
    assert row["gated"] == "large_busbw_gbps" and row["expected_gbps"] == pytest.approx(963.0)
    assert row["bound_gbps"] == 900.0 and row["domains"] == 1
    (gate,) = out["section"]["public_gates"]  # NVIDIA CRE's rack gate, shown beside the model's 770.4 target
    assert (gate["scope"], gate["collective"], gate["gbps"]) == ("nvlink-domain", "all_reduce", 900.0)
    assert row["status"] == "PASS" and row["scope"] == "nvlink-domain" and row["collective"] == "all_reduce"


def test_nvlink_domain_busbw_below_target_fails(tmp_path: Path) -> None:
    out = _collectives(tmp_path, {"ar-rack1": ("nvlink-domain", None, nccl_output(
        "all_reduce", 8, {GIB: 600.0, 2 * GIB: 650.0}))})
    check = out["checks"][NVL]
    assert check.status is Status.FAIL and check.measured == pytest.approx(650.0)
    assert "ar-rack1 650.0 GB/s < target 770.4 (expected 963.0" in check.message


def test_busbw_above_the_ceiling_is_an_error_not_a_pass(tmp_path: Path) -> None:
    out = _collectives(tmp_path, {"ar-rack1": ("nvlink-domain", None, nccl_output(
        "all_reduce", 8, {GIB: 2000.0, 2 * GIB: 2100.0}))})
    check = out["checks"][NVL]
    assert check.status is Status.ERROR and check.measured is None
    assert "plausibility ceiling 1800 GB/s" in check.message and "got 2100 GB/s" in check.message
    assert f"{out['root'] / 'nccl/ar-rack1.log'} line 1" in check.message


def test_aborted_test_is_an_error(tmp_path: Path) -> None:
    out = _collectives(tmp_path, {"ar-rack1": ("nvlink-domain", None, nccl_output(
        "all_reduce", 8, {GIB: 800.0, 2 * GIB: 810.0}, abort=True))})
    check = out["checks"][NVL]
    assert check.status is Status.ERROR and "aborted" in check.message


def test_collective_without_an_efficiency_is_reported_only(tmp_path: Path) -> None:
    out = _collectives(tmp_path, {"bc-rack1": ("nvlink-domain", None, nccl_output(
        "broadcast", 8, {GIB: 600.0}))})
    check = out["checks"]["scaling.nvlink-domain-broadcast_busbw_meets_target"]
    assert check.severity is Severity.ADVISORY and check.status is Status.SKIPPED
    assert check.measured is None and check.target is None
    assert "sets no nvlink efficiency for broadcast" in check.message


def test_every_collective_present_gets_a_model_target(tmp_path: Path) -> None:
    # all_gather in one domain: 0.8 x 0.81 x 900 = 583.2; 600 passes
    out = _collectives(tmp_path, {"ag-rack1": ("nvlink-domain", None, nccl_output(
        "all_gather", 8, {GIB: 600.0}))})
    check = out["checks"]["scaling.nvlink-domain-all_gather_busbw_meets_target"]
    assert check.severity is Severity.REQUIRED and check.status is Status.PASS
    assert check.measured == pytest.approx(600.0) and check.target == pytest.approx(583.2)


def _pairs(tmp_path: Path, values: list[float]) -> dict[str, Any]:
    nodes = [["n1", "n3"], ["n2", "n4"], ["n1", "n5"]]
    return _collectives(tmp_path, {
        f"pair-{i}": ("pair", pair, nccl_output("all_reduce", 2, {GIB: v, 2 * GIB: v}, hosts=pair))
        for i, (pair, v) in enumerate(zip(nodes, values, strict=True))
    })


def test_pairs_without_a_degraded_link_pass(tmp_path: Path) -> None:
    out = _pairs(tmp_path, [45.0, 46.0, 44.0])
    check = out["checks"]["scaling.pairs_no_degraded_link"]
    assert check.status is Status.PASS and check.measured == pytest.approx(44.0 / 45.0)
    assert [p["domains"] for p in out["section"]["pairs"]] == [["rack1", "rack2"]] * 3


def test_degraded_pair_is_named_with_its_racks(tmp_path: Path) -> None:
    out = _pairs(tmp_path, [45.0, 46.0, 20.0])
    check = out["checks"]["scaling.pairs_no_degraded_link"]
    # median of 45, 46, 20 is 45; 20 / 45 = 0.444 < 0.8
    assert check.status is Status.FAIL and check.measured == pytest.approx(20.0 / 45.0)
    assert "n1 (rack1) - n5 (rack2) all_reduce 20.0 GB/s, 44% of the median 45.0 GB/s" in check.message
    # its evidence starts with the degraded pair's file (the one a reason names), the other pairs' after it
    assert [Path(s.file).name for s in check.evidence][:1] == ["pair-2.log"]
    assert {Path(s.file).name for s in check.evidence} == {"pair-0.log", "pair-1.log", "pair-2.log"}
    # two domains, 1 GPU per node over one NDR NIC: bound 50, expected 0.83 x 50 = 41.5, target 33.2
    target = out["checks"]["scaling.pair-all_reduce_busbw_meets_target"]
    assert target.target == pytest.approx(33.2) and "pair-2 20.0 GB/s < target 33.2" in target.message
    degraded = [p for p in out["section"]["pairs"] if p["degraded"]]
    assert [(p["nodes"], p["busbw_gbps"]) for p in degraded] == [(["n1", "n5"], 20.0)]
    assert out["checks"]["scaling.pair-all_reduce_busbw_meets_target"].status is Status.FAIL


def test_pair_run_must_name_two_nodes(tmp_path: Path) -> None:
    out = _collectives(tmp_path, {"pair-0": ("pair", ["n1"], nccl_output("all_reduce", 2, {GIB: 45.0}))})
    check = out["checks"]["scaling.pair-0_valid"]
    assert check.status is Status.ERROR and "expected the 2 nodes of the pair, got ['n1']" in check.message


def test_scaling_no_profile_decides_turns_absence_into_skipped(tmp_path: Path) -> None:
    run, rel, text = _training(512, 7.0, phase="efficiency")
    bundle = write_bundle(tmp_path / "b", [run], {rel: text})
    efficiency_only = with_profiles(gb200(), {"full": Profile(title="efficiency only", phases=["efficiency"])})
    result = judge_scaling(bundle, efficiency_only, parse_all(bundle))
    assert all(c.status is not Status.FAIL for c in result.checks)
    assert all(c.severity is Severity.ADVISORY for c in result.checks)
    required = judge_scaling(bundle, gb200(), parse_all(bundle))
    assert by_id(required.checks)["scaling.evidence_present"].status is Status.FAIL


def test_unusable_repeat_beside_a_usable_one_leaves_scaling_judged(tmp_path: Path) -> None:
    run, rel, text = _training(128, 7.0)
    bad = {**run, "id": "llama3-70b-fp8-128-r2", "repeat": 2, "files": ["training/bad.log"]}
    other, rel2, text2 = _training(256, 7.7)
    bundle = write_bundle(tmp_path / "b", [run, bad, other],
                          {rel: text, "training/bad.log": text.replace("iteration 40/", "iteration 99/"), rel2: text2})
    check = by_id(judge_scaling(bundle, gb200(), parse_all(bundle)).checks)[
        "scaling.llama3-70b-fp8_weak_scaling_efficiency"]
    # 7.0 / 7.7 = 0.909 >= 0.90; the broken repeat is left out (its own run check reports it)
    assert check.status is Status.PASS and check.measured == pytest.approx(7.0 / 7.7, rel=1e-12)
    assert "1 unusable repeat(s) left out" in check.message


def test_a_gpu_count_left_without_a_usable_run_is_the_errors_reason(tmp_path: Path) -> None:
    """The reason an operator reads (results.json's, the terminal's) gave the ratios that were measured ("256 GPUs
    1.000, 512 GPUs 0.998"), not why the check could not be judged: the GPU count without a usable run, and why."""
    from clustercert.verdicts import outcome_reasons

    small, rel, _ = _training(128, 7.0)
    mid, rel2, text2 = _training(256, 7.0)
    large, rel3, text3 = _training(512, 7.7)
    written = write_bundle(tmp_path / "b", [small, mid, large], {rel: "", rel2: text2, rel3: text3})
    bundle = dataclasses.replace(written, in_bundle_names=True)  # as a certification loads it
    checks = judge_scaling(bundle, gb200(), parse_all(bundle)).checks
    check = by_id(checks)["scaling.llama3-70b-fp8_weak_scaling_efficiency"]
    assert check.status is Status.ERROR
    assert check.summary == f"no usable run at 128 GPUs: {rel}: expected log text, got an empty file"
    [reason] = [r for r in outcome_reasons(checks) if r.check == check.id]
    assert reason.summary == f"no usable run at 128 GPUs: {rel}: expected log text, got an empty file"
    assert reason.where[0] == rel


def test_run_far_below_its_peers_fails_even_above_its_target(tmp_path: Path) -> None:
    # 4 one-domain all_reduce runs: 1200, 1210, 1190 and 800 GB/s; target 770.4 holds for all, but the median
    # is (1190 + 1200) / 2 = 1195 and 800 / 1195 = 0.669 < 0.8
    values = {"ar-a": 1200.0, "ar-b": 1210.0, "ar-c": 1190.0, "ar-d": 800.0}
    out = _collectives(tmp_path, {k: ("nvlink-domain", None, nccl_output("all_reduce", 8, {GIB: v}))
                                  for k, v in values.items()})
    assert out["checks"][NVL].status is Status.PASS
    peers = out["checks"]["scaling.nvlink-domain-all_reduce-8ranks_no_run_below_peers"]
    assert peers.status is Status.FAIL and peers.measured == pytest.approx(800 / 1195)
    assert "ar-d 800.0 GB/s = 67%" in peers.message and "median 1195.0 GB/s" in peers.message
    assert "ar-a" not in peers.message.split("):", 1)[1]


def test_fewer_than_three_peers_make_no_peer_check(tmp_path: Path) -> None:
    out = _collectives(tmp_path, {k: ("nvlink-domain", None, nccl_output("all_reduce", 8, {GIB: v}))
                                  for k, v in {"ar-a": 1200.0, "ar-b": 800.0}.items()})
    assert not [c for c in out["checks"] if c.endswith("_no_run_below_peers")]
