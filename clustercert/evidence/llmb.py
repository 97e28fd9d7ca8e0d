"""`evidence init` for what llmb-run writes: an `$LLMB_INSTALL` tree or an `llmb-run archive` unpacked beside it."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from clustercert.attest.atomic import write_atomic
from clustercert.catalog import LoadedCatalog, edition_for
from clustercert.errors import EvidenceError, UsageError
from clustercert.evidence.archive import ARCHIVE_RECORD, Unpacked, is_archive, unpack_archive
from clustercert.evidence.bundle import BUNDLE_FILE, MANIFEST_NAME, PLACEHOLDER
from clustercert.evidence.init import (
    Draft,
    _collective_run,
    _emit,
    _Field,
    _Health,
    _health_files,
    _health_run,
    _Run,
    _run_id,
    _training_fields,
)
from clustercert.parsers import FORMATS, TRAINING_FORMATS, detect_format
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.llmb_config import LlmbConfig, config_job_id, read_llmb_config
from clustercert.parsers.log_config import read_log_config
from clustercert.parsers.nccl_ranks import read_rank_lines

__all__ = ["LlmbJob", "draft_llmb", "is_llmb_tree", "write_llmb_draft"]

_NCCL = "microbenchmark_nccl"
_PRESCREEN = "microbenchmark_system_info"
_SWEEP = re.compile(r"^LOG_.*_sweep_N(?P<nodes>[0-9]+)$")
_RETRY_LOG = re.compile(r"^log-.*_(?P<job>[0-9]+)_(?P<retry>[0-9]+)\.out$")


@dataclass
class LlmbJob:
    """One submitted job of an llmb-run tree: its config, the log judged (the last retry, else the Slurm output),
    the earlier retries' logs, and its workload (the folder under `workloads/`)."""

    workload: str
    config_rel: str
    config: LlmbConfig
    log: str | None
    earlier: list[str] = field(default_factory=list)


def is_llmb_tree(folder: Path) -> bool:
    """Whether `folder` is an `$LLMB_INSTALL` tree or an unpacked llmb-run archive (a workload's `experiments/`)."""
    root = _workloads(folder)
    return root.is_dir() and any((d / "experiments").is_dir() for d in root.iterdir() if d.is_dir())


def _workloads(folder: Path) -> Path:
    """The folder holding one folder per workload: `workloads/` of an install tree, an archive's top otherwise."""
    return folder / "workloads" if (folder / "workloads").is_dir() else folder


def _rel(path: Path, folder: Path) -> str:
    return path.relative_to(folder).as_posix()


def _files(directory: Path) -> list[Path]:
    """Every regular file under `directory` that may be evidence (not hidden, not a link), sorted."""
    return [p for p in sorted(directory.rglob("*")) if p.is_file() and not p.is_symlink()
            and not any(q.startswith(".") for q in p.relative_to(directory).parts)]


def _jobs(folder: Path, taken_files: set[str]) -> list[LlmbJob]:
    """Every training job of the tree's workloads (not the microbenchmarks) with its config and logs."""
    jobs: list[LlmbJob] = []
    root = _workloads(folder)
    for workload_dir in sorted(d for d in root.iterdir() if d.is_dir() and not d.is_symlink()):
        if workload_dir.name.startswith("microbenchmark_") or not (workload_dir / "experiments").is_dir():
            continue
        for cfg in _files(workload_dir / "experiments"):
            job_id = config_job_id(cfg.name)
            if job_id is None:
                continue
            rel = _rel(cfg, folder)
            taken_files.add(rel)
            config = read_llmb_config(cfg, rel)  # a config that cannot be read is refused: it says what ran
            retries = sorted(((int(m["retry"]), p) for p in cfg.parent.iterdir()
                              if (m := _RETRY_LOG.match(p.name)) and m["job"] == job_id and p.is_file()),
                             key=lambda t: t[0])
            slurm = cfg.parent / f"slurm-{job_id}.out"
            if retries:
                log: str | None = _rel(retries[-1][1], folder)
                earlier = [_rel(p, folder) for _, p in retries[:-1]]
            else:
                log, earlier = (_rel(slurm, folder) if slurm.is_file() else None), []
            taken_files.update([*earlier, *([log] if log else [])])
            jobs.append(LlmbJob(workload_dir.name, rel, config, log, earlier))
    return jobs


