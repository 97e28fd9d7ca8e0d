"""Collective jobs run NVIDIA's nccl-tests where their binaries are installed (issue 15), else clustercert's CPU
stand-in; the choice is the plan's `collectives.nccl_tests` (auto, off, or a folder), shown in the job script."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clustercert.runner.execute import Runner
from clustercert.runner.plan import PlanError, load_plan
from clustercert.runner.slurm import Slurm

_HEAD = ("schema_version: 1\ncluster: {name: c, provider: p}\nsystem: {id: h100-sxm, devices_per_node: 8}\n"
         "catalog: h100\nrecipe_version: r\njobs:\n")
_BINARIES = ("all_reduce_perf", "sendrecv_perf")


def _plan(tmp_path: Path, nccl_tests: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(_HEAD + "  - id: full\n    kind: collective\n    scope: full-scale\n    nodes: 4\n"
                    f"    collectives: {{collectives: [all_reduce, sendrecv], min_bytes: 8, max_bytes: 1024,"
                    f" iters: 7, warmup: 3, nccl_tests: '{nccl_tests}'}}\n", encoding="utf-8")
    return path


def _install(folder: Path, names: tuple[str, ...] = _BINARIES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("#!/bin/sh\n", encoding="utf-8")
        (folder / name).chmod(0o755)
    return folder


def _script(tmp_path: Path, plan_path: Path) -> list[str]:
    plan = load_plan(plan_path)
    runner = Runner(plan, tmp_path / "bundle", Slurm(UTC), lambda: datetime.now(UTC), lambda m: None)
    return runner._script(plan.jobs[0], None, "full").read_text(encoding="utf-8").splitlines()


def test_a_folder_of_binaries_is_run_one_rank_per_gpu(tmp_path: Path) -> None:
    folder = _install(tmp_path / "nccl-tests" / "build")
    lines = _script(tmp_path, _plan(tmp_path, str(folder)))
    # 4 nodes x 8 GPUs: 32 ranks, one GPU each (-g 1), the plan's sweep, iterations and warm-up.
    assert "#SBATCH --ntasks=32" in lines and "#SBATCH --ntasks-per-node=8" in lines
    runs = [ln for ln in lines if ln.startswith("srun ")]
    assert runs == [f"srun --kill-on-bad-exit=1 {folder.resolve() / name} -b 8 -e 1024 -f 2 -g 1 -n 7 -w 3"
                    for name in _BINARIES]
    assert not any("clustercert.runner.collbench" in ln for ln in lines)
    assert any(ln.startswith('echo "# clustercert run: NVIDIA nccl-tests from ') for ln in lines)


def test_auto_finds_them_on_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _install(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    runs = [ln for ln in _script(tmp_path, _plan(tmp_path, "auto")) if ln.startswith("srun ")]
    assert [ln.split()[2] for ln in runs] == [str(folder.resolve() / name) for name in _BINARIES]


def test_auto_without_every_binary_and_off_run_the_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _install(tmp_path / "bin", ("all_reduce_perf",))  # sendrecv_perf missing: the stand-in runs both
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    for choice in ("auto", "off"):
        lines = _script(tmp_path, _plan(tmp_path, choice))
        runs = [ln for ln in lines if ln.startswith("srun ")]
        assert len(runs) == 1 and " -m clustercert.runner.collbench --collectives all_reduce,sendrecv " in runs[0]
        assert "#SBATCH --ntasks=4" in lines and "#SBATCH --ntasks-per-node=1" in lines


def test_a_folder_without_the_binaries_is_refused_at_load(tmp_path: Path) -> None:
    folder = _install(tmp_path / "partial", ("all_reduce_perf",))
    plan = _plan(tmp_path, str(folder))
    with pytest.raises(PlanError) as info:
        load_plan(plan)
    assert str(info.value).startswith(f"{plan} line 11 field 'jobs[0].collectives': Value error, nccl_tests: "
                                      "expected 'auto', 'off' or a folder holding nccl-tests' all_reduce_perf, "
                                      f"sendrecv_perf, got '{folder}' (missing or not executable: sendrecv_perf)")
