"""Write what `llmb-run` leaves on a cluster (install tree, llmb-config files, Megatron-Bridge logs, the NCCL
microbenchmark) and pack it as `llmb-run archive` does, for tests and benchmarks of the llmb-run intake."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import yaml
import zstandard

from clustercert.catalog import LoadedCatalog
from clustercert.editions import RecipeConfig
from clustercert.metrics.megatron_flops import megatron_flops_per_sequence
from clustercert.simulate.nccl import NcclRun, render_nccl_tests

__all__ = [
    "LlmbJob", "baseline_entry", "pack_llmb_archive", "recipe_row", "render_bridge_log", "step_seconds", "suite_jobs",
    "write_llmb_install",
]

# llmb-run's nccl sweep: one nccl-tests output per test (microbenchmarks/nccl/README.md)
_NCCL_TESTS = (("1_1", "all_reduce", "env1"), ("1_2", "all_gather", "env1"), ("1_3", "reduce_scatter", "env1"),
               ("1_4", "alltoall", "env1"), ("1_5", "alltoall", "env2"), ("1_6", "sendrecv", "env1"),
               ("1_7", "sendrecv", "env2"))
_BUSBW = {"all_reduce": 800.0, "all_gather": 700.0, "reduce_scatter": 700.0, "alltoall": 680.0, "sendrecv": 720.0}
START = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)  # the first job's launch: within a year of the tests' clock
_ARCHIVE_EXCLUDED = ("code", "checkpoints", "nsys_profile", "torch_profile", "pytorch_profile")


@dataclass(frozen=True)
class LlmbJob:
    """One job llmb-run submitted, and what its log will show."""

    workload: str
    dtype: str
    scale: int
    job_id: int
    mfu: float = 0.35  # model TFLOP/s per GPU over the dtype's peak, at the mean step time
    noise: float = 0.004
    retries: int = 1  # log files left (the launcher's retries); the last is the one judged
    iterations: int = 50
    model_overrides: dict[str, Any] = field(default_factory=dict)
    env_overrides: dict[str, Any] = field(default_factory=dict)
    mbridge_args: tuple[str, ...] = ()
    proxy: bool = False
    profile: bool = False
    release: str = "26.08.00"
    printed_tp: int | None = None  # a TP the log prints other than the recipe's
    nan_at: int | None = None  # the iteration whose grad norm is nan


def suite_jobs(catalog: LoadedCatalog, first_job: int = 4_100_001) -> list[LlmbJob]:
    """One job per (workload, dtype) of the catalog's suite at its scale."""
    return [LlmbJob(e.workload, e.precision.value, e.gpus, first_job + i) for i, e in enumerate(catalog.spec.suite)]


def _size(workload: str) -> str:
    return workload.rsplit("_", 1)[-1]


def recipe_row(catalog: LoadedCatalog, job: LlmbJob) -> RecipeConfig:
    """The recipe table's row of the job; for a dtype the table has no row for (`unlisted`: the GB200 70B NVFP4
    table is missing) the row of another dtype at the same GPU count stands in, as the simulator's assumption."""
    recipe = catalog.spec.recipes[job.workload]
    row = recipe.configuration(job.dtype, job.scale)
    if row is not None:
        return row
    other = next((c for c in recipe.configurations if c.gpus == job.scale), None)
    if other is None:
        raise ValueError(f"{job.workload} {job.dtype} at {job.scale}: no row in {catalog.spec.id}'s recipe table")
    return other.model_copy(update={"precision": job.dtype, "fp8_recipe": None})


def step_seconds(job: LlmbJob, catalog: LoadedCatalog) -> tuple[float, float, int, int]:
    """The job's mean step time, its model TFLOP/s per GPU (Megatron-Bridge's count), GBS and sequence length."""
    row = recipe_row(catalog, job)
    arch = catalog.spec.models[job.workload].architecture()
    flops = megatron_flops_per_sequence(arch, row.seq_len, tensor_parallel=row.tp)
    tflops = job.mfu * catalog.peak_tflops(job.dtype)
    return flops * row.gbs / (tflops * 1e12 * job.scale), tflops, row.gbs, row.seq_len


