"""Training jobs of a plan (efficiency and scaling) without Slurm: the plan schema, the checks on what ran, and
bundle.yaml as the certify flow reads it, from the shipped workload's real logs.

The oracles: the workload's own printed step times (read here with a regex, not the parser) and the weak-scaling
formula of DOMAIN.md (tokens/s/GPU = GBS x seq_len / step time / GPUs, over the catalog's window).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import load_bundle
from clustercert.evidence.parse import DEFAULT_LIMIT
from clustercert.phases.efficiency import judge_efficiency
from clustercert.phases.evidence import parse_run
from clustercert.phases.scaling import judge_scaling
from clustercert.runner.execute import JobRecord, Runner, _check_training, expand_jobs, write_bundle
from clustercert.runner.plan import JobKind, PlanError, RunnerError, load_plan
from clustercert.runner.slurm import Slurm

ROOT = Path(__file__).resolve().parents[2]
_HEAD = ("schema_version: 1\ncluster: {name: c, provider: p}\nsystem: {id: cpu-loopback}\ncatalog: loopback-cpu\n"
         "recipe_version: clustercert-cpu-1\njobs:\n")
_STEP = re.compile(r"^Training epoch 0, iteration (\d+)/\d+ .*train_step_timing in s: ([\d.]+)", re.M)
_SACCT = "JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Submit|Start|End|Elapsed|NNodes|NodeList\n"


def _plan(tmp_path: Path, jobs: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(_HEAD + jobs, encoding="utf-8")
    return path


@pytest.mark.parametrize(("job", "line", "message"), [
    ("  - {id: t, kind: training, nodes: 2}\n", 7, "a training job needs a phase (efficiency or scaling)"),
    ("  - {id: t, kind: training, phase: scaling, nodes: 2, faults: [{kind: node-down, at_step: 3}]}\n", 7,
     "faults apply to resilience jobs only (a training job measures a clean run)"),
    ("  - id: t\n    kind: training\n    phase: scaling\n    nodes: 1\n    workload: {straggler_threshold: 0.5}\n", 7,
     "workload.straggler_threshold applies to resilience jobs only"),
    ("  - {id: t, kind: collective, scope: full-scale, nodes: 2, repeats: 3}\n", 7,
     "repeats apply to training jobs only"),
    ("  - {id: t, kind: resilience, nodes: 2, phase: efficiency}\n", 7, "phase apply to training jobs only"),
    ("  - {id: t, kind: training, phase: scaling, nodes: 2, scope: pair}\n", 7,
     "scope applies to collective jobs only"),
])
def test_bad_training_jobs_are_one_line_with_line_and_field(tmp_path: Path, job: str, line: int,
                                                             message: str) -> None:
    path = _plan(tmp_path, job)
    with pytest.raises(PlanError) as info:
        load_plan(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{path} line {line} field 'jobs[0]': Value error, {message}"), text
    assert text.endswith("Fix the plan (see docs/plan-schema.md).")


def test_bad_phase_and_precision_name_the_field(tmp_path: Path) -> None:
    path = _plan(tmp_path, "  - id: t\n    kind: training\n    phase: goodput\n    nodes: 2\n")
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert str(info.value).startswith(f"{path} line 9 field 'jobs[0].phase': ")
    path = _plan(tmp_path, "  - id: t\n    kind: training\n    phase: scaling\n    nodes: 2\n    precision: bf16\n")
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert str(info.value).startswith(f"{path} line 11 field 'jobs[0].precision': ")


def test_repeats_make_one_slurm_job_each() -> None:
    plan = load_plan(ROOT / "clustercert" / "runner" / "plans" / "loopback.yaml")
    training = [(j.phase, j.nodes, rid) for j, _, rid in expand_jobs(plan, ["a", "b", "c"])
                if j.kind is JobKind.TRAINING]
    assert training == [("efficiency", 2, "eff-tiny-lm-r1"), ("efficiency", 2, "eff-tiny-lm-r2"),
                        ("efficiency", 2, "eff-tiny-lm-r3"), ("scaling", 1, "scale-1n"), ("scaling", 2, "scale-2n"),
                        ("scaling", 3, "scale-3n")]
    # the catalog's suite entry is what the efficiency job runs, and its window fits the job's steps
    catalog = load_catalog(plan.catalog, ROOT / "references")
    (entry,) = catalog.spec.suite
    eff = next(j for j in plan.jobs if j.phase == "efficiency")
    assert (entry.workload, entry.precision.value, entry.gpus) == (eff.model, eff.precision, eff.nodes)
    (baseline,) = catalog.spec.baselines
    assert baseline.illustrative and baseline.window.last < eff.workload.steps
    assert not catalog.spec.judges("efficiency")  # no profile of the loopback catalog decides on them
    assert not catalog.spec.judges("scaling")


def _train(folder: Path, tasks: int, port: int, steps: int = 50) -> Path:
    """The shipped workload on `tasks` local processes, as srun starts them; rank 0's output is the job's log."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "slurm-output.log"
    procs = []
    with log.open("w", encoding="utf-8") as out0:
        for rank in range(tasks):
            env = {**os.environ, "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(tasks), "SLURM_JOB_ID": "7",
                   "SLURMD_NODENAME": f"cc-n{rank + 1}", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                   "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "clustercert.runner.workload", "--steps", str(steps), "--batch", "8",
                 "--checkpoint-dir", str(folder / f"ckpt-{rank}"), "--checkpoint-every", str(steps),
                 "--straggler-threshold", "0"], cwd=ROOT, env=env,
                stdout=out0 if rank == 0 else subprocess.DEVNULL, stderr=subprocess.STDOUT))
        for p in procs:
            assert p.wait(timeout=120) == 0
    return log


