"""The evidence bundle: bundle.yaml (schema_version 1), safe file resolution, sealing and hashing."""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from clustercert.attest.atomic import write_atomic
from clustercert.errors import EvidenceError
from clustercert.evidence.guards import check_regular, read_regular
from clustercert.evidence.hashing import sha256_file
from clustercert.parsers.health import HEALTH_FORMATS
from clustercert.yamlio import load_yaml_model

__all__ = [
    "MANIFEST_NAME",
    "PLACEHOLDER",
    "ArchiveRecord",
    "Bundle",
    "LoadedBundle",
    "Phase",
    "Precision",
    "RunKind",
    "RunSpec",
    "Seal",
    "check_sealed_sizes",
    "load_bundle",
    "read_seal",
    "seal_bundle",
]

MANIFEST_NAME = "MANIFEST.sha256"
BUNDLE_FILE = "bundle.yaml"
# what `evidence init` writes where the files do not show a value; a bundle that still holds one is refused
PLACEHOLDER = "FILL_IN"
_HINT = "Fix bundle.yaml (docs/bundle-schema.md)."
# A seal's line is a hash, two spaces and a path: a bundle of a million files seals in less than this.
MAX_SEAL_BYTES = 256 * 1024**2


class Phase(StrEnum):
    EFFICIENCY = "efficiency"
    SCALING = "scaling"
    RESILIENCE = "resilience"
    HEALTH = "health"  # node health (issue 59): required only where a catalog's rules name it


class Precision(StrEnum):
    BF16 = "bf16"
    FP8 = "fp8"
    NVFP4 = "nvfp4"
    FP32 = "fp32"  # plain float32 (clustercert's own CPU workload, clustercert.runner.workload)


class RunKind(StrEnum):
    TRAINING = "training"
    COLLECTIVE = "collective"
    RESILIENCE = "resilience"
    MLPERF = "mlperf"
    SCHEDULER = "scheduler"
    EVENTS = "events"
    RANK_TIMINGS = "rank-timings"
    TELEMETRY = "telemetry"
    HEALTH = "health"  # a node-health tool's output or the Exemplar prescreen, of one node


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


class SystemDescription(_Strict):
    """What the submitter says the system is (MLPerf-style); shown beside what the evidence prints."""

    accelerator: str | None = None
    host: str | None = None
    interconnect: str | None = None
    software: dict[str, str] = Field(default_factory=dict)  # e.g. driver, cuda, nccl, container -> version
    notes: str | None = None


class SystemSpec(_Strict):
    gpu: str = Field(pattern=_ID)
    gpus_per_node: int = Field(gt=0)
    nodes: list[str] = Field(min_length=1)
    nvlink_domains: list[NvlinkDomain] = Field(default_factory=list)
    interconnect: Interconnect | None = None
    description: SystemDescription | None = None


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
    # sacct: the field list of a dump written without a header (`sacct --noheader --format ...`), in order
    fields: list[str] | None = Field(default=None, min_length=1)
    files: list[str] = Field(min_length=1)
    # an llmb-run job: its llmb-config file (what it was told to run, read again by certify) and the logs of its
    # earlier retries (listed, never judged: the last retry is the run)
    config: str | None = None
    retries: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _training_fields(self) -> RunSpec:
        if self.kind is RunKind.TRAINING:
            missing = [k for k in ("workload", "precision", "gpus", "gbs", "seq_len") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"a training run needs {', '.join(missing)}")
        if (self.kind is RunKind.HEALTH) != (self.phase is Phase.HEALTH):
            raise ValueError(f"kind health goes with phase health, got kind '{self.kind.value}' in phase "
                             f"'{self.phase.value}'")
        if self.kind is RunKind.HEALTH and (self.nodes is None or len(self.nodes) != 1):
            # a health output is one node's: the verdicts and the suspect list are per node
            raise ValueError("a health run needs nodes: [the one node whose output it is]")
        if self.kind is RunKind.HEALTH and self.format not in HEALTH_FORMATS:
            raise ValueError(f"expected a format for kind health ({', '.join(sorted(HEALTH_FORMATS))}), got "
                             f"'{self.format}'")
        if self.fields is not None and self.format != "sacct":
            raise ValueError(f"fields (a sacct field list) applies to format sacct only, got format '{self.format}'")
        return self


