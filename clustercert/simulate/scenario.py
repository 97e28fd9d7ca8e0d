"""Scenarios (seed, degraded, h100) -> a sealed bundle: training, collective and resilience evidence."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

import yaml

from clustercert.catalog import Baseline, LoadedCatalog
from clustercert.errors import UsageError
from clustercert.evidence.bundle import load_bundle, seal_bundle
from clustercert.metrics.flops import model_flops_per_sequence
from clustercert.metrics.throughput import tflops_per_gpu
from clustercert.simulate.faults import Fault, FaultKind, parse_fault
from clustercert.simulate.megatron import MegatronRun, render_megatron_log
from clustercert.simulate.nccl import NcclRun, render_nccl_tests
from clustercert.simulate.nemo import NemoRun, render_nemo_log
from clustercert.simulate.resilience import ResilienceJob, fixed_start, simulate_resilience
from clustercert.simulate.topology import System, Topology, build_topology

__all__ = ["SCENARIOS", "Scenario", "ScenarioName", "cluster_scale", "pairwise_rounds", "scenario_for", "write_bundle"]


class ScenarioName(StrEnum):
    """The shipped scenarios; `custom` takes every setting from the command line."""

    SEED = "seed"
    DEGRADED = "degraded"
    H100 = "h100"


@dataclass(frozen=True)
class Scenario:
    """Everything a bundle is simulated from; the same Scenario gives byte-identical files."""

    system: System
    gpus: int
    seed: int
    margins: dict[tuple[str, str], float]  # (workload, precision) -> fractional step-time margin over baseline
    scaling_gpus: tuple[int, ...]
    faults: tuple[Fault, ...] = ()
    repeats: int = 3
    start: str = "2026-11-02T03:00:00+00:00"
    resilience_gpus: int = 128
    resilience_hours: float = 3.0
    resilience_workload: tuple[str, str] = ("llama3-70b", "fp8")
    telemetry_every_s: float = 60.0  # DCGM sampling interval of the resilience run
    timings_every: int = 10  # per-rank timings of every N-th step of the resilience run
    # None: the shipped samples' pairs (one pair per two racks on GB200, neighbours on H100); 0: a full pairwise
    # sweep (every pair of the allocation's nodes, n(n-1)/2, in n-1 rounds of n/2 disjoint pairs); K: its first K
    # rounds (every node in every round)
    pairwise_rounds: int | None = None
    megatron: frozenset[tuple[str, str, int]] = frozenset()  # (workload, precision, GPUs) logged by Megatron-Bridge
    cluster_name: str = "example-cloud-gb200-east"
    recipe_version: str = "25.05.05"
    extra: dict[str, str] = field(default_factory=dict)


# Step times this much faster than the baseline (the seed announcement's MFU deltas).
SEED_MARGINS = {
    ("deepseek-v3", "bf16"): 0.019,
    ("grok1-314b", "bf16"): 0.047,
    ("llama3.1-405b", "fp8"): 0.038,
    ("llama3-70b", "fp8"): 0.024,
}
SCENARIOS: dict[ScenarioName, Scenario] = {
    ScenarioName.SEED: Scenario(
        system=System.GB200_NVL72, gpus=512, seed=7, margins=SEED_MARGINS, scaling_gpus=(128, 256),
        megatron=frozenset({("llama3-70b", "fp8", 128), ("llama3-70b", "fp8", 256)}),
        faults=(
            parse_fault("slow-gpu:node=gb-r2-n07,gpu=2,pct=15,at=50m,reported=yes"),
            parse_fault("node-fail:node=gb-r1-n11,at=2h,reported=yes"),
        ),
    ),
    ScenarioName.DEGRADED: Scenario(
        system=System.GB200_NVL72, gpus=512, seed=11, scaling_gpus=(128, 256),
        megatron=frozenset({("llama3-70b", "fp8", 128), ("llama3-70b", "fp8", 256), ("llama3-70b", "fp8", 512)}),
        margins={**SEED_MARGINS, ("grok1-314b", "bf16"): -0.072},
        faults=(
            parse_fault("bad-link:a=gb-r3-n09,b=gb-r4-n09,pct=60"),
            parse_fault("slow-gpu:node=gb-r2-n05,gpu=1,pct=12,at=20m,reported=no"),
            parse_fault("node-fail:node=gb-r1-n11,at=2h,reported=yes"),
        ),
        cluster_name="example-cloud-gb200-west",
    ),
    ScenarioName.H100: Scenario(
        system=System.H100_SXM, gpus=1024, seed=3, scaling_gpus=(128, 256, 1024),
        margins={
            ("llama3.1-70b", "bf16"): 0.012,
            ("llama3.1-70b", "fp8"): 0.009,
            ("llama3.1-405b", "bf16"): 0.015,
            ("llama3.1-405b", "fp8"): 0.007,
        },
        faults=(
            parse_fault("slow-gpu:node=h100-n0006,gpu=5,pct=14,at=40m,reported=yes"),
            parse_fault("node-fail:node=h100-n0011,at=2h,reported=yes"),
        ),
        resilience_workload=("llama3.1-70b", "fp8"),
        cluster_name="example-cloud-h100-central",
        recipe_version="25.04.02",
    ),
}


def scenario_for(
    name: ScenarioName, *, seed: int | None = None, gpus: int | None = None, system: System | None = None,
    faults: tuple[Fault, ...] | None = None, repeats: int | None = None, start: str | None = None,
) -> Scenario:
    """The named scenario with any command-line overrides applied."""
    base = SCENARIOS[name]
    if system is not None and system is not base.system:
        raise UsageError(f"--system {system.value}: the {name.value} scenario is {base.system.value}; "
                         "pick the scenario of that system")
    return replace(
        base,
        seed=base.seed if seed is None else seed,
        gpus=base.gpus if gpus is None else gpus,
        faults=base.faults if faults is None else faults,
        repeats=base.repeats if repeats is None else repeats,
        start=base.start if start is None else start,
    )


def cluster_scale(
    gpus: int, *, hours: float = 24.0, telemetry_every_s: float = 1.0, timings_every: int = 1,
    pairwise: int = 0,
) -> Scenario:
    """The seed scenario's cluster (GB200 NVL72) at full evidence size: the suite's workloads x three repeats at
    512 GPUs, scaling from 128 GPUs up to `gpus` in doublings, nccl-tests at every scope with a full pairwise
    sweep (`pairwise` 0, else its first K rounds), and a resilience run of `hours` on all `gpus` GPUs with DCGM
    telemetry every `telemetry_every_s` and per-rank timings of every `timings_every`-th step."""
    base = SCENARIOS[ScenarioName.SEED]
    scaling = tuple(g for g in (128 * 2**k for k in range(12)) if g <= gpus and g != 512)
    return replace(
        base, gpus=gpus, scaling_gpus=scaling, resilience_gpus=gpus, resilience_hours=hours,
        telemetry_every_s=telemetry_every_s, timings_every=timings_every, pairwise_rounds=pairwise,
        megatron=frozenset(), cluster_name=f"example-cloud-gb200-scale-{gpus}",
    )


def pairwise_rounds(nodes: tuple[str, ...], rounds: int = 0) -> list[list[tuple[str, str]]]:
    """A full pairwise sweep as a round-robin schedule (the circle method): n-1 rounds (n even; with n odd, n
    rounds and one node resting in each) of disjoint pairs, every pair of `nodes` exactly once; `rounds` > 0 keeps
    the first that many. Each pair is in the nodes' order."""
    order = {n: i for i, n in enumerate(nodes)}
    ring: list[str | None] = list(nodes) + ([None] if len(nodes) % 2 else [])
    m = len(ring)
    out: list[list[tuple[str, str]]] = []
    for _ in range(m - 1):
        pairs: list[tuple[str, str]] = []
        for i in range(m // 2):
            a, b = ring[i], ring[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if order[a] < order[b] else (b, a))
        out.append(sorted(pairs, key=lambda p: order[p[0]]))
        ring = [ring[0], ring[-1], *ring[1:-1]]
        if rounds and len(out) == rounds:
            break
    return out


# Large-message busbw (GB/s) each scope reaches on a healthy fabric, per collective.
# Large-message busbw a healthy cluster reaches, about the collective link model's expected value
# (references/README.md, "Collective target model": efficiency x bound). GB200 cross-rack runs span 2 NVL72
# domains with 64 GPUs in each (bound 900 for all_reduce/all_gather/reduce_scatter, 50 x 127/64 = 99.2 for
# alltoall), full-scale 8 domains of 64 (alltoall 50 x 511/448 = 57.0); H100 runs 8 GPUs per node-domain.
# The GB200 intra-rack all_reduce clears NVIDIA's Cluster Readiness Engine gate of 900 GB/s.
_BUSBW = {
    System.GB200_NVL72: {
        "nvlink-domain": {"all_reduce": 948.0, "all_gather": 688.0, "reduce_scatter": 676.0, "alltoall": 612.0,
                          "sendrecv": 741.0},
        "cross-rack": {"all_reduce": 752.0, "all_gather": 668.0, "reduce_scatter": 664.0, "alltoall": 90.4,
                       "sendrecv": 46.1},
        "full-scale": {"all_reduce": 741.0, "all_gather": 660.0, "reduce_scatter": 657.0, "alltoall": 52.1,
                       "sendrecv": 46.0},
        "pair": {"all_reduce": 46.4, "alltoall": 45.8, "sendrecv": 46.3},
    },
    System.H100_SXM: {
        "nvlink-domain": {"all_reduce": 478.0, "all_gather": 352.0, "reduce_scatter": 349.0, "alltoall": 301.0,
                          "sendrecv": 372.0},
        "cross-rack": {"all_reduce": 361.0, "all_gather": 328.0, "reduce_scatter": 322.0, "alltoall": 41.2,
                       "sendrecv": 46.3},
        "full-scale": {"all_reduce": 352.0, "all_gather": 319.0, "reduce_scatter": 316.0, "alltoall": 40.6,
                       "sendrecv": 46.1},
        "pair": {"all_reduce": 46.5, "alltoall": 45.9, "sendrecv": 46.4},
    },
}
_CHECKPOINT_S = 300.0  # the resilience job checkpoints about every 5 minutes (asynchronously)
_SCALING_LOSS = 0.004  # per doubling of GPUs: step time grows this much (weak scaling, nearly flat)


def _write(out: Path, rel: str, data: str | bytes) -> None:
    path = out / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")


def _training_runs(out: Path, sc: Scenario, topo: Topology, catalog: LoadedCatalog) -> list[dict[str, object]]:
    runs: list[dict[str, object]] = []
    for index, ((workload, precision), margin) in enumerate(sorted(sc.margins.items())):
        baseline = catalog.baseline_for(workload, precision, 512)
        if baseline is None:
            raise UsageError(f"catalog {catalog.spec.id}: no 512-GPU baseline for {workload} {precision}")
        base_mean = baseline.step_time_s / (1.0 + margin)
        shape = catalog.spec.models[workload].shape()
        points = [(512, r) for r in range(1, sc.repeats + 1)]
        points += [(g, 1) for g in sc.scaling_gpus if g != 512 and _fits(baseline, g, sc.gpus)]
        for gpus, repeat in points:
            ref = catalog.baseline_for(workload, precision, gpus) or baseline
            gbs = baseline.gbs * gpus // 512
            mean = base_mean * (1.0 + _SCALING_LOSS * math.log2(gpus / 512))
            flops = model_flops_per_sequence(shape, baseline.seq_len, ref.flops_convention.flops())
            run_id = f"{workload}-{precision}-{gpus}-r{repeat}"
            rel = f"training/{workload}/{precision}/{gpus}/r{repeat}.log"
            run_seed = sc.seed * 1000 + index * 100 + gpus // 64 * 10 + repeat
            tflops = tflops_per_gpu(flops, gbs, mean, gpus)
            fmt = "megatron" if (workload, precision, gpus) in sc.megatron else "nemo"
            if fmt == "megatron":
                text = render_megatron_log(MegatronRun(
                    steps=50, gbs=gbs, mean_step_s=mean, noise=0.004, tflops_at_mean=tflops, seed=run_seed,
                    start=fixed_start(sc.start)))
            else:
                text = render_nemo_log(NemoRun(
                    name=run_id, steps=50, gbs=gbs, mean_step_s=mean, noise=0.004, tflops_at_mean=tflops,
                    seed=run_seed, params=catalog.spec.models[workload].name.split()[-1],
                    timestamp=fixed_start(sc.start).strftime("%Y-%m-%d %H:%M:%S"),
                    visible_devices=",".join(str(g) for g in range(topo.gpus_per_node)),
                ))
            _write(out, rel, text)
            runs.append({
                "id": run_id, "phase": "efficiency" if gpus == 512 else "scaling", "kind": "training",
                "format": fmt, "workload": workload, "precision": precision, "gpus": gpus, "gbs": gbs,
                "seq_len": baseline.seq_len, "parallelism": baseline.parallelism.model_dump(exclude_none=True),
                "repeat": repeat, "nodes": list(topo.allocation_of(gpus)), "files": [rel],
            })
    return runs


def _fits(baseline: Baseline, gpus: int, cluster_gpus: int) -> bool:
    """A scaling point needs whole model replicas and must fit the cluster."""
    p = baseline.parallelism
    replica = p.tp * p.pp * p.cp
    return gpus <= cluster_gpus and gpus % replica == 0 and baseline.gbs * gpus // 512 >= gpus // replica


def _collective_groups(sc: Scenario, topo: Topology) -> list[tuple[str, tuple[str, ...], int]]:
    """(scope, nodes, GPUs per node used) of every nccl-tests run."""
    groups: list[tuple[str, tuple[str, ...], int]] = []
    gpn = topo.gpus_per_node
    links = [f for f in sc.faults if f.kind is FaultKind.BAD_LINK]
    if topo.system is System.GB200_NVL72:
        racks = [nodes for _, nodes in topo.domains]
        groups += [("nvlink-domain", nodes, gpn) for nodes in racks]
        used = [[n for n in nodes if n in topo.allocation] for nodes in racks]
        groups += [("cross-rack", tuple(used[i] + used[i + 1]), gpn) for i in range(0, len(used) - 1, 2)]
        for i in range(len(racks) if sc.pairwise_rounds is None else 0):
            for j in range(i + 1, len(racks)):
                tray = (i + j) % 16
                pair = (used[i][tray], used[j][tray])
                for f in links:
                    ends = {f.node, f.peer}
                    a = next((n for n in racks[i] if n in ends), None)
                    b = next((n for n in racks[j] if n in ends), None)
                    if a is not None and b is not None:
                        pair = (a, b)
                groups.append(("pair", pair, 1))
    else:
        nodes = topo.nodes
        # single-node runs on every 4th node and every spare keep the sample small; a real sweep covers all
        groups += [("nvlink-domain", (n,), gpn) for i, n in enumerate(nodes) if i % 4 == 0 or n in topo.spares]
        alloc = topo.allocation
        groups += [("cross-rack", alloc[i:i + 32], gpn) for i in range(0, len(alloc), 32)]
        if sc.pairwise_rounds is None:
            groups += [("pair", (alloc[i], alloc[i + 1]), 1) for i in range(0, len(alloc) - 1, 2)]
    if sc.pairwise_rounds is not None:
        groups += [("pair", pair, 1) for pairs in pairwise_rounds(topo.allocation, sc.pairwise_rounds)
                   for pair in pairs]
    groups.append(("full-scale", topo.allocation_of(sc.gpus), gpn))
    return groups


def _collective_runs(out: Path, sc: Scenario, topo: Topology) -> list[dict[str, object]]:
    runs: list[dict[str, object]] = []
    links = [f for f in sc.faults if f.kind is FaultKind.BAD_LINK]
    counts: dict[str, int] = {}
    for index, (scope, nodes, gpn) in enumerate(_collective_groups(sc, topo)):
        peaks = dict(_BUSBW[topo.system][scope])
        nvlink = scope == "nvlink-domain" or len({topo.domain_of(n) for n in nodes}) == 1
        if scope == "pair" and nvlink:  # two nodes of one NVLink domain (a full sweep's pairs in a rack) talk over
            peaks = {k: _BUSBW[topo.system]["nvlink-domain"][k] for k in peaks}  # NVLink, not InfiniBand
        if scope != "nvlink-domain":
            for f in links:
                if f.node in nodes and f.peer in nodes:
                    peaks = {k: v * (1.0 - f.pct / 100.0) for k, v in peaks.items()}
        counts[scope] = counts.get(scope, 0) + 1
        label = "-".join(nodes) if scope == "pair" else (
            topo.domain_of(nodes[0]) if scope == "nvlink-domain" else f"{len(nodes) * gpn}gpus-{counts[scope]}")
        rel = f"collectives/{scope}/{label}.log"
        text = render_nccl_tests(NcclRun(
            nodes=nodes, gpus_per_node=gpn, device_name=topo.device_name, peak_busbw=peaks,
            half_size=4e7 if nvlink else 1.2e8, seed=sc.seed * 100000 + index,
        ))
        _write(out, rel, text)
        runs.append({
            "id": f"nccl-{scope}-{label}", "phase": "scaling", "kind": "collective", "format": "nccl-tests",
            "scope": scope, "gpus": len(nodes) * gpn, "nodes": list(nodes), "files": [rel],
        })
    return runs


def _resilience_runs(out: Path, sc: Scenario, topo: Topology, catalog: LoadedCatalog) -> list[dict[str, object]]:
    workload, precision = sc.resilience_workload
    baseline = catalog.baseline_for(workload, precision, 512)
    if baseline is None:
        raise UsageError(f"catalog {catalog.spec.id}: no 512-GPU baseline for {workload} {precision}")
    margin = sc.margins.get((workload, precision), 0.0)
    gpus = sc.resilience_gpus
    mean = baseline.step_time_s / (1.0 + margin) * (1.0 + _SCALING_LOSS * math.log2(gpus / 512))
    job = ResilienceJob(
        workload=workload, precision=precision, gpus=gpus, gbs=baseline.gbs * gpus // 512, mean_step_s=mean,
        hours=sc.resilience_hours, checkpoint_every=max(10, round(_CHECKPOINT_S / mean)),
        start=fixed_start(sc.start).replace(hour=9), job_id=48213, seed=sc.seed * 7 + 1,
        faults=tuple(f for f in sc.faults if f.kind is not FaultKind.BAD_LINK),
        timings_every=sc.timings_every, telemetry_every_s=sc.telemetry_every_s,
    )
    files = simulate_resilience(job, topo)
    nodes = sorted({n for a in files.allocations for n in a}, key=topo.nodes.index)
    common = {"phase": "resilience", "workload": workload, "precision": precision, "gpus": gpus, "nodes": nodes}
    items: list[tuple[str, str, str, str | None]] = [
        ("resilience", "nemo", "resilience/training.log", files.nemo_log),
        ("scheduler", "sacct", "resilience/sacct.txt", files.sacct),
        ("events", "events", "resilience/events.jsonl", files.events),
        ("rank-timings", "rank-timings", "resilience/rank-timings.parquet", None),
        ("telemetry", "dcgm", "resilience/dcgm.prom", None),
    ]
    runs: list[dict[str, object]] = []
    for kind, fmt, rel, data in items:
        if data is not None:
            _write(out, rel, data)
        elif kind == "telemetry":
            files.write_telemetry(out / rel)
        else:
            files.write_rank_timings(out / rel)
        runs.append({"id": f"resilience-{kind}", **common, "kind": kind, "format": fmt, "files": [rel]})
    return runs


def write_bundle(out: Path, sc: Scenario, catalog: LoadedCatalog) -> Path:
    """Write the scenario's bundle into `out` (created) and seal it; returns the bundle folder."""
    topo = build_topology(sc.system, sc.gpus)
    if catalog.spec.id != topo.catalog:
        raise UsageError(f"catalog {catalog.spec.id}: expected {topo.catalog} for {sc.system.value}")
    for f in sc.faults:
        for node in (f.node, f.peer):
            if node is not None and node not in topo.nodes:
                raise UsageError(f"--fault {f.kind.value}: node {node} is not in the simulated cluster "
                                 f"({topo.nodes[0]} .. {topo.nodes[-1]})")
    out.mkdir(parents=True, exist_ok=True)
    runs = _training_runs(out, sc, topo, catalog)
    runs += _collective_runs(out, sc, topo)
    runs += _resilience_runs(out, sc, topo, catalog)
    provider = "Example Cloud"
    doc = {
        "schema_version": 1,
        "cluster": {"name": sc.cluster_name, "provider": provider},
        "system": {
            "gpu": sc.system.value, "gpus_per_node": topo.gpus_per_node, "nodes": list(topo.nodes),
            "nvlink_domains": [{"name": name, "nodes": list(nodes)} for name, nodes in topo.domains],
            "interconnect": {"scale_out": "infiniband-ndr", "nics_per_node": topo.nics_per_node},
        },
        "catalog": catalog.spec.id,
        "recipe_version": sc.recipe_version,
        "timezone": "UTC",
        "synthetic": True,
        "runs": runs,
    }
    text = "# Synthetic evidence written by `clustercert simulate`; not from a real cluster.\n"
    text += yaml.safe_dump(doc, sort_keys=False, width=120)
    (out / "bundle.yaml").write_text(text, encoding="utf-8")
    seal_bundle(load_bundle(out))
    return out




