"""The simulator at cluster scale (issue 13): the full pairwise sweep, the vectorised telemetry and rank-timings
writers, at small sizes, checked against counts worked out independently and read back by the current parsers."""

from __future__ import annotations

import io
import itertools
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import load_bundle
from clustercert.parsers.dcgm import parse_dcgm
from clustercert.parsers.nccl_tests import parse_nccl_tests
from clustercert.parsers.rank_timings import parse_rank_timings
from clustercert.settings import load_settings
from clustercert.simulate.faults import parse_fault
from clustercert.simulate.resilience import ResilienceJob, fixed_start, simulate_resilience
from clustercert.simulate.scenario import cluster_scale, pairwise_rounds, write_bundle
from clustercert.simulate.topology import System, build_topology

LINE = re.compile(r'^DCGM_FI_DEV_SM_CLOCK\{gpu="([0-3])",Hostname="(gb-r\d+-n\d\d)"\} (\d{4}) (\d{13})$')


@pytest.mark.parametrize("n", [2, 5, 6, 17, 32])
def test_full_sweep_is_every_pair_once_in_rounds_of_disjoint_pairs(n: int) -> None:
    nodes = tuple(f"node{i:02d}" for i in range(n))
    rounds = pairwise_rounds(nodes)
    pairs = [p for r in rounds for p in r]
    assert len(pairs) == n * (n - 1) // 2
    assert set(pairs) == set(itertools.combinations(nodes, 2))  # each in the nodes' order, none twice
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    for r in rounds:
        used = [x for p in r for x in p]
        assert len(used) == len(set(used)) == n - n % 2  # disjoint; every node but one resting (n odd) in each


def test_first_rounds_only() -> None:
    nodes = tuple(f"n{i}" for i in range(10))
    rounds = pairwise_rounds(nodes, 3)
    assert len(rounds) == 3 and all(len(r) == 5 for r in rounds)
    assert rounds == pairwise_rounds(nodes)[:3]


def _job(hours: float, every_s: float, timings_every: int = 1) -> ResilienceJob:
    return ResilienceJob(
        workload="llama3-70b", precision="fp8", gpus=128, gbs=128, mean_step_s=7.5, hours=hours,
        checkpoint_every=50, start=fixed_start("2026-11-02T09:00:00"), job_id=100, seed=5,
        faults=(parse_fault("slow-gpu:node=gb-r2-n07,gpu=2,pct=15,at=2m,reported=yes"),),
        timings_every=timings_every, telemetry_every_s=every_s,
    )


