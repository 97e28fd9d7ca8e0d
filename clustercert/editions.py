"""A catalog edition tied to one recipe release (Exemplar 26.08 on): its suite file, each recipe's configuration
table per chip, dtype and GPU count, and NVIDIA's published figures for the same runs."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clustercert.evidence.bundle import Parallelism, Precision
from clustercert.metrics.megatron_flops import MegatronConvention

__all__ = [
    "Edition",
    "Fp8Recipe",
    "MegatronConventionSpec",
    "PublishedReference",
    "Recipe",
    "RecipeConfig",
    "Unlisted",
    "check_edition",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Fp8Recipe(StrEnum):
    """How an FP8 run scales its tensors (the recipe's FP8_RECIPE, the log's fp8 recipe)."""

    CS = "cs"  # per-tensor current scaling
    MX = "mx"  # MXFP8: 32-element blocks with a shared exponent
    SC = "sc"  # sub-channel (DeepSeek-V3's blockwise FP8, H100)


class _Entry(Protocol):
    """A suite entry (clustercert.catalog.SuiteEntry) as the edition check reads it."""

    @property
    def workload(self) -> str: ...
    @property
    def precision(self) -> Precision: ...
    @property
    def gpus(self) -> int: ...


class Edition(_Strict):
    """The recipe release an edition certifies and the suite file's rules for its chip."""

    release: str = Field(pattern=r"^\d{2}\.\d{2}(\.\d{2})?$")  # llmb-run's gsw_version, e.g. 26.08.00
    chip: str = Field(min_length=1)  # the chip's key in the suite file (gb200, h100, ...)
    source: str  # the suite file (exemplar.yaml), a key of `sources`
    scale: int = Field(gt=0)
    repeats: int = Field(gt=0)
    profile: bool


class RecipeConfig(_Strict):
    """One row of a recipe's configuration table: how NVIDIA runs the workload at this dtype and GPU count.

    None is a cell the table leaves empty or marks NA; `dp` is the data-parallel size, `ga` the gradient
    accumulation. A row the table gives for a range of GPU counts ("64-512", GBS "GPUs*20") is written out per
    GPU count metadata.yaml lists, with the table's row in `expanded_from`. `erratum` records cells the table gives
    that cannot all hold (the row is kept as printed).
    """

    precision: Precision
    gpus: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    layers: int | None = Field(default=None, gt=0)
    tp: int = Field(gt=0)
    pp: int = Field(gt=0)
    cp: int = Field(gt=0)
    ep: int | None = Field(default=None, gt=0)
    etp: int | None = Field(default=None, gt=0)
    dp: int | None = Field(default=None, gt=0)
    vp: int | None = Field(default=None, gt=0)
    mbs: int = Field(gt=0)
    gbs: int = Field(gt=0)
    ga: int | None = Field(default=None, gt=0)
    fsdp: bool = False
    fp8_recipe: Fp8Recipe | None = None
    expanded_from: str | None = None
    erratum: str | None = None

    @model_validator(mode="after")
    def _fp8_has_its_recipe(self) -> RecipeConfig:
        if (self.precision is Precision.FP8) != (self.fp8_recipe is not None):
            raise ValueError("fp8_recipe is given for an fp8 row and only for one")
        return self


class Unlisted(_Strict):
    """A dtype and GPU count the recipe runs (metadata.yaml) that its table has no row for, and why."""

    precision: Precision
    gpus: int = Field(gt=0)
    note: str = Field(min_length=1)


class Recipe(_Strict):
    """One workload's recipe in this release: framework, container, scales and configuration table."""

    framework: Literal["megatron_bridge", "nemo2"]
    container: str = Field(min_length=1)  # as metadata.yaml names it, e.g. nvcr.io#nvidia/nemo:26.06.01
    source: str  # the file the configuration table was read from, a key of `sources`
    metadata: str  # metadata.yaml (scales, container), a key of `sources`
    scales: dict[Precision, list[int]]
    # stand-in runs at smaller scales (metadata.yaml proxy_scales): never an Exemplar result
    proxy_scales: dict[Precision, list[int]] = Field(default_factory=dict)
    configurations: list[RecipeConfig]
    unlisted: list[Unlisted] = Field(default_factory=list)
    note: str | None = None

    @model_validator(mode="after")
    def _one_row_each(self) -> Recipe:
        keys = [(c.precision, c.gpus) for c in self.configurations]
        repeated = sorted({f"{p} at {g}" for p, g in keys if keys.count((p, g)) > 1})
        if repeated:
            raise ValueError(f"configurations repeat {repeated}")
        both = sorted(f"{u.precision} at {u.gpus}" for u in self.unlisted if (u.precision, u.gpus) in keys)
        if both:
            raise ValueError(f"unlisted names {both}, which the configurations list")
        return self

    def configuration(self, precision: str, gpus: int) -> RecipeConfig | None:
        return next((c for c in self.configurations if c.precision == precision and c.gpus == gpus), None)

    def is_proxy(self, precision: str, gpus: int) -> bool:
        return gpus in self.proxy_scales.get(Precision(precision), [])