def _recipe_fields(job: LlmbJob, catalog: LoadedCatalog | None) -> list[_Field]:
    """gbs, seq_len and parallelism from the recipe's table of the catalog, for what the log does not print."""
    recipe = catalog.spec.recipes.get(job.workload) if catalog is not None else None
    row = recipe.configuration(job.config.dtype, job.config.scale) if recipe is not None else None
    if row is None:
        return []
    why = f"the {catalog.spec.id if catalog else ''} recipe table's row for {job.config.dtype} at {row.gpus} GPUs"
    par = {k: v for k, v in (("tp", row.tp), ("pp", row.pp), ("cp", row.cp), ("vp", row.vp), ("ep", row.ep),
                             ("etp", row.etp)) if v is not None}
    return [_Field("gbs", row.gbs, why), _Field("seq_len", row.seq_len, why), _Field("parallelism", par, why)]


def _training_run(job: LlmbJob, folder: Path, catalog: LoadedCatalog | None, repeat: int, taken: set[str],
                  unused: list[tuple[str, str]], limit: int) -> _Run | None:
    """The run of one job: what ran from its llmb-config, the batch and parallelism from what its log printed
    (else the recipe's table); None when it has no usable log (listed in `unused`, with why)."""
    cfg = job.config
    if job.log is None:
        unused.append((job.config_rel, f"job {cfg.job_id}: no training log beside it (log-*_{cfg.job_id}_<retry>.out "
                                       f"or slurm-{cfg.job_id}.out): the job left no measurement"))
        return None
    path = folder / job.log
    try:
        fmt = detect_format(path, job.log)
        if fmt not in TRAINING_FORMATS:
            raise EvidenceError(job.log, f"expected a training log, got {fmt} output")
        log = TRAINING_FORMATS[fmt](path, job.log, limit=limit)
        printed = read_log_config(path, job.log, limit=limit)
    except EvidenceError as exc:
        unused.append((job.log, f"job {cfg.job_id}: a training log its parser cannot use: {exc.message}"))
        return None
    from_log = {f.key: f for f in _training_fields(log, printed, catalog) if f.value != PLACEHOLDER}
    recipe = {f.key: f for f in _recipe_fields(job, catalog)}
    where = f"{job.config_rel}"
    fields = [
        _Field("id", _run_id(f"{job.workload}-{cfg.dtype}-{cfg.scale}-job{cfg.job_id}", taken)),
        _Field("phase", "efficiency"), _Field("kind", "training"),
        _Field("format", fmt, f"{len(log.steps)} steps" + (f"; retry {len(job.earlier)} of job {cfg.job_id} (the "
                                                           "last; earlier ones under retries)" if job.earlier else "")),
        _Field("workload", job.workload, f"the workload folder of {where}"),
        _Field("precision", cfg.dtype, f"model_info.dtype of {where}"),
        _Field("gpus", cfg.scale, f"model_info.scale of {where}"),
    ]
    for key in ("gbs", "seq_len", "parallelism"):
        chosen = from_log.get(key) or recipe.get(key)
        if chosen is not None:
            fields.append(chosen)
        else:
            fields.append(_Field(key, PLACEHOLDER, f"needed: the log prints no {key} and the catalog's recipe table "
                                 f"has no row for {job.workload} {cfg.dtype} at {cfg.scale} GPUs"))
    fields += [_Field("repeat", repeat, "submissions of this workload, dtype and scale, in job id order"),
               _Field("config", job.config_rel, "llmb-run's record of the job (certify reads it again)")]
    if job.earlier:
        fields.append(_Field("retries", job.earlier, "earlier retries of the job: listed, not judged"))
    fields.append(_Field("files", [job.log]))
    return _Run(fields)


def _nccl_runs(folder: Path, hosts_all: list[str], taken: set[str], unused: list[tuple[str, str]],
               attachments: list[str], limit: int) -> list[_Run]:
    """The NCCL microbenchmark: each nccl-tests output of a `LOG_*_sweep_N<nodes>` folder is a collective run
    (its scope from its hosts, else from the node count); its job records are kept as attachments."""
    runs: list[_Run] = []
    root = _workloads(folder) / _NCCL
    if not root.is_dir():
        return runs
    for path in _files(root):
        rel = _rel(path, folder)
        sweep = _SWEEP.match(path.parent.name)
        if sweep is None or path.suffix != ".txt":
            if path.parent == root or config_job_id(path.name) or path.name.startswith("slurm-"):
                attachments.append(rel)  # llmb-config and slurm output of the benchmark's jobs
            else:
                unused.append((rel, "not an nccl-tests result of a sweep folder (the recipe's README: debug and "
                                    "per-rank output, metadata)"))
            continue
        try:
            parsed = FORMATS["nccl-tests"](path, rel, limit=limit)
            ranks = read_rank_lines(path, rel, limit=limit)
        except EvidenceError as exc:
            unused.append((rel, f"nccl-tests output its parser cannot use: {exc.message}"))
            continue
        run = _collective_run(rel, parsed, hosts_all, taken)
        nodes = int(sweep["nodes"])
        if not ranks or any(f.key == "scope" and f.value == PLACEHOLDER for f in run.fields):
            # scope from the sweep's node count, as the folder names it
            scope = ("nvlink-domain" if nodes == 1 else "pair" if nodes == 2 else
                     "full-scale" if hosts_all and nodes == len(hosts_all) else "cross-rack")
            run.fields = [_Field("scope", scope, f"the sweep folder's node count N{nodes}") if f.key == "scope"
                          else f for f in run.fields]
        runs.append(run)
    return runs


