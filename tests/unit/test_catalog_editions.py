"""The 26.08 Exemplar editions (references/exemplar-<chip>-26.08.yaml) against what NVIDIA's files say.

The expected suites are exemplar.yaml of NVIDIA/exemplar-performance release 26.08.00, copied below as read; the
peaks are its README.md's "Peak Theoretical Throughput" table. Configuration rows are checked for the arithmetic
every recipe table obeys (DP = GPUs / (TP x PP x CP), GA = GBS / (MBS x DP), GBS growing with GPUs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.catalog import LoadedCatalog, load_catalog
from clustercert.editions import Fp8Recipe
from clustercert.errors import CatalogError
from clustercert.evidence.init import _catalog_for
from clustercert.metrics.flops import CANONICAL, model_flops_per_sequence
from clustercert.metrics.megatron_flops import Kind, megatron_flops_per_sequence
from clustercert.metrics.throughput import mfu
from clustercert.settings import PROJECT_ROOT

REFS = PROJECT_ROOT / "references"
CHIPS = ("gb300", "gb200", "b300", "b200", "h100")

# NVIDIA/exemplar-performance 26.08.00, exemplar.yaml `workloads`, as read (config: scale 512, repeats 1, profile false)
EXEMPLAR_26_08: dict[str, dict[str, list[str]]] = {
    "gb300": {"pretrain_deepseek-v3_671b": ["bf16", "fp8", "nvfp4"], "pretrain_gpt_oss_120b": ["bf16"],
              "pretrain_kimi-k2_1t": ["fp8"], "pretrain_llama3.1_405b": ["fp8", "nvfp4"],
              "pretrain_llama3.1_70b": ["fp8", "nvfp4"], "pretrain_nemotron-h_56b": ["fp8"],
              "pretrain_nemotron_3_120b": ["bf16", "fp8"], "pretrain_qwen3_235b": ["bf16", "fp8"]},
    "gb200": {"pretrain_deepseek-v3_671b": ["bf16", "fp8", "nvfp4"], "pretrain_gpt_oss_120b": ["bf16"],
              "pretrain_kimi-k2_1t": ["fp8"], "pretrain_llama3.1_405b": ["fp8", "nvfp4"],
              "pretrain_llama3.1_70b": ["fp8", "nvfp4"], "pretrain_nemotron-h_56b": ["fp8"],
              "pretrain_nemotron_3_120b": ["bf16"], "pretrain_qwen3_235b": ["bf16", "fp8"]},
    "b300": {"pretrain_deepseek-v3_671b": ["bf16", "fp8", "nvfp4"], "pretrain_gpt_oss_120b": ["bf16"],
             "pretrain_kimi-k2_1t": ["fp8"], "pretrain_llama3.1_405b": ["fp8", "nvfp4"],
             "pretrain_llama3.1_70b": ["fp8", "nvfp4"], "pretrain_nemotron-h_56b": ["fp8"],
             "pretrain_nemotron_3_120b": ["bf16"], "pretrain_qwen3_235b": ["bf16", "fp8"]},
    "b200": {"pretrain_deepseek-v3_671b": ["bf16", "fp8"], "pretrain_gpt_oss_120b": ["bf16"],
             "pretrain_kimi-k2_1t": ["fp8"], "pretrain_llama3.1_405b": ["fp8", "nvfp4"],
             "pretrain_llama3.1_70b": ["fp8", "nvfp4"], "pretrain_nemotron-h_56b": ["fp8"],
             "pretrain_nemotron_3_120b": ["bf16"], "pretrain_qwen3_235b": ["bf16", "fp8"]},
    "h100": {"pretrain_gpt_oss_120b": ["bf16"], "pretrain_llama3.1_70b": ["bf16", "fp8"],
             "pretrain_nemotron-h_56b": ["fp8"], "pretrain_qwen3_235b": ["bf16"]},
}
# README.md 26.08.00, Peak Theoretical Throughput (TFLOP/s, dense); H100 has no NVFP4
PEAKS = {"gb300": {"bf16": 2450, "fp8": 4900, "nvfp4": 14700}, "gb200": {"bf16": 2450, "fp8": 4900, "nvfp4": 9800},
         "b300": {"bf16": 2250, "fp8": 4500, "nvfp4": 13500}, "b200": {"bf16": 2250, "fp8": 4500, "nvfp4": 9000},
         "h100": {"bf16": 989, "fp8": 1979}}
# suite entries whose recipe table has no 512-GPU row, and why (each catalog says so under `unlisted`)
GAPS = {("gb200", "pretrain_llama3.1_70b", "nvfp4"): "GB200 NVFP4 table has no 70b row",
        ("gb300", "pretrain_nemotron-h_56b", "fp8"): "no GB300 table", ("b300", "pretrain_nemotron-h_56b", "fp8"):
        "no B300 table"}


def _edition(chip: str) -> LoadedCatalog:
    return load_catalog(f"exemplar-{chip}-26.08", REFS)


# references/ also holds data that is not a catalog: the node-health rules (clustercert.health)
NOT_CATALOGS = {"health-rules", "mlperf-benchmarks"}


def test_every_shipped_catalog_loads() -> None:
    loaded = {p.stem: load_catalog(p.stem, REFS) for p in sorted(REFS.glob("*.yaml")) if p.stem not in NOT_CATALOGS}
    assert {f"exemplar-{chip}-26.08" for chip in CHIPS} <= set(loaded)
    for name, cat in loaded.items():
        assert cat.spec.id == name
        assert (cat.spec.edition is not None) == name.endswith("-26.08"), name


@pytest.mark.parametrize("chip", CHIPS)
def test_the_suite_is_exemplar_yamls(chip: str) -> None:
    spec = _edition(chip).spec
    assert spec.edition is not None
    assert (spec.edition.release, spec.edition.chip, spec.edition.scale, spec.edition.repeats,
            spec.edition.profile) == ("26.08.00", chip, 512, 1, False)
    assert sorted((e.workload, e.precision.value) for e in spec.suite) == sorted(
        (w, d) for w, dtypes in EXEMPLAR_26_08[chip].items() for d in dtypes)
    assert {e.gpus for e in spec.suite} == {512}
    assert set(spec.models) == set(spec.recipes) == set(EXEMPLAR_26_08[chip])
    assert spec.baselines == []  # none public: NVIDIA's account team supplies them
    assert (spec.rules.pass_ratio, spec.rules.repeats, spec.rules.validity_months) == (0.95, "latest", 12)
    assert spec.sources[spec.edition.source].file == "exemplar.yaml"
    assert spec.sources[spec.edition.source].release == "26.08.00"


def test_the_gb200_suite_has_thirteen_pairs() -> None:
    assert len(_edition("gb200").spec.suite) == 13  # the count


@pytest.mark.parametrize("chip", CHIPS)
def test_peaks_are_nvidias_table_with_its_source(chip: str) -> None:
    cat = _edition(chip)
    assert {p.value: v for p, v in cat.spec.peaks_tflops.items()} == PEAKS[chip]
    assert cat.spec.peaks_source is not None
    assert "Peak Theoretical Throughput" in cat.spec.sources[cat.spec.peaks_source].title
    assert cat.spec.nvlink_gbps_per_direction == (450 if chip == "h100" else 900)


def test_nvfp4_goes_through_the_catalog_and_the_flops_with_its_own_peak() -> None:
    cat = _edition("gb200")
    assert cat.peak_tflops("nvfp4") == 9800
    ref = next(p for p in cat.spec.published if p.precision == "nvfp4")
    arch = cat.spec.models[ref.workload].architecture()
    flops = megatron_flops_per_sequence(arch, ref.seq_len, tensor_parallel=ref.parallelism.tp)
    step_s = ref.gbs * ref.seq_len / (ref.tokens_per_gpu_s * ref.gpus)  # the step time its tokens/s imply
    assert mfu(flops, ref.gbs, step_s, ref.gpus, cat.peak_tflops("nvfp4")) == pytest.approx(
        ref.tflops_per_gpu / 9800, rel=3e-3)


@pytest.mark.parametrize("chip", CHIPS)
def test_configuration_rows_obey_their_tables_arithmetic(chip: str) -> None:
    broken = []
    for workload, recipe in _edition(chip).spec.recipes.items():
        for row in recipe.configurations:
            dp_ok = row.dp is None or row.dp * row.tp * row.pp * row.cp == row.gpus
            ga_ok = row.ga is None or row.dp is None or row.ga * row.mbs * row.dp == row.gbs
            if row.erratum is None and not (dp_ok and ga_ok):
                broken.append((workload, row.precision.value, row.gpus))
            if row.erratum is not None:
                assert not (dp_ok and ga_ok), f"{workload} {row.gpus}: an erratum on a row that adds up"
        # weak scaling: GBS per GPU is one number per dtype
        for dtype in {row.precision for row in recipe.configurations}:
            assert len({row.gbs / row.gpus for row in recipe.configurations if row.precision == dtype}) == 1
    assert broken == []


def test_the_one_erratum_is_nvidias_h100_fp8_70b_row() -> None:
    found = {(chip, w, r.precision.value) for chip in CHIPS for w, rc in _edition(chip).spec.recipes.items()
             for r in rc.configurations if r.erratum}
    assert found == {("h100", "pretrain_llama3.1_70b", "fp8")}


@pytest.mark.parametrize("chip", CHIPS)
def test_every_suite_entry_has_its_512_gpu_row_or_says_why_not(chip: str) -> None:
    spec = _edition(chip).spec
    for e in spec.suite:
        recipe = spec.recipes[e.workload]
        row = recipe.configuration(e.precision, 512)
        gap = (chip, e.workload, e.precision.value)
        if gap in GAPS:
            assert row is None
            note = next(u.note for u in recipe.unlisted if (u.precision, u.gpus) == (e.precision, 512))
            assert GAPS[gap] in note
        else:
            assert row is not None, gap
            assert row.seq_len == (8192 if "llama" in e.workload or "nemotron" in e.workload else 4096)
            assert not recipe.is_proxy(e.precision, 512)


def test_fp8_recipes_follow_the_launch_scripts() -> None:
    for chip in CHIPS:
        for workload, recipe in _edition(chip).spec.recipes.items():
            for row in recipe.configurations:
                if row.precision != "fp8":
                    continue
                if workload in ("pretrain_llama3.1_405b", "pretrain_nemotron-h_56b"):
                    expected = Fp8Recipe.CS
                elif workload == "pretrain_llama3.1_70b":
                    expected = Fp8Recipe.MX if chip in ("b300", "b200") and row.gpus >= 128 else Fp8Recipe.CS
                else:
                    expected = Fp8Recipe.MX
                assert row.fp8_recipe is expected, (chip, workload, row.gpus)


def test_containers_and_proxy_scales_are_metadata_yamls() -> None:
    for chip in CHIPS:
        for workload, recipe in _edition(chip).spec.recipes.items():
            older = workload == "pretrain_nemotron-h_56b" or (workload == "pretrain_kimi-k2_1t" and chip == "b200")
            assert recipe.container == f"nvcr.io#nvidia/nemo:{'26.04.01' if older else '26.06.01'}", (chip, workload)
            assert recipe.framework == "megatron_bridge"
    deepseek = _edition("gb200").spec.recipes["pretrain_deepseek-v3_671b"]
    assert deepseek.is_proxy("fp8", 64) and deepseek.is_proxy("fp8", 576) and not deepseek.is_proxy("fp8", 512)
    assert not deepseek.is_proxy("bf16", 64)


def test_a_model_is_the_same_in_every_edition() -> None:
    specs = [_edition(chip).spec.models for chip in CHIPS]
    for workload in EXEMPLAR_26_08["gb200"]:
        assert len({m[workload] for m in specs if workload in m}) == 1, workload


def test_domain_md_formula_only_for_the_models_it_describes() -> None:
    models = _edition("gb200").spec.models
    # Llama and DeepSeek-V3: DOMAIN.md's causal formula and Megatron-Bridge's count agree (norms and MTP
    # norms aside, within 1e-4); DOMAIN.md's worked numbers: Llama 3.1 405B 2.06762e16, DeepSeek-V3 1.06493e15
    for workload, seq, worked in (("pretrain_llama3.1_405b", 8192, 2.06762e16),
                                  ("pretrain_deepseek-v3_671b", 4096, 1.06493e15)):
        m = models[workload]
        assert model_flops_per_sequence(m.shape(), seq, CANONICAL) == pytest.approx(worked, rel=1e-4)
        assert megatron_flops_per_sequence(m.architecture(), seq) == pytest.approx(worked, rel=1e-4)
    for workload, beyond in (("pretrain_gpt_oss_120b", "sliding-window attention"),
                             ("pretrain_qwen3_235b", "a head size other than hidden / heads"),
                             ("pretrain_nemotron-h_56b", "kind: hybrid"), ("pretrain_nemotron_3_120b", "latent MoE")):
        with pytest.raises(ValueError, match=beyond):
            models[workload].shape()
    assert {w for w, m in models.items() if m.kind is Kind.HYBRID} == {"pretrain_nemotron-h_56b",
                                                                       "pretrain_nemotron_3_120b"}


def test_evidence_init_keeps_the_legacy_editions_as_its_default() -> None:
    # an edition tied to a recipe release is chosen by the release its evidence records, not by the system alone
    for system, legacy in (("gb200-nvl72", "exemplar-gb200"), ("h100-sxm", "exemplar-h100")):
        found = _catalog_for(system, REFS)
        assert found is not None and found.spec.id == legacy


def _broken(tmp_path: Path, old: str, new: str) -> Path:
    text = (REFS / "exemplar-gb200-26.08.yaml").read_text()
    assert old in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new, 1))
    return bad


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("  chip: gb200\n  source: exemplar-26.08", "  chip: gb200\n  source: nowhere",
         "edition.source 'nowhere' is not under sources"),
        ("  - {workload: pretrain_kimi-k2_1t, precision: fp8, gpus: 512}",
         "  - {workload: pretrain_kimi-k2_1t, precision: fp8, gpus: 256}", "the edition's scale is 512 GPUs"),
        ("{precision: fp8, gpus: 512, seq_len: 4096, tp: 1, pp: 4, cp: 1, ep: 64, dp: 128, vp: 4, mbs: 1, gbs: 4096",
         "{precision: fp8, gpus: 1024, seq_len: 4096, tp: 1, pp: 4, cp: 1, ep: 64, dp: 128, vp: 4, mbs: 1, gbs: 4096",
         "has no configuration row for it and does not say why"),
        ("gpus: 256, gbs: 8192, mbs: 1, seq_len: 4096, parallelism: {tp: 1, pp: 8, cp: 1, vp: 3, ep: 32}, "
         "tokens_per_gpu_s: 7280", "gpus: 256, gbs: 4096, mbs: 1, seq_len: 4096, parallelism: {tp: 1, pp: 8, cp: 1, "
         "vp: 3, ep: 32}, tokens_per_gpu_s: 7280", "matches no row of its recipe's table"),
        ("    kind: hybrid\n    layers: 118", "    kind: hybrid\n    layers: 117",
         "a hybrid model needs a hybrid_pattern of `layers` symbols"),
        ("fp8_recipe: mx}", "}", "fp8_recipe is given for an fp8 row and only for one"),
    ],
    ids=["edition-source", "suite-scale", "no-row", "published-unmatched", "hybrid-pattern", "fp8-recipe"],
)
def test_a_malformed_edition_is_a_one_line_catalog_error(tmp_path: Path, old: str, new: str, message: str) -> None:
    bad = _broken(tmp_path, old, new)
    with pytest.raises(CatalogError) as exc:
        load_catalog(str(bad), REFS)
    assert str(exc.value).startswith(f"{bad}")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_recipes_without_an_edition_are_refused(tmp_path: Path) -> None:
    text = (REFS / "exemplar-gb200.yaml").read_text() + "\nrecipes: {}\npublished: []\n"
    good = tmp_path / "still-good.yaml"
    good.write_text(text)
    load_catalog(str(good), REFS)  # empty ones are the default
    moved = (REFS / "exemplar-gb200-26.08.yaml").read_text()
    recipes = moved[moved.index("recipes:"):moved.index("\npublished:")]
    bad = tmp_path / "bad.yaml"
    bad.write_text((REFS / "exemplar-gb200.yaml").read_text() + "\n" + recipes + "\n")
    with pytest.raises(CatalogError, match="recipes and published belong to an edition: give `edition`"):
        load_catalog(str(bad), REFS)
