"""The catalog's facts of each run, worked out once for the validation tables (issue 13): checked against
DOMAIN.md's worked FLOPs and the catalog file's own peaks, window and NVLink rate."""

from __future__ import annotations

import pytest
import yaml

from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import load_bundle
from clustercert.evidence.facts import RunFacts, bundle_facts
from tests.conftest import ROOT

SEED = ROOT / "evidence" / "gb200-seed"


def test_the_seed_runs_facts_match_domain_md_and_the_catalog_file() -> None:
    bundle = load_bundle(SEED)
    catalog = load_catalog("exemplar-gb200", ROOT / "references")
    facts = bundle_facts(bundle, catalog)
    raw = yaml.safe_load((ROOT / "references" / "exemplar-gb200.yaml").read_text())
    assert facts.busbw_ceiling_gbps == 2 * raw["nvlink_gbps_per_direction"] == 1800.0  # DOMAIN.md section 6
    assert set(facts.runs) == {r.id for r in bundle.spec.runs}
    # DOMAIN.md section 4, c = 1/2 (the canonical convention): Llama 3 70B 3.68003e15, DeepSeek-V3 1.06493e15
    llama = facts.of("llama3-70b-fp8-512-r1")
    assert llama.flops_per_sequence == pytest.approx(3.68003e15, rel=1e-5)
    assert facts.of("deepseek-v3-bf16-512-r1").flops_per_sequence == pytest.approx(1.06493e15, rel=1e-5)
    assert llama.peak_tflops == raw["peaks_tflops"]["fp8"] == 4900
    baseline = next(b for b in raw["baselines"] if (b["workload"], b["precision"], b["gpus"]) == (
        "llama3-70b", "fp8", 512))
    assert llama.window == (baseline["window"]["first"], baseline["window"]["last"])


def test_a_run_the_catalog_says_nothing_about_has_no_facts() -> None:
    bundle = load_bundle(SEED)
    facts = bundle_facts(bundle, load_catalog("exemplar-gb200", ROOT / "references"))
    collective = next(r.id for r in bundle.spec.runs if r.kind.value == "collective")
    assert facts.of(collective) == RunFacts() and facts.of("no-such-run") == RunFacts()