def _prescreens(folder: Path, hosts: list[str], attachments: list[str], limit: int) -> list[_Health]:
    """The prescreen's outputs (`microbenchmarks/system_info`'s slurm-*.out) that read as one: health evidence of
    the node each prints, asked for where that node is not among `hosts` (the NCCL sweep's); the prescreen's other
    files, and an output that does not read as the prescreen, are kept as attachments."""
    root = _workloads(folder) / _PRESCREEN
    outputs: list[tuple[str, str, Path]] = []
    for path in _files(root) if root.is_dir() else []:
        rel = _rel(path, folder)
        try:
            told = detect_format(path, rel) if path.name.startswith("slurm-") else None
        except EvidenceError:
            told = None
        if told == "prescreen":
            outputs.append((rel, told, path))
        else:
            attachments.append(rel)
    refused: list[tuple[str, str]] = []
    health = _health_files(outputs, hosts, refused, limit)
    attachments += [rel for rel, _ in refused]  # cut short or garbled: kept as it came, not judged
    out = []
    for h in health:
        if hosts and h.node not in hosts:
            why = (f"needed: the prescreen ran on {h.node} ({h.why}), which is not among the {len(hosts)} hosts of "
                   "the NCCL microbenchmark's rank lines: give the node (and add it to system.nodes if it is one of "
                   "the cluster's)")
            h = _Health(h.rel, h.fmt, h.found, PLACEHOLDER, why, h.table)
        out.append(h)
    return sorted(out, key=lambda h: h.rel)


def _hosts(folder: Path, limit: int) -> list[str]:
    root = _workloads(folder) / _NCCL
    hosts: set[str] = set()
    if root.is_dir():
        for path in sorted(root.rglob("*.txt")):
            if _SWEEP.match(path.parent.name) and path.is_file() and not path.is_symlink():
                try:
                    hosts.update(r.host for r in read_rank_lines(path, _rel(path, folder), limit=limit))
                except EvidenceError:
                    continue
    return sorted(hosts)


def _one(values: list[str]) -> tuple[str | None, str]:
    """The value most jobs record and how the others differ (for a comment)."""
    counted = Counter(values).most_common()
    if not counted:
        return None, ""
    others = ", ".join(f"{v} ({n} jobs)" for v, n in counted[1:])
    return counted[0][0], (f"; others: {others}" if others else "")


