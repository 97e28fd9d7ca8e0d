"""`clustercert run PLAN --bundle DIR --certify` on a real Slurm cluster: a node set DOWN mid-run.

The oracles are the raw evidence itself, read here by hand (and Slurm's own `scontrol show hostnames`),
never the runner's own records: what sacct says happened, what the workload printed, which events the
scheduler, the injector and the trainer wrote, and the numbers certify must then report.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from clustercert.parsers.sacct import parse_sacct
from tests.conftest import ROOT, run_cli
from tests.slurm.conftest import PLAN_HEADER

PLAN = PLAN_HEADER + """\
  - id: coll-full
    kind: collective
    scope: full-scale
    nodes: 3
    collectives: {max_bytes: 65536, iters: 2}
  - id: coll-cross
    kind: collective
    scope: cross-rack
    nodes: 2
    collectives: {collectives: [all_reduce], max_bytes: 16384, iters: 2}
  - id: coll-pair
    kind: collective
    scope: pair
    nodes: 2
    collectives: {collectives: [all_reduce], max_bytes: 16384, iters: 2}
  - id: eff
    kind: training
    phase: efficiency
    nodes: 2
    repeats: 2
    workload: {steps: 50, batch: 8, checkpoint_every: 50}
  - id: scale-1n
    kind: training
    phase: scaling
    nodes: 1
    workload: {steps: 50, batch: 8, checkpoint_every: 50}
  - id: scale-2n
    kind: training
    phase: scaling
    nodes: 2
    workload: {steps: 50, batch: 8, checkpoint_every: 50}
  - id: scale-3n
    kind: training
    phase: scaling
    nodes: 3
    workload: {steps: 50, batch: 8, checkpoint_every: 50}
  - id: res
    kind: resilience
    nodes: 2
    workload: {steps: 100, batch: 64, checkpoint_every: 20, straggler_threshold: 0.5}
    faults:
      - {kind: node-down, at_step: 45, node: last}
