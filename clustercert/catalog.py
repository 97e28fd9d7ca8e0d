"""Reference catalogs (files in references/): hardware peaks, model shapes, baselines and rules."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clustercert.editions import Edition, PublishedReference, Recipe, check_edition
from clustercert.errors import CatalogError, EvidenceError
from clustercert.evidence.bundle import Bundle, Parallelism, Phase, Precision
from clustercert.evidence.hashing import sha256_file
from clustercert.metrics.flops import Attention, FlopsConvention, Mlp, ModelShape
from clustercert.metrics.megatron_flops import Architecture, Kind
from clustercert.yamlio import load_yaml_model

__all__ = [
    "PHASE_NAMES", "Baseline", "Catalog", "CollectiveModel", "LoadedCatalog", "ModelSpec", "Profile", "Rules",
    "check_bundle_ids", "choose_catalog", "default_profiles", "edition_for", "load_catalog", "shipped_hashes",
]

_SCOPES = ("nvlink-domain", "cross-rack", "full-scale", "pair")
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")

_HINT = "Fix the catalog (see references/README.md)."
# the phases a profile may name: the bundle's phases and `health` (node health, judged where its evidence is)
PhaseName = Literal["efficiency", "scaling", "resilience", "health"]
PHASE_NAMES: tuple[PhaseName, ...] = ("efficiency", "scaling", "resilience", "health")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    title: str
    url: str | None = None
    note: str | None = None
    # a file of a repository at a release (or commit): where a value was read
    repository: str | None = None
    release: str | None = None
    file: str | None = None
    commit: str | None = None


class ModelSpec(_Strict):
    name: str
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    ffn_hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    vocab: int = Field(gt=0)
    kv_groups: int | None = Field(default=None, gt=0)
    mlp: Mlp = Mlp.SWIGLU
    experts: int | None = Field(default=None, gt=0)
    top_k: int = Field(default=1, gt=0)
    dense_layers: int = Field(default=0, ge=0)
    moe_ffn_hidden: int | None = Field(default=None, gt=0)
    shared_ffn_hidden: int | None = Field(default=None, gt=0)
    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int | None = Field(default=None, gt=0)
    qk_head_dim: int | None = Field(default=None, gt=0)
    qk_rope_head_dim: int | None = Field(default=None, gt=0)
    v_head_dim: int | None = Field(default=None, gt=0)
    mtp_layers: int = Field(default=0, ge=0)
    source: str
    # what Megatron-Bridge's FLOPs count reads beyond DOMAIN.md's formula (clustercert.metrics.megatron_flops)
    kind: Kind = Kind.TRANSFORMER
    kv_channels: int | None = Field(default=None, gt=0)
    moe_latent_size: int | None = Field(default=None, gt=0)
    window_size: tuple[int, int] | None = None
    window_skip_freq: int | None = Field(default=None, gt=0)
    hybrid_pattern: str | None = Field(default=None, pattern=r"^[M*\-E]+$")
    mtp_pattern: str | None = Field(default=None, pattern=r"^[M*\-E]+$")
    mamba_state_dim: int | None = Field(default=None, gt=0)
    mamba_head_dim: int | None = Field(default=None, gt=0)
    mamba_groups: int | None = Field(default=None, gt=0)
    mamba_heads: int | None = Field(default=None, gt=0)
    vocab_divisible_by: int = Field(default=128, gt=0)

    @model_validator(mode="after")
    def _kind_has_its_fields(self) -> ModelSpec:
        mamba = (self.mamba_state_dim, self.mamba_head_dim, self.mamba_groups, self.mamba_heads)
        if self.kind is Kind.HYBRID:
            if self.hybrid_pattern is None or len(self.hybrid_pattern) != self.layers or None in mamba:
                raise ValueError("a hybrid model needs a hybrid_pattern of `layers` symbols and its mamba_* sizes")
            if (self.mtp_pattern is None) != (self.mtp_layers == 0):
                raise ValueError("a hybrid model's MTP layers need their mtp_pattern, and only they")
        elif self.hybrid_pattern is not None or self.mtp_pattern is not None or mamba != (None,) * 4:
            raise ValueError("hybrid_pattern, mtp_pattern and mamba_* belong to kind: hybrid")
        mla = (self.q_lora_rank, self.kv_lora_rank, self.qk_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if self.kv_lora_rank is not None and None in mla[1:]:
            raise ValueError("an MLA model needs kv_lora_rank, qk_head_dim, qk_rope_head_dim and v_head_dim")
        return self

    def shape(self) -> ModelShape:
        """The shape DOMAIN.md's formula reads; ValueError for a model that formula does not describe."""
        beyond = [name for name, value in (("kind: hybrid", self.kind is Kind.HYBRID),
                                           ("a head size other than hidden / heads",
                                            self.kv_channels not in (None, self.hidden // self.heads)),
                                           ("sliding-window attention", self.window_size is not None),
                                           ("latent MoE", self.moe_latent_size is not None)) if value]
        if beyond:
            raise ValueError(f"{self.name}: DOMAIN.md's FLOPs formula does not describe {', '.join(beyond)}; "
                             "count it with architecture() and clustercert.metrics.megatron_flops")
        names = {f.name for f in fields(ModelShape)}
        return ModelShape(**{k: v for k, v in self.model_dump().items() if k in names})

    def architecture(self) -> Architecture:
        """The model as Megatron-Bridge's FLOPs count reads it."""
        return Architecture(
            kind=self.kind, layers=self.layers, hidden=self.hidden, ffn_hidden=self.ffn_hidden, heads=self.heads,
            vocab=self.vocab, kv_groups=self.kv_groups, kv_channels=self.kv_channels, gated=self.mlp is Mlp.SWIGLU,
            experts=self.experts, top_k=self.top_k, dense_layers=self.dense_layers,
            moe_ffn_hidden=self.moe_ffn_hidden, shared_ffn_hidden=self.shared_ffn_hidden,
            moe_latent_size=self.moe_latent_size, q_lora_rank=self.q_lora_rank, kv_lora_rank=self.kv_lora_rank,
            qk_head_dim=self.qk_head_dim, qk_rope_head_dim=self.qk_rope_head_dim, v_head_dim=self.v_head_dim,
            mtp_layers=self.mtp_layers, window_size=self.window_size, window_skip_freq=self.window_skip_freq,
            hybrid_pattern=self.hybrid_pattern, mtp_pattern=self.mtp_pattern,
            mamba_state_dim=self.mamba_state_dim or 128, mamba_head_dim=self.mamba_head_dim or 64,
            mamba_groups=self.mamba_groups or 8, mamba_heads=self.mamba_heads or 128,
            vocab_divisible_by=self.vocab_divisible_by,
        )


class Convention(_Strict):
    """The FLOPs convention of a published figure: the formula's attention discount and overrides, or a fixed
    `flops_per_sample` (a sample is one sequence of the baseline's seq_len) that replaces the formula."""

    attention: Attention | None = None
    kv_groups: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)
    flops_per_sample: float | None = Field(default=None, gt=0)
    mtp: bool = True  # False: the model's multi-token-prediction layers left out ("w/o MTP")
    lora: bool = False  # a LoRA fine-tune counted as Megatron-Bridge does (frozen weights x 2/3)
    note: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Convention:
        if self.flops_per_sample is None and self.attention is None:
            raise ValueError("a FLOPs convention needs attention (causal, non-causal) or flops_per_sample")
        if (self.flops_per_sample is not None
                and (self.attention, self.kv_groups, self.vocab, self.lora) != (None, None, None, False)):
            raise ValueError("flops_per_sample replaces the formula: give no attention, kv_groups, vocab or lora "
                             "with it")
        return self

    def flops(self) -> FlopsConvention:
        return FlopsConvention(self.attention or Attention.CAUSAL, self.kv_groups, self.vocab,
                               self.flops_per_sample, self.mtp, self.lora)


class Window(_Strict):
    first: int = Field(ge=0)
    last: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.last < self.first:
            raise ValueError(f"window last ({self.last}) is before first ({self.first})")
        return self


class Baseline(_Strict):
    workload: str
    precision: Precision
    gpus: int = Field(gt=0)
    gbs: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    parallelism: Parallelism
    step_time_s: float = Field(gt=0)
    mfu_published: float | None = Field(default=None, gt=0, le=1)  # the 26.08 targets come without one
    tflops_per_gpu_published: float | None = Field(default=None, gt=0)
    window: Window
    flops_convention: Convention
    source: str
    recipe_version: str
    date: str = Field(pattern=r"^\d{4}-\d{2}(-\d{2})?$")
    illustrative: bool = False
    derivation: str | None = None
    # where in the source the numbers are: the table, section or line (shown beside the number in reports)
    source_table: str | None = None
    # recipe fields (Rules.recipe_fields) a run may differ in from this baseline, each with the reason
    allowed_differences: dict[str, str] = Field(default_factory=dict)
    # published, supplied (for this certification, `certify --baselines`) or derived; None: published, or derived
    # when illustrative (the catalogs before the 26.08 editions)
    kind: Literal["published", "supplied", "derived"] | None = None

    @model_validator(mode="after")
    def _illustrative_has_derivation(self) -> Baseline:
        if self.illustrative and not self.derivation:
            raise ValueError("an illustrative baseline needs its derivation")
        return self


class PublicGate(_Strict):
    """A published busbw threshold: the target of the runs it covers (its system, scope and collective, and a rank
    count within [min_ranks, max_ranks])."""

    system: str
    scope: str
    collective: str
    gbps: float = Field(gt=0)
    source: str
    note: str | None = None
    min_ranks: int = Field(default=2, ge=2)
    max_ranks: int | None = Field(default=None, ge=2)


class ReferenceResult(_Strict):
    """A healthy cluster's large-message busbw as published or measured (references/README.md, "Collective
    targets"): the expected value of runs of its collective and link class, carried to their shape by the model."""

    collective: str
    ranks: int = Field(ge=2)
    domains: int = Field(ge=1)  # NVLink domains the run spanned
    ranks_per_domain: int = Field(ge=1)
    net_gbps: float | None = Field(default=None, gt=0)  # scale-out GB/s per GPU where it spanned domains
    gbps: float = Field(gt=0)
    source: str
    note: str


class CollectiveModel(_Strict):
    """How collective targets follow from published figures and the declared topology (references/README.md,
    "Collective target model").

    target = target_fraction x expected. expected = a reference result of the run's collective and link class
    (`nvlink` inside one NVLink domain, `scale-out` across several) carried to the run's shape, else
    efficiency[class][collective] x the link bound of the run (clustercert's own model). A published gate that
    covers a run is its target.
    """

    target_fraction: float = Field(gt=0, le=1)
    efficiency: dict[Literal["nvlink", "scale-out"], dict[str, float]]
    # scope -> collectives whose absence is a FAIL; every other collective is judged when present
    required: dict[str, list[str]] = Field(default_factory=dict)
    source: str
    efficiency_source: str
    public_gates: list[PublicGate] = Field(default_factory=list)
    references: list[ReferenceResult] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known_names(self) -> CollectiveModel:
        for cls, per in self.efficiency.items():
            for coll, value in per.items():
                if coll not in _COLLECTIVES:
                    raise ValueError(f"efficiency.{cls} names '{coll}', expected one of {', '.join(_COLLECTIVES)}")
                if not 0 < value <= 2:
                    raise ValueError(f"efficiency.{cls}.{coll} must lie in (0, 2], got {value}")
        for i, ref in enumerate(self.references):
            if ref.collective not in _COLLECTIVES:
                raise ValueError(f"references[{i}] names '{ref.collective}', expected one of {', '.join(_COLLECTIVES)}")
            if (ref.domains > 1) != (ref.net_gbps is not None):
                raise ValueError(f"references[{i}]: net_gbps is given exactly when the result spanned domains")
        for scope, colls in self.required.items():
            if scope not in _SCOPES:
                raise ValueError(f"required names scope '{scope}', expected one of {', '.join(_SCOPES)}")
            for coll in colls:
                if coll not in _COLLECTIVES:
                    raise ValueError(f"required.{scope} names '{coll}', expected one of {', '.join(_COLLECTIVES)}")
        return self

RecipeField = Literal["gbs", "seq_len", "precision", "tp", "pp", "cp", "vp", "ep", "etp", "fsdp", "recipe_version"]
RECIPE_FIELDS: tuple[RecipeField, ...] = (
    "gbs", "seq_len", "precision", "tp", "pp", "cp", "vp", "ep", "etp", "fsdp", "recipe_version",
)


class Rules(_Strict):
    pass_ratio: float = Field(gt=0, le=1)
    # how repeats combine; `latest`: one run per workload and dtype is judged, the latest valid one (Exemplar 26.05 on)
    repeats: Literal["median", "best", "worst", "latest"] = "median"
    validity_months: int = Field(gt=0)
    bootstrap_resamples: int = Field(default=2000, gt=99)
    bootstrap_seed: int = 20260101
    step_time_cv_max: float = Field(default=0.05, gt=0)
    goodput_min: float = Field(default=0.90, gt=0, le=1)
    scaling_efficiency_min: float = Field(default=0.90, gt=0, le=1)
    straggler_score_min: float = Field(default=0.90, gt=0, le=1)
    straggler_detect_max_s: float = Field(default=600, gt=0)
    restart_max_s: float = Field(default=900, gt=0)
    stall_factor: float = Field(default=3.0, gt=1)
    large_message_bytes: int = Field(default=1 << 30, gt=0)
    degraded_pair_fraction: float = Field(default=0.8, gt=0, le=1)
    # fixed targets by scope and collective: override the model where given (a user's own, with its reason)
    collective_targets_gbps: dict[str, dict[str, float]] = Field(default_factory=dict)
    collective_model: CollectiveModel | None = None
    # MLPerf time-to-train targets in minutes by benchmark; without one the score is reported only
    mlperf_targets_minutes: dict[str, float] = Field(default_factory=dict)
    # recipe fields a run must share with its baseline unless the baseline allows a difference
    recipe_fields: list[RecipeField] = Field(default_factory=lambda: list(RECIPE_FIELDS))
    # the logged-loss sanity check: advisory (WARN) unless the catalog makes it required (FAIL)
    loss_check: Literal["advisory", "required"] = "advisory"
    # a loss above this multiple of the run's first logged loss has exploded (clustercert's own default)
    loss_explode_factor: float = Field(default=1.5, gt=1)


class Profile(_Strict):
    """A certification profile: the phases (and, where given, the checks of them) that decide its outcome, and
    what evidence the profile's phases lack means: `fail` (the cluster did not show it) or `not-submitted` (an
    acceptance of what was submitted: the missing part is named, never judged)."""

    title: str = Field(min_length=1)
    phases: list[PhaseName] = Field(min_length=1)
    # fnmatch patterns of the check ids that decide, within `phases`; empty: every check of them
    checks: list[str] = Field(default_factory=list)
    missing: Literal["fail", "not-submitted"] = "fail"
    # phases that decide only on what was submitted: their missing evidence is not submitted, whatever `missing` says
    when_present: list[PhaseName] = Field(default_factory=list)
    # what the profile does not cover, in a reader's words, beside its outcome
    not_covered: str = ""


def default_profiles() -> dict[str, Profile]:
    """The profiles a catalog has unless it gives its own (references/README.md, "Profiles")."""
    return {
        # node health decides when its evidence is submitted (its phase is newer than the samples and editions)
        "full": Profile(title="Full certification", phases=list(PHASE_NAMES), when_present=["health"],
                        not_covered="nothing: every phase decides (node health when its evidence is submitted)"),
        "network": Profile(
            title="Network acceptance", phases=["scaling"], missing="not-submitted",
            checks=["scaling.*_busbw_meets_target", "scaling.*_no_run_below_peers", "scaling.pairs_*",
                    "scaling.*_valid"],
            not_covered="training efficiency against the baselines, weak scaling, resilience and node health: "
                        "this is not a full certification"),
        "health": Profile(
            title="Node health", phases=["health"], missing="not-submitted",
            not_covered="training efficiency, scaling, collectives and resilience: this is not a full "
                        "certification"),
    }


class SuiteEntry(_Strict):
    """A workload the suite certifies: the bundle must show it, at this precision and GPU count."""

    workload: str
    precision: Precision
    gpus: int = Field(gt=0)


class Catalog(_Strict):
    schema_version: Literal[1]
    id: str
    version: str
    title: str
    system: str
    peaks_tflops: dict[Precision, float]
    peaks_source: str | None = None  # the table the peaks come from, named beside every MFU
    nvlink_gbps_per_direction: float = Field(gt=0)
    # scale-out NIC line rate, GB/s per direction, by the bundle's `system.interconnect.scale_out` name
    scale_out_gbps: dict[str, float] = Field(default_factory=dict)
    sources: dict[str, Source]
    models: dict[str, ModelSpec]
    baselines: list[Baseline]
    suite: list[SuiteEntry] = Field(min_length=1)
    rules: Rules
    # an edition tied to a recipe release (Exemplar 26.08 on): its suite file, its recipes' configuration tables and
    # NVIDIA's published figures for the same runs (clustercert.editions); the 25.05 editions have none
    edition: Edition | None = None
    recipes: dict[str, Recipe] = Field(default_factory=dict)
    published: list[PublishedReference] = Field(default_factory=list)
    # certification profiles by id (`certify --profile`, bundle.yaml `profile`); `full` is the default one
    profiles: dict[str, Profile] = Field(default_factory=default_profiles)

    def judges(self, phase: Phase | str) -> bool:
        """Whether some profile of the catalog decides on `phase`: a phase none decides is judged advisory."""
        return any(str(phase) in p.phases for p in self.profiles.values())

    @model_validator(mode="after")
    def _consistent(self) -> Catalog:
        if "full" not in self.profiles:
            raise ValueError("profiles must define 'full', the default profile")
        for i, b in enumerate(self.baselines):
            if b.workload not in self.models:
                raise ValueError(f"baselines[{i}] names workload '{b.workload}' which is not under models")
            if b.precision not in self.peaks_tflops:
                raise ValueError(f"baselines[{i}] precision '{b.precision}' has no entry under peaks_tflops")
            if b.source not in self.sources:
                raise ValueError(f"baselines[{i}] source '{b.source}' is not under sources")
            unknown = sorted(set(b.allowed_differences) - set(RECIPE_FIELDS))
            if unknown:
                raise ValueError(f"baselines[{i}] allowed_differences names unknown recipe field(s) {unknown}; "
                                 f"expected some of {list(RECIPE_FIELDS)}")
        model = self.rules.collective_model
        if model is not None:
            for key in [model.source, model.efficiency_source, *(g.source for g in model.public_gates),
                        *(r.source for r in model.references)]:
                if key not in self.sources:
                    raise ValueError(f"rules.collective_model names source '{key}' which is not under sources")
        if self.peaks_source is not None and self.peaks_source not in self.sources:
            raise ValueError(f"peaks_source '{self.peaks_source}' is not under sources")
        if self.edition is not None:
            # NVIDIA's account team gives an edition's baselines at certify time; none are public
            check_edition(self.edition, self.suite, self.recipes, self.published, self.models, self.sources)
            return self
        if self.recipes or self.published:
            raise ValueError("recipes and published belong to an edition: give `edition`")
        for i, e in enumerate(self.suite):
            if not any(
                b.workload == e.workload and b.precision == e.precision and b.gpus == e.gpus for b in self.baselines
            ):
                raise ValueError(f"suite[{i}] ({e.workload} {e.precision} {e.gpus} GPUs) has no baseline")
        return self


@dataclass(frozen=True)
class LoadedCatalog:
    path: Path
    sha256: str
    spec: Catalog
    # whether its bytes are those of a catalog shipped in references/ (by sha256), and who chose it for the run
    shipped: bool = False
    chosen_by: str = ""
    # the baselines file that replaced the catalog's (clustercert.baselines): its name, sha256, who, when, from what
    baselines: dict[str, object] | None = None
    baselines_path: Path | None = None

    def baseline_for(self, workload: str, precision: str, gpus: int) -> Baseline | None:
        for b in self.spec.baselines:
            if b.workload == workload and b.precision == precision and b.gpus == gpus:
                return b
        return None

    def baselines_for(self, workload: str, precision: str) -> list[Baseline]:
        return [b for b in self.spec.baselines if b.workload == workload and b.precision == precision]

    def peak_tflops(self, precision: str) -> float:
        return self.spec.peaks_tflops[Precision(precision)]


def typed_catalog(value: str | None, bundle: Path) -> str | None:
    """`--catalog` as a command reads it: an id as typed; a relative path to a file where the command runs, made
    absolute (a run records it, and its report's command repeats it from any folder); a path that names a file of
    the bundle `bundle` (a folder or its bundle.yaml) as typed, read as bundle.yaml's `catalog:` reads it."""
    if value is None:
        return None
    typed = Path(value)
    if typed.suffix not in (".yaml", ".yml") or typed.is_absolute():
        return value
    root = bundle if bundle.is_dir() else bundle.parent
    if (root / typed).is_file() or not typed.is_file():
        return value  # the bundle's, or nowhere: load_catalog says where it looked
    return os.path.abspath(typed)


def load_catalog(
    name_or_path: str, references_dir: Path, *, relative_to: Path | None = None
) -> LoadedCatalog:
    """A catalog by id (a file in `references_dir`) or by path (relative to `relative_to` when given)."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        path = candidate if candidate.is_absolute() or relative_to is None else relative_to / candidate
    else:
        path = references_dir / f"{name_or_path}.yaml"
    if not path.is_file():
        raise CatalogError(f"{path}: expected a catalog file, got nothing at this path. {_HINT}")
    spec = load_yaml_model(path, Catalog, CatalogError, hint=_HINT)
    return LoadedCatalog(path=path, sha256=sha256_file(path), spec=spec)


def shipped_hashes(references_dir: Path) -> dict[str, str]:
    """The sha256 of every catalog file shipped in `references_dir`, by its id (the file's stem)."""
    return {path.stem: sha256_file(path) for path in sorted(references_dir.glob("*.yaml")) if path.is_file()}


def edition_for(references_dir: Path, *, release: str, chip: str | None = None,
                system: str | None = None) -> LoadedCatalog | None:
    """The shipped edition of recipe release `release` for a chip (llmb-run's gpu_type) or a system id; None when
    references/ ships none."""
    for path in sorted(references_dir.glob("*.yaml")):
        try:
            # most files are not editions of this release: only those that name it are parsed
            if f'"{release}"' not in path.read_text(encoding="utf-8", errors="replace"):
                continue
            loaded = load_catalog(path.stem, references_dir)
        except (OSError, CatalogError):
            continue
        edition = loaded.spec.edition
        if edition is None or edition.release != release:
            continue
        if (chip is None or edition.chip == chip) and (system is None or loaded.spec.system == system):
            return LoadedCatalog(loaded.path, loaded.sha256, loaded.spec, shipped=True)
    return None


def choose_catalog(bundle: Bundle, root: Path, references_dir: Path, override: str | None) -> LoadedCatalog:
    """The catalog that judges: the one the person running certify names (`override`), else the shipped edition of
    the recipe release the bundle records, else the shipped catalog bundle.yaml names. A catalog is the auditor's
    choice: bundle.yaml naming one that is not shipped (by content) is refused, never used."""
    hashes = shipped_hashes(references_dir)
    if override is not None:
        chosen = load_catalog(override, references_dir, relative_to=root)
        return LoadedCatalog(chosen.path, chosen.sha256, chosen.spec, shipped=chosen.sha256 in hashes.values(),
                             chosen_by="named with certify --catalog")
    where = f"{root / 'bundle.yaml'}"
    named = load_catalog(bundle.catalog, references_dir, relative_to=root)
    if named.sha256 not in hashes.values():
        raise CatalogError(f"{where} catalog: expected a catalog shipped in {references_dir} (the audited party does "
                           f"not choose the rules), got '{bundle.catalog}', whose content (sha256 {named.sha256[:12]}) "
                           "is none of them. To judge with it, name it yourself: certify --catalog "
                           f"{bundle.catalog}")
    edition = edition_for(references_dir, release=bundle.recipe_version, system=bundle.system.gpu)
    if edition is not None and edition.sha256 != named.sha256:
        raise CatalogError(f"{where} catalog: the evidence's recipe release {bundle.recipe_version} is judged by "
                           f"the shipped edition {edition.spec.id}, got '{bundle.catalog}'. Name {edition.spec.id} "
                           "in bundle.yaml, or choose a catalog with certify --catalog")
    why = (f"the shipped edition of recipe release {bundle.recipe_version}" if edition is not None
           else "the shipped catalog bundle.yaml names")
    return LoadedCatalog(named.path, named.sha256, named.spec, shipped=True, chosen_by=why)


def check_bundle_ids(bundle: Bundle, catalog: LoadedCatalog, where: str) -> None:
    """The bundle's system and workload ids must be ones its catalog defines (`where`: the bundle.yaml path)."""
    spec = catalog.spec
    if bundle.system.gpu != spec.system:
        raise EvidenceError(
            where,
            f"expected the system the catalog {spec.id} ({catalog.path}) certifies, '{spec.system}', got "
            f"'{bundle.system.gpu}'. Choose a catalog for this system or fix system.gpu",
            field="system.gpu",
        )
    for run in bundle.runs:
        if run.workload is not None and run.workload not in spec.models:
            raise EvidenceError(
                where,
                f"run '{run.id}': expected a workload the catalog {spec.id} ({catalog.path}) defines under models "
                f"({', '.join(sorted(spec.models))}), got '{run.workload}'. Add the model to the catalog or fix "
                "the run's workload",
                field="workload",
            )