def _record(rid: str, slurm_id: str, tasks: int, rel: str) -> JobRecord:
    nodes = [f"cc-n{i + 1}" for i in range(tasks)]
    return JobRecord(rid, slurm_id=slurm_id, state="COMPLETED", collected=True,
                     incarnations=[{"restart": 0, "start": "2026-12-01T12:00:00+00:00", "nodes": nodes,
                                    "tasks": tasks}], files={"training": rel})


def _sacct(slurm_id: str, *states: str) -> str:
    return _SACCT + "".join(f"{slurm_id}|cc-x|debug|root|2|{s}|0:0|2026-12-01T12:00:00|2026-12-01T12:00:00|"
                            f"2026-12-01T12:00:10|00:00:10|2|cc-n[1-2]\n" for s in states)


def test_training_runs_become_bundle_runs_that_scaling_judges(tmp_path: Path) -> None:
    plan_path = _plan(tmp_path, (
        "  - {id: eff, kind: training, phase: efficiency, nodes: 2, repeats: 2, "
        "workload: {steps: 50, batch: 8, checkpoint_every: 50}}\n"
        "  - {id: scale-1n, kind: training, phase: scaling, nodes: 1, "
        "workload: {steps: 50, batch: 8, checkpoint_every: 50}}\n"))
    plan = load_plan(plan_path)
    bundle = tmp_path / "bundle"
    by_id = {j.id: j for j in plan.jobs}
    records = []
    for n, (job_id, rid, tasks) in enumerate((("eff", "eff-r1", 2), ("eff", "eff-r2", 2), ("scale-1n", "scale-1n", 1))):
        job = by_id[job_id]
        rel = f"training/{job.phase}/{rid}/slurm-output.log"
        log = _train(bundle / rel.rsplit("/", 1)[0], tasks, 24100 + 10 * n)
        rec = _record(rid, str(100 + n), tasks, rel)
        _check_training(rec, log, _sacct(str(100 + n), "COMPLETED"))
        records.append((job, rec))
    write_bundle(plan, records, bundle, ["cc-n1", "cc-n2", "cc-n3"])

    spec = yaml.safe_load((bundle / "bundle.yaml").read_text(encoding="utf-8"))
    assert spec["synthetic"] is False
    assert [(r["id"], r["phase"], r["kind"], r["format"], r["workload"], r["precision"], r["gpus"], r["gbs"],
             r["seq_len"], r["parallelism"], r["repeat"], r["nodes"]) for r in spec["runs"]] == [
        ("eff-r1", "efficiency", "training", "nemo", "cc-tiny-lm", "fp32", 2, 16, 32, {"tp": 1, "pp": 1}, 1,
         ["cc-n1", "cc-n2"]),
        ("eff-r2", "efficiency", "training", "nemo", "cc-tiny-lm", "fp32", 2, 16, 32, {"tp": 1, "pp": 1}, 2,
         ["cc-n1", "cc-n2"]),
        ("scale-1n", "scaling", "training", "nemo", "cc-tiny-lm", "fp32", 1, 8, 32, {"tp": 1, "pp": 1}, 1,
         ["cc-n1"]),
    ]

    loaded = load_bundle(bundle)
    catalog = load_catalog("loopback-cpu", ROOT / "references")
    parsed = {r.id: parse_run(loaded, r, DEFAULT_LIMIT) for r in loaded.spec.runs}
    result = judge_scaling(loaded, catalog, parsed)
    (weak,) = [c for c in result.checks if c.id == "scaling.cc-tiny-lm-fp32_weak_scaling_efficiency"]
    assert weak.severity.value == "advisory"  # scaling is not a required phase of the loopback catalog
    (section,) = result.section["weak_scaling"]  # type: ignore[index]
    points = {p["gpus"]: p for p in section["points"]}
    assert sorted(points) == [1, 2]
    # by hand: the mean printed step time over the window 35-44 of the run each point names
    window = catalog.spec.baselines[0].window
    for gpus, point in points.items():
        text = (bundle / f"training/{'scaling' if gpus == 1 else 'efficiency'}/{point['run']}/slurm-output.log"
                ).read_text(encoding="utf-8")
        times = [float(t) for i, t in _STEP.findall(text) if window.first <= int(i) <= window.last]
        assert len(times) == 10
        assert point["step_time_s"] == pytest.approx(statistics.fmean(times), rel=1e-9)
        assert point["tokens_per_s_per_gpu"] == pytest.approx(8 * gpus * 32 / statistics.fmean(times) / gpus)
    assert points[2]["efficiency"] == pytest.approx(
        points[2]["tokens_per_s_per_gpu"] / points[1]["tokens_per_s_per_gpu"])

    # efficiency: measured against the illustrative baseline and reported, but advisory (not a required phase)
    logs = {r.id: parse_run(loaded, r, DEFAULT_LIMIT) for r in loaded.spec.runs if r.phase.value == "efficiency"}
    eff = judge_efficiency(loaded.spec, catalog, logs)  # type: ignore[arg-type]
    (meets,) = [c for c in eff.checks if c.id == "efficiency.cc-tiny-lm-fp32-2_meets_baseline"]
    assert meets.severity.value == "advisory" and meets.status.value in ("PASS", "FAIL")
    assert "(baseline derived, not published)" in meets.message
    assert meets.message.endswith("(advisory: catalog loopback-cpu does not require the efficiency phase)")
    assert all(c.severity.value == "advisory" for c in eff.checks)
    (workload,) = eff.workloads
    means = sorted(statistics.fmean(float(t) for i, t in _STEP.findall(
        (bundle / f"training/efficiency/{rid}/slurm-output.log").read_text(encoding="utf-8"))
        if window.first <= int(i) <= window.last) for rid in ("eff-r1", "eff-r2"))
    assert workload.used.throughput.mean_s in [pytest.approx(m, rel=1e-9) for m in means]
    assert meets.measured == pytest.approx(workload.used.throughput.mean_s)
    # without an efficiency run the suite entry is skipped, not failed, for this catalog
    only_scaling = loaded.spec.model_copy(update={"runs": [r for r in loaded.spec.runs if r.phase.value == "scaling"]})
    (absent,) = [c for c in judge_efficiency(only_scaling, catalog, {}).checks if c.id.endswith("_meets_baseline")]
    assert (absent.status.value, absent.severity.value) == ("SKIPPED", "advisory")