class MegatronConventionSpec(_Strict):
    """The Megatron-Bridge FLOPs convention a published figure was counted in (clustercert.metrics.megatron_flops)."""

    mtp: bool = True
    sliding_window: bool = True
    gated_mlp: bool = True
    note: str | None = None

    def convention(self) -> MegatronConvention:
        return MegatronConvention(mtp=self.mtp, sliding_window=self.sliding_window, gated_mlp=self.gated_mlp)


class PublishedReference(_Strict):
    """A row of NVIDIA's Megatron-Bridge performance summary for the same chip, dtype, GPU count, GBS and sequence
    length as a row of the recipe's table: a published figure to show beside a cluster's, not a baseline."""

    workload: str
    precision: Precision
    fp8_recipe: Fp8Recipe | None = None
    gpus: int = Field(gt=0)
    gbs: int = Field(gt=0)
    mbs: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    parallelism: Parallelism
    tokens_per_gpu_s: float = Field(gt=0)
    tflops_per_gpu: float = Field(gt=0)
    container: str = Field(min_length=1)  # the NeMo container of the table's section, e.g. 26.04.01
    system_label: str = Field(min_length=1)  # the table's System cell, e.g. DGX-GB200
    model_heading: str = Field(min_length=1)  # the table's model name, e.g. "DeepSeekV3 (w/o MTP)"
    table_precision: str = Field(min_length=1)  # the table's Precision cell, e.g. MXFP8
    source: str
    source_table: str = Field(min_length=1)  # the file and line of the row
    # the section prints tokens/s/GPU rounded to a few significant bits (26.04.01, 26.06.01, 26.08), not to the unit
    tokens_rounded: bool = False
    flops_convention: MegatronConventionSpec = Field(default_factory=MegatronConventionSpec)
    note: str | None = None

    @model_validator(mode="after")
    def _fp8_has_its_recipe(self) -> PublishedReference:
        if (self.precision is Precision.FP8) != (self.fp8_recipe is not None):
            raise ValueError("fp8_recipe is given for an fp8 row and only for one")
        return self


def check_edition(
    edition: Edition,
    suite: Sequence[_Entry],
    recipes: Mapping[str, Recipe],
    published: list[PublishedReference],
    models: Collection[str],
    sources: Collection[str],
) -> None:
    """ValueError naming the first entry of an edition that points nowhere or contradicts its recipe table."""
    if edition.source not in sources:
        raise ValueError(f"edition.source '{edition.source}' is not under sources")
    for workload, one in recipes.items():
        if workload not in models:
            raise ValueError(f"recipes names workload '{workload}' which is not under models")
        for key in (one.source, one.metadata):
            if key not in sources:
                raise ValueError(f"recipes.{workload} names source '{key}' which is not under sources")
    for i, e in enumerate(suite):
        where = f"suite[{i}] ({e.workload} {e.precision} {e.gpus} GPUs)"
        if e.gpus != edition.scale:
            raise ValueError(f"{where}: the edition's scale is {edition.scale} GPUs")
        recipe = recipes.get(e.workload)
        if recipe is None:
            raise ValueError(f"{where} has no recipe")
        if e.gpus not in recipe.scales.get(e.precision, []):
            raise ValueError(f"{where}: the recipe's scales for {e.precision} do not list {e.gpus}")
        if recipe.configuration(e.precision, e.gpus) is None and not any(
            (u.precision, u.gpus) == (e.precision, e.gpus) for u in recipe.unlisted
        ):
            raise ValueError(f"{where}: the recipe has no configuration row for it and does not say why (unlisted)")
    for i, p in enumerate(published):
        if p.source not in sources:
            raise ValueError(f"published[{i}] source '{p.source}' is not under sources")
        row = recipes[p.workload].configuration(p.precision, p.gpus) if p.workload in recipes else None
        if row is None or (row.fp8_recipe, row.gbs, row.seq_len) != (p.fp8_recipe, p.gbs, p.seq_len):
            raise ValueError(f"published[{i}] ({p.workload} {p.precision} {p.gpus} GPUs, GBS {p.gbs}) matches no "
                             "row of its recipe's table (dtype, FP8 recipe, GPUs, GBS and sequence length)")