class ArchiveRecord(_Strict):
    """The archive the bundle's files were unpacked from (it carries no manifest of its own): its name and sha256."""

    name: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Bundle(_Strict):
    schema_version: Literal[1]
    cluster: Cluster
    system: SystemSpec
    catalog: str = Field(min_length=1)
    recipe_version: str = Field(min_length=1)
    timezone: str = "UTC"
    synthetic: bool = False
    archive: ArchiveRecord | None = None
    # the certification profile the runs were collected for (a profile of the catalog); default `full`
    profile: str | None = Field(default=None, min_length=1)
    runs: list[RunSpec] = Field(min_length=1)
    # files kept as evidence that no check judges (the prescreen's output, a microbenchmark's job records): sealed,
    # hashed into the manifest and listed in the report
    attachments: list[str] = Field(default_factory=list)

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
    in_bundle_names: bool = False  # a certification's: `shown` names a file by its path in the bundle

    def shown(self, rel: str) -> str:
        """The name results and messages give the bundle's file `rel`: in a certification (`in_bundle_names`) its
        path in the bundle, as bundle.yaml and the manifest list it, so that a run's results and reports do not
        depend on where the bundle lay (a re-run of a copied or moved bundle reproduces them); elsewhere (evidence
        check, seal) its path as the command was given it, for the person fixing the file."""
        return rel if self.in_bundle_names else str(self.root / rel)

    def resolve(self, rel: str, *, entry: str = "files") -> Path:
        """The path of a bundle file, refusing anything that leaves the bundle."""
        return resolve_inside(self.root, rel, entry=entry, real_root=self.real_root)

    @functools.cached_property
    def real_root(self) -> str:
        """The real path of the bundle's folder, found once: each file's own real path is found when it is asked
        for. Should the folder become a link elsewhere later, its files' real paths leave this one and are refused
        (a stale root can refuse a file, never let one out)."""
        return os.path.realpath(self.root)

    def run_files(self, run: RunSpec) -> list[str]:
        """The files of a run relative to the bundle, a listed folder (an MLPerf result folder) by its files."""
        out: list[str] = []
        for rel in run.files:
            path = self.root / rel
            if not path.is_dir():
                out.append(rel)
                continue
            base = PurePosixPath(rel)
            for inner in sorted(p for p in path.rglob("*") if p.is_file()):
                out.append(str(base / inner.relative_to(path).as_posix()))
        return out

    def evidence_files(self) -> list[str]:
        """Every file named by a run (a folder's files), relative to the bundle, in bundle order without repeats."""
        out: dict[str, None] = {}  # ordered, and a lookup per file (a cluster's bundle lists thousands)
        for run in self.spec.runs:
            for rel in self.run_files(run):
                out.setdefault(rel, None)
            for rel in [*([run.config] if run.config else []), *run.retries]:
                out.setdefault(rel, None)
        for rel in self.spec.attachments:
            out.setdefault(rel, None)
        return list(out)


def resolve_inside(root: Path, rel: str, *, entry: str, folders: dict[str, str] | None = None,
                   real_root: str | None = None) -> Path:
    """`root / rel`, refused when it is absolute, climbs out, links outside the bundle, is missing or is no regular
    file or folder. `folders` (for one pass over a bundle's files) remembers the real path of each folder seen;
    `real_root` is the root's real path where the caller knows it."""
    where = f"{root / BUNDLE_FILE} {entry}"
    pure = PurePosixPath(rel)
    if pure.is_absolute() or rel.startswith("~") or Path(rel).is_absolute():
        raise EvidenceError(where, f"expected a path relative to the bundle, got the absolute path '{rel}'")
    if ".." in pure.parts:
        raise EvidenceError(where, f"expected a path inside the bundle, got '{rel}' which uses '..'")
    candidate = root / rel
    if folders is None:
        if real_root is None:
            real_root = os.path.realpath(root)  # os.path: Path.resolve is slow once a bundle lists thousands of runs
        real = os.path.realpath(candidate)
    else:
        real_root = _real_path(str(root), folders)
        real = _real_path(str(candidate), folders)
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise EvidenceError(where, f"expected a file inside the bundle, got '{rel}' which links outside it")
    try:
        mode = os.stat(candidate).st_mode  # one stat for what exists(), is_dir() and check_regular() each asked
    except OSError as exc:
        if exc.errno in _MISSING:  # what Path.exists() calls missing
            raise EvidenceError(where, f"expected an existing file, got '{rel}' which is missing") from None
        mode = None  # check_regular names the error
    if mode is None or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a folder is an MLPerf result folder
        check_regular(candidate, f"{where} '{rel}'")  # a FIFO, device or socket is refused here, before any read
    return candidate