def test_a_training_run_that_did_not_run_cleanly_is_refused(tmp_path: Path) -> None:
    log = _train(tmp_path / "run", 1, 24200, steps=3)
    with pytest.raises(RunnerError, match=r"to run once and complete, got state\(s\) \['NODE_FAIL', 'COMPLETED'\]"):
        _check_training(_record("r", "9", 1, "x"), log, _sacct("9", "NODE_FAIL", "COMPLETED"))
    with pytest.raises(RunnerError, match=r"expected the workload on Slurm's 2 task\(s\) on cc-n1,cc-n2 to run to its "
                                          r"end, got world_size=1 nodes=cc-n1"):
        _check_training(_record("r", "9", 2, "x"), log, _sacct("9", "COMPLETED"))
    cut = tmp_path / "cut.log"
    cut.write_text(log.read_text(encoding="utf-8").split("Worker group SUCCEEDED")[0], encoding="utf-8")
    with pytest.raises(RunnerError, match="and no SUCCEEDED line"):
        _check_training(_record("r", "9", 1, "x"), cut, _sacct("9", "COMPLETED"))


class _SeenSlurm(Slurm):
    """Slurm as `scontrol show job` shows a job that has already completed (no cluster needed)."""

    def job(self, job_id: str) -> dict[str, str] | None:
        return {"JobId": job_id, "JobState": "COMPLETED", "Restarts": "0", "StartTime": "2026-12-01T12:00:00",
                "EndTime": "2026-12-01T12:00:10", "NodeList": "cc-n1", "NumTasks": "1"}

    def hostnames(self, nodelist: str) -> list[str]:
        return [nodelist]