def baseline_entry(job: LlmbJob, catalog: LoadedCatalog, slower: float, *,
                   as_tflops: bool = False) -> dict[str, Any]:
    """A baselines-file entry for `job` whose target is `slower` times its own step time (a TFLOP/s target divided by
    `slower` with `as_tflops`); the run's batch and parallelism where the recipe table has no row for it."""
    step, tflops, gbs, seq = step_seconds(job, catalog)
    entry: dict[str, Any] = {"workload": job.workload, "precision": job.dtype, "gpus": job.scale}
    entry.update({"tflops_per_gpu": round(tflops / slower, 3)} if as_tflops
                 else {"step_time_s": round(step * slower, 4)})
    if catalog.spec.recipes[job.workload].configuration(job.dtype, job.scale) is None:
        row = recipe_row(catalog, job)
        entry.update({"gbs": gbs, "seq_len": seq, "parallelism": {
            k: v for k, v in (("tp", row.tp), ("pp", row.pp), ("cp", row.cp), ("vp", row.vp), ("ep", row.ep))
            if v is not None}})
    return entry


def render_bridge_log(job: LlmbJob, catalog: LoadedCatalog, start: datetime, seed: int) -> str:
    """Rank 0's console log of a Megatron-Bridge pretraining job: the configuration it prints at start-up, then
    one line per iteration (step time and TFLOP/s per GPU), as the 26.08 recipes print them."""
    row = recipe_row(catalog, job)
    model = catalog.spec.models[job.workload]
    mean_s, tflops, gbs, seq = step_seconds(job, catalog)
    rng = np.random.default_rng(seed)
    lines = [
        f"srun: job {job.job_id} queued and waiting for resources",
        "------- Megatron-Bridge ConfigContainer -------",
        "model:",
        # the recipe's layer count where its table gives one, else the model's own (as a real run prints it)
        f"  num_layers: {row.layers or model.layers}", f"  hidden_size: {model.hidden}",
        f"  num_attention_heads: {model.heads}", f"  ffn_hidden_size: {model.ffn_hidden}",
        f"  tensor_model_parallel_size: {job.printed_tp or row.tp}",
        f"  pipeline_model_parallel_size: {row.pp}", f"  context_parallel_size: {row.cp}",
        f"  virtual_pipeline_model_parallel_size: {row.vp if row.vp else 'null'}",
        *([f"  expert_model_parallel_size: {row.ep}"] if row.ep else []), f"  seq_length: {seq}",
        f"  fp8: {'e4m3' if job.dtype == 'fp8' else 'null'}",
        f"  fp4: {'nvfp4' if job.dtype == 'nvfp4' else 'null'}",
        f"  bf16: {'true' if job.dtype == 'bf16' else 'false'}",
        "train:", f"  global_batch_size: {gbs}", f"  micro_batch_size: {row.mbs}",
        f"  train_iters: {job.iterations}",
        f"world_size: {job.scale}",
        "Training ...",
    ]
    t = start
    loss = 12.0
    for it in range(1, job.iterations + 1):
        warm = 1.0 + (3.0 if it == 1 else 0.3 if it == 2 else 0.04 if it < 6 else 0.0)
        step = mean_s * warm * (1.0 + job.noise * float(rng.standard_normal()))
        t += timedelta(seconds=step)
        loss *= 0.985 - 0.005 * float(rng.random())
        grad = "nan" if it == job.nan_at else f"{1.0 + 4.0 * float(rng.random()) / it:.3f}"
        lines.append(
            f" [{t.strftime('%Y-%m-%d %H:%M:%S')}] iteration {it:8d}/{job.iterations:8d} | consumed samples: "
            f"{it * gbs:12d} | elapsed time per iteration (ms): {step * 1000:.1f} | throughput per GPU "
            f"(TFLOP/s/GPU): {tflops * mean_s / step:.1f} | learning rate: {1e-6 * it:E} | global batch size: "
            f"{gbs:5d} | lm loss: {loss:E} | loss scale: 1.0 | grad norm: {grad} | number of skipped iterations:"
            "   0 | number of nan iterations:   0 |")
    return "\n".join(lines) + "\n"