# The errors Path.exists() reads as "nothing there" (pathlib's _IGNORED_ERRNOS)
_MISSING = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def _real_path(path: str, folders: dict[str, str]) -> str:
    """os.path.realpath(path), its folder's real path remembered in `folders`: realpath looks at every part of a
    path (an lstat each), and a cluster's bundle lists 8,000 files in a few folders (147,000 lstat calls in its
    load). `path` is absolute or relative to the working folder (a Path's text: '.' only as the whole path)."""
    folder, name = os.path.split(path)
    if name in ("", ".", ".."):  # the file system's root, or a path ending in '.' or '..' (a bundle given as '.')
        return os.path.realpath(path)
    real_folder = folders.get(folder)
    if real_folder is None:
        real_folder = folders[folder] = os.path.realpath(folder or ".")
    joined = os.path.join(real_folder, name)
    return os.path.realpath(joined) if os.path.islink(joined) else joined


def load_bundle(path: Path, *, in_bundle_names: bool = False) -> LoadedBundle:
    """Load `path` (a bundle folder or its bundle.yaml) strictly; `in_bundle_names` for a certification
    (`LoadedBundle.shown`). A problem found while loading is named by the path the command was given."""
    root = path if path.is_dir() else path.parent
    yaml_path = root / BUNDLE_FILE
    if not root.exists():
        raise EvidenceError(str(path), "expected a bundle folder, got a path that does not exist")
    if path.exists() and not path.is_dir() and path.name != BUNDLE_FILE:
        # a log or a manifest of another name: its folder's bundle.yaml was read instead, and named as the problem
        raise EvidenceError(str(path), f"expected a bundle folder or its {BUNDLE_FILE}, got another file")
    if path.is_dir() and not yaml_path.exists() and not yaml_path.is_symlink():
        # files as collected, not yet described: the command that drafts the description
        raise EvidenceError(str(yaml_path), f"expected the {BUNDLE_FILE} that describes the evidence, got none. "
                            f"Draft one from the folder's files: clustercert evidence init {root}")
    spec = load_yaml_model(yaml_path, Bundle, EvidenceError, hint=_HINT,
                           check_node=_placeholder_refuser(yaml_path))
    bundle = LoadedBundle(root=root, spec=spec, in_bundle_names=in_bundle_names)
    folders: dict[str, str] = {}  # the real path of each folder, for this load's checks only
    for run in spec.runs:
        listed: set[str] = set()
        for rel in run.files:
            path = resolve_inside(root, rel, entry=f"run '{run.id}' files", folders=folders)
            if path.is_dir():
                if run.format != "mlperf":
                    check_regular(path, f"{yaml_path} run '{run.id}' files '{rel}'")  # only MLPerf reads a folder
            else:
                listed.add(rel)  # checked just now
        for rel in bundle.run_files(run):
            if rel not in listed:  # a file inside a listed folder
                resolve_inside(root, rel, entry=f"run '{run.id}' files", folders=folders)
        for rel, entry in [*([(run.config, "config")] if run.config else []), *((r, "retries") for r in run.retries)]:
            check_regular(resolve_inside(root, rel, entry=f"run '{run.id}' {entry}", folders=folders),
                          f"{yaml_path} run '{run.id}' {entry} '{rel}'")
    for rel in spec.attachments:
        check_regular(resolve_inside(root, rel, entry="attachments", folders=folders),
                      f"{yaml_path} attachments '{rel}'")
    return bundle


