"""Hostile corpus, third round (issue 55 item 3): a plan becomes shell. A `slurm.partition` holding a newline
wrote a command of its own into the batch script Slurm runs; every plan value that reaches a script or a command
line is now held to its grammar, and the script is built of one line per option."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clustercert.errors import ClusterCertError
from clustercert.runner.execute import Runner
from clustercert.runner.plan import Plan, PlanError, SlurmOptions, load_plan
from clustercert.runner.slurm import Slurm
from tests.conftest import run_cli
from tests.hostile.test_round3_files import BOUND_S, one_line

Count = Callable[[int], None]
HEAD = ("schema_version: 1\ncluster: {name: c, provider: p}\nsystem: {id: cpu-loopback, devices_per_node: 1}\n"
        "catalog: loopback-cpu\nrecipe_version: r\n")
JOB = "jobs:\n  - {id: coll, kind: collective, scope: full-scale, nodes: 2, collectives: {nccl_tests: 'off'}}\n"


def _plan(tmp_path: Path, slurm: str, job: str = JOB) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(HEAD + slurm + job, encoding="utf-8")
    return path


@pytest.mark.parametrize(("slurm", "field"), [
    ('slurm: {partition: "debug\\ntouch MARKER"}\n', "slurm.partition"),
    ('slurm: {partition: "debug; touch MARKER"}\n', "slurm.partition"),
    ('slurm: {partition: "$(touch MARKER)"}\n', "slurm.partition"),
    ('slurm: {python: "/usr/bin/python3\\ntouch MARKER"}\n', "slurm.python"),
])
def test_a_plan_value_outside_its_grammar_is_refused_by_run(tmp_path: Path, slurm: str, field: str,
                                                            hostile: Count) -> None:
    """`clustercert run` refuses the plan at once (exit 2, one line naming the field), before any job."""
    plan = _plan(tmp_path, slurm)
    hostile(1)
    one_line(run_cli("run", str(plan), "--bundle", str(tmp_path / "bundle"), timeout=BOUND_S), 2,
             f"{plan} line 6 field '{field}': String should match pattern")
    assert not (tmp_path / "MARKER").exists() and not (tmp_path / "bundle").exists()


def test_a_nccl_tests_folder_with_a_newline_is_refused(tmp_path: Path, hostile: Count) -> None:
    job = JOB.replace("nccl_tests: 'off'", 'nccl_tests: "/opt/x\\ntouch MARKER"')
    hostile(1)
    with pytest.raises(PlanError, match=r"field 'jobs\[0\]\.collectives\.nccl_tests': String should match pattern"):
        load_plan(_plan(tmp_path, "", job))


def test_the_script_holds_no_injected_line_even_past_the_grammar(tmp_path: Path, hostile: Count) -> None:
    """The script's own check, for values the plan's grammar did not see (a plan built in code, the bundle folder
    named by the command line): a line break is refused, no script is written; a valid partition is one line."""
    plan = load_plan(_plan(tmp_path, "slurm: {partition: 'debug,gpu'}\n"))
    runner = Runner(plan, tmp_path / "bundle", Slurm(UTC), lambda: datetime.now(UTC), lambda m: None)
    lines = runner._script(plan.jobs[0], None, "coll").read_text(encoding="utf-8").splitlines()
    assert "#SBATCH --partition=debug,gpu" in lines
    assert all(ln.startswith(("#", "export ", "srun ", "echo ")) for ln in lines), lines
    hostile(2)
    forged = Plan.model_construct(**{**dict(plan), "slurm": SlurmOptions.model_construct(
        partition="debug\ntouch MARKER", poll_s=1.0, python=None, node_wait_s=600.0)})
    runner = Runner(forged, tmp_path / "bundle2", Slurm(UTC), lambda: datetime.now(UTC), lambda m: None)
    with pytest.raises(ClusterCertError, match=r"slurm\.partition: expected no control characters"):
        runner._script(plan.jobs[0], None, "coll")
    runner = Runner(plan, tmp_path / "bun\ndle", Slurm(UTC), lambda: datetime.now(UTC), lambda m: None)
    with pytest.raises(ClusterCertError, match="the bundle folder: expected no control characters"):
        runner._script(plan.jobs[0], None, "coll")
    assert not list((tmp_path / "bundle2").rglob("*.sbatch"))


def test_a_nccl_tests_folder_named_like_a_command_is_not_run_by_the_echo(tmp_path: Path, hostile: Count) -> None:
    """The script's echo of nccl-tests' folder printed it inside double quotes, where `$(...)` in its name ran."""
    folder = tmp_path / "$(touch MARKER)"
    folder.mkdir()
    for name in ("all_reduce_perf", "sendrecv_perf"):
        (folder / name).write_text("#!/bin/sh\n", encoding="utf-8")
        (folder / name).chmod(0o755)
    job = JOB.replace("nccl_tests: 'off'", f"collectives: [all_reduce, sendrecv], nccl_tests: '{folder}'")
    plan = load_plan(_plan(tmp_path, "", job))
    runner = Runner(plan, tmp_path / "bundle", Slurm(UTC), lambda: datetime.now(UTC), lambda m: None)
    lines = runner._script(plan.jobs[0], None, "coll").read_text(encoding="utf-8").splitlines()
    [echo] = [ln for ln in lines if ln.startswith("echo ")]
    hostile(1)
    done = subprocess.run(["bash", "-c", echo], cwd=tmp_path, capture_output=True, text=True, check=False,
                          env={**os.environ, "SLURM_JOB_NODELIST": "n1", "SLURM_NTASKS": "2"}, timeout=BOUND_S)
    assert done.returncode == 0 and not (tmp_path / "MARKER").exists(), done
    assert done.stdout == f"# clustercert run: NVIDIA nccl-tests from {folder.resolve()} on n1 (2 ranks)\n"
