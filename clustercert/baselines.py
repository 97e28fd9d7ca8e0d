"""`certify --baselines FILE`: the program's targets, given by whoever runs certify (never by the bundle), per
workload, dtype and scale, with who supplied them, when and from what; they take the catalog's place."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clustercert.catalog import Baseline, Convention, LoadedCatalog, Source, Window
from clustercert.errors import UsageError
from clustercert.evidence.bundle import Parallelism, Precision
from clustercert.evidence.hashing import sha256_file
from clustercert.metrics.megatron_flops import megatron_flops_per_sequence
from clustercert.yamlio import load_yaml_model

__all__ = ["BaselinesFile", "LoadedBaselines", "apply_baselines", "load_baselines"]

_HINT = "Fix the baselines file (docs/reference.md, \"Baselines file\")."
SOURCE_KEY = "baselines-file"
# the Exemplar measurement window (EXEMPLAR.md): iterations 35 to 44 of a 50-step run
_WINDOW = Window(first=35, last=44)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BaselineEntry(_Strict):
    """One target: a step time or a model TFLOP/s per GPU for a workload, dtype and GPU count."""

    workload: str = Field(min_length=1)
    precision: Precision
    gpus: int = Field(gt=0)
    step_time_s: float | None = Field(default=None, gt=0)
    tflops_per_gpu: float | None = Field(default=None, gt=0)
    mfu_published: float | None = Field(default=None, gt=0, le=1)
    # published: NVIDIA printed it; supplied: given for this certification (the program's usual case); derived:
    # computed from other figures (its derivation says how)
    kind: Literal["published", "supplied", "derived"] = "supplied"
    derivation: str | None = None
    note: str | None = None
    # the run the target is for, where the catalog's recipe table has no row for it (else the row's)
    gbs: int | None = Field(default=None, gt=0)
    seq_len: int | None = Field(default=None, gt=0)
    parallelism: Parallelism | None = None

    @model_validator(mode="after")
    def _one_figure(self) -> BaselineEntry:
        if (self.step_time_s is None) == (self.tflops_per_gpu is None):
            raise ValueError("give exactly one of step_time_s and tflops_per_gpu")
        if self.kind == "derived" and not self.derivation:
            raise ValueError("a derived baseline needs its derivation")
        return self


class BaselinesFile(_Strict):
    schema_version: Literal[1]
    supplied_by: str = Field(min_length=1)  # who gave the targets (e.g. the NVIDIA account team)
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")  # when
    source: str = Field(min_length=1)  # from what (a message, a document, a table)
    baselines: list[BaselineEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _once_each(self) -> BaselinesFile:
        keys = [(b.workload, b.precision, b.gpus) for b in self.baselines]
        twice = sorted({f"{w} {p} {g}" for w, p, g in keys if keys.count((w, p, g)) > 1})
        if twice:
            raise ValueError(f"each workload, precision and gpus once; repeated: {', '.join(twice)}")
        return self


@dataclass(frozen=True)
class LoadedBaselines:
    path: Path
    sha256: str
    spec: BaselinesFile

    def to_json(self) -> dict[str, object]:
        return {"file": self.path.name, "sha256": self.sha256, "supplied_by": self.spec.supplied_by,
                "date": self.spec.date, "source": self.spec.source, "count": len(self.spec.baselines)}


def load_baselines(path: Path) -> LoadedBaselines:
    """The baselines file at `path`; a UsageError (exit 2) names its line and key when it cannot be used."""
    if not path.is_file():
        raise UsageError(f"{path}: expected a baselines file (certify --baselines), got nothing at this path")
    spec = load_yaml_model(path, BaselinesFile, UsageError, hint=_HINT)
    return LoadedBaselines(path, sha256_file(path), spec)


def _converted(entry: BaselineEntry, catalog: LoadedCatalog, seq_len: int, gbs: int, tp: int) -> tuple[float, float]:
    """The step time of an entry (a TFLOP/s target through the model's FLOPs per step, Megatron-Bridge's count,
    the one its logs print TFLOP/s in) and the FLOPs of one sequence."""
    arch = catalog.spec.models[entry.workload].architecture()
    per_sequence = megatron_flops_per_sequence(arch, seq_len, tensor_parallel=tp)
    if entry.step_time_s is not None:
        return entry.step_time_s, per_sequence
    assert entry.tflops_per_gpu is not None
    return per_sequence * gbs / (entry.tflops_per_gpu * 1e12 * entry.gpus), per_sequence


def apply_baselines(catalog: LoadedCatalog, baselines: LoadedBaselines) -> LoadedCatalog:
    """`catalog` judged against `baselines`: each entry replaces the catalog's baseline of the same workload,
    dtype and GPU count, at the recipe's batch, sequence length and parallelism (the edition's recipe table, else
    the catalog's own baseline). An entry the catalog cannot place is a UsageError naming it."""
    spec = catalog.spec
    shown = str(baselines.path)
    made: dict[tuple[str, str, int], Baseline] = {}
    for index, entry in enumerate(baselines.spec.baselines):
        where = f"{shown} baselines[{index}] ({entry.workload} {entry.precision} {entry.gpus} GPUs)"
        if entry.workload not in spec.models:
            raise UsageError(f"{where}: expected a workload of catalog {spec.id} ({', '.join(sorted(spec.models))}), "
                             f"got '{entry.workload}'. {_HINT}")
        if entry.precision not in spec.peaks_tflops:
            raise UsageError(f"{where}: catalog {spec.id} has no peak for {entry.precision}. {_HINT}")
        recipe = spec.recipes.get(entry.workload)
        row = recipe.configuration(entry.precision, entry.gpus) if recipe is not None else None
        own = catalog.baseline_for(entry.workload, entry.precision, entry.gpus)
        if row is not None and entry.gbs is None:
            gbs, seq_len = row.gbs, row.seq_len
            # ETP is left out: Megatron-Bridge's start-up print does not show it, so no run could be compared on it
            par = Parallelism(tp=row.tp, pp=row.pp, cp=row.cp, vp=row.vp, ep=row.ep)
            release = spec.edition.release if spec.edition is not None else ""
        elif own is not None:
            gbs, seq_len, par, release = own.gbs, own.seq_len, own.parallelism, own.recipe_version
        elif entry.gbs is not None and entry.seq_len is not None:
            gbs, seq_len, par = entry.gbs, entry.seq_len, entry.parallelism or Parallelism()
            release = spec.edition.release if spec.edition is not None else ""
        else:
            raise UsageError(f"{where}: catalog {spec.id} has neither a recipe row nor a baseline for it, so its "
                             f"batch and parallelism are unknown: give gbs, seq_len and parallelism in the entry. "
                             f"{_HINT}")
        step, per_sequence = _converted(entry, catalog, seq_len, gbs, par.tp)
        how = (f"{entry.tflops_per_gpu:g} TFLOP/s per GPU converted to a step time through {per_sequence:.6g} FLOPs "
               f"per sequence x GBS {gbs} (Megatron-Bridge's count)" if entry.tflops_per_gpu is not None else None)
        made[(entry.workload, entry.precision.value, entry.gpus)] = Baseline(
            workload=entry.workload, precision=entry.precision, gpus=entry.gpus, gbs=gbs, seq_len=seq_len,
            parallelism=par, step_time_s=step, mfu_published=entry.mfu_published,
            tflops_per_gpu_published=entry.tflops_per_gpu, window=own.window if own is not None else _WINDOW,
            flops_convention=Convention(flops_per_sample=per_sequence, note="Megatron-Bridge flop_utils count"),
            source=SOURCE_KEY, recipe_version=release or "unknown", date=baselines.spec.date,
            illustrative=entry.kind == "derived", derivation=entry.derivation or how, kind=entry.kind,
            source_table=f"{baselines.path.name}, baselines[{index}]" + (f"; {entry.note}" if entry.note else ""),
            # what the catalog allows its own baseline of this run to differ by still holds for the one replacing it
            allowed_differences=dict(own.allowed_differences) if own is not None else {},
        )
    kept = [b for b in spec.baselines if (b.workload, b.precision.value, b.gpus) not in made]
    source = Source(title=f"Baselines supplied by {baselines.spec.supplied_by} on {baselines.spec.date}, from "
                          f"{baselines.spec.source}", note=f"{baselines.path.name}, sha256 {baselines.sha256}")
    judged = spec.model_copy(update={"baselines": [*kept, *made.values()],
                                     "sources": {**spec.sources, SOURCE_KEY: source}})
    return replace(catalog, spec=judged, baselines=baselines.to_json(), baselines_path=baselines.path)
