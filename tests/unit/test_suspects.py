"""The suspect list on hand-made sections: nodes merged across layers, ranked by how many layers name them, each
finding with where it is; the nodes nothing covers listed as unexamined; the terminal's lines for it."""

from __future__ import annotations

from typing import Any

from clustercert.cli.summary import suspect_lines
from clustercert.metrics.suspects import SuspectInputs, rank_suspects

NODES = ["a", "b", "c", "d", "e", "f"]
SCALING = {
    "pairs": [
        {"run": "pair-a-b", "collective": "all_reduce", "nodes": ["a", "b"], "busbw_gbps": 20.0,
         "fraction_of_median": 0.4, "degraded": True},
        {"run": "pair-a-c", "collective": "all_reduce", "nodes": ["a", "c"], "busbw_gbps": 50.0,
         "fraction_of_median": 1.0, "degraded": False},
    ],
    "pair_nodes": [{"node": "a", "bad_pairs": 1, "pairs": 2, "share": 0.5, "suspect": False}],
}
RESILIENCE = {
    "stragglers": [{"rank": 5, "node": "c", "gpu": 1, "relative_score": 0.893, "flagged": True},
                   {"rank": 6, "node": "c", "gpu": 2, "relative_score": 1.0, "flagged": False}],
    "events": [{"time_s": 3000.0, "type": "node-excluded", "node": "d", "detail": "slow GPU", "file": "events.jsonl",
                "line": 7}],
}
HEALTH = {"nodes": [
    {"node": "b", "status": "FAIL", "findings": [
        {"unit": {"name": "GPU 0"}, "check": "xid", "status": "FAIL", "reason": "Xid 48 x1", "file": "b/dmesg.log",
         "line": 11},
        {"unit": {"name": "GPU 1"}, "check": "dcgm.pcie", "status": "SKIPPED", "reason": "PCIe: Skip",
         "file": "b/diag.txt", "line": 16}]},
    {"node": "e", "status": "SKIPPED", "findings": [
        {"unit": {"name": "GPU 1"}, "check": "dcgm.pcie", "status": "SKIPPED", "reason": "PCIe: Skip",
         "file": "e/diag.txt", "line": 16}]},
]}
CHECKS = [
    {"id": "scaling.pairs_no_degraded_link", "evidence": [{"file": "pairs/a-b.log", "line": 40, "last": 52,
                                                           "count": 13}]},
    {"id": "resilience.stragglers_detected_and_handled", "evidence": [{"file": "timings.parquet", "line": 1,
                                                                       "last": 6400, "count": 6400}]},
]


def _ranked(**sections: Any) -> dict[str, Any]:
    return rank_suspects(SuspectInputs(nodes=NODES, covered=frozenset({"a", "b"}),
                                       run_files={"pair-a-b": "pairs/a-b.log", "pair-a-c": "pairs/a-c.log"},
                                       sections=sections, checks=CHECKS))


def test_nodes_named_by_more_layers_rank_first_with_their_evidence() -> None:
    got = _ranked(scaling=SCALING, resilience=RESILIENCE, health=HEALTH)
    # b: network and health (2 layers); a: network; c: straggler; d: resilience (1 each, by findings then name)
    assert [(n["rank"], n["node"], n["layers"]) for n in got["nodes"]] == [
        (1, "b", ["network", "health"]), (2, "a", ["network"]), (3, "c", ["straggler"]), (4, "d", ["resilience"])]
    b = got["nodes"][0]["findings"]
    assert b == [
        {"layer": "network", "finding": "all_reduce test with a: 20.0 GB/s, 40% of the median of its peers",
         "where": ["pairs/a-b.log:40-52"]},
        # a skipped test is not examined, no fault: only the Xid is a finding
        {"layer": "health", "finding": "FAIL GPU 0 xid: Xid 48 x1", "where": ["b/dmesg.log:11"]}]
    assert got["nodes"][2]["findings"] == [{"layer": "straggler", "finding": "GPU 1 (rank 5) slow, relative score "
                                            "0.893", "where": ["timings.parquet:1-6400"]}]
    assert got["nodes"][3]["findings"] == [{"layer": "resilience", "finding": "node excluded at 3000 s (slow GPU)",
                                            "where": ["events.jsonl:7"]}]


def test_unexamined_are_the_nodes_no_run_lists_and_no_section_names() -> None:
    # a, b: listed by runs; c, d: named by the resilience sections; e: by the health section; f: by nothing
    assert _ranked(scaling=SCALING, resilience=RESILIENCE, health=HEALTH)["unexamined"] == ["f"]
    assert _ranked()["unexamined"] == ["c", "d", "e", "f"]
    assert _ranked()["nodes"] == []


def test_a_suspect_node_of_the_sweep_is_a_network_finding_of_its_own() -> None:
    scaling = {"pairs": [], "pair_nodes": [{"node": "a", "bad_pairs": 3, "pairs": 4, "share": 0.75,
                                            "suspect": True}]}
    (a,) = _ranked(scaling=scaling)["nodes"]
    assert a["findings"] == [{"layer": "network", "finding": "in 3 of its 4 pairs' failures (the node, not a link)",
                              "where": []}]


def test_terminal_lines_list_the_first_suspects_and_the_unexamined() -> None:
    results = {"suspects": _ranked(scaling=SCALING, resilience=RESILIENCE, health=HEALTH)}
    lines = suspect_lines(results, 100, 3)
    assert lines == [
        "Suspect nodes (4, most layers of evidence first)",
        "  1. b [network, health]: all_reduce test with a: 20.0 GB/s, 40% of the median of its peers",
        "       (pairs/a-b.log:40-52); 1 more finding",
        "  2. a [network]: all_reduce test with b: 20.0 GB/s, 40% of the median of its peers",
        "       (pairs/a-b.log:40-52)",
        "  3. c [straggler]: GPU 1 (rank 5) slow, relative score 0.893 (timings.parquet:1-6400)",
        "  and 1 more node (--verbose, or the report)",
        "Unexamined: 1 node of bundle.yaml no run lists and no finding names: f",
    ]
    assert suspect_lines({"suspects": {"nodes": [], "unexamined": []}}, 80) == []
    assert suspect_lines({}, 80) == []  # a results.json from before the list