"""
_STEP = re.compile(r"Training epoch 0, iteration (\d+)/\d+ .*reduced_train_loss: ([\d.]+)")
_TIMING = re.compile(r"^Training epoch 0, iteration (\d+)/\d+ .*train_step_timing in s: ([\d.]+)", re.M)


@pytest.fixture(scope="module")
def ran(slurm_cluster: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    work = tmp_path_factory.mktemp("slurm-run")
    plan = work / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    reports = work / "reports"
    done = run_cli("run", str(plan), "--bundle", str(work / "bundle"), "--certify", "--reports-dir", str(reports),
                   env=slurm_cluster, timeout=900)
    return {"done": done, "bundle": work / "bundle", "reports": reports, "env": slurm_cluster, "plan": plan}


def _hostnames(env: dict[str, str], nodelist: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], env={**os.environ, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_node_down_requeue_resume_and_certify(ran: dict[str, object]) -> None:
    done = ran["done"]
    assert isinstance(done, subprocess.CompletedProcess)
    bundle = ran["bundle"]
    assert isinstance(bundle, Path)
    env = ran["env"]
    assert isinstance(env, dict)
    assert "run: bundle written and sealed" in done.stderr, done.stderr[-3000:]
    assert done.returncode in (0, 1, 3), done.stderr[-3000:]  # certify's codes: the checks below decide

    spec = yaml.safe_load((bundle / "bundle.yaml").read_text(encoding="utf-8"))
    assert spec["synthetic"] is False
    kinds = sorted(r["kind"] for r in spec["runs"])
    assert kinds == ["collective"] * 5 + ["events", "rank-timings", "resilience", "scheduler"] + ["training"] * 5
    assert sorted(r["scope"] for r in spec["runs"] if r["kind"] == "collective") == [
        "cross-rack", "full-scale", "pair", "pair", "pair"]
    pairs = sorted(r["files"][0] for r in spec["runs"] if r.get("scope") == "pair")
    assert pairs == [f"collectives/pair/coll-pair-{a}-{b}/slurm-output.log" for a, b in
                     (("cc-n1", "cc-n2"), ("cc-n1", "cc-n3"), ("cc-n2", "cc-n3"))]
    # the seal covers bundle.yaml and every listed file, with their real hashes
    sealed = dict(reversed(line.split("  ", 1)) for line in
                  (bundle / "MANIFEST.sha256").read_text(encoding="utf-8").splitlines() if not line.startswith("#"))
    for run in spec["runs"]:
        for rel in run["files"]:
            assert sealed[rel] == hashlib.sha256((bundle / rel).read_bytes()).hexdigest()

    folder = bundle / "resilience" / "res"
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    (fault,) = [e for e in events if e["type"] == "fault_injected"]
    down = fault["node"]
    starts = [e for e in events if e["type"] == "job_started"]
    assert len(starts) == 2
    assert down in starts[0]["nodes"] and down not in starts[1]["nodes"] and len(starts[1]["nodes"]) == 2
    assert [e["node"] for e in events if e["type"] == "node_excluded"] == [down]
    assert [e["by"] for e in events if e["type"] == "restart_started"] == ["scheduler"]
    assert not [e for e in events if e["type"] == "admin_action"]
    fault_ts = datetime.fromisoformat(fault["ts"])
    saved_before = [e["step"] for e in events if e["type"] == "checkpoint_saved"
                    and datetime.fromisoformat(e["ts"]) <= fault_ts]
    (loaded,) = [e for e in events if e["type"] == "checkpoint_loaded"]
    assert loaded["step"] == max(saved_before)
    resumed_from = loaded["step"]

    # Slurm's own account: the job ran twice under one id, killed by the node failure, then completed elsewhere
    rows = [line.split("|") for line in (folder / "sacct.txt").read_text(encoding="utf-8").splitlines()]
    header, body = rows[0], rows[1:]
    assert header[:1] == ["JobID"]
    col = {name: i for i, name in enumerate(header)}
    jobs = [r for r in body if "." not in r[col["JobID"]]]
    assert [r[col["State"]] for r in jobs] == ["NODE_FAIL", "COMPLETED"]
    assert down in _hostnames(env, jobs[0][col["NodeList"]])
    assert down not in _hostnames(env, jobs[1][col["NodeList"]])

    # the workload's log: resumed from that checkpoint, steps after it re-done, the loss fell
    log = (folder / "slurm-output.log").read_text(encoding="utf-8")
    assert "Restored all states from the checkpoint at " in log and f"step={resumed_from}-" in log
    printed = [(int(m.group(1)), float(m.group(2))) for m in _STEP.finditer(log)]
    steps = [s for s, _ in printed]
    cut = next(i for i in range(1, len(steps)) if steps[i] <= steps[i - 1])
    last_before = steps[cut - 1]
    assert steps[cut] == resumed_from + 1 and steps[-1] == 99
    assert last_before >= 45  # the fault came once step 45 was printed
    assert printed[-1][1] < 0.7 * printed[0][1]
    lost_steps = last_before - resumed_from

    # certify reports the restart, the resume and the goodput loss with this run's numbers
    (results_path,) = Path(str(ran["reports"])).glob("*/results.json")
    checks = {c["id"]: c for c in json.loads(results_path.read_text(encoding="utf-8"))["checks"]}
    restart = checks["resilience.restarts_automatic_on_healthy_nodes"]
    assert restart["status"] == "PASS", restart["message"]
    assert f"on {down} restarted" in restart["message"] and f"resumed from step {resumed_from}" in restart["message"]
    reschedule = (datetime.fromisoformat(starts[1]["ts"]) - fault_ts).total_seconds()
    assert restart["measured"] == pytest.approx(reschedule, abs=2.0)
    lost = checks["resilience.lost_work_within_checkpoint_interval"]
    assert lost["status"] == "PASS" and lost["measured"] == lost_steps
    goodput = checks["resilience.goodput_meets_min"]
    assert "1 interruption(s)" in goodput["message"]
    shown = re.search(r"reschedule (\d+) s", goodput["message"])
    assert shown is not None and abs(int(shown.group(1)) - reschedule) <= 2
    redone = re.search(r"re-done steps \[([\d, ]+)\]", goodput["message"])
    assert redone is not None
    assert [int(s) for s in redone.group(1).split(",")] == list(range(resumed_from + 1, last_before + 1))
    assert checks["resilience.no_admin_action"]["status"] == "PASS"


def _sacct_steps(env: dict[str, str], job: str) -> list[list[str]]:
    out = subprocess.run(["sacct", "-j", job, "--parsable2", "--noheader", "-o", "JobID,State,NTasks,NNodes,NodeList"],
                         env={**os.environ, **env}, capture_output=True, text=True, check=True)
    return [line.split("|") for line in out.stdout.splitlines() if line.strip()]


def test_efficiency_and_scaling_runs_as_slurm_ran_them(ran: dict[str, object]) -> None:
    bundle = ran["bundle"]
    assert isinstance(bundle, Path)
    env = ran["env"]
    assert isinstance(env, dict)
    spec = yaml.safe_load((bundle / "bundle.yaml").read_text(encoding="utf-8"))
    training = {r["id"]: r for r in spec["runs"] if r["kind"] == "training"}
    assert sorted(training) == ["eff-r1", "eff-r2", "scale-1n", "scale-2n", "scale-3n"]
    gbs_per_task = 8
    for rid, run in training.items():
        folder = bundle / run["files"][0].rsplit("/", 1)[0]
        assert run["files"] == [f"training/{run['phase']}/{rid}/slurm-output.log"]
        assert run["phase"] == ("efficiency" if rid.startswith("eff") else "scaling")
        # Slurm's own account (asked here, not read from the runner): one incarnation, COMPLETED, its srun step's
        # task count is the run's GPU count and its node list the run's nodes
        job = (folder / "sacct.txt").read_text(encoding="utf-8").splitlines()[1].split("|")[0]
        rows = _sacct_steps(env, job)
        (top,) = [r for r in rows if r[0] == job]
        (step,) = [r for r in rows if r[0] == f"{job}.0"]
        assert top[1] == "COMPLETED" and step[1] == "COMPLETED"
        assert run["gpus"] == int(step[2]) and run["nodes"] == _hostnames(env, top[4])
        assert len(run["nodes"]) == int(top[3]) == {"1n": 1, "3n": 3}.get(rid[-2:], 2)
        assert (run["workload"], run["precision"], run["gbs"], run["seq_len"], run["parallelism"]) == (
            "cc-tiny-lm", "fp32", gbs_per_task * run["gpus"], 32, {"tp": 1, "pp": 1})
        assert run["repeat"] == (int(rid[-1]) if rid.startswith("eff") else 1)
        log = (folder / "slurm-output.log").read_text(encoding="utf-8")
        assert f"world_size={run['gpus']} " in log and "Worker group SUCCEEDED: 50 steps" in log

    (results_path,) = Path(str(ran["reports"])).glob("*/results.json")
    results = json.loads(results_path.read_text(encoding="utf-8"))
    (weak,) = results["phases"]["scaling"]["weak_scaling"]
    assert (weak["workload"], weak["precision"], weak["reference_gpus"]) == ("cc-tiny-lm", "fp32", 1)
    points = {p["gpus"]: p for p in weak["points"]}
    assert sorted(points) == [1, 2, 3]
    assert points[1]["run"] == "scale-1n" and points[3]["run"] == "scale-3n"
    # by hand, from the log's own printed step times over the catalog's window (35-44)
    for gpus, point in points.items():
        run = training[point["run"]]
        text = (bundle / run["files"][0]).read_text(encoding="utf-8")
        times = [float(t) for i, t in _TIMING.findall(text) if 35 <= int(i) <= 44]
        assert len(times) == 10
        mean = sum(times) / len(times)
        assert point["step_time_s"] == pytest.approx(mean, rel=1e-9)
        assert point["gbs"] == gbs_per_task * gpus
        assert point["tokens_per_s_per_gpu"] == pytest.approx(gbs_per_task * gpus * 32 / mean / gpus)
    assert points[3]["efficiency"] == pytest.approx(
        points[3]["tokens_per_s_per_gpu"] / points[1]["tokens_per_s_per_gpu"])
    checks = {c["id"]: c for c in results["checks"]}
    assert checks["scaling.cc-tiny-lm-fp32_weak_scaling_efficiency"]["severity"] == "advisory"
    # collective tests at each scope the loopback cluster has (each node its own domain): measured, not skipped
    scopes = {(c["scope"], c["collective"]) for c in results["phases"]["scaling"]["collectives"]}
    assert {("full-scale", "all_reduce"), ("cross-rack", "all_reduce"), ("pair", "all_reduce")} <= scopes
    assert "scaling.cross-rack-all_reduce_busbw_meets_target" in checks

    # the efficiency workload line: the suite entry, from this run's repeats, against the illustrative baseline
    (workload,) = results["workloads"]
    assert (workload["workload"], workload["precision"], workload["gpus"]) == ("cc-tiny-lm", "fp32", 2)
    assert sorted(r["run"] for r in workload["repeats"]) == ["eff-r1", "eff-r2"]
    assert workload["baseline"]["illustrative"] is True
    meets = checks["efficiency.cc-tiny-lm-fp32-2_meets_baseline"]
    assert meets["severity"] == "advisory" and "(baseline derived, not published)" in meets["message"]
    stdout = ran["done"].stdout  # type: ignore[attr-defined]
    assert "  - cc-tiny-lm FP32: the baseline is derived" in stdout
    [line] = [ln for ln in stdout.splitlines() if ln.startswith("  cc-tiny-lm FP32 2 ")]
    assert f"{workload['step_time_s']['mean']:.2f} s vs" in line and line.endswith(workload["status"])


def test_sacct_json_reads_as_the_parsable_dump_of_the_same_jobs(ran: dict[str, object], tmp_path: Path) -> None:
    """Slurm's two dumps of this run's jobs (`sacct --duplicates --json` and `--parsable2`): the same jobs,
    incarnations, states, durations, times and steps, the requeued node-down job's two incarnations among them."""
    # sacct prints --parsable2 times in the local zone (TZ), --json ones as epoch seconds: both read as UTC here
    env = {**os.environ, **ran["env"], "TZ": "UTC"}  # type: ignore[dict-item]
    fields = "JobIDRaw,State,Elapsed,Start,End,Submit"
    dumps = {}
    for name, options in (("sacct.json", ["--json"]), ("sacct.txt", ["--parsable2", f"--format={fields}"])):
        done = subprocess.run(["sacct", "--duplicates", *options], env=env, capture_output=True, text=True,
                              check=True)
        dumps[name] = tmp_path / name
        dumps[name].write_text(done.stdout, encoding="utf-8")

    def records(path: Path) -> dict[tuple[int, int], tuple[object, ...]]:
        return {(int(j.job_id), j.incarnation): (j.state, j.elapsed_s, j.start, j.end, j.submit,
                                                 [(s.step_id, s.state, s.elapsed_s, s.start, s.end) for s in j.steps])
                for j in parse_sacct(path, path.name, timezone="UTC").jobs}

    parsable, dumped = records(dumps["sacct.txt"]), records(dumps["sacct.json"])
    ended = {key for key, value in parsable.items() if value[3] is not None}  # a job of a later test may run
    assert len(ended) >= 11
    assert {key: dumped[key] for key in ended} == {key: parsable[key] for key in ended}
    assert any(incarnation == 2 for _, incarnation in ended)


