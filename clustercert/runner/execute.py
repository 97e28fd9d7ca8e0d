"""Running a plan's jobs on Slurm: submit, watch, inject faults, collect the evidence, write bundle.yaml.

What the cluster did is observed, never assumed: job starts, requeues and node lists come from
`scontrol show job` while the job runs and from `sacct --duplicates` after it; the fault is recorded when
the injector acted; checkpoints and straggler reports come from the workload itself. A run folder's
state (`runner/state.json` in the bundle folder) makes a re-run resume: a collected job is not submitted
again, a submitted one is tracked on.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from clustercert.runner.plan import FaultKind, JobKind, Plan, PlanJob, RunnerError, nccl_tests_binaries
from clustercert.runner.slurm import TERMINAL, NodeState, Slurm

__all__ = ["JobRecord", "Runner", "expand_jobs", "write_bundle"]

_STEP = re.compile(r"Training epoch \d+, iteration (\d+)/")
_THREADS = "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1"
# The job's own resilience handling, after the workload stopped itself: a straggler's node is drained and the
# job requeued (Slurm then allocates without it); a stall (a peer stopped answering) requeues the job.
_ON_FAILURE = [
    "rc=$?",
    'if [ "$rc" -ne 0 ] && [ -s "$CLUSTERCERT_STRAGGLER_FILE" ]; then',
    '  while read -r node; do scontrol update nodename="$node" state=drain '
    'reason="straggler detected by job $SLURM_JOB_ID"; done < "$CLUSTERCERT_STRAGGLER_FILE"',
    '  mv "$CLUSTERCERT_STRAGGLER_FILE" "$CLUSTERCERT_STRAGGLER_FILE.${SLURM_RESTART_COUNT:-0}"',
    '  echo "# clustercert run: straggler node(s) drained; requeueing job $SLURM_JOB_ID"',
    '  scontrol requeue "$SLURM_JOB_ID"',
    'elif [ "$rc" -ne 0 ] && [ -s "$CLUSTERCERT_STALL_FILE" ]; then',
    '  mv "$CLUSTERCERT_STALL_FILE" "$CLUSTERCERT_STALL_FILE.${SLURM_RESTART_COUNT:-0}"',
    '  echo "# clustercert run: stall detected; requeueing job $SLURM_JOB_ID"',
    '  scontrol requeue "$SLURM_JOB_ID"',
    "fi",
    'exit "$rc"',
]


@dataclass
class JobRecord:
    """What one plan job did, as observed; serialised in runner/state.json."""

    id: str
    slurm_id: str | None = None
    state: str = "planned"
    collected: bool = False
    incarnations: list[dict[str, Any]] = field(default_factory=list)  # {restart, start, nodes}
    restarts_seen: int = 0
    faults_done: list[int] = field(default_factory=list)
    downed: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # role -> bundle-relative path

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobRecord:
        return cls(**data)


def _sbatch_value(value: str, what: str) -> str:
    """`value` for an `#SBATCH` line, refused when it holds a line break or another control character (the
    plan's grammar refuses them first; a bundle folder's name is checked here): the script is one line per
    option, and a second line would be a command of its own."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise RunnerError(f"{what}: expected no control characters (a line break would start a command of its own "
                          f"in the job script), got {value!r}")
    return value