def _config(job: LlmbJob, catalog: LoadedCatalog, install: Path, cluster: str, launched: datetime) -> str:
    """llmb-config_<jobid>.yaml with the fields and order of llmb-run's run_config.create_llmb_config."""
    recipe = catalog.spec.recipes[job.workload]
    edition = catalog.spec.edition
    assert edition is not None
    data = {
        "job_info": {"job_id": str(job.job_id), "user": "certops", "launcher_type": "configured_sbatch",
                     "launch_time": launched.replace(tzinfo=None).isoformat(), "experiment_id": None},
        "workload_info": {"framework": recipe.framework, "gsw_version": job.release,
                          "fw_version": recipe.container.rsplit(":", 1)[-1], "workload_type": "pretrain",
                          "synthetic_dataset": True},
        "model_info": {"model_name": job.workload.split("_", 1)[-1], "model_size": _size(job.workload),
                       "dtype": job.dtype, "scale": job.scale, "gpu_type": edition.chip},
        "cluster_info": {"cluster_name": cluster, "gpus_per_node": 4 if edition.chip.startswith("gb") else 8,
                         "llmb_install": str(install), "llmb_repo": str(install / "llmb_repo"),
                         "slurm_account": "certification", "slurm_gpu_partition": "batch",
                         "slurm_cpu_partition": "cpu"},
        "container_info": {"images": [recipe.container]},
        "job_config": {"profile_enabled": job.profile, "proxy": job.proxy, "strong_scaling": False,
                       "env_overrides": dict(job.env_overrides), "model_overrides": dict(job.model_overrides),
                       "mbridge_args": list(job.mbridge_args)},
    }
    return yaml.dump(data, default_flow_style=False, sort_keys=False)


def write_llmb_install(install: Path, catalog: LoadedCatalog, jobs: list[LlmbJob], *, nodes: list[str],
                       cluster: str = "example-gb200-su1", nccl: bool = True, prescreen: bool = True) -> Path:
    """An `$LLMB_INSTALL` tree holding `jobs` as llmb-run lays them out, the NCCL microbenchmark over `nodes`
    (the whole allocation, one node, a pair) and the prescreen's output; returns `install`."""
    when = START
    for index, job in enumerate(jobs):
        launched = when + timedelta(hours=index)
        desc = f"{job.workload}_{_size(job.workload)}_{job.dtype}_gpus{job.scale}"
        folder = install / "workloads" / job.workload / "experiments" / desc / str(int(launched.timestamp()))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"llmb-config_{job.job_id}.yaml").write_text(_config(job, catalog, install, cluster, launched))
        for retry in range(job.retries):
            # an earlier retry stopped short (the launcher retried it); the last one ran to its end
            text = render_bridge_log(job, catalog, launched + timedelta(minutes=5 + 20 * retry), job.job_id + retry)
            if retry < job.retries - 1:
                text = "\n".join(text.splitlines()[:40]) + "\nsrun: error: node failure, job requeued\n"
            (folder / f"log-{desc}_{job.job_id}_{retry}.out").write_text(text)
        (folder / "configs").mkdir(exist_ok=True)
        (folder / "configs" / f"{desc}_config.yaml").write_text(f"recipe: {job.workload}\n")
    if nccl:
        _write_nccl(install, nodes, catalog, when - timedelta(days=1), cluster)
    if prescreen:
        folder = install / "workloads" / "microbenchmark_system_info" / "experiments" / \
            "microbenchmark_system_info_1b_bf16_gpus4" / str(int(when.timestamp()) - 7200)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "slurm-4099000.out").write_text(
            "== lscpu ==\nArchitecture: aarch64\n== nvidia-smi -q ==\nDriver Version: 580.82.07\n"
            "== nvidia-smi nvlink -s ==\nLink 0: 50 GB/s\n== srun --mpi=list ==\npmix\n")
    return install