def draft_llmb(folder: Path, references_dir: Path, *, unpacked: Unpacked | None = None,
               limit: int = DEFAULT_LIMIT) -> Draft:
    """The draft bundle.yaml of an llmb-run tree: every value its files show; FILL_IN only for what they cannot
    (the provider, and the cluster's name when llmb-run did not record one)."""
    unused: list[tuple[str, str]] = []
    taken: set[str] = set()
    used: set[str] = set()
    jobs = _jobs(folder, used)
    if not jobs:
        raise EvidenceError(str(folder), "expected llmb-run jobs (llmb-config_<jobid>.yaml in a workload's "
                            "experiments/), found none")
    release, release_note = _one([j.config.release for j in jobs])
    chip, chip_note = _one([j.config.gpu_type for j in jobs])
    catalog = edition_for(references_dir, chip=chip or "", release=release or "")
    hosts = _hosts(folder, limit)
    runs: list[_Run] = []
    order = sorted(jobs, key=lambda j: (j.workload, j.config.dtype, j.config.scale, int(j.config.job_id)))
    seen: Counter[tuple[str, str, int]] = Counter()
    for job in order:
        key = (job.workload, job.config.dtype, job.config.scale)
        seen[key] += 1
        run = _training_run(job, folder, catalog, seen[key], taken, unused, limit)
        if run is not None:
            runs.append(run)
    attachments: list[str] = []
    runs += _nccl_runs(folder, hosts, taken, unused, attachments, limit)
    runs += [_health_run(h, taken) for h in _prescreens(folder, hosts, attachments, limit)]
    gpn, _ = _one([str(j.config.gpus_per_node) for j in jobs if j.config.gpus_per_node])
    cluster, cluster_note = _one([j.config.cluster_name for j in jobs if j.config.cluster_name])
    top: list[object] = [
        _Field("schema_version", 1),
        ("cluster", [
            _Field("name", cluster, f"cluster_info.cluster_name of the jobs' llmb-config{cluster_note}") if cluster
            else _Field("name", PLACEHOLDER, "needed: the cluster's name (llmb-run recorded none)"),
            _Field("provider", PLACEHOLDER, "needed: who operates the cluster (no llmb-run file says; the cover "
                   "shows it)")]),
        ("system", [
            _Field("gpu", catalog.spec.system, f"model_info.gpu_type {chip} of the jobs{chip_note}") if catalog
            else _Field("gpu", PLACEHOLDER, f"needed: the system id of the catalog for gpu_type {chip}"),
            _Field("gpus_per_node", int(gpn), "cluster_info.gpus_per_node of the jobs' llmb-config") if gpn
            else _Field("gpus_per_node", PLACEHOLDER, "needed: GPUs per node"),
            _Field("nodes", hosts, f"the {len(hosts)} hosts of the NCCL microbenchmark's rank lines") if hosts
            else _Field("nodes", [PLACEHOLDER], "needed: the node hostnames (no nccl-tests rank lines)"),
            *([_interconnect(catalog)] if len(hosts) > 1 else [])]),
        _Field("catalog", catalog.spec.id, f"the shipped edition for {chip} and recipe release {release}")
        if catalog else _Field("catalog", PLACEHOLDER, f"needed: no shipped edition for {chip} and release {release}; "
                               "name your catalog here and with certify --catalog"),
        _Field("recipe_version", release, f"workload_info.gsw_version of the jobs' llmb-config{release_note}"),
        _Field("timezone", "UTC", "default: set the cluster's zone"),
    ]
    if unpacked is not None:
        top.append(("archive", [_Field("name", unpacked.name),
                                _Field("sha256", unpacked.sha256, "of the archive as unpacked")]))
    if attachments:
        top.append(_Field("attachments", attachments, "kept as evidence, not judged (job records; the prescreen's "
                          "files that are no prescreen output it can read)"))
    used.update(attachments)
    _not_read(folder, used | {str(f.value[0]) for r in runs for f in r.fields if f.key == "files"}, unused)
    text = _emit(top, runs, unused)
    placeholders = [line.split("#", 1)[0].strip() for line in text.splitlines() if PLACEHOLDER in line.split("#")[0]]
    return Draft(text, len(runs), placeholders, unused, ["system.interconnect"] if len(hosts) > 1 else [])


def _interconnect(catalog: LoadedCatalog | None) -> _Field:
    """The network between the nodes, which no llmb-run file names: commented out, to fill in if one will."""
    kinds = "|".join(sorted(catalog.spec.scale_out_gbps)) if catalog is not None else "infiniband-ndr|..."
    return _Field("# interconnect", f"{{scale_out: <{kinds}>, nics_per_node: <NICs per node>}}",
                  "not in the files: uncomment and fill in to judge the NCCL sweeps between nodes against targets")


def write_llmb_draft(path: Path, references_dir: Path, *, force: bool = False,
                     limit: int = DEFAULT_LIMIT) -> tuple[Path, Draft, Unpacked | None]:
    """Unpack an archive (`path` ending .tar.zst) beside it, or take an llmb-run tree as it is, and write its
    bundle.yaml (never over an existing one unless `force`)."""
    unpacked = unpack_archive(path, member_limit=limit) if is_archive(path) else None
    folder = unpacked.folder if unpacked is not None else path
    if not is_llmb_tree(folder):
        raise EvidenceError(str(path), "expected what llmb-run writes (a workload folder with experiments/), "
                            "found none")
    out = folder / BUNDLE_FILE
    if out.exists() and not force:
        raise UsageError(f"{out}: a bundle.yaml is already there. Pass --force to replace it with a new draft")
    draft = draft_llmb(folder, references_dir, unpacked=unpacked, limit=limit)
    write_atomic(out, draft.text.encode())
    return out, draft, unpacked


_SKIPPED = (BUNDLE_FILE, MANIFEST_NAME, ARCHIVE_RECORD)


def _not_read(folder: Path, used: set[str], unused: list[tuple[str, str]]) -> None:
    """Every other file of the tree into `unused`, with why: a draft says what it left out."""
    listed = {rel for rel, _ in unused}
    # only what llmb-run archives: an install tree also holds code, virtual environments and container images
    trees = sorted(d / "experiments" for d in _workloads(folder).iterdir() if (d / "experiments").is_dir())
    for path in (p for tree in trees for p in sorted(tree.rglob("*"))):
        rel = _rel(path, folder)
        if rel in used or rel in listed or rel in _SKIPPED or (path.is_dir() and not path.is_symlink()):
            continue
        if path.is_symlink() or any(p.startswith(".") for p in path.relative_to(folder).parts):
            unused.append((rel, "a link or a hidden file (a bundle holds regular files only)"))
        else:
            unused.append((rel, "not a file clustercert reads for an llmb-run submission"))