class Runner:
    """Runs the jobs of one plan into one bundle folder."""

    def __init__(self, plan: Plan, bundle: Path, slurm: Slurm, now: Callable[[], datetime],
                 log: Callable[[str], None]) -> None:
        self.plan, self.bundle, self.slurm, self.now, self.log = plan, bundle, slurm, now, log
        self.state_path = bundle / "runner" / "state.json"
        self.python = plan.slurm.python or sys.executable

    # state ----------------------------------------------------------------------------------------
    def load(self) -> dict[str, JobRecord]:
        if not self.state_path.exists():
            return {}
        data = json.loads(self.state_path.read_text(encoding="utf-8"))
        return {k: JobRecord.from_json(v) for k, v in data["jobs"].items()}

    def save(self, record: JobRecord) -> None:
        records = self.load()
        records[record.id] = record
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"schema_version": 1, "jobs": {k: v.to_json() for k, v in records.items()}},
                                  indent=1), encoding="utf-8")
        os.replace(tmp, self.state_path)

    def submitted_ids(self) -> list[str]:
        return [r.slurm_id for r in self.load().values() if r.slurm_id and not r.collected]

    # jobs -----------------------------------------------------------------------------------------
    def folder(self, job: PlanJob, rid: str) -> str:
        if job.kind is JobKind.RESILIENCE:
            return f"resilience/{rid}"
        if job.kind is JobKind.TRAINING:
            return f"training/{job.phase}/{rid}"
        return f"collectives/{job.scope}/{rid}"

    def _script(self, job: PlanJob, nodelist: list[str] | None, rid: str) -> Path:
        rel = self.folder(job, rid)
        out = self.bundle / rel
        out.mkdir(parents=True, exist_ok=True)
        py = shlex.quote(self.python)
        binaries = nccl_tests_binaries(job.collectives) if job.kind is JobKind.COLLECTIVE else None
        # nccl-tests run one process per GPU (`-g 1`); clustercert's own workloads one per node.
        per_node = self.plan.system.devices_per_node if binaries else 1
        lines = ["#!/bin/bash", f"#SBATCH --job-name=cc-{_sbatch_value(job.id, 'job id')}",
                 f"#SBATCH --nodes={job.nodes}",
                 f"#SBATCH --ntasks={job.nodes * per_node}", f"#SBATCH --ntasks-per-node={per_node}",
                 f"#SBATCH --time={job.time_limit_min}", "#SBATCH --open-mode=append",
                 f"#SBATCH --output={_sbatch_value(str(out / 'slurm-output.log'), 'the bundle folder')}"]
        if self.plan.slurm.partition:
            lines.append(f"#SBATCH --partition={_sbatch_value(self.plan.slurm.partition, 'slurm.partition')}")
        if nodelist:
            lines.append(f"#SBATCH --nodelist={_sbatch_value(','.join(nodelist), 'the node list')}")
        if job.kind is JobKind.RESILIENCE:
            w = job.workload
            ckpt = self.bundle / "runner" / "checkpoints" / rid
            lines += ["#SBATCH --requeue", f"export {_THREADS}",
                      f"export CLUSTERCERT_PID_DIR={shlex.quote(str(out / 'pids'))}",
                      f"export CLUSTERCERT_STRAGGLER_FILE={shlex.quote(str(out / 'straggler-nodes.txt'))}",
                      f"export CLUSTERCERT_STALL_FILE={shlex.quote(str(out / 'stall.txt'))}",
                      "echo \"# clustercert run: job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0} on "
                      "$SLURM_JOB_NODELIST\"",
                      f"srun --kill-on-bad-exit=1 {py} -m clustercert.runner.workload --steps {w.steps} "
                      f"--batch {w.batch} --checkpoint-dir {shlex.quote(str(ckpt))} --checkpoint-every "
                      f"{w.checkpoint_every} --straggler-threshold {w.straggler_threshold} --straggler-window "
                      f"{w.straggler_window} --events {shlex.quote(str(out / 'trainer-events.jsonl'))} "
                      f"--rank-timings {shlex.quote(str(out / 'ranks'))} --hang-timeout {w.hang_timeout_s}",
                      *_ON_FAILURE]
        elif job.kind is JobKind.TRAINING:
            # a measurement: the same workload, no faults, no requeue, the straggler detector off
            w = job.workload
            ckpt = self.bundle / "runner" / "checkpoints" / rid
            lines += ["#SBATCH --no-requeue", f"export {_THREADS}",
                      "echo \"# clustercert run: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST "
                      "($SLURM_NTASKS task(s))\"",
                      f"srun --kill-on-bad-exit=1 {py} -m clustercert.runner.workload --steps {w.steps} "
                      f"--batch {w.batch} --checkpoint-dir {shlex.quote(str(ckpt))} --checkpoint-every "
                      f"{w.checkpoint_every} --straggler-threshold 0 --hang-timeout {w.hang_timeout_s}"]
        elif binaries:
            c = job.collectives
            lines += ["#SBATCH --no-requeue",
                      # the folder quoted outside the double quotes: inside them, $(...) in its name would run
                      f"echo \"# clustercert run: NVIDIA nccl-tests from \"{shlex.quote(str(binaries[0].parent))}"
                      "\" on $SLURM_JOB_NODELIST ($SLURM_NTASKS ranks)\""]
            lines += [f"srun --kill-on-bad-exit=1 {shlex.quote(str(binary))} -b {c.min_bytes} -e {c.max_bytes} -f 2 "
                      f"-g 1 -n {c.iters} -w {c.warmup}" for binary in binaries]
        else:
            c = job.collectives
            lines += ["#SBATCH --no-requeue", f"export {_THREADS}",
                      f"srun --kill-on-bad-exit=1 {py} -m clustercert.runner.collbench --collectives "
                      f"{','.join(c.collectives)} --min-bytes {c.min_bytes} --max-bytes {c.max_bytes} "
                      f"--iters {c.iters} --warmup {c.warmup}"]
        script = self.bundle / "runner" / "jobs" / f"{rid}.sbatch"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return script

    def event(self, job: PlanJob, rid: str, kind: str, ts: datetime, **fields: Any) -> None:
        path = self.bundle / self.folder(job, rid) / "runner-events.jsonl"
        record = {"ts": ts.isoformat(timespec="milliseconds"), "type": kind, **fields}
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    def run_job(self, job: PlanJob, nodelist: list[str] | None = None, run_id: str | None = None) -> JobRecord:
        """Submit (or keep tracking) one job, inject its faults, wait for its end, collect its evidence."""
        rid = run_id or job.id
        record = self.load().get(rid) or JobRecord(rid)
        if record.collected:
            self.log(f"{rid}: collected by an earlier run (Slurm job {record.slurm_id}); not submitted again")
            return record
        if record.slurm_id is None:
            script = self._script(job, nodelist, rid)
            record.slurm_id = self.slurm.sbatch(str(script))
            record.state = "submitted"
            self.save(record)
            self.log(f"{rid}: submitted as Slurm job {record.slurm_id}")
        try:
            self._track(job, record)
        except BaseException as exc:
            if not record.collected and record.slurm_id:
                self.slurm.cancel(record.slurm_id)
                why = "interrupted" if isinstance(exc, KeyboardInterrupt) else "stopped on an error"
                self.log(f"{rid}: {why}; cancelled Slurm job {record.slurm_id}")
                try:
                    self._return_to_service(record)
                except RunnerError as cleanup:  # the cluster's own trouble: the first error is the one to report
                    self.log(f"{rid}: could not return the nodes the run took out to service: {cleanup}")
            raise
        self._collect(job, record)
        return record

    def _last_step(self, job: PlanJob, rid: str) -> int | None:
        path = self.bundle / self.folder(job, rid) / "slurm-output.log"
        if not path.exists():
            return None
        steps = _STEP.findall(path.read_text(encoding="utf-8", errors="replace"))
        return int(steps[-1]) if steps else None

    def _track(self, job: PlanJob, record: JobRecord) -> None:
        """Follow the job in Slurm until it ends: each requeue, each incarnation's nodes, a pending job that cannot
        start, the faults to inject while a resilience run runs, its end."""
        assert record.slurm_id is not None
        deadline = time.monotonic() + job.time_limit_min * 60 * 2 + 600
        missing_since: float | None = None
        pending = _PendingWatch(self, record)
        while True:
            info = self.slurm.job(record.slurm_id)
            if info is None:
                # slurmctld forgot the job (MinJobAge): its end is in sacct
                missing_since = missing_since or time.monotonic()
                if time.monotonic() - missing_since > 5:
                    record.state = "ended"
                    break
                time.sleep(self.plan.slurm.poll_s)
                continue
            state = info.get("JobState", "")
            restarts = int(info.get("Restarts", "0") or 0)
            if restarts > record.restarts_seen:
                record.restarts_seen = restarts
                self.event(job, record.id, "restart_started", self.now(), by="scheduler", job_id=record.slurm_id,
                           detail=f"requeued by Slurm (Restarts={restarts}, JobState={state}, "
                                  f"Reason={info.get('Reason', '')})")
                self.log(f"{record.id}: Slurm requeued job {record.slurm_id} (restart {restarts})")
            started = self.slurm.when(info.get("StartTime"))
            # A requeued job shows COMPLETING with Restarts already raised while its old incarnation is killed,
            # its old NodeList and the requeue's time as StartTime (seen on Slurm 22.05): a COMPLETING job is
            # an incarnation of its own only before any requeue; a later one is seen RUNNING or ended.
            if state == "RUNNING" or state in TERMINAL or (state == "COMPLETING" and restarts == 0):
                self._incarnation(job, record, info, restarts, started)
            pending.poll(info, state)
            if state == "RUNNING" and job.kind is JobKind.RESILIENCE:
                self._inject(job, record)
            self.save(record)
            if state in TERMINAL:
                record.state = state
                if state == "COMPLETED":
                    self._finished(job, record, info)
                break
            if time.monotonic() > deadline:
                raise RunnerError(f"{record.id}: expected Slurm job {record.slurm_id} to end within "
                                  f"{job.time_limit_min * 2 + 10} min, got state {state}. It was cancelled")
            time.sleep(self.plan.slurm.poll_s)
        self.save(record)

    def _incarnation(self, job: PlanJob, record: JobRecord, info: dict[str, str], restarts: int,
                     started: datetime | None) -> None:
        """The job's incarnation `restarts`, which `started`, seen for the first time: its start and nodes, and the
        nodes the requeue left out or added, as events."""
        seen = {(i["restart"]) for i in record.incarnations}
        if restarts in seen or started is None or not info.get("NodeList"):
            return
        nodes = self.slurm.hostnames(info["NodeList"])
        previous = record.incarnations[-1]["nodes"] if record.incarnations else None
        tasks = info.get("NumTasks", "")
        record.incarnations.append({"restart": restarts, "start": started.isoformat(), "nodes": nodes,
                                    "tasks": int(tasks) if tasks.isdigit() else None})
        if previous is not None:
            for gone in sorted(set(previous) - set(nodes)):
                self.event(job, record.id, "node_excluded", started, by="scheduler", node=gone,
                           job_id=record.slurm_id, detail="not in the requeued job's allocation")
            for new in sorted(set(nodes) - set(previous)):
                self.event(job, record.id, "node_added", started, by="scheduler", node=new, job_id=record.slurm_id)
        self.event(job, record.id, "job_started", started, by="scheduler", job_id=record.slurm_id,
                   nodes=nodes, detail=f"restart {restarts}")
        self.log(f"{record.id}: job {record.slurm_id} running on {','.join(nodes)} (restart {restarts})")

    def _finished(self, job: PlanJob, record: JobRecord, info: dict[str, str]) -> None:
        """The job_finished event of a COMPLETED job. EndTime is truncated to the second (the job ended within the
        second after it) and the trainer's own events have ms: the earlier of when the runner saw it and the end of
        EndTime's second is after the job's last event and inside the scheduler's span, however late the poll
        came."""
        seen_at = self.now()
        ended = self.slurm.when(info.get("EndTime"))
        if ended is not None:
            seen_at = min(seen_at, ended + timedelta(milliseconds=999))
        self.event(job, record.id, "job_finished", seen_at, by="scheduler", job_id=record.slurm_id,
                   detail=f"JobState=COMPLETED EndTime={info.get('EndTime')}")

    def _short_of_nodes(self, info: dict[str, str]) -> str | None:
        """Why a pending job cannot start until a node returns to service (its partition has fewer nodes that can
        run a job than it needs, or a node it asks for by name cannot), as a phrase; None when it can."""
        need = re.match(r"\d+", info.get("NumNodes", ""))
        if need is None:
            return None
        partitions = [name for name in info.get("Partition", "").split(",") if name]
        nodes = self.slurm.node_states(partitions)
        excluded = set(self.slurm.hostnames(info.get("ExcNodeList", "")))
        asked = set(self.slurm.hostnames(info.get("ReqNodeList", "")))
        usable = [node for node in nodes if node.usable and node.name not in excluded]
        out = [node for node in nodes if not node.usable and node.name not in excluded]
        where = f"partition {','.join(partitions)}" if partitions else "the cluster"
        unusable_asked = sorted(node.name for node in out if node.name in asked)
        if unusable_asked:
            return (f"the job asks for node(s) {','.join(unusable_asked)} by name, which cannot run it: "
                    f"{_listed(node for node in out if node.name in asked)}")
        if len(usable) >= int(need.group()):
            return None
        return (f"it needs {need.group()} node(s) while {where} has {len(usable)} that can run it: {_listed(out)}")

    def _return_to_service(self, record: JobRecord) -> None:
        """Resume the nodes the fault injector took out for `record` (their job is over), once."""
        for node in record.downed:
            self.slurm.resume(node)
            self.log(f"{record.id}: node {node} returned to service after the job (fault injection cleanup)")
        record.downed = []
        self.save(record)

    def _inject(self, job: PlanJob, record: JobRecord) -> None:
        for i, fault in enumerate(job.faults):
            if i in record.faults_done:
                continue
            step = self._last_step(job, record.id)
            if step is None or step < fault.at_step or not record.incarnations:
                continue
            nodes = record.incarnations[-1]["nodes"]
            node = nodes[0] if fault.node == "first" else nodes[-1]
            if fault.kind is FaultKind.NODE_DOWN:
                self.slurm.set_down(node, fault.reason)
                record.downed.append(node)
                what = f"scontrol update nodename={node} state=down reason='{fault.reason}'"
            else:
                pid = self._pid_on(job, record.id, node, record.restarts_seen)
                if pid is None:
                    continue  # the rank has not started yet: try at the next poll
                if fault.kind is FaultKind.SLOW:
                    _throttle(pid, fault.slowdown)
                    record.downed.append(node)  # the job's handler drains it; returned to service afterwards
                    what = f"process {pid} stopped {fault.slowdown:.0%} of the time (SIGSTOP/SIGCONT)"
                else:
                    os.kill(pid, signal.SIGSTOP)
                    what = f"process {pid} stopped (SIGSTOP) until the job kills it"
            record.faults_done.append(i)
            self.event(job, record.id, "fault_injected", self.now(), by="injector", node=node, step=step,
                       job_id=record.slurm_id, detail=f"{fault.kind.value}: {what}")
            self.log(f"{record.id}: fault injected at step {step} on {node}: {fault.kind.value} ({what})")
            self.save(record)

    def _pid_on(self, job: PlanJob, rid: str, node: str, restart: int) -> int | None:
        for f in (self.bundle / self.folder(job, rid) / "pids").glob("rank-*.pid"):
            pid, where, incarnation = f.read_text(encoding="utf-8").split()
            if where == node and int(incarnation) == restart and _alive(int(pid)):
                return int(pid)
        return None

    def _collect(self, job: PlanJob, record: JobRecord) -> None:
        assert record.slurm_id is not None
        rel = self.folder(job, record.id)
        out = self.bundle / rel
        text = ""
        for _ in range(60):  # accounting reaches slurmdbd a moment after the job ends
            text = self.slurm.sacct(record.slurm_id)
            rows = [r.split("|") for r in text.splitlines()[1:] if r.strip()]
            top = [r for r in rows if r and r[0] == record.slurm_id]
            if top and all(r[5].split()[0] not in ("RUNNING", "PENDING") for r in top) and \
                    len(top) >= record.restarts_seen + 1:
                break
            time.sleep(1.0)
        else:
            raise RunnerError(f"{record.id}: expected sacct to show Slurm job {record.slurm_id}'s end, got "
                              f"{text.strip().splitlines()[-1:]!r}. Is slurmdbd up (sacctmgr list cluster)?")
        (out / "sacct.txt").write_text(text, encoding="utf-8")
        record.files["scheduler"] = f"{rel}/sacct.txt"
        nodes_txt = "".join(f"restart {i['restart']}: {' '.join(i['nodes'])}\n" for i in record.incarnations)
        (out / "nodes.txt").write_text(nodes_txt, encoding="utf-8")
        record.files["nodes"] = f"{rel}/nodes.txt"
        log = out / "slurm-output.log"
        if job.kind is JobKind.RESILIENCE:
            events: list[tuple[str, str]] = []
            for name in ("runner-events.jsonl", "trainer-events.jsonl"):
                p = out / name
                if p.exists():
                    events += [(json.loads(line)["ts"], line) for line in p.read_text(encoding="utf-8").splitlines()
                               if line.strip()]
            events.sort(key=lambda e: datetime.fromisoformat(e[0]))
            (out / "events.jsonl").write_text("".join(line + "\n" for _, line in events), encoding="utf-8")
            record.files["events"] = f"{rel}/events.jsonl"
            csv_rows: list[str] = []
            for part in sorted((out / "ranks").glob("rank-*.csv"), key=lambda p: int(p.stem.split("-")[1])):
                lines = part.read_text(encoding="utf-8").splitlines()
                csv_rows += lines[1:] if csv_rows else lines
            if csv_rows:
                (out / "rank-timings.csv").write_text("\n".join(csv_rows) + "\n", encoding="utf-8")
                record.files["rank-timings"] = f"{rel}/rank-timings.csv"
            record.files["training"] = f"{rel}/slurm-output.log"
        elif job.kind is JobKind.TRAINING:
            record.files["training"] = f"{rel}/slurm-output.log"
        else:
            record.files["collective"] = f"{rel}/slurm-output.log"
        if not log.exists():
            raise RunnerError(f"{record.id}: expected the job's output at {log}, got nothing. Check the job "
                              "(sacct above) and the slurmd logs")
        if job.kind is JobKind.TRAINING:
            _check_training(record, log, text)
        # the injector restores what it broke once the job is over; the job's evidence ends before this
        self._return_to_service(record)
        record.collected = True
        self.save(record)