@pytest.mark.parametrize(("seen", "expected"), [
    ("2026-12-01T12:00:13.500000+00:00", "2026-12-01T12:00:10.999+00:00"),  # a late poll: EndTime's second
    ("2026-12-01T12:00:10.300000+00:00", "2026-12-01T12:00:10.300+00:00"),  # a prompt one: when it was seen
])
def test_job_finished_stays_inside_the_scheduler_span(tmp_path: Path, seen: str, expected: str) -> None:
    plan = load_plan(_plan(tmp_path, "  - {id: s, kind: training, phase: scaling, nodes: 1}\n"))
    runner = Runner(plan, tmp_path / "b", _SeenSlurm(UTC), lambda: datetime.fromisoformat(seen), lambda m: None)
    (tmp_path / "b" / "training" / "scaling" / "s").mkdir(parents=True)
    record = JobRecord("s", slurm_id="5")
    runner._track(plan.jobs[0], record)
    events = [json.loads(line) for line in
              (tmp_path / "b" / "training" / "scaling" / "s" / "runner-events.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events] == ["job_started", "job_finished"]
    assert events[1]["ts"] == expected
    assert record.incarnations == [{"restart": 0, "start": "2026-12-01T12:00:00+00:00", "nodes": ["cc-n1"],
                                    "tasks": 1}]


class _RequeuedSlurm(_SeenSlurm):
    """`scontrol show job` through a requeue, state by state as Slurm 22.05 showed it (polled without pause)."""

    def __init__(self) -> None:
        super().__init__(UTC)
        run0 = {"Restarts": "0", "StartTime": "2026-12-02T05:53:18", "NodeList": "cc-n[1-2]"}
        # the old incarnation being killed: Restarts already 1, its NodeList, the requeue's time as StartTime
        killing = {"JobState": "COMPLETING", "Restarts": "1", "StartTime": "2026-12-02T05:53:22",
                   "NodeList": "cc-n[1-2]"}
        run1 = {"Restarts": "1", "StartTime": "2026-12-02T05:55:23", "NodeList": "cc-n[1,3]"}
        self.states = [{"JobState": "RUNNING", **run0}, killing, {**killing, "NodeList": "cc-n1"},
                       {"JobState": "PENDING", "Restarts": "1", "StartTime": "2026-12-02T05:55:23",
                        "NodeList": "(null)"},
                       {"JobState": "RUNNING", **run1}, {"JobState": "COMPLETED", **run1}]

    def job(self, job_id: str) -> dict[str, str] | None:
        return {"JobId": job_id, "EndTime": "2026-12-02T05:56:00", "NumTasks": "2", **self.states.pop(0)}

    def hostnames(self, nodelist: str) -> list[str]:
        return {"cc-n[1-2]": ["cc-n1", "cc-n2"], "cc-n[1,3]": ["cc-n1", "cc-n3"]}.get(nodelist, [nodelist])


def test_a_requeued_job_is_a_new_incarnation_only_once_it_runs(tmp_path: Path) -> None:
    """The requeue's COMPLETING moment (old nodes, Restarts raised) is not the requeued job's start."""
    plan = load_plan(_plan(tmp_path, "  - {id: r, kind: resilience, nodes: 2}\nslurm: {poll_s: 0.001}\n"))
    slurm = _RequeuedSlurm()
    runner = Runner(plan, tmp_path / "b", slurm, lambda: datetime(2026, 12, 2, 5, 56, tzinfo=UTC), lambda m: None)
    (tmp_path / "b" / "resilience" / "r").mkdir(parents=True)
    record = JobRecord("r", slurm_id="2")
    runner._track(plan.jobs[0], record)
    assert slurm.states == []
    assert [(i["restart"], i["start"], i["nodes"]) for i in record.incarnations] == [
        (0, "2026-12-02T05:53:18+00:00", ["cc-n1", "cc-n2"]), (1, "2026-12-02T05:55:23+00:00", ["cc-n1", "cc-n3"])]
    events = [json.loads(line) for line in
              (tmp_path / "b" / "resilience" / "r" / "runner-events.jsonl").read_text().splitlines()]
    assert [(e["type"], e.get("node"), e.get("nodes")) for e in events] == [
        ("job_started", None, ["cc-n1", "cc-n2"]), ("restart_started", None, None),
        ("node_excluded", "cc-n2", None), ("node_added", "cc-n3", None),
        ("job_started", None, ["cc-n1", "cc-n3"]), ("job_finished", None, None)]


def test_plan_scopes_are_the_bundle_scopes_the_scaling_phase_judges(tmp_path: Path) -> None:
    from typing import get_args

    from clustercert.metrics.collectives import Scope
    from clustercert.runner.plan import PlanJob

    literal = next(a for a in get_args(PlanJob.model_fields["scope"].annotation) if a is not type(None))
    scopes = list(get_args(literal))
    assert scopes and all(Scope(s) for s in scopes)
    path = _plan(tmp_path, "  - {id: c, kind: collective, scope: cross-domain, nodes: 2}\n")
    with pytest.raises(PlanError, match=r"line 7 field 'jobs\[0\]\.scope': "):
        load_plan(path)