def test_rerun_resumes_without_resubmitting(ran: dict[str, object]) -> None:
    bundle = ran["bundle"]
    assert isinstance(bundle, Path)
    env = ran["env"]
    assert isinstance(env, dict)
    before = (bundle / "runner" / "state.json").read_text(encoding="utf-8")
    again = run_cli("run", str(ran["plan"]), "--bundle", str(bundle), env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    # full-scale, cross-rack, 3 pairs, 2 efficiency repeats, 3 scaling, resilience
    assert again.stdout.count("collected by an earlier run") == 11
    ids = {r["slurm_id"] for r in json.loads(before)["jobs"].values()}
    after = {r["slurm_id"] for r in json.loads((bundle / "runner" / "state.json").read_text())["jobs"].values()}
    assert after == ids


def test_bad_plan_is_refused_before_submitting(slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.replace("nodes: 2\n    collectives: {collectives: [all_reduce]",
                                 "nodes: 3\n    collectives: {collectives: [all_reduce]"), encoding="utf-8")
    done = run_cli("run", str(plan), "--bundle", str(tmp_path / "b"), env=slurm_cluster)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {plan} line 18 field 'jobs[2]': Value error, a pairwise sweep runs on 2 nodes "
                           "per job, got nodes: 3")
    assert line.endswith("Fix the plan (see docs/plan-schema.md).")
    assert not (tmp_path / "b").exists()