_WORLD = re.compile(r"Starting worker group: job \S+ restart_count=\d+ world_size=(\d+) nodes=(\S+)")
_FINISHED = re.compile(r"Worker group SUCCEEDED: (\d+) steps")


def _check_training(record: JobRecord, log: Path, sacct: str) -> None:
    """A measurement run is usable only if it ran once, to its end, on the tasks Slurm allocated."""
    rows = [r.split("|") for r in sacct.splitlines()[1:] if r.strip()]
    states = [r[5].split()[0] for r in rows if r and r[0] == record.slurm_id]
    if states != ["COMPLETED"] or len(record.incarnations) != 1:
        raise RunnerError(f"{record.id}: expected Slurm job {record.slurm_id} to run once and complete, got "
                          f"state(s) {states or ['none']} over {len(record.incarnations)} start(s). See its "
                          f"output ({log}) and sacct.txt; re-run the plan to measure it again")
    tasks = record.incarnations[0].get("tasks")
    text = log.read_text(encoding="utf-8", errors="replace")
    world = _WORLD.search(text)
    if tasks is None or world is None or int(world.group(1)) != tasks or \
            sorted(set(world.group(2).split(","))) != sorted(record.incarnations[0]["nodes"]) or \
            not _FINISHED.search(text):
        got = f"world_size={world.group(1)} nodes={world.group(2)}" if world else "no 'Starting worker group' line"
        raise RunnerError(f"{log}: expected the workload on Slurm's {tasks} task(s) on "
                          f"{','.join(record.incarnations[0]['nodes'])} to run to its end, got {got}"
                          f"{'' if _FINISHED.search(text) else ' and no SUCCEEDED line'}. Check the job's output")


