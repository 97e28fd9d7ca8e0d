"""`evidence init`: a draft bundle.yaml derived from a folder of raw evidence files as they were collected."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from clustercert.attest.atomic import write_atomic
from clustercert.catalog import LoadedCatalog, load_catalog, typed_catalog
from clustercert.errors import ClusterCertError, EvidenceError, UsageError
from clustercert.evidence.bundle import BUNDLE_FILE, MANIFEST_NAME, PLACEHOLDER
from clustercert.evidence.mlcommons import MlperfSystem, find_system
from clustercert.evidence.smi import Inferred, SmiReport, gpu_names, gpus_per_node, nvlink_domains
from clustercert.parsers import FORMATS, TRAINING_FORMATS, detect_format
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health import HEALTH_FORMATS, GpuReport, KernelLog, Prescreen
from clustercert.parsers.log_config import LogConfig, read_log_config
from clustercert.parsers.megatron_golden import MODEL_CONFIG, read_model_config
from clustercert.parsers.nccl_ranks import RankLine, read_rank_lines
from clustercert.parsers.nccl_tests import NcclTestsResult
from clustercert.parsers.training import TrainingLog

__all__ = ["Draft", "draft_bundle", "write_draft"]

# What a GPU name in nccl-tests' rank lines says about the system (most specific first).
_GPU_NAMES: tuple[tuple[str, str], ...] = (
    # GH200 (Grace Hopper) first: its name holds "H200", and no catalog is of it
    ("GH200", ""),
    ("GB300", "gb300-nvl72"), ("GB200", "gb200-nvl72"), ("B300", "b300"), ("B200", "b200"), ("H200", "h200-sxm"),
    ("H100 80GB HBM3", "h100-sxm"), ("H100-SXM", "h100-sxm"), ("H100 SXM", "h100-sxm"),
)
_KIND_OF_FORMAT = {
    "nccl-tests": ("collective", "scaling"), "mlperf": ("mlperf", "efficiency"), "sacct": ("scheduler", "resilience"),
    "dcgm": ("telemetry", "resilience"), "events": ("events", "resilience"),
    "rank-timings": ("rank-timings", "resilience"),
}
_FALSE = {"none", "null", "false", "0", ""}
# Systems whose NVLink domain spans nodes: (nodes, GPUs per node) of one domain (an NVL72 rack: 18 trays of 4 GPUs)
_NVL_DOMAIN = {"gb200-nvl72": (18, 4), "gb300-nvl72": (18, 4)}
# a rack token in a host name (`gb-r1-n01`, `rack07-node3`): the NVLink domain host naming shows
_RACK = re.compile(r"(?:^|[-_.])((?:rack|r)[-_]?\d+)(?=[-_.]|$)", re.IGNORECASE)
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


@dataclass
class _Field:
    key: str
    value: Any
    comment: str | None = None


@dataclass
class _Run:
    fields: list[_Field]
    note: str | None = None


@dataclass
class Draft:
    """The drafted bundle.yaml text, what it still needs, every file it did not use (with why), and the keys it
    left commented out for the user to fill in if they will (`system.interconnect`)."""

    text: str
    runs: int
    placeholders: list[str]
    unused: list[tuple[str, str]] = field(default_factory=list)
    optional: list[str] = field(default_factory=list)
    # the system's values nvidia-smi's reports gave, each with where from (`system.gpu: gb200-nvl72 (...)`)
    inferred: list[str] = field(default_factory=list)


def _scan(folder: Path, unused: list[tuple[str, str]]) -> Iterator[tuple[str, Path]]:
    """(relative path, path) of every evidence file or MLPerf result folder under `folder`, sorted; what cannot be
    evidence (hidden files, links that leave the folder) goes to `unused` with why."""
    real_root = folder.resolve()

    def walk(directory: Path) -> Iterator[Path]:
        for entry in sorted(directory.iterdir()):
            rel = entry.relative_to(folder).as_posix()
            if entry.name.startswith("."):
                unused.append((rel, "a hidden file or folder"))
                continue
            try:
                real = entry.resolve()
            except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a loop of links, 3.13 OSError
                raise EvidenceError(str(entry), "expected a file or a folder, got a symbolic link that loops. "
                                    "Remove the link or point it at the evidence") from None
            if real_root not in real.parents:
                unused.append((rel, "a link that leaves the folder (a bundle holds its evidence)"))
                continue
            if entry.is_dir() and not entry.is_symlink():
                if any(entry.glob("result_*.txt")):
                    yield entry  # an MLPerf result folder is one run, its files (system JSON included) with it
                else:
                    yield from walk(entry)
            else:
                yield entry
    for path in walk(folder):
        rel = path.relative_to(folder).as_posix()
        if rel in (BUNDLE_FILE, MANIFEST_NAME):
            continue
        yield rel, path


def _run_id(rel: str, taken: set[str]) -> str:
    stem = PurePosixPath(rel).name
    for suffix in (".log", ".txt", ".json", ".out", ".csv", ".parquet", ".jsonl"):
        stem = stem.removesuffix(suffix)
    base = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._") or "run"
    out, n = base, 2
    while out in taken:
        out, n = f"{base}-{n}", n + 1
    taken.add(out)
    return out


def _system_of(gpu_name: str) -> str | None:
    return next((sid for needle, sid in _GPU_NAMES if needle in gpu_name and "PCIe" not in gpu_name), None) or None


def _catalog_for(system: str, references_dir: Path) -> LoadedCatalog | None:
    for path in sorted(references_dir.glob("*.yaml")):
        try:
            cat = load_catalog(str(path), references_dir)
        except ClusterCertError:
            continue
        # an edition tied to a recipe release judges evidence of that release, not a folder of logs by default
        if cat.spec.system == system and cat.spec.edition is None:
            return cat
    return None


def _scope(hosts: list[str], all_nodes: list[str]) -> tuple[str, str]:
    if len(hosts) == 1:
        return "nvlink-domain", "one host: within its NVLink domain"
    if len(hosts) == 2:
        return "pair", "two hosts"
    if set(hosts) == set(all_nodes):
        return "full-scale", f"all {len(all_nodes)} hosts"
    return "cross-rack", f"{len(hosts)} of {len(all_nodes)} hosts"


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() and int(text) > 0 else None


def _launched_world(config: LogConfig) -> tuple[int, str] | None:
    """The world size a launcher printed, with where: torchrun's global_world_sizes, else PyTorch Lightning's
    `MEMBER: k/N` (None when neither printed one value)."""
    for key, where in (("global_world_sizes", "torchrun's global_world_sizes"),
                       ("MEMBER", "PyTorch Lightning's MEMBER k/N")):
        one = config.one(key)
        if one is not None and (size := _int(one[0])) is not None:
            return size, f"{where} at line {one[1]}"
    return None


def _training_fields(log: TrainingLog, config: LogConfig, catalog: LoadedCatalog | None) -> list[_Field]:
    """workload, precision, gpus, gbs, seq_len and parallelism from the configuration the log printed (or, for
    golden values, the model_config.yaml beside them: each value then names that file)."""
    out: list[_Field] = []
    apart = config.file != log.file
    said = f"{config.file} states" if apart else "the log prints"

    def line(number: int) -> str:
        return f"{config.file} line {number}" if apart else f"line {number}"

    def need(key: str, what: str) -> None:
        out.append(_Field(key, PLACEHOLDER, f"needed: {what}"))

    def seen(key: str) -> str:
        values = config.distinct(key)
        return ", ".join(f"{v} (line {n})" for v, n in values) if values else "not printed"

    shape = {k: config.one(k) for k in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size")}
    got = {k: _int(v[0]) if v else None for k, v in shape.items()}
    described = ("no model shape" if all(v is None for v in got.values()) else
                 ", ".join(f"{name} {got[key]}" for key, name in (("num_layers", "layers"), ("hidden_size", "hidden"),
                           ("num_attention_heads", "heads"), ("ffn_hidden_size", "ffn")) if got[key] is not None))
    matches = [] if catalog is None or None in (got["num_layers"], got["hidden_size"], got["num_attention_heads"]) \
        else [mid for mid, m in catalog.spec.models.items()
              if (m.layers, m.hidden, m.heads) == (got["num_layers"], got["hidden_size"], got["num_attention_heads"])
              and got["ffn_hidden_size"] in (None, m.ffn_hidden)]
    if len(matches) == 1:
        out.append(_Field("workload", matches[0], f"the catalog's model of this shape ({described})"))
    elif catalog is None:
        need("workload", f"a model id of the catalog ({said} {described})")
    else:
        need("workload", f"a model id of {catalog.spec.id} ({', '.join(sorted(catalog.spec.models))}); {said} "
             f"{described}, which matches none: name one, or add the model to a catalog of your own")
    fp8 = [v for v, _ in config.distinct("fp8") if v.lower() not in _FALSE]
    bf16 = [n for v, n in config.distinct("bf16") if v.lower() == "true"]
    precision = [n for v, n in config.distinct("precision") if "bf16" in v.lower()]
    if fp8:
        out.append(_Field("precision", "fp8", f"{said} fp8 {fp8[0]}"))
    elif bf16 or precision:
        out.append(_Field("precision", "bf16", f"{said} bf16 at line {(bf16 or precision)[0]}"))
    else:
        need("precision", f"bf16, fp8 or nvfp4 ({said} neither bf16 nor fp8 settings)")
    world = config.one("world_size")
    devices, nodes = config.one("devices"), config.one("num_nodes")
    if world and _int(world[0]):
        out.append(_Field("gpus", _int(world[0]), f"world_size at {line(world[1])}"))
    elif devices and nodes and _int(devices[0]) and _int(nodes[0]):
        gpus = (_int(devices[0]) or 0) * (_int(nodes[0]) or 0)
        out.append(_Field("gpus", gpus,
                          f"devices {devices[0]} x num_nodes {nodes[0]} ({line(devices[1])}, {line(nodes[1])})"))
    elif (launched := _launched_world(config)) is not None:
        out.append(_Field("gpus", *launched))
    elif apart:
        need("gpus", f"the GPU count of the run ({config.file} states none)")
    else:
        need("gpus", f"the GPU count of the run (world_size: {seen('world_size')}; devices: {seen('devices')}; "
             f"torchrun's global_world_sizes: {seen('global_world_sizes')})")
    logged = sorted({s.global_batch_size for s in log.steps if s.global_batch_size is not None})
    gbs = config.one("global_batch_size")
    if len(logged) == 1:
        out.append(_Field("gbs", logged[0], "the global batch size the step lines print"))
    elif gbs and _int(gbs[0]):
        out.append(_Field("gbs", _int(gbs[0]), f"global_batch_size at {line(gbs[1])}"))
    else:
        need("gbs", f"the global batch size (global_batch_size: {seen('global_batch_size')})")
    seq = config.one("seq_length") or config.one("encoder_seq_length")
    if seq and _int(seq[0]):
        out.append(_Field("seq_len", _int(seq[0]), f"seq_length at {line(seq[1])}"))
    else:
        need("seq_len", f"the sequence length (seq_length: {seen('seq_length')})")
    par: dict[str, int] = {}
    for key, name in (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
                      ("context_parallel_size", "cp"), ("virtual_pipeline_model_parallel_size", "vp"),
                      ("expert_model_parallel_size", "ep")):
        one = config.one(key)
        if one and _int(one[0]):
            par[name] = _int(one[0]) or 1
    if par:
        out.append(_Field("parallelism", par, f"as {config.file} states it" if apart else "as the log prints it"))
    return out


def draft_bundle(folder: Path, references_dir: Path, *, system: str | None = None, catalog: str | None = None,
                 limit: int = DEFAULT_LIMIT) -> Draft:
    """The draft of FOLDER/bundle.yaml: every value the files show, a FILL_IN (with what is needed) for the rest."""
    taken: set[str] = set()  # the run ids given so far
    unused: list[tuple[str, str]] = []
    collectives, others = _sorted_files(folder, unused, limit)
    hosts = sorted({h for _, parsed, _ in collectives for t in parsed.tests for h in t.hosts})
    mlperf = {rel: found for rel, fmt, _ in others if fmt == "mlperf" and (found := find_system(folder, rel))}
    claimed = {m.rel for m in mlperf.values() if m.rel is not None}  # a system JSON of MLCommons' systems/
    unused[:] = [u for u in unused if u[0] not in claimed]
    health = _health_files([o for o in others if o[1] in HEALTH_FORMATS], hosts, unused, limit)
    others = [o for o in others if o[1] not in HEALTH_FORMATS]
    smi = [SmiReport(h.rel, h.node, report) for h in health
           if isinstance(report := h.table.gpus if isinstance(h.table, Prescreen) else h.table, GpuReport)]
    system_fields, sys_id = _system_fields(collectives, system, catalog, list(mlperf.values()), smi)
    if not hosts and health and all(h.node != PLACEHOLDER for h in health):
        # no rank lines to list the nodes: the health files name them, one node each
        named = sorted({h.node for h in health})
        system_fields[-1] = _Field("nodes", named, f"the {len(named)} nodes of the health files (printed hostnames, "
                                   "folder or file names: check them)")
    loaded, catalog_field = _catalog_field(folder, references_dir, catalog, sys_id)
    if system_fields[0].value == "" and loaded is not None:
        system_fields[0] = _Field("gpu", loaded.spec.system, "default: the system the catalog certifies")
    domains = _domains_field(str(system_fields[0].value), system_fields[2].value, smi)
    if domains is not None:
        system_fields.append(domains)
    if len(hosts) > 1:
        # the files do not say which network joins the nodes (NCCL_DEBUG's NET/IB lines would, nccl-tests' do not):
        # a commented-out line shows where it goes, as a folder of collectives alone is usable without it
        kinds = "|".join(sorted(loaded.spec.scale_out_gbps)) if loaded is not None else "infiniband-ndr|..."
        system_fields.append(_Field("# interconnect", f"{{scale_out: <{kinds}>, nics_per_node: <NICs per node>}}",
                                    "not in the files: uncomment and fill in to judge busbw between nodes against "
                                    "targets (without it, it is measured and compared pair with pair only)"))
    runs = [_collective_run(rel, parsed, hosts, taken) for rel, parsed, _ in collectives]
    golden = _golden_configs(folder, others, unused, limit)
    other_runs, training = _other_runs(others, loaded, taken, unused, limit, mlperf, golden)
    runs += other_runs
    runs += [_health_run(h, taken) for h in health]
    top = [
        _Field("schema_version", 1),
        ("cluster", [_Field("name", re.sub(r"[^A-Za-z0-9._-]+", "-", folder.resolve().name) or "cluster",
                            "default: the folder's name"),
                     _Field("provider", "not given", "who operates the cluster (the report's cover shows it)")]),
        ("system", system_fields),
        catalog_field,
        _Field("recipe_version", PLACEHOLDER, "needed: the recipe (container) version of the training runs")
        if training else _Field("recipe_version", "none", "no training run: no recipe"),
        _Field("timezone", "UTC", "default: sacct times carry no offset; set the cluster's zone"),
    ]
    if attached := sorted({c.file for c in golden.values()}):
        top.append(_Field("attachments", attached, "the settings of the golden values beside them (sealed, not "
                          "judged): their runs' values name the line they come from"))
    text = _emit(top, runs, unused)
    placeholders = [line.split("#", 1)[0].strip() for line in text.splitlines() if PLACEHOLDER in line.split("#")[0]]
    optional = [f"system.{f.key[2:]}" for f in system_fields if f.key.startswith("# ")]
    inferred = [f"system.{f.key}: {_value(f.value)} ({f.comment})" for f in system_fields
                if f.value != PLACEHOLDER and f.comment and "nvidia-smi" in f.comment]
    return Draft(text, len(runs), placeholders, unused, optional, inferred)


_Collective = tuple[str, NcclTestsResult, list[RankLine]]  # (rel, parsed, rank lines)


def _sorted_files(folder: Path, unused: list[tuple[str, str]],
                  limit: int) -> tuple[list[_Collective], list[tuple[str, str, Path]]]:
    """The folder's nccl-tests outputs (parsed, with their rank lines) and its other files of a known format (rel,
    format, path); each file that is neither goes to `unused`, with why."""
    collectives: list[_Collective] = []
    others: list[tuple[str, str, Path]] = []
    for rel, path in _scan(folder, unused):
        try:
            fmt = detect_format(path, rel)
        except EvidenceError as exc:
            unused.append((rel, exc.message))
            continue
        if fmt == "nccl-tests":
            try:
                parsed = FORMATS[fmt](path, rel, limit=limit)
                ranks = read_rank_lines(path, rel, limit=limit)
            except EvidenceError as exc:
                unused.append((rel, f"nccl-tests output its parser cannot use: {exc}"))
                continue
            collectives.append((rel, parsed, ranks))
        else:
            others.append((rel, fmt, path))
    return collectives, others


def _whole_ranks(collectives: list[_Collective]) -> list[RankLine]:
    """The rank lines of the tests that print every one of their ranks: a test a copy kept only some rank lines of
    shows neither its nodes nor how many GPUs each holds."""
    out: list[RankLine] = []
    for _, parsed, ranks in collectives:
        spans = [(t.line, t.last_line) for t in parsed.tests if t.hosts]
        out += [r for r in ranks if any(first <= r.line <= last for first, last in spans)]
    return out


def _system_fields(collectives: list[_Collective], system: str | None, catalog: str | None,
                   mlperf: list[MlperfSystem], smi: list[SmiReport]) -> tuple[list[_Field], str | None]:
    """The system's fields as nccl-tests' rank lines show them (the GPU's system, GPUs per node, the nodes), else
    as MLPerf's system JSON states them, else as nvidia-smi's reports print them, and the system id; the gpu
    field's value is "" where the catalog given will say it."""
    whole = _whole_ranks(collectives)
    hosts = sorted({r.host for r in whole})
    per_host: dict[str, set[int]] = {}
    for r in whole:
        per_host.setdefault(r.host, set()).add(r.device)
    printed = gpu_names(smi)  # product name -> where nvidia-smi prints it first
    others = {r.gpu for _, _, ranks in collectives for r in ranks} | {m.gpu_name for m in mlperf if m.gpu_name}
    names = sorted(others | set(printed))
    shown = ", ".join(f"{n} ({printed[n]})" if n in printed and n not in others else n for n in names)
    fields: list[_Field] = []
    systems = sorted({s for s in map(_system_of, names) if s})
    sys_id = system or (systems[0] if len(systems) == 1 else None)
    if system is not None:
        fields.append(_Field("gpu", system, "given with --system"))
    elif len(systems) > 1:
        # one bundle certifies one system: evidence of two chips is a question, never silently one of them
        fields.append(_Field("gpu", PLACEHOLDER, f"needed: the files name GPUs of {len(systems)} systems "
                             f"({', '.join(systems)}: {shown}); keep one system's evidence in this folder and give "
                             "its id"))
    elif sys_id is not None and not others:
        fields.append(_Field("gpu", sys_id, f"nvidia-smi's product name {shown}"))
    elif sys_id is not None:
        fields.append(_Field("gpu", sys_id, f"nccl-tests rank lines name {shown}"))
    elif catalog is not None:
        fields.append(_Field("gpu", "", ""))  # the catalog's system, set once it is loaded
    else:
        fields.append(_Field("gpu", PLACEHOLDER, "needed: the system id of the catalog (gb200-nvl72, "
                             f"h100-sxm, h200-sxm, b200 or your catalog's); rank lines name {names or 'none'}"))
    stated = sorted({(m.gpus_per_node, m.nodes, m.json_rel) for m in mlperf if m.gpus_per_node and m.nodes})
    if per_host:
        fields.append(_Field("gpus_per_node", max(len(d) for d in per_host.values()),
                             "the most devices one host shows in nccl-tests rank lines"))
        fields.append(_Field("nodes", hosts, f"the {len(hosts)} hosts of nccl-tests' rank lines"))
    elif len({(g, n) for g, n, _ in stated}) == 1:
        per_node, count, where = stated[0]
        name = re.sub(r"[^a-z0-9._-]+", "-", (mlperf[0].name or "node").lower()).strip("-._") or "node"
        fields.append(_Field("gpus_per_node", per_node, f"accelerators_per_node in {where}"))
        # MLPerf states how many nodes, never their host names: numbered, to be renamed where the hosts are known
        fields.append(_Field("nodes", [f"{name}-n{i:03d}" for i in range(1, count + 1)],
                             f"number_of_nodes {count} in {where} (no host names there: numbered; rename them to the "
                             "hosts if you know them)"))
    elif (attached := gpus_per_node(smi)) is not None:
        fields.append(_Field("gpus_per_node", PLACEHOLDER if attached.value is None else attached.value,
                             attached.why))
        fields.append(_Field("nodes", [PLACEHOLDER], "needed: the node hostnames (no nccl-tests test prints all its "
                             "rank lines)"))
    else:
        fields.append(_Field("gpus_per_node", PLACEHOLDER, "needed: GPUs per node (no nccl-tests test prints all "
                             "its rank lines)"))
        fields.append(_Field("nodes", [PLACEHOLDER], "needed: the node hostnames (no nccl-tests test prints all its "
                             "rank lines)"))
    return fields, sys_id


def _domains_field(sys_id: str, nodes: Any, smi: list[SmiReport]) -> _Field | None:
    """The NVLink domains of a system whose domain spans nodes (NVL72): from the fabric clique nvidia-smi's reports
    print where they print one, else from a rack token every host name holds where each rack fits one domain, else
    asked for; None for a system whose domain is one node (nothing to declare: each node is its own)."""
    if sys_id not in _NVL_DOMAIN:
        return None
    per_domain, gpus = _NVL_DOMAIN[sys_id]
    size = f"{sys_id}: one NVLink domain is at most {per_domain} nodes x {gpus} GPUs"
    named = isinstance(nodes, list) and PLACEHOLDER not in nodes
    fabric: Inferred | None = nvlink_domains(smi, nodes if named else [], per_domain)
    if fabric is not None:
        return _Field("nvlink_domains", PLACEHOLDER if fabric.value is None else fabric.value,
                      fabric.why if fabric.value is not None else f"{fabric.why} ({size})")
    racks: dict[str, list[str]] = {}
    for node in nodes if named else []:
        found = _RACK.search(node)
        if found is None:
            racks = {}
            break
        racks.setdefault(found.group(1).lower(), []).append(node)
    if racks and all(len(members) <= per_domain for members in racks.values()):
        return _Field("nvlink_domains", [{"name": name, "nodes": members} for name, members in racks.items()],
                      f"from the rack in each host name ({size}): check against nvidia-smi -q's Fabric ClusterUUID "
                      "and CliqueId")
    return _Field("nvlink_domains", PLACEHOLDER, f"needed: the NVLink domains ({size}), each as {{name: ..., nodes: "
                  "[...]}; nvidia-smi -q's Fabric ClusterUUID and CliqueId tell which nodes share one")


def _catalog_field(folder: Path, references_dir: Path, catalog: str | None,
                   sys_id: str | None) -> tuple[LoadedCatalog | None, _Field]:
    """The catalog given (as bundle.yaml names it: relative to the bundle), else the shipped one for the system."""
    if catalog is not None:
        written = catalog
        typed = typed_catalog(catalog, folder)
        if typed is not None and typed != catalog:  # typed relative to where the command ran; bundle.yaml names it
            written = os.path.relpath(str(Path(typed).resolve()), str(folder.resolve()))  # relative to the bundle
        loaded = load_catalog(written, references_dir, relative_to=folder)
        return loaded, _Field("catalog", written, f"given with --catalog {catalog}")
    if sys_id is not None and (found := _catalog_for(sys_id, references_dir)) is not None:
        return found, _Field("catalog", found.spec.id, f"default: the shipped catalog for {sys_id}")
    return None, _Field("catalog", PLACEHOLDER, "needed: a catalog id in references/ or a path to your own")


def _collective_run(rel: str, parsed: NcclTestsResult, hosts: list[str], taken: set[str]) -> _Run:
    """A collective run from an nccl-tests output: its scope from its hosts among all `hosts`, where every test
    prints all its rank lines; what the file cannot say (the nodes of a test without its rank lines, one GPU count
    for tests at several scales) is asked for."""
    # a test read without its rank lines, or with only some (one that stopped before both says nothing)
    partial = [t for t in parsed.tests if not t.hosts and (t.hosts_seen or t.rows)]
    run_hosts = sorted({h for t in parsed.tests for h in t.hosts})
    names_of = ", ".join(t.collective for t in parsed.tests)
    aborted = [t for t in parsed.tests if t.error and not t.truncated]
    cut = [t for t in parsed.tests if t.truncated]
    counts = sorted({t.ranks for t in parsed.tests if t.ranks})
    said = (f"; {len(aborted)} aborted" if aborted else "") + (f"; {len(cut)} truncated capture" if cut else "")
    fields = [_Field("id", _run_id(rel, taken)), _Field("phase", "scaling"), _Field("kind", "collective"),
              _Field("format", "nccl-tests", names_of + said)]
    if run_hosts and not partial:
        scope, why = _scope(run_hosts, hosts)
        fields.append(_Field("scope", scope, why))
        fields.append(_Field("nodes", run_hosts))
    else:
        lines = ", ".join(str(t.line) for t in partial[:4]) + (" ..." if len(partial) > 4 else "")
        why = (f"the tests at line(s) {lines} do not print all their rank lines: their nodes are unknown" if partial
               else "the file has no rank lines")
        fields.append(_Field("scope", PLACEHOLDER, f"needed: nvlink-domain, cross-rack, full-scale or pair ({why})"))
    if len(counts) == 1 and not any(t.ranks is None and t.rows for t in parsed.tests):
        fields.append(_Field("gpus", counts[0], "ranks of the test"))
    elif len(counts) > 1:
        fields.append(_Field("gpus", PLACEHOLDER, f"needed: the file holds tests at {', '.join(map(str, counts))} "
                             "ranks and a run has one GPU count: split it into one file per scale, each its own run"))
    elif partial:
        fields.append(_Field("gpus", PLACEHOLDER, "needed: the GPUs the tests ran on (the file prints no rank lines "
                             f"for the test(s) at line(s) {', '.join(str(t.line) for t in partial[:4])})"))
    fields.append(_Field("files", [rel]))
    return _Run(fields)


def _golden_configs(folder: Path, others: list[tuple[str, str, Path]], unused: list[tuple[str, str]],
                    limit: int) -> dict[str, LogConfig]:
    """The model_config.yaml beside each golden-values file (Megatron-LM's functional-test layout), read, by the
    golden file; a config read is taken off `unused`, one its reader refuses stays there with why."""
    out: dict[str, LogConfig] = {}
    for rel, fmt, _ in others:
        beside = PurePosixPath(rel).parent / MODEL_CONFIG
        if fmt != "megatron-golden" or not (folder / beside).is_file():
            continue
        try:
            out[rel] = read_model_config(folder / beside, beside.as_posix(), limit=limit)
        except EvidenceError as exc:
            unused[:] = [(u, exc.message if u == beside.as_posix() else why) for u, why in unused]
    read = {c.file for c in out.values()}
    unused[:] = [u for u in unused if u[0] not in read]
    return out


def _other_runs(others: list[tuple[str, str, Path]], loaded: LoadedCatalog | None, taken: set[str],
                unused: list[tuple[str, str]], limit: int,
                mlperf: dict[str, MlperfSystem], golden: dict[str, LogConfig]) -> tuple[list[_Run], bool]:
    """The runs of the files other than nccl-tests outputs, and whether one is a training run; a file its parser
    cannot use goes to `unused`, with why. A golden-values file's settings come from its model_config.yaml."""
    runs: list[_Run] = []
    training = False
    for rel, fmt, path in others:
        if fmt in TRAINING_FORMATS:
            try:
                log = TRAINING_FORMATS[fmt](path, rel, limit=limit)
                config = golden.get(rel) or read_log_config(path, rel, limit=limit)
            except EvidenceError as exc:
                unused.append((rel, f"a {fmt} log its parser cannot use: {exc}"))
                continue
            training = True
            fields = [_Field("id", _run_id(rel, taken)), _Field("phase", "efficiency"), _Field("kind", "training"),
                      _Field("format", fmt, f"{len(log.steps)} steps"), *_training_fields(log, config, loaded),
                      _Field("files", [rel])]
            runs.append(_Run(fields))
            continue
        kind, phase = _KIND_OF_FORMAT[fmt]
        fields = [_Field("id", _run_id(rel, taken)), _Field("phase", phase), _Field("kind", kind),
                  _Field("format", fmt)]
        if fmt == "sacct":
            try:
                FORMATS["sacct"](path, rel, limit=limit)
            except EvidenceError as exc:
                width = _sacct_width(path)
                if "header line or a field list" not in exc.message:
                    unused.append((rel, f"a sacct dump its parser cannot use: {exc}"))
                    continue
                fields.append(_Field("fields", [PLACEHOLDER], f"needed: the dump has no header line: the {width} "
                                     "field names of its `sacct --format` list, in order"))
        if fmt == "mlperf" and (precision := _mlperf_precision(path, rel, limit)) is not None:
            fields.append(precision)
        found = mlperf.get(rel)
        if found is not None and found.rel is not None:  # MLCommons' systems/<system>.json: listed with its result
            fields.append(_Field("files", [rel, found.rel], f"the result and its system {found.name or '(unnamed)'}"))
        else:
            fields.append(_Field("files", [rel]))
        runs.append(_Run(fields))
    return runs, training


def _mlperf_precision(path: Path, rel: str, limit: int) -> _Field | None:
    """The precision an MLPerf result's runs print in their configuration (the peak of its MFU), where every
    result file prints the same one; None (the field left out, MFU not derived) where they print none or differ."""
    files = sorted(path.glob("result_*.txt")) if path.is_dir() else [path]
    seen: dict[str, str] = {}
    for file in files:
        shown = f"{rel}/{file.name}" if path.is_dir() else rel
        try:
            config = read_log_config(file, shown, limit=limit)
        except EvidenceError:
            return None
        fp8 = [(v, n) for v, n in config.distinct("fp8") if v.lower() not in _FALSE]
        bf16 = [n for v, n in config.distinct("bf16") if v.lower() == "true"]
        bf16 += [n for v, n in config.distinct("precision") if "bf16" in v.lower()]
        if fp8:
            seen.setdefault("fp8", f"{shown} prints fp8: {fp8[0][0]} at line {fp8[0][1]}")
        elif bf16:
            seen.setdefault("bf16", f"{shown} prints bf16 at line {bf16[0]}")
        else:
            return None
    if len(seen) != 1:
        return None
    ((precision, said),) = seen.items()
    return _Field("precision", precision, f"{said}, as do all {len(files)} runs (the peak of the MFU)")


@dataclass(frozen=True)
class _Health:
    """A node-health file: its format, what it holds in a few words, and the node it is from (FILL_IN when
    nothing says) with how that was found."""

    rel: str
    fmt: str
    found: str
    node: str
    why: str
    table: object = None


def _health_files(files: list[tuple[str, str, Path]], hosts: list[str], unused: list[tuple[str, str]],
                  limit: int) -> list[_Health]:
    """Each node-health file parsed (one its parser cannot use goes to `unused`, with why) and assigned to a node:
    the hostname it prints, else a folder or file name that names a known node (nccl-tests' hosts, the hostnames
    the health files print), else its own folder's name, else FILL_IN."""
    parsed: list[tuple[str, str, object]] = []
    for rel, fmt, path in files:
        try:
            parsed.append((rel, fmt, FORMATS[fmt](path, rel, limit=limit)))
        except EvidenceError as exc:
            unused.append((rel, f"a {fmt} output its parser cannot use: {exc}"))
    known = set(hosts) | {host for _, _, table in parsed if (host := _printed_host(table)[0]) is not None}
    out: list[_Health] = []
    for rel, fmt, table in parsed:
        node, why = _printed_host(table)
        if node is None:
            node, why = _named_node(rel, known)
        out.append(_Health(rel, fmt, _health_found(table), node, why, table))
    return out


def _printed_host(table: object) -> tuple[str | None, str]:
    """The hostname a health output prints (the prescreen's `Host:` line, a syslog's host column), and where."""
    if isinstance(table, Prescreen) and table.host is not None:
        return table.host, f"the hostname it prints (line {table.host_line})"
    if isinstance(table, KernelLog) and len(table.hosts) == 1:
        return table.hosts[0], "the hostname its syslog lines print"
    return None, ""


def _named_node(rel: str, known: set[str]) -> tuple[str, str]:
    """The node a file's folders or name give: a known node first (innermost folder, then the file name's lead),
    else the file's own folder (how per-node collection scripts lay outputs out), else FILL_IN."""
    parts = PurePosixPath(rel).parts
    for folder in reversed(parts[:-1]):
        if folder in known:
            return folder, f"its folder's name ({folder}/), a node the evidence names"
    name = parts[-1]
    lead = [n for n in known if name.startswith(n) and name[len(n):len(n) + 1] in (".", "_", "-")]
    if lead:
        node = max(lead, key=len)
        return node, f"its file name, which starts with {node}, a node the evidence names"
    if len(parts) > 1 and _HOST.match(parts[-2]):
        return parts[-2], f"its folder's name ({parts[-2]}/): check that it is the node's hostname"
    return PLACEHOLDER, ("needed: the node this output is from (it prints no hostname, and no folder or file name "
                         "says it)")


# what a health output holds, by its JSON's list key: (key, one, many)
_HELD = (("gpus", "GPU", "GPUs"), ("tests", "test", "tests"), ("ports", "port", "ports"),
         ("devices", "device", "devices"), ("steps", "prescreen step", "prescreen steps"),
         ("xids", "Xid line", "Xid lines"), ("entries", "entry", "entries"))


def _health_found(table: object) -> str:
    """What a health output holds, in a few words (its format's parser read it whole)."""
    to_json = getattr(table, "to_json", None)
    held = to_json() if callable(to_json) else {}
    said = [f"{len(value):,} {one if len(value) == 1 else many}" for key, one, many in _HELD
            if isinstance(value := held.get(key), list)][:1]
    carrier = held.get("carrier")
    if isinstance(carrier, list) and carrier:  # a kernel log's link flaps, beside its Xid lines
        said.append(f"{len(carrier):,} carrier event{'' if len(carrier) == 1 else 's'}")
    return ", ".join(said) or "read"


def _health_run(h: _Health, taken: set[str]) -> _Run:
    """A health run: one node's tool output (or prescreen), judged in the health phase."""
    node = h.node if h.node != PLACEHOLDER else "node"
    name = PurePosixPath(h.rel).name
    fields = [_Field("id", _run_id(name if name.startswith(node) else f"{node}-{name}", taken)),
              _Field("phase", "health"),
              _Field("kind", "health"), _Field("format", h.fmt, h.found), _Field("nodes", [h.node], h.why),
              _Field("files", [h.rel])]
    return _Run(fields)


def _sacct_width(path: Path) -> int:
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if raw.strip() and not raw.lstrip().startswith("#"):
            return len(raw.split("|"))
    return 0


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _line(indent: str, f: _Field) -> str:
    # a key commented out ("# interconnect") is a hint whose value is a pattern to fill in, written as it is
    text = f"{indent}{f.key}: {f.value if f.key.startswith('#') else _value(f.value)}"
    return f"{text}  # {f.comment}" if f.comment else text


def _emit(top: list[Any], runs: list[_Run], unused: list[tuple[str, str]]) -> str:
    lines = [
        "# Drafted by `clustercert evidence init` from the files of this folder (none of them was changed).",
        f"# Each {PLACEHOLDER} is a value the files do not show: replace it as its comment says; `evidence seal`",
        "# and `certify` refuse this bundle while one is left. Defaults are marked as such: check them.",
    ]
    for item in top:
        if isinstance(item, tuple):
            name, fields = item
            lines.append(f"{name}:")
            lines += [_line("  ", f) for f in fields]
        else:
            lines.append(_line("", item))
    lines.append("runs:")
    for run in runs:
        first, *rest = run.fields
        lines.append(_line("  - ", first))
        lines += [_line("    ", f) for f in rest]
    if unused:
        lines.append("# Files not used (each with why):")
        lines += [f"#   {rel}: {why}" for rel, why in unused]
    return "\n".join(lines) + "\n"


def write_draft(folder: Path, references_dir: Path, *, system: str | None = None, catalog: str | None = None,
                force: bool = False, limit: int = DEFAULT_LIMIT) -> tuple[Path, Draft]:
    """Write FOLDER/bundle.yaml (never over an existing one unless `force`); no other file is touched."""
    if not folder.is_dir():
        got = "a file" if folder.exists() else "nothing"
        raise UsageError(f"{folder}: expected a folder of evidence files, got {got}")
    out = folder / BUNDLE_FILE
    if out.exists() and not force:
        raise UsageError(f"{out}: a bundle.yaml is already there. Pass --force to replace it with a new draft")
    draft = draft_bundle(folder, references_dir, system=system, catalog=catalog, limit=limit)
    if draft.runs == 0:
        raise EvidenceError(str(folder), "expected evidence files of a known format, found none"
                            + (f" ({len(draft.unused)} files not recognised)" if draft.unused else ""))
    write_atomic(out, draft.text.encode())  # a full disk leaves a bundle.yaml replaced with --force as it was
    return out, draft
