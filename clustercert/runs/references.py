"""The reference files a run judges with beside its catalog (references/: the node-health rules, the MLPerf
benchmarks' FLOPs), loaded with the bundle where it needs them, so that the run folder keeps what it judged with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from clustercert.catalog import LoadedCatalog
from clustercert.errors import CatalogError
from clustercert.evidence.bundle import LoadedBundle
from clustercert.evidence.hashing import sha256_file
from clustercert.health import RULES_FILE, HealthRules, load_health_rules
from clustercert.mlperf_benchmarks import BENCHMARKS_FILE, MlperfBenchmarks, load_mlperf_benchmarks
from clustercert.phases.efficiency import mlperf_asked
from clustercert.phases.health import phase_asked

__all__ = ["HEALTH_RULES", "MLPERF_BENCHMARKS", "REFERENCES", "LoadedReference", "Reference", "judged_with",
           "load_references"]


class Edition(Protocol):
    """What a reference file says of itself: its id and version (the run's manifest names them)."""

    @property
    def id(self) -> str: ...

    @property
    def version(self) -> str: ...


E = TypeVar("E", bound=Edition)


@dataclass(frozen=True)
class Reference(Generic[E]):
    """A reference file a run judges with: its name (in references/ and in a run folder), its key (in the
    manifest's predicate, the cache key and a re-run's request), what messages call it, how it is read, and
    whether a bundle is judged with it (so that other run folders stay as they were)."""

    name: str
    key: str
    what: str
    read: Callable[[Path], E]
    asked: Callable[[LoadedBundle, LoadedCatalog], bool]

    def load(self, path: Path) -> LoadedReference[E]:
        """The file at `path` read, with its path and sha256."""
        return LoadedReference(self, self.read(path), path, sha256_file(path))


@dataclass(frozen=True)
class LoadedReference(Generic[E]):
    """A reference file as a certification judges with it: what it says, the file it was read from and its sha256
    at the load (the run folder keeps a copy of those bytes, and `rerun` judges with the copy)."""

    reference: Reference[E]
    data: E
    path: Path
    sha256: str

    def edition(self) -> dict[str, str]:
        """Its id, version and sha256, as the run's manifest lists them."""
        return {"id": self.data.id, "version": self.data.version, "sha256": self.sha256}


HEALTH_RULES: Reference[HealthRules] = Reference(RULES_FILE, "health_rules", "the health rules", load_health_rules,
                                                  phase_asked)
MLPERF_BENCHMARKS: Reference[MlperfBenchmarks] = Reference(
    BENCHMARKS_FILE, "mlperf_benchmarks", "the MLPerf benchmarks file", load_mlperf_benchmarks, mlperf_asked)
REFERENCES: tuple[Reference[Any], ...] = (HEALTH_RULES, MLPERF_BENCHMARKS)


def load_references(bundle: LoadedBundle, catalog: LoadedCatalog, references_dir: Path,
                    given: Mapping[str, str]) -> tuple[LoadedReference[Any], ...]:
    """Each reference file the bundle is judged with: the file `given` names by its key (a re-run's copy), else
    the one in references_dir."""
    return tuple(ref.load(Path(given[ref.key]) if ref.key in given else references_dir / ref.name)
                 for ref in REFERENCES if ref.key in given or ref.asked(bundle, catalog))


def judged_with(loaded: tuple[LoadedReference[Any], ...], ref: Reference[E]) -> E:
    """What `ref` says, as loaded with the bundle; a CatalogError where the load did not see it was needed."""
    for one in loaded:
        if one.reference.key == ref.key:  # by key: an Inputs handed to a Dask worker holds an unpickled Reference
            return one.data  # type: ignore[no-any-return]
    raise CatalogError(f"{ref.name} ({ref.what}) was not loaded with the bundle: certify again")