def training_runs(plan: Plan, job: PlanJob, rec: JobRecord) -> list[dict[str, Any]]:
    """bundle.yaml's training run of one collected training job: tasks and nodes as Slurm ran them."""
    from clustercert.runner.model import ModelConfig

    (ran,) = rec.incarnations
    tasks = int(ran["tasks"])
    repeat = int(rec.id.rsplit("-r", 1)[1]) if job.repeats > 1 else 1
    return [{"id": rec.id, "phase": job.phase, "kind": "training", "format": "nemo", "workload": job.model,
             "precision": job.precision, "gpus": tasks, "gbs": job.workload.batch * tasks,
             "seq_len": ModelConfig().seq_len, "parallelism": {"tp": 1, "pp": 1}, "repeat": repeat,
             "nodes": list(ran["nodes"]), "files": [rec.files["training"]]}]


def _listed(nodes: Iterable[NodeState], most: int = 8) -> str:
    """`cc-n1 drained (straggler detected by job 12), ...`: the first `most`, then how many more."""
    every = list(nodes)
    shown = [f"{node.name} {node.state}" + (f" ({node.reason})" if node.reason not in ("", "none") else "")
             for node in every[:most]]
    more = f" and {len(every) - most} more" if len(every) > most else ""
    return ", ".join(shown) + more if shown else "none is drained or down"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _throttle(pid: int, slowdown: float, period_s: float = 0.2) -> threading.Thread:
    """Stop and continue a process so it runs (1 - slowdown) of the time, until it exits (like cpulimit)."""

    def loop() -> None:
        try:
            while True:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(period_s * slowdown)
                os.kill(pid, signal.SIGCONT)
                time.sleep(period_s * (1 - slowdown))
        except OSError:
            return  # the process is gone

    thread = threading.Thread(target=loop, name=f"throttle-{pid}", daemon=True)
    thread.start()
    return thread