def _placeholder_refuser(yaml_path: Path) -> Callable[[yaml.Node], None]:
    """What refuses a draft from `evidence init` with a FILL_IN left, the first one named by line and key: it looks
    at bundle.yaml's node tree once the loader's bounds hold (size, nesting, aliases), each node once."""

    def refuse(root: yaml.Node) -> None:
        found = _first_placeholder(root)
        if found is None:
            return
        loc, line = found
        dotted = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in loc).lstrip(".")
        raise EvidenceError(
            str(yaml_path),
            f"expected a value, got the placeholder {PLACEHOLDER} that `evidence init` left (its comment says what "
            "is needed). Fill it in",
            line=line,
            field=dotted,
        )

    return refuse


def _first_placeholder(root: yaml.Node) -> tuple[list[int | str], int] | None:
    """The key path and line of the first FILL_IN scalar in document order; a node an alias names again is
    looked at once (without that, a few aliases stand for billions of nodes)."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, list[int | str]]] = [(root, [])]
    while stack:
        node, loc = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if node.value == PLACEHOLDER:
                return loc, node.start_mark.line + 1
        elif isinstance(node, yaml.MappingNode):
            stack.extend((value, [*loc, str(key.value)]) for key, value in reversed(node.value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, [*loc, index]) for index, item in reversed(list(enumerate(node.value))))
    return None


def seal_bundle(bundle: LoadedBundle) -> Path:
    """Write MANIFEST.sha256 (sha256sum format) over bundle.yaml and every evidence file, then each file's size
    in comment lines (`# size BYTES  PATH`, which `sha256sum -c` skips): a file of another size is refused
    before it is hashed."""
    names = sorted([BUNDLE_FILE, *bundle.evidence_files()])
    lines = [f"{sha256_file(bundle.root / rel)}  {rel}\n" for rel in names]
    lines += [f"{_SIZE_MARK}{(bundle.root / rel).stat().st_size}  {rel}\n" for rel in names]
    # under a temporary name, then renamed: a full disk leaves the earlier seal as it was, not half a new one
    return write_atomic(bundle.root / MANIFEST_NAME, "".join(lines).encode())


_SIZE_MARK = "# size "


@dataclass(frozen=True)
class Seal:
    """MANIFEST.sha256 as read: each file's sha256 and, in a seal written since sizes were recorded, its size."""

    digests: dict[str, str]
    sizes: dict[str, int]


def read_seal(bundle: LoadedBundle) -> Seal | None:
    """The seal, or None when the bundle was never sealed. It is read through the guards evidence files go
    through (a regular file of bounded size: a FIFO or a link to /dev/zero is refused)."""
    path = bundle.root / MANIFEST_NAME
    if not path.exists() and not path.is_symlink():
        return None
    try:
        text = read_regular(path, limit=MAX_SEAL_BYTES, fix="Seal the bundle again (clustercert evidence seal)"
                            ).decode("utf-8")
    except UnicodeDecodeError:
        raise EvidenceError(str(path), "expected UTF-8 text, got other bytes. Seal the bundle again "
                            "(clustercert evidence seal)") from None
    seal = Seal({}, {})
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if raw.startswith("#"):  # a comment to sha256sum; a size to clustercert
            size, sep, rel = raw.removeprefix(_SIZE_MARK).partition("  ")
            if raw.startswith(_SIZE_MARK) and sep and size.isdigit() and len(size) <= 20:
                seal.sizes[rel] = int(size)
            elif raw.startswith(_SIZE_MARK):
                raise EvidenceError(str(path), f"expected '{_SIZE_MARK}<bytes>  <path>'", line=number)
            continue
        digest, sep, rel = raw.partition("  ")
        if not sep or len(digest) != 64:
            raise EvidenceError(str(path), "expected '<sha256>  <path>'", line=number)
        seal.digests[rel] = digest
    return seal


def check_sealed_sizes(bundle: LoadedBundle) -> None:
    """Refuse the first file whose size is not the one its seal records (a seal that records sizes), before any
    file is hashed: a file of another size has other bytes, and hashing a large one takes minutes."""
    seal = read_seal(bundle)
    if seal is None:
        return
    for rel, size in seal.sizes.items():
        path = bundle.root / rel
        try:
            now = os.stat(path).st_size
        except OSError:
            continue  # missing: the seal's check names it
        if now != size:
            raise EvidenceError(str(path), f"changed since the bundle was sealed ({now} bytes, {size} in "
                                f"{MANIFEST_NAME}). Restore it or re-seal the bundle")