def test_one_hertz_telemetry_has_one_line_per_gpu_and_second(tmp_path: Path) -> None:
    # 60 s at 1 Hz on 128 GPUs, the job running throughout: samples at t = 0, 1, ..., 60
    job = _job(hours=60 / 3600, every_s=1.0)
    files = simulate_resilience(job, build_topology(System.GB200_NVL72, 512))
    path = tmp_path / "dcgm.prom"
    files.write_telemetry(path)
    lines = path.read_text(encoding="ascii").splitlines()
    assert lines[:2] == ["# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).",
                         "# TYPE DCGM_FI_DEV_SM_CLOCK gauge"]
    body = lines[2:]
    assert len(body) == 128 * (60 // 1 + 1)
    parsed = [LINE.match(x) for x in body]
    assert all(parsed)
    start_ms = round(fixed_start("2026-11-02T09:00:00").timestamp() * 1000)
    stamps = sorted({int(m.group(4)) for m in parsed if m})
    assert stamps == [start_ms + 1000 * k for k in range(61)]
    # the exporter's label shape, as the current parser reads it: 128 series of 61 samples
    summary = parse_dcgm(path, "dcgm.prom").to_json()
    assert summary["samples"] == 128 * 61
    series = summary["series"]
    assert isinstance(series, list) and len(series) == 128
    assert {s["count"] for s in series} == {61}
    # before the slow GPU's fault (2 min) every clock is nominal (1965 MHz) less a few MHz of noise
    clocks = [int(m.group(3)) for m in parsed if m]
    assert 1900 < min(clocks) and max(clocks) <= 1965


def test_telemetry_is_the_same_bytes_whatever_the_chunk(tmp_path: Path) -> None:
    job = _job(hours=0.25, every_s=5.0)
    files = simulate_resilience(job, build_topology(System.GB200_NVL72, 512))
    files.write_telemetry(tmp_path / "a.prom")
    files.write_telemetry(tmp_path / "b.prom", chunk_bytes=10_000)  # a few sample times per chunk
    assert (tmp_path / "a.prom").read_bytes() == (tmp_path / "b.prom").read_bytes()
    assert files.telemetry.encode() == (tmp_path / "a.prom").read_bytes()
    throttled = [x for x in files.telemetry.splitlines() if 'gpu="2",Hostname="gb-r2-n07"' in x]
    # from 2 min on, the monitoring sees the throttled clock int(1965 / 1.15)
    assert {int(x.split()[1]) for x in throttled[-10:]} == {int(1965 / 1.15)}


def test_rank_timings_have_ranks_times_steps_rows_whatever_the_chunk(tmp_path: Path) -> None:
    job = _job(hours=0.25, every_s=60.0)
    files = simulate_resilience(job, build_topology(System.GB200_NVL72, 512))
    files.write_rank_timings(tmp_path / "a.parquet")
    files.write_rank_timings(tmp_path / "b.parquet", chunk_rows=1000)  # 7 steps of 128 ranks per chunk
    a = pq.read_table(tmp_path / "a.parquet")
    b = pq.read_table(tmp_path / "b.parquet")
    assert a.num_rows == 128 * files.steps  # every step sampled (timings_every=1)
    assert a.equals(b)
    assert pq.ParquetFile(tmp_path / "b.parquet").metadata.num_row_groups > 1
    parsed = parse_rank_timings(tmp_path / "b.parquet", "rt")
    assert parsed.table.num_rows == 128 * files.steps
    # the slow GPU is reported (straggler detection 4 min after 2 min) and its tray swapped for a spare
    assert files.events.count('"straggler_detected"') == 1
    assert parsed.ranks == 128 and parsed.nodes == 32 + 1
    assert pq.read_table(io.BytesIO(files.rank_timings)).equals(a)


def test_every_tenth_step_by_default() -> None:
    job = _job(hours=0.25, every_s=60.0, timings_every=10)
    files = simulate_resilience(job, build_topology(System.GB200_NVL72, 512))
    table = pq.read_table(io.BytesIO(files.rank_timings))
    assert table.num_rows == 128 * len(range(0, files.steps, 10))


def test_cluster_scale_bundle_at_128_gpus(tmp_path: Path) -> None:
    sc = cluster_scale(128, hours=60 / 3600, telemetry_every_s=1.0)
    catalog = load_catalog("exemplar-gb200", load_settings().references_dir)
    root = write_bundle(tmp_path / "b", sc, catalog)
    bundle = load_bundle(root)
    doc = yaml.safe_load((root / "bundle.yaml").read_text(encoding="utf-8"))
    nodes = 128 // 4
    pairs = [r for r in doc["runs"] if r.get("scope") == "pair"]
    assert len(pairs) == nodes * (nodes - 1) // 2  # 496: every pair of the 32 trays
    assert len({tuple(r["nodes"]) for r in pairs}) == len(pairs)
    assert all(r["gpus"] == 2 for r in pairs)
    first = parse_nccl_tests(root / pairs[0]["files"][0], pairs[0]["files"][0])
    assert [t.collective for t in first.tests] == ["all_reduce", "alltoall", "sendrecv"]
    resilience = {r["kind"]: r for r in doc["runs"] if r["phase"] == "resilience"}
    assert resilience["telemetry"]["gpus"] == 128
    telemetry = (root / resilience["telemetry"]["files"][0]).read_text(encoding="ascii").splitlines()
    assert len(telemetry) == 2 + 128 * 61
    assert len(bundle.spec.runs) == len(doc["runs"])


def test_a_full_sweeps_pairs_in_one_rack_run_at_nvlink_rates(tmp_path: Path) -> None:
    """Two trays of one NVL72 rack talk over NVLink: the sweep's pairs inside a domain get the nvlink-domain
    bus bandwidth, the pairs across racks InfiniBand's (the seed's `_BUSBW` table); a sweep on the 512-GPU bundle
    read 960 in-rack pairs at 46 GB/s, under their NVLink target."""
    sc = cluster_scale(128, hours=60 / 3600, telemetry_every_s=60.0, pairwise=3)
    root = write_bundle(tmp_path / "b", sc, load_catalog("exemplar-gb200", load_settings().references_dir))
    bundle = load_bundle(root)
    domain = {n: d.name for d in bundle.spec.system.nvlink_domains for n in d.nodes}
    largest: dict[bool, list[float]] = {True: [], False: []}
    for run in bundle.spec.runs:
        if run.scope == "pair":
            test = parse_nccl_tests(root / run.files[0], run.files[0]).tests[0]
            assert test.collective == "all_reduce"
            largest[len({domain[n] for n in run.nodes or []}) == 1].append(test.rows[-1].busbw_oop)
    assert largest[True] and largest[False]
    assert min(largest[True]) > 850 and max(largest[False]) < 50  # 948 and 46.4 GB/s peaks, less noise