def local_zone() -> str:
    """The IANA name of this machine's zone: sacct prints local times without an offset (bundle.yaml timezone)."""
    if os.environ.get("TZ"):
        return os.environ["TZ"].lstrip(":")
    link = Path("/etc/localtime")
    if link.is_symlink() and "zoneinfo/" in str(link.readlink()):
        return str(link.readlink()).split("zoneinfo/", 1)[1]
    timezone_file = Path("/etc/timezone")
    return timezone_file.read_text(encoding="utf-8").strip() if timezone_file.exists() else "UTC"


def write_bundle(plan: Plan, records: list[tuple[PlanJob, JobRecord]], bundle: Path, nodes: list[str]) -> Path:
    """bundle.yaml from what actually ran (synthetic: false): one run per collected file."""
    runs: list[dict[str, Any]] = []
    for job, rec in records:
        allocated = sorted({n for i in rec.incarnations for n in i["nodes"]})
        if job.kind is JobKind.RESILIENCE:
            for suffix, kind, fmt, role in (("training", "resilience", "nemo", "training"),
                                            ("scheduler", "scheduler", "sacct", "scheduler"),
                                            ("events", "events", "events", "events"),
                                            ("rank-timings", "rank-timings", "rank-timings", "rank-timings")):
                if role not in rec.files:
                    continue
                runs.append({"id": f"{rec.id}-{suffix}", "phase": "resilience", "kind": kind, "format": fmt,
                             "nodes": list(allocated), "files": [rec.files[role]]})
        elif job.kind is JobKind.TRAINING:
            runs += training_runs(plan, job, rec)
        else:
            runs.append({"id": rec.id, "phase": "scaling", "kind": "collective", "format": "nccl-tests",
                         "scope": job.scope, "gpus": job.nodes * plan.system.devices_per_node,
                         "nodes": list(allocated),
                         "files": [rec.files["collective"]]})
    doc = {
        "schema_version": 1,
        "cluster": {"name": plan.cluster.name, "provider": plan.cluster.provider},
        "system": {"gpu": plan.system.id, "gpus_per_node": plan.system.devices_per_node, "nodes": nodes},
        "catalog": plan.catalog,
        "recipe_version": plan.recipe_version,
        "timezone": local_zone(),
        "synthetic": False,
        "runs": runs,
    }
    out = bundle / "bundle.yaml"
    header = "# Written by `clustercert run` from the jobs that ran on Slurm (measured, on CPUs; not simulated).\n"
    out.write_text(header + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return out


def expand_jobs(plan: Plan, nodes: list[str]) -> list[tuple[PlanJob, list[str] | None, str]]:
    """The Slurm jobs a plan makes: one per job, a pairwise sweep one per pair of the cluster's nodes, a
    training job one per repeat (`<id>-r<n>` when it has more than one)."""
    out: list[tuple[PlanJob, list[str] | None, str]] = []
    for job in plan.jobs:
        if job.kind is JobKind.COLLECTIVE and job.scope == "pair":
            for i, a in enumerate(nodes):
                for b in nodes[i + 1:]:
                    out.append((job, [a, b], f"{job.id}-{a}-{b}"))
        elif job.kind is JobKind.TRAINING and job.repeats > 1:
            out.extend((job, None, f"{job.id}-r{n}") for n in range(1, job.repeats + 1))
        else:
            out.append((job, None, job.id))
    return out


class _PendingWatch:
    """Whether a pending job can start: a job may pend for hours on a busy cluster, so its partition's nodes are
    looked at (sinfo) every 15 s at most, not every poll; one short of usable nodes for longer than the plan's
    node_wait_s stops the run."""

    def __init__(self, run: Runner, record: JobRecord) -> None:
        self.run, self.record = run, record
        self.every = min(15.0, run.plan.slurm.node_wait_s / 4)
        self.checked_at: float | None = None
        self.short_since: float | None = None  # since when the partition has too few usable nodes

    def poll(self, info: dict[str, str], state: str) -> None:
        if state != "PENDING":
            self.short_since = self.checked_at = None
            return
        if self.checked_at is not None and time.monotonic() - self.checked_at < self.every:
            return
        self.checked_at = time.monotonic()
        short = self.run._short_of_nodes(info)
        record, wait = self.record, self.run.plan.slurm.node_wait_s
        if short is None:
            self.short_since = None
        elif self.short_since is None:
            self.short_since = time.monotonic()
            self.run.log(f"{record.id}: Slurm job {record.slurm_id} is pending and {short}; the run stops if it "
                         f"still is in {wait:.0f} s")
        elif time.monotonic() - self.short_since >= wait:
            raise RunnerError(
                f"{record.id}: expected Slurm job {record.slurm_id} to start, got it pending for "
                f"{time.monotonic() - self.short_since:.0f} s, and {short}. It was cancelled. Check those nodes "
                "and return them to service (scontrol update nodename=NODE state=resume), or plan the "
                "job on fewer nodes than the partition has (a restart needs a spare node)")
