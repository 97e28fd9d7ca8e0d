"""The evidence bundle: bundle.yaml (schema_version 1), safe file resolution, sealing and hashing."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from clustercert.errors import EvidenceError
from clustercert.evidence.hashing import sha256_file
from clustercert.yamlio import load_yaml_model

__all__ = [
    "MANIFEST_NAME",
    "Bundle",
    "LoadedBundle",
    "Phase",
    "Precision",
    "RunKind",
    "RunSpec",
    "load_bundle",
    "read_seal",
    "seal_bundle",
]

MANIFEST_NAME = "MANIFEST.sha256"
BUNDLE_FILE = "bundle.yaml"
_HINT = "Fix bundle.yaml (see DESIGN.md, 'Evidence bundle')."


class Phase(StrEnum):
    EFFICIENCY = "efficiency"
    SCALING = "scaling"
    RESILIENCE = "resilience"


class Precision(StrEnum):
    BF16 = "bf16"
    FP8 = "fp8"
    NVFP4 = "nvfp4"


class RunKind(StrEnum):
    TRAINING = "training"
    COLLECTIVE = "collective"
    RESILIENCE = "resilience"
    MLPERF = "mlperf"
    SCHEDULER = "scheduler"
    EVENTS = "events"
    RANK_TIMINGS = "rank-timings"
    TELEMETRY = "telemetry"


# Workload and system ids are the ones the bundle's catalog defines (checked against it in `check_bundle_ids`,
# clustercert.catalog): a user's own catalog may certify any model or system, the shipped ones keep theirs.
_ID = r"^[a-z0-9][a-z0-9._-]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cluster(_Strict):
    name: str = Field(min_length=1)
    provider: str = Field(min_length=1)


class NvlinkDomain(_Strict):
    name: str
    nodes: list[str]


class Interconnect(_Strict):
    scale_out: str
    nics_per_node: int = Field(gt=0)


class SystemSpec(_Strict):
    gpu: str = Field(pattern=_ID)
    gpus_per_node: int = Field(gt=0)
    nodes: list[str] = Field(min_length=1)
    nvlink_domains: list[NvlinkDomain] = Field(default_factory=list)
    interconnect: Interconnect | None = None


class Parallelism(_Strict):
    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    cp: int = Field(default=1, gt=0)
    vp: int | None = Field(default=None, gt=0)
    ep: int | None = Field(default=None, gt=0)
    etp: int | None = Field(default=None, gt=0)
    fsdp: int | None = Field(default=None, gt=0)


class RunSpec(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    phase: Phase
    kind: RunKind
    format: str = Field(min_length=1)
    workload: str | None = Field(default=None, pattern=_ID)
    precision: Precision | None = None
    gpus: int | None = Field(default=None, gt=0)
    gbs: int | None = Field(default=None, gt=0)
    seq_len: int | None = Field(default=None, gt=0)
    parallelism: Parallelism | None = None
    repeat: int = Field(default=1, gt=0)
    scope: str | None = None
    ruleset: str | None = None
    nodes: list[str] | None = None
    files: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _training_fields(self) -> RunSpec:
        if self.kind is RunKind.TRAINING:
            missing = [k for k in ("workload", "precision", "gpus", "gbs", "seq_len") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"a training run needs {', '.join(missing)}")
        return self


class Bundle(_Strict):
    schema_version: Literal[1]
    cluster: Cluster
    system: SystemSpec
    catalog: str = Field(min_length=1)
    recipe_version: str = Field(min_length=1)
    timezone: str = "UTC"
    synthetic: bool = False
    runs: list[RunSpec] = Field(min_length=1)

    @field_validator("runs")
    @classmethod
    def _unique_ids(cls, runs: list[RunSpec]) -> list[RunSpec]:
        seen: set[str] = set()
        for run in runs:
            if run.id in seen:
                raise ValueError(f"run id '{run.id}' appears twice")
            seen.add(run.id)
        return runs


@dataclass(frozen=True)
class LoadedBundle:
    """A parsed bundle.yaml with the folder it lives in."""

    root: Path
    spec: Bundle

    def resolve(self, rel: str, *, entry: str = "files") -> Path:
        """The path of a bundle file, refusing anything that leaves the bundle."""
        return resolve_inside(self.root, rel, entry=entry)

    def evidence_files(self) -> list[str]:
        """Every file named by a run, relative to the bundle, in bundle order without repeats."""
        out: list[str] = []
        for run in self.spec.runs:
            for rel in run.files:
                if rel not in out:
                    out.append(rel)
        return out


def resolve_inside(root: Path, rel: str, *, entry: str) -> Path:
    where = f"{root / BUNDLE_FILE} {entry}"
    pure = PurePosixPath(rel)
    if pure.is_absolute() or rel.startswith("~") or Path(rel).is_absolute():
        raise EvidenceError(where, f"expected a path relative to the bundle, got the absolute path '{rel}'")
    if ".." in pure.parts:
        raise EvidenceError(where, f"expected a path inside the bundle, got '{rel}' which uses '..'")
    candidate = root / rel
    real_root = root.resolve()
    real = candidate.resolve()
    if real != real_root and real_root not in real.parents:
        raise EvidenceError(where, f"expected a file inside the bundle, got '{rel}' which links outside it")
    if not candidate.exists():
        raise EvidenceError(where, f"expected an existing file, got '{rel}' which is missing")
    return candidate


def load_bundle(path: Path) -> LoadedBundle:
    """Load `path` (a bundle folder or its bundle.yaml) strictly."""
    root = path if path.is_dir() else path.parent
    yaml_path = root / BUNDLE_FILE
    if not root.exists():
        raise EvidenceError(str(path), "expected a bundle folder, got a path that does not exist")
    spec = load_yaml_model(yaml_path, Bundle, EvidenceError, hint=_HINT)
    bundle = LoadedBundle(root=root, spec=spec)
    for run in spec.runs:
        for rel in run.files:
            bundle.resolve(rel, entry=f"run '{run.id}' files")
    return bundle


def seal_bundle(bundle: LoadedBundle) -> Path:
    """Write MANIFEST.sha256 (sha256sum format) over bundle.yaml and every evidence file."""
    names = [BUNDLE_FILE, *bundle.evidence_files()]
    lines = [f"{sha256_file(bundle.root / rel)}  {rel}\n" for rel in sorted(names)]
    out = bundle.root / MANIFEST_NAME
    out.write_text("".join(lines), encoding="utf-8")
    return out


def read_seal(bundle: LoadedBundle) -> dict[str, str] | None:
    """The sealed hashes by path, or None when the bundle was never sealed."""
    path = bundle.root / MANIFEST_NAME
    if not path.exists():
        return None
    out: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        digest, sep, rel = raw.partition("  ")
        if not sep or len(digest) != 64:
            raise EvidenceError(str(path), "expected '<sha256>  <path>'", line=number)
        out[rel] = digest
    return out

