"""Collective targets with an authority: the hierarchical model's shape, published gates and reference results.

Oracles: the shape's limits (B_nvl inside one domain, B_net at one GPU per domain), its values worked by hand
below, a GB200 NVL72 operator's published 20-rack all_reduce (about 406 GB/s at 1,440 GPUs, issue 58), and the
degraded sample's collapsed cross-rack and full-scale all_reduce (304.08 and 300.72 GB/s, read from
evidence/gb200-degraded/collectives).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clustercert.evidence.bundle import load_bundle
from clustercert.metrics.collectives import Collective, LinkRates, Placement, carried, model_shape
from clustercert.phases.scaling import judge_scaling, reference_fit
from tests.unit.phase_bundles import gb200, nccl_output, parse_all

GIB = 1 << 30
GB200 = LinkRates(900.0, 50.0)  # NVLink 5 per GPU; one NDR NIC per GPU


def test_shape_is_nvlink_in_one_domain_and_the_nic_at_one_gpu_per_domain() -> None:
    assert model_shape(Collective.ALL_REDUCE, Placement(72, 1, 72), GB200) == 900.0
    assert model_shape(Collective.ALL_REDUCE, Placement(10, 10, 1), GB200) == pytest.approx(50.0)
    assert model_shape(Collective.ALL_REDUCE, Placement(16, 2, 8), LinkRates(900.0, None)) is None


def test_shape_falls_with_the_domains_a_run_spans() -> None:
    # ((N-1)/N) / ((k-1)/(k B_nvl) + (D-1)/(D k B_net)), worked by hand:
    # 2 racks of 64: (127/128) / (63/57600 + 1/6400) = 793.75; 8 racks of 64: 730.0; 20 racks of 72: 735.02
    assert model_shape(Collective.ALL_REDUCE, Placement(128, 2, 64), GB200) == pytest.approx(793.75)
    assert model_shape(Collective.ALL_REDUCE, Placement(512, 8, 64), GB200) == pytest.approx(730.0)
    assert model_shape(Collective.ALL_REDUCE, Placement(1440, 20, 72), GB200) == pytest.approx(735.017, abs=1e-3)
    values = [model_shape(Collective.ALL_REDUCE, Placement(64 * d, d, 64), GB200) for d in (2, 4, 8, 16, 32)]
    assert values == sorted(values, reverse=True) and len(set(values)) == 5


def test_a_reference_carries_to_its_own_shape_unchanged() -> None:
    placement = Placement(1440, 20, 72)
    assert carried(Collective.ALL_REDUCE, placement, GB200, placement, 406.0) == pytest.approx(406.0)


def _gb200_bundle(root: Path, runs: dict[str, tuple[str, list[str], float]]) -> Any:
    """20 NVL72 racks of 18 trays x 4 GPUs, 4 NDR NICs per tray; each run all_reduce on its trays' GPUs."""
    racks = {f"rack{r}": [f"r{r}-n{t:02d}" for t in range(1, 19)] for r in range(1, 21)}
    entries, files = [], {}
    for run_id, (scope, nodes, gbps) in runs.items():
        hosts = [n for n in nodes for _ in range(4)]
        rel = f"nccl/{run_id}.log"
        files[rel] = nccl_output("all_reduce", len(hosts), {GIB: gbps - 5.0, 2 * GIB: gbps}, hosts=hosts)
        entries.append({"id": run_id, "phase": "scaling", "kind": "collective", "format": "nccl-tests",
                        "scope": scope, "gpus": len(hosts), "nodes": nodes, "files": [rel]})
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    doc = {"schema_version": 1, "cluster": {"name": "t", "provider": "t"},
           "system": {"gpu": "gb200-nvl72", "gpus_per_node": 4, "nodes": [n for ns in racks.values() for n in ns],
                      "nvlink_domains": [{"name": k, "nodes": v} for k, v in racks.items()],
                      "interconnect": {"scale_out": "infiniband-ndr", "nics_per_node": 4}},
           "catalog": "exemplar-gb200", "recipe_version": "25.05.05", "runs": entries}
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_bundle(root)


def _trays(racks: range, per_rack: int) -> list[str]:
    return [f"r{r}-n{t:02d}" for r in racks for t in range(1, per_rack + 1)]


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    bundle = _gb200_bundle(tmp_path_factory.mktemp("gb200"), {
        "published-20-racks": ("cross-rack", _trays(range(1, 21), 18), 406.0),
        "collapsed-2-racks": ("cross-rack", _trays(range(3, 5), 16), 304.08),
        "healthy-2-racks": ("cross-rack", _trays(range(1, 3), 16), 752.0),
        "collapsed-8-racks": ("full-scale", _trays(range(1, 9), 16), 300.72),
        "rack1": ("nvlink-domain", _trays(range(1, 2), 18), 948.0),
        "tray": ("nvlink-domain", _trays(range(1, 2), 1), 700.0),
    })
    result = judge_scaling(bundle, gb200(), parse_all(bundle))
    return {row["run"]: row for row in result.section["collectives"]}


def test_the_published_20_rack_result_passes_the_cross_rack_target(judged: dict[str, dict[str, Any]]) -> None:
    row = judged["published-20-racks"]
    assert row["status"] == "PASS" and row["target_gbps"] == pytest.approx(0.8 * 406.0)
    assert row["target_source"] == "reference: operator-gb200-20-racks"


def test_the_degraded_samples_collapses_still_fail(judged: dict[str, dict[str, Any]]) -> None:
    # 0.8 x 406 x 793.75 / 735.017 = 350.75 at 2 racks of 64; 0.8 x 406 x 730.0 / 735.017 = 322.58 at 8 racks
    two, eight = judged["collapsed-2-racks"], judged["collapsed-8-racks"]
    assert two["target_gbps"] == pytest.approx(350.75, abs=0.01) and two["status"] == "FAIL"
    assert eight["target_gbps"] == pytest.approx(322.58, abs=0.01) and eight["status"] == "FAIL"
    assert judged["healthy-2-racks"]["status"] == "PASS"


def test_nvidias_gates_judge_the_runs_they_cover(judged: dict[str, dict[str, Any]]) -> None:
    rack, tray = judged["rack1"], judged["tray"]
    assert rack["target_gbps"] == 900.0 and rack["target_source"] == "published gate: nvidia-cre-gb200"
    assert tray["target_gbps"] == 680.0 and tray["status"] == "PASS"


def test_the_fit_lists_each_reference_with_the_link_model_alone() -> None:
    (row,) = reference_fit(gb200())
    assert row["gbps"] == 406 and row["carried_gbps"] is None and row["fits"] is None
    # the link model alone expected 0.83 x 900 across racks: it would have failed the published result
    assert row["link_model_gbps"] == pytest.approx(0.83 * 900.0)
    assert 0.8 * row["link_model_gbps"] > row["gbps"]
