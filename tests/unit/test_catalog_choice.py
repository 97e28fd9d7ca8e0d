"""The catalog is the auditor's choice; the baselines file is the certifier's; llmb-run's job records are judged."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from clustercert.baselines import apply_baselines, load_baselines
from clustercert.catalog import choose_catalog, edition_for, load_catalog
from clustercert.errors import CatalogError, EvidenceError, UsageError
from clustercert.evidence.bundle import load_bundle
from clustercert.parsers.llmb_config import LlmbConfig
from clustercert.phases.efficiency import judge_efficiency
from clustercert.phases.program import deviations, judge_job_configs
from clustercert.verdicts import Status
from tests.conftest import ROOT

REFERENCES = ROOT / "references"
DEGRADED = ROOT / "evidence" / "gb200-degraded"


def _lenient(text: str) -> str:
    """The shipped catalog with its id, title and version kept, pass ratio 0.5 and every minimum 0.1 (issue 55)."""
    text = re.sub(r"pass_ratio: [0-9.]+", "pass_ratio: 0.5", text)
    return re.sub(r"(_min: )[0-9.]+", r"\g<1>0.1", text)


def test_a_bundle_naming_a_catalog_it_ships_itself_is_refused(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(DEGRADED, bundle)
    (bundle / "evil.yaml").write_text(_lenient((REFERENCES / "exemplar-gb200.yaml").read_text()))
    spec = load_bundle(bundle).spec.model_copy(update={"catalog": "evil.yaml"})
    with pytest.raises(CatalogError) as caught:
        choose_catalog(spec, bundle, REFERENCES, None)
    assert "got 'evil.yaml', whose content" in str(caught.value)
    assert "certify --catalog evil.yaml" in str(caught.value)
    # named by the person running certify, it judges, and says it is not shipped
    chosen = choose_catalog(spec, bundle, REFERENCES, "evil.yaml")
    assert (chosen.spec.rules.pass_ratio, chosen.shipped) == (0.5, False)
    # a byte-identical copy of a shipped catalog is that catalog, wherever it lies
    shutil.copy(REFERENCES / "exemplar-gb200.yaml", bundle / "copy.yaml")
    same = choose_catalog(spec.model_copy(update={"catalog": "copy.yaml"}), bundle, REFERENCES, None)
    assert same.shipped and same.spec.rules.pass_ratio == 0.95


def test_the_edition_of_the_recorded_release_judges(tmp_path: Path) -> None:
    found = edition_for(REFERENCES, release="26.08.00", chip="gb200")
    assert found is not None and found.spec.id == "exemplar-gb200-26.08"
    assert edition_for(REFERENCES, release="26.08.00", system="h100-sxm").spec.id == "exemplar-h100-26.08"  # type: ignore[union-attr]
    assert edition_for(REFERENCES, release="99.01.00", chip="gb200") is None
    spec = load_bundle(DEGRADED).spec
    seed = choose_catalog(spec, DEGRADED, REFERENCES, None)  # 25.05.05: no edition, bundle.yaml's shipped catalog
    assert seed.spec.id == "exemplar-gb200" and seed.shipped
    newer = spec.model_copy(update={"recipe_version": "26.08.00"})
    with pytest.raises(CatalogError, match=r"judged by the shipped edition exemplar-gb200-26\.08"):
        choose_catalog(newer, DEGRADED, REFERENCES, None)
    right = choose_catalog(newer.model_copy(update={"catalog": "exemplar-gb200-26.08"}), DEGRADED, REFERENCES, None)
    assert right.spec.id == "exemplar-gb200-26.08"


def _baselines(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text("schema_version: 1\nsupplied_by: NVIDIA account team\ndate: '2026-11-15'\n"
                    "source: targets message of 2026-11-15\nbaselines:\n" + body)
    return path


def test_a_tflops_target_becomes_a_step_time_through_the_models_flops(tmp_path: Path) -> None:
    catalog = load_catalog("exemplar-gb200-26.08", REFERENCES)
    path = _baselines(tmp_path, "  - {workload: pretrain_llama3.1_405b, precision: fp8, gpus: 512, "
                                "tflops_per_gpu: 1500}\n  - {workload: pretrain_llama3.1_70b, precision: fp8, "
                                "gpus: 512, step_time_s: 4.5, kind: published, mfu_published: 0.41}\n")
    judged = apply_baselines(catalog, load_baselines(path))
    b = judged.baseline_for("pretrain_llama3.1_405b", "fp8", 512)
    assert b is not None and b.kind == "supplied"
    row = catalog.spec.recipes["pretrain_llama3.1_405b"].configuration("fp8", 512)
    assert row is not None
    # oracle: DOMAIN.md section 4, Llama 3.1 405B causal (Megatron's count), 2.06762e16 FLOPs per sequence
    assert b.step_time_s == pytest.approx(2.06762e16 * row.gbs / (1500e12 * 512), rel=2e-3)
    assert (b.gbs, b.seq_len, b.window.first, b.window.last) == (row.gbs, row.seq_len, 35, 44)
    other = judged.baseline_for("pretrain_llama3.1_70b", "fp8", 512)
    assert other is not None and (other.step_time_s, other.kind, other.mfu_published) == (4.5, "published", 0.41)
    assert judged.baselines is not None and judged.baselines["supplied_by"] == "NVIDIA account team"
    assert "NVIDIA account team" in judged.spec.sources["baselines-file"].title


def test_a_supplied_baseline_keeps_the_differences_the_catalog_allows(tmp_path: Path) -> None:
    """The seed catalog allows llama3-70b FP8's recipe version to differ from its 26.04.01 source; a baselines-file
    entry replacing that baseline keeps the allowance (else every 25.05.05 bundle failed recipe conformance)."""
    catalog = load_catalog("exemplar-gb200", REFERENCES)
    own = catalog.baseline_for("llama3-70b", "fp8", 512)
    assert own is not None and "recipe_version" in own.allowed_differences
    path = _baselines(tmp_path, "  - {workload: llama3-70b, precision: fp8, gpus: 512, step_time_s: 7.9}\n")
    judged = apply_baselines(catalog, load_baselines(path)).baseline_for("llama3-70b", "fp8", 512)
    assert judged is not None and judged.step_time_s == 7.9
    assert judged.allowed_differences == own.allowed_differences


def test_a_suite_entry_without_a_baseline_cannot_be_judged(tmp_path: Path) -> None:
    catalog = load_catalog("exemplar-gb200-26.08", REFERENCES)
    path = _baselines(tmp_path, "  - {workload: pretrain_llama3.1_70b, precision: fp8, gpus: 512, step_time_s: 4.5}\n")
    judged = apply_baselines(catalog, load_baselines(path))
    spec = load_bundle(DEGRADED).spec
    checks = {c.id: c for c in judge_efficiency(spec, judged, {}).checks}
    missing = checks["efficiency.pretrain_qwen3_235b-fp8-512_meets_baseline"]
    assert missing.status is Status.ERROR and "no baseline for pretrain_qwen3_235b-fp8-512" in missing.message
    assert "the baselines file given has no entry for it" in missing.message
    assert checks["efficiency.pretrain_llama3.1_70b-fp8-512_meets_baseline"].status is Status.FAIL  # no run


@pytest.mark.parametrize(("body", "says"), [
    ("  - {workload: pretrain_llama3.1_70b, precision: fp8, gpus: 512, step_time_s: 4.5, tflops_per_gpu: 9}\n",
     "line 6 field 'baselines[0]': Value error, give exactly one of step_time_s and tflops_per_gpu"),
    ("  - {workload: gpt3-175b, precision: fp8, gpus: 512, step_time_s: 4.5}\n",
     "baselines[0] (gpt3-175b fp8 512 GPUs): expected a workload of catalog exemplar-gb200-26.08"),
    ("  - {workload: pretrain_llama3.1_70b, precision: fp8, gpus: 8, step_time_s: 4.5}\n",
     "has neither a recipe row nor a baseline for it"),
])
def test_a_bad_baselines_file_is_a_usage_error_naming_where(tmp_path: Path, body: str, says: str) -> None:
    catalog = load_catalog("exemplar-gb200-26.08", REFERENCES)
    with pytest.raises(UsageError) as caught:
        apply_baselines(catalog, load_baselines(_baselines(tmp_path, body)))
    assert says in str(caught.value) and "targets.yaml" in str(caught.value)


def _config(**changes: object) -> LlmbConfig:
    base: dict[str, object] = dict(
        file="w/llmb-config_7.yaml", job_id="7", user="u", launch_time=None, framework="megatron_bridge",
        release="26.08.00", fw_version="26.06.01", model_name="llama3.1", model_size="70b", dtype="fp8", scale=512,
        gpu_type="gb200", cluster_name="c", gpus_per_node=4, images=("nvcr.io#nvidia/nemo:26.06.01",),
        profile_enabled=False, proxy=False, strong_scaling=False,
        lines={"job_config.model_overrides": 31, "workload_info.gsw_version": 9})
    return LlmbConfig(**{**base, **changes})  # type: ignore[arg-type]


def test_each_recorded_deviation_is_named_with_its_line() -> None:
    catalog = load_catalog("exemplar-gb200-26.08", REFERENCES)
    assert deviations(_config(), catalog, "pretrain_llama3.1_70b") == []
    found = deviations(_config(model_overrides={"num_layers": 40}, proxy=True, profile_enabled=True,
                               mbridge_args=("--x",), env_overrides={"NCCL_ALGO": "Ring"},
                               images=("nvcr.io#nvidia/nemo:25.11",)), catalog, "pretrain_llama3.1_70b")
    assert [d.subject for d in found] == ["model_overrides", "env_overrides", "mbridge_args", "proxy", "profile",
                                          "container"]
    assert found[0].line == 31 and found[0].value == "{'num_layers': 40}"
    proxy_scale = deviations(_config(dtype="fp8", scale=504), catalog, "pretrain_deepseek-v3_671b")
    assert [d.value for d in proxy_scale] == ["scale 504, a proxy scale of the recipe"]


def test_runs_of_two_releases_fail_the_one_release_rule() -> None:
    catalog = load_catalog("exemplar-gb200-26.08", REFERENCES)
    spec = load_bundle(DEGRADED).spec
    runs = [r.id for r in spec.runs if r.kind.value == "training"][:3]
    configs = {runs[0]: _config(), runs[1]: _config(release="26.05.00", file="w/llmb-config_8.yaml"),
               runs[2]: EvidenceError("w/llmb-config_9.yaml", "expected a mapping", line=2)}
    checks, aside = judge_job_configs(spec, catalog, configs)
    one = next(c for c in checks if c.id == "efficiency.recipe_release_one")
    assert one.status is Status.FAIL
    assert f"26.05.00: {runs[1]}; 26.08.00: {runs[0]}" in one.message
    assert runs[2] in aside and any(c.status is Status.ERROR for c in checks if runs[2] in c.id)