def _write_nccl(install: Path, nodes: list[str], catalog: LoadedCatalog, when: datetime, cluster: str) -> None:
    """Three sweeps of llmb-run's NCCL microbenchmark: every node, one node, two nodes."""
    root = install / "workloads" / "microbenchmark_nccl"
    experiments = root / "experiments" / "microbenchmark_nccl"
    gpn = 4 if catalog.spec.system.startswith("gb") else 8
    device = {"gb200-nvl72": "NVIDIA GB200"}.get(catalog.spec.system, "NVIDIA H100 80GB HBM3")
    for index, chosen in enumerate((nodes, nodes[:1], nodes[:2])):
        job = 4_098_001 + index
        stamp = (when + timedelta(hours=index)).strftime("%Y%m%d_%H%M%S")
        sweep = experiments / f"microbenchmark_nccl_ib_certops_{job}" / f"LOG_{stamp}-{job}_sweep_N{len(chosen)}"
        sweep.mkdir(parents=True, exist_ok=True)
        for number, collective, env in _NCCL_TESTS:
            run = NcclRun(tuple(chosen), gpn, device, {collective: _BUSBW[collective] * (1.0 if len(chosen) == 1
                                                                                          else 0.45)},
                          half_size=4e6, seed=job * 10 + int(number[-1]), debug_row=False)
            name = f"{number}_LOG_{collective}_{env}_args1_job{job}_iter1"
            (sweep / f"{name}.txt").write_text(render_nccl_tests(run))
            (sweep / name).mkdir(exist_ok=True)
            (sweep / name / "rank0.log").write_text("NCCL INFO debug output\n")
        (sweep / "sweep.yml").write_text(f"nodes: {len(chosen)}\n")
        (root / f"llmb-config_{job}.yaml").write_text(yaml.dump({
            "job_info": {"job_id": str(job), "user": "certops", "launcher_type": "sbatch"},
            "workload_info": {"framework": "nccl", "gsw_version": "26.08.00", "workload_type": "microbenchmark"},
            "model_info": {"model_name": "nccl", "dtype": "bf16", "scale": len(chosen) * gpn,
                           "gpu_type": (catalog.spec.edition.chip if catalog.spec.edition else "gb200")},
            "cluster_info": {"cluster_name": cluster}}, default_flow_style=False, sort_keys=False))
        (root / f"slurm-{job}.out").write_text(f"nccl sweep N{len(chosen)} done\n")


def pack_llmb_archive(install: Path, out_dir: Path, *, release: str = "26.08.00",
                      timestamp: str = "20261201T090000Z", extra: list[tuple[tarfile.TarInfo, bytes]] | None = None
                      ) -> Path:
    """`llmb-run archive`: every workload's experiments/ (profiles, checkpoints and code left out) and the NCCL
    microbenchmark's top-level job records, under one folder `llmb-archive-<timestamp>/`, tar streamed through
    zstd; `extra` members are appended as given (a hostile archive)."""
    entries: list[tuple[Path, str]] = []
    workloads = install / "workloads"
    for workload in sorted(p for p in workloads.iterdir() if p.is_dir()):
        if workload.name == "microbenchmark_nccl":
            entries += [(f, f"{workload.name}/{f.name}") for f in sorted(workload.iterdir())
                        if f.is_file() and (f.name.startswith("llmb-config_") or f.name.startswith("slurm-"))]
        experiments = workload / "experiments"
        for f in sorted(experiments.rglob("*")):
            if f.is_file() and not set(f.relative_to(experiments).parts) & set(_ARCHIVE_EXCLUDED):
                entries.append((f, f"{workload.name}/experiments/{f.relative_to(experiments).as_posix()}"))
    entries.sort(key=lambda e: e[1])
    root = f"llmb-archive-{timestamp}"
    out = out_dir / f"llmb-archive_{release}_{timestamp}.tar.zst"
    with out.open("wb") as raw, zstandard.ZstdCompressor(level=5).stream_writer(raw) as stream, \
            tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        top = tarfile.TarInfo(f"{root}/")
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(top)
        for source, arcname in entries:
            tar.add(source, arcname=f"{root}/{arcname}", recursive=False)
        for info, data in extra or []:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out
