"""Small hand-written bundles for the phase judges: files in tmp_path, parsed with the real parsers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from clustercert.catalog import LoadedCatalog, Profile, load_catalog
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, load_bundle
from clustercert.phases.evidence import parse_run
from clustercert.settings import PROJECT_ROOT
from clustercert.verdicts import Check

RACKS = {"rack1": ["n1", "n2"], "rack2": ["n3", "n4", "n5", "n6"]}


def gb200(**rules: Any) -> LoadedCatalog:
    """The GB200 catalog with some rules replaced."""
    catalog = load_catalog("exemplar-gb200", PROJECT_ROOT / "references")
    spec = catalog.spec.model_copy(update={"rules": catalog.spec.rules.model_copy(update=rules)})
    return LoadedCatalog(catalog.path, catalog.sha256, spec)


def with_profiles(catalog: LoadedCatalog, profiles: dict[str, Profile]) -> LoadedCatalog:
    """`catalog` with its profiles replaced."""
    return LoadedCatalog(catalog.path, catalog.sha256, catalog.spec.model_copy(update={"profiles": profiles}))


def write_bundle(root: Path, runs: list[dict[str, Any]], files: dict[str, str | bytes]) -> LoadedBundle:
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    doc = {
        "schema_version": 1,
        "cluster": {"name": "test", "provider": "test"},
        "system": {"gpu": "gb200-nvl72", "gpus_per_node": 1, "nodes": [n for ns in RACKS.values() for n in ns],
                   "nvlink_domains": [{"name": k, "nodes": v} for k, v in RACKS.items()],
                   "interconnect": {"scale_out": "infiniband-ndr", "nics_per_node": 1}},
        "catalog": "exemplar-gb200", "recipe_version": "25.05.05", "runs": runs,
    }
    (root / "bundle.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_bundle(root)


def parse_all(bundle: LoadedBundle) -> dict[str, object | EvidenceError]:
    return {r.id: parse_run(bundle, r, 1 << 30) for r in bundle.spec.runs}


def by_id(checks: list[Check]) -> dict[str, Check]:
    ids = [c.id for c in checks]
    assert len(ids) == len(set(ids)), f"duplicate check ids: {ids}"
    return {c.id: c for c in checks}


def nemo_log(step_times: dict[int, float], last: int = 49) -> str:
    """NeMo 2 step lines (iteration N/last) with the given step times, in the order given."""
    return "".join(
        f"[default0]:Training epoch 0, iteration {i}/{last} | lr: 1e-05 | global_batch_size: 512 | global_step: {i} "
        f"| reduced_train_loss: 11.03 | train_step_timing in s: {t}\n"
        for i, t in step_times.items()
    )


_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n}


def nccl_output(collective: str, ranks: int, busbw_by_size: dict[int, float], *, abort: bool = False,
                hosts: list[str] | None = None) -> str:
    """nccl-tests text output with rows that agree with themselves: algbw = busbw / factor, time = size / algbw.

    Ranks sit on `hosts` (one rank per host when given), else all on host n1.
    """
    on = hosts or ["n1"] * ranks
    factor = _FACTOR.get(collective, lambda n: 1.0)(ranks)
    head = [
        "# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807",
        f"# Collective test starting: {collective}_perf",
        "# nThread 1 nGpus 1 minBytes 33554432 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20",
        "#",
        "# Using devices",
        *[f"#  Rank {r:2d} Group  0 Pid {1000 + r} on {on[r]} device  0 [0000:1b:00] NVIDIA GB200"
          for r in range(ranks)],
        "#",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw"
        "   busbw  #wrong",
    ]
    rows = []
    for size, bw in busbw_by_size.items():
        alg = bw / factor
        us = size / (alg * 1e3)
        rows.append(f"{size:12d} {size // 4:12d}     float     sum      -1  {us:9.1f} {alg:7.2f} {bw:7.2f}       0  "
                    f"{us:9.1f} {alg:7.2f} {bw:7.2f}       0")
    tail = [] if abort else ["# Out of bounds values : 0 OK",
                             f"# Avg bus bandwidth    : {sum(busbw_by_size.values()) / len(busbw_by_size):.3f}", "#"]
    if abort:
        rows = [*rows[:1], "n1: Test NCCL failure common.cu:1005 'unhandled system error'"]
    return "\n".join([*head, *rows, *tail]) + "\n"
