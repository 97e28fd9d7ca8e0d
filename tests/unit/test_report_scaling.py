"""The scaling section of the report with failed and degraded pairs together (issue 11 item 1: exit 4)."""

from __future__ import annotations

from typing import Any

from clustercert.report.render import _phase_context


def _pair(nodes: list[str], busbw: float | None, degraded: bool) -> dict[str, Any]:
    return {"run": "-".join(nodes), "collective": "alltoall", "ranks": 8, "ranks_per_node": 4, "nodes": nodes,
            "domains": nodes, "busbw_gbps": busbw, "median_gbps": 23.0,
            "fraction_of_median": None if busbw is None else busbw / 23.0, "degraded": degraded,
            "failed": busbw is None, "cause": "remote process exited or there was a network error" if busbw is None
            else None, "peers": 4}


def test_failed_and_degraded_pairs_sort_without_a_crash() -> None:
    pairs = [_pair(["a", "b"], 23.0, False), _pair(["a", "c"], 12.0, True), _pair(["b", "c"], None, True),
             _pair(["c", "d"], 22.5, False)]
    nodes = [{"node": "c", "bad_pairs": 2, "pairs": 3, "share": 2 / 3, "suspect": True},
             {"node": "a", "bad_pairs": 1, "pairs": 2, "share": 0.5, "suspect": False}]
    results = {"phases": {"scaling": {"weak_scaling": [], "collectives": [], "pairs": pairs, "pair_nodes": nodes,
                                      "ceiling_gbps": 900.0}}}
    phase = _phase_context("scaling", results, [])
    # failed first, then degraded (slowest first), then the rest
    assert [p["run"] for p in phase["pairs"]] == ["b-c", "a-c", "c-d", "a-b"]
    assert phase["pairs_degraded"] == 2 and phase["pairs_failed"] == 1
    assert [n["node"] for n in phase["pair_nodes"]] == ["c", "a"]
    heat = [c for c in phase["charts"] if c.id == "chart-pairs"]
    assert len(heat) == 1 and heat[0].uri.startswith("data:image/png;base64,")
    assert "1 failed and 1 degraded pair(s) marked" in heat[0].alt and "c (2)" in heat[0].alt
