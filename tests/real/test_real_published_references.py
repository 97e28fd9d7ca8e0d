"""The 26.08 catalogs' published references are NVIDIA's own rows, all of them, and reproduce from our FLOPs.

A published reference is the newest Megatron-Bridge performance-summary row for the same chip, dtype (FP8 recipe
included), GPU count, GBS and sequence length as a row of a recipe's configuration table. Each is read back from the
file and line it names; the set is recomputed from the summary and must equal the catalog's; its TFLOP/s must follow
from its tokens/s and our FLOPs in the convention it records, within what its rounding allows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clustercert.catalog import LoadedCatalog, load_catalog
from clustercert.editions import PublishedReference
from clustercert.metrics.megatron_flops import megatron_flops_per_sequence
from tests.real.summary_tables import Row, pretraining_rows

REFERENCES = Path(__file__).resolve().parents[2] / "references"
EDITIONS = ["exemplar-gb300-26.08", "exemplar-gb200-26.08", "exemplar-b300-26.08", "exemplar-b200-26.08",
            "exemplar-h100-26.08"]
MODELS = {
    "DeepSeekV3": "pretrain_deepseek-v3_671b",
    "GPT OSS 120B": "pretrain_gpt_oss_120b",
    "Kimi_K2": "pretrain_kimi-k2_1t",
    "LLAMA3.1_405B": "pretrain_llama3.1_405b",
    "LLAMA3_70B": "pretrain_llama3.1_70b",
    "Nemotron_3_Super": "pretrain_nemotron_3_120b",
    "Qwen3_235B_a22B": "pretrain_qwen3_235b",
}
# the table's Precision cell -> (dtype, FP8 recipe): the tables print current-scaling FP8 as FP8 or FP8-CS
PRECISIONS = {"BF16": ("bf16", None), "FP8": ("fp8", "cs"), "FP8-CS": ("fp8", "cs"), "MXFP8": ("fp8", "mx"),
              "FP8-MX": ("fp8", "mx"), "NVFP4": ("nvfp4", None)}
# containers whose tokens/s/GPU figures are rounded to a few significant bits (a finding checked below)
ROUNDED = {"26.08", "26.06.01", "26.04.01"}
SYSTEMS = {"exemplar-gb300-26.08": "DGX-GB300", "exemplar-gb200-26.08": "DGX-GB200", "exemplar-b300-26.08": "DGX-B300",
           "exemplar-b200-26.08": "DGX-B200", "exemplar-h100-26.08": "DGX-H100"}


def _version(container: str) -> tuple[int, ...]:
    return tuple(int(p) for p in container.split("."))


def _int_or_none(cell: str) -> int | None:
    return None if cell == "n/a" else int(cell)


@pytest.fixture(scope="module")
def rows(real_samples: Path) -> list[Row]:
    return pretraining_rows(real_samples)


@pytest.fixture(scope="module", params=EDITIONS)
def edition(request: pytest.FixtureRequest) -> LoadedCatalog:
    return load_catalog(request.param, REFERENCES)


def _matches(cat: LoadedCatalog, rows: list[Row]) -> dict[tuple[str, str, int], Row]:
    """The newest row per (workload, dtype, GPUs) that matches a row of a recipe table of `cat`."""
    newest: dict[tuple[str, str, int], Row] = {}
    for r in rows:
        workload = MODELS.get(re.sub(r"\s*\(.*\)$", "", r.heading))
        if r.cells["System"] != SYSTEMS[cat.spec.id] or workload not in cat.spec.recipes:
            continue
        dtype, fp8 = PRECISIONS[r.cells["Precision"]]
        own = cat.spec.recipes[workload].configuration(dtype, int(r.cells["#-GPUs"]))
        if own is None or ((own.fp8_recipe.value if own.fp8_recipe else None), own.gbs, own.seq_len) != (
                fp8, int(r.cells["GBS"]), int(r.cells["Sequence Length"])):
            continue
        key = (workload, dtype, own.gpus)
        if key not in newest or _version(r.container) > _version(newest[key].container):
            newest[key] = r
    return newest


def test_every_precision_the_tables_print_is_known(rows: list[Row]) -> None:
    assert {r.cells["Precision"] for r in rows if re.sub(r"\s*\(.*\)$", "", r.heading) in MODELS} <= set(PRECISIONS)


def test_the_rounded_containers_are_the_ones_printing_coarse_tokens(rows: list[Row]) -> None:
    by_container: dict[str, list[int]] = {}
    for r in rows:
        by_container.setdefault(r.container, []).append(int(r.cells["Tokens / sec / GPU"]))
    coarse = {c for c, figures in by_container.items() if all(f % 8 == 0 for f in figures)}
    assert coarse == ROUNDED
    assert all(len(by_container[c]) >= 14 for c in ROUNDED)  # not a handful that happen to be round


def test_the_published_references_are_every_matching_row_of_the_newest_container(
    edition: LoadedCatalog, rows: list[Row]
) -> None:
    expected = {key: f"{r.file} line {r.line}" for key, r in _matches(edition, rows).items()}
    carried = {(p.workload, p.precision.value, p.gpus): p.source_table for p in edition.spec.published}
    assert carried == expected


def test_each_reference_is_the_row_it_names(edition: LoadedCatalog, rows: list[Row]) -> None:
    at = {f"{r.file} line {r.line}": r for r in rows}
    for p in edition.spec.published:
        r = at[p.source_table]
        c = r.cells
        assert (r.container, r.heading, c["System"], c["Precision"]) == (
            p.container, p.model_heading, p.system_label, p.table_precision), p.source_table
        assert PRECISIONS[p.table_precision] == (p.precision.value, p.fp8_recipe.value if p.fp8_recipe else None)
        assert (int(c["#-GPUs"]), int(c["GBS"]), int(c["MBS"]), int(c["Sequence Length"])) == (
            p.gpus, p.gbs, p.mbs, p.seq_len), p.source_table
        layout = p.parallelism
        assert (int(c["TP"]), int(c["PP"]), int(c["CP"]), _int_or_none(c["VP"]), _int_or_none(c["EP"])) == (
            layout.tp, layout.pp, layout.cp, layout.vp, layout.ep), p.source_table
        assert (int(c["FSDP"]) or None if "FSDP" in c else None) == layout.fsdp, p.source_table
        assert (float(c["Tokens / sec / GPU"]), float(c["Model TFLOP / sec / GPU"])) == (
            p.tokens_per_gpu_s, p.tflops_per_gpu), p.source_table
        assert p.source == ("mb-summary-archive" if "archive" in r.file else "mb-summary")
        assert p.tokens_rounded == (r.container in ROUNDED), p.source_table


def _off(cat: LoadedCatalog, p: PublishedReference) -> float:
    """How far our FLOPs per token lie outside what the row's printed figures allow (0 inside), relative.

    TFLOP/s is printed to the unit; tokens/s to the unit, or, in a rounded container, to the figure's lowest set bit
    (1664 = 13 x 128 stands for 1600 to 1728).
    """
    arch = cat.spec.models[p.workload].architecture()
    ours = megatron_flops_per_sequence(arch, p.seq_len, p.flops_convention.convention(),
                                       tensor_parallel=p.parallelism.tp) / p.seq_len / 1e12
    tokens = int(p.tokens_per_gpu_s)
    half = (tokens & -tokens) / 2 if p.tokens_rounded else 0.5
    low = (p.tflops_per_gpu - 0.5) / (tokens + half)
    high = (p.tflops_per_gpu + 0.5) / (tokens - half)
    return max(0.0, 1.0 - ours / low, ours / high - 1.0)


def test_each_reference_follows_from_our_flops_in_its_convention(edition: LoadedCatalog) -> None:
    off = {p.source_table: round(_off(edition, p), 5) for p in edition.spec.published}
    assert {where: d for where, d in off.items() if d > 3e-3} == {}
    assert len(off) >= 2


def test_the_references_name_their_conventions(edition: LoadedCatalog) -> None:
    for p in edition.spec.published:
        conv = p.flops_convention
        assert conv.mtp == ("w/o MTP" not in p.model_heading), p.source_table
        legacy = p.workload == "pretrain_gpt_oss_120b" and _version(p.container) < (26, 6)
        assert (conv.sliding_window, conv.gated_mlp) == (not legacy, not legacy), p.source_table
