"""MLPerf Training benchmarks' model FLOPs per sample (references/mlperf-benchmarks.yaml) as typed data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clustercert.catalog import Convention, ModelSpec, Source
from clustercert.errors import CatalogError
from clustercert.metrics.flops import model_flops_per_sequence
from clustercert.yamlio import load_yaml_model

__all__ = ["BENCHMARKS_FILE", "BenchmarkFlops", "MlperfBenchmarks", "load_mlperf_benchmarks"]

# the file's name, in references/ and in a run folder (the copy the run judged with, which `rerun` reads)
BENCHMARKS_FILE = "mlperf-benchmarks.yaml"

_HINT = "Fix the MLPerf benchmarks file (see references/README.md, \"MLPerf benchmarks\")."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Benchmark(_Strict):
    """One benchmark's model, the tokens of one of its samples, and how its FLOPs are counted."""

    model: ModelSpec
    seq_len: int = Field(gt=0)
    seq_len_source: str
    flops_convention: Convention
    source: str
    note: str | None = None


@dataclass(frozen=True)
class BenchmarkFlops:
    """A benchmark's FLOPs per sample with what they were computed from, as the report says it."""

    benchmark: str
    flops_per_sample: float
    model: str
    seq_len: int
    convention: str
    sources: tuple[str, ...]

    def describe(self) -> str:
        return (f"{self.flops_per_sample:.4g} FLOPs per sample of {self.model} at {self.seq_len} tokens "
                f"({self.convention}; {', '.join(self.sources)})")


class MlperfBenchmarks(_Strict):
    schema_version: int = Field(ge=1, le=1)
    id: str
    version: str
    title: str
    sources: dict[str, Source]
    benchmarks: dict[str, Benchmark]

    @model_validator(mode="after")
    def _sources_named(self) -> MlperfBenchmarks:
        for name, bench in self.benchmarks.items():
            for cited in (bench.source, bench.seq_len_source, bench.model.source):
                if cited not in self.sources:
                    raise ValueError(f"benchmarks.{name} cites source '{cited}', which sources does not define")
        return self

    def flops(self, benchmark: str) -> BenchmarkFlops | None:
        """The FLOPs per sample of `benchmark` (as `submission_benchmark` names it); None when it is not listed."""
        bench = self.benchmarks.get(benchmark)
        if bench is None:
            return None
        convention = bench.flops_convention.flops()
        flops = model_flops_per_sequence(bench.model.shape(), bench.seq_len, convention)
        cited = dict.fromkeys((bench.model.source, bench.seq_len_source, bench.source))
        return BenchmarkFlops(benchmark, flops, bench.model.name, bench.seq_len, convention.describe(),
                              tuple(cited))


def load_mlperf_benchmarks(path: Path) -> MlperfBenchmarks:
    """The benchmarks file at `path`; any problem is a CatalogError naming the file, line and key."""
    return load_yaml_model(path, MlperfBenchmarks, CatalogError, hint=_HINT)