def test_interrupted_run_cancels_its_job(slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.split("  - id: coll-full")[0] + "  - id: long\n    kind: resilience\n    nodes: 2\n"
                    "    workload: {steps: 5000, batch: 64}\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), **slurm_cluster}
    proc = subprocess.Popen([sys.executable, "-m", "clustercert", "run", str(plan), "--bundle", str(tmp_path / "b")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = tmp_path / "b" / "runner" / "state.json"
    job = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and job is None:
        time.sleep(1)
        if state.exists() and "Starting worker group" in _read(tmp_path / "b" / "resilience" / "long"
                                                                / "slurm-output.log"):
            job = json.loads(state.read_text(encoding="utf-8"))["jobs"]["long"]["slurm_id"]
    assert job is not None, "the job never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted; the plan's running Slurm job was cancelled" in err
    for _ in range(60):
        queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True)
        if not queued.stdout.strip():
            break
        time.sleep(1)
    assert not queued.stdout.strip(), queued.stdout
    acct = subprocess.run(["sacct", "-j", job, "-X", "-n", "-P", "-o", "State"], env=env, capture_output=True,
                          text=True, check=True)
    assert acct.stdout.split()[0] == "CANCELLED"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def test_no_reachable_cluster_is_one_line_and_exit_3(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    conf = tmp_path / "slurm.conf"  # a cluster whose controller is not running (a missing file makes Slurm
    conf.write_text(  # look for a configless server in DNS, which takes minutes offline)
        "ClusterName=gone\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=17999\n"
        f"AuthInfo=socket={tmp_path / 'no-munge.socket'}\nNodeName=n1 NodeAddr=127.0.0.1 CPUs=1\n"
        "PartitionName=p Nodes=n1 Default=YES\n", encoding="utf-8")
    done = run_cli("run", str(plan), "--bundle", str(tmp_path / "b"), env={"SLURM_CONF": str(conf)})
    assert done.returncode == 3, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: sinfo -h -N: expected exit 0, got 1 (") and line.endswith(
        "Check that Slurm answers here (`scontrol ping`; SLURM_CONF names the cluster; the local one: "
        "scripts/slurm-local status)")
