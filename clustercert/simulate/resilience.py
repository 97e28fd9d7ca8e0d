"""A long resilience run: its NeMo log across restarts, sacct dump, event log, per-rank timings, telemetry."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clustercert.simulate.faults import Fault, FaultKind
from clustercert.simulate.topology import Topology, compress_hostlist

__all__ = ["ResilienceFiles", "ResilienceJob", "simulate_resilience"]

STARTUP_S = 120.0  # launch, rendezvous, model build, checkpoint load
DETECT_STRAGGLER_S = 240.0  # the straggler detector's report interval
DETECT_FAULT_S = 45.0  # the health watchdog's heartbeat timeout
RESCHEDULE_S = 95.0  # node swap and requeue by the scheduler's automation
ADMIN_DELAY_S = 2400.0  # an unreported fault waits for an operator
COMPUTE_SHARE = 0.82  # compute (NCCL kernels excluded) as a share of a healthy step
_LAUNCHER = "ft_launcher@{host}"


@dataclass(frozen=True)
class ResilienceJob:
    """The long job: one workload on `gpus` GPUs for `hours` of simulated time, with its faults."""

    workload: str
    precision: str
    gpus: int
    gbs: int
    mean_step_s: float
    hours: float
    checkpoint_every: int
    start: datetime
    job_id: int
    seed: int
    faults: tuple[Fault, ...] = ()
    timings_every: int = 10
    telemetry_every_s: float = 60.0


@dataclass
class ResilienceFiles:
    """The rendered text files and what happened, for tests and bundle.yaml. The two large files (per-rank
    timings as Parquet, DCGM telemetry as Prometheus text) are written on demand, streamed in bounded chunks:
    `write_rank_timings` / `write_telemetry` to a path, or the `rank_timings` / `telemetry` properties in memory
    (small jobs and tests). Every write of the same job gives the same bytes."""

    nemo_log: str
    sacct: str
    events: str
    allocations: list[tuple[str, ...]] = field(default_factory=list)
    steps: int = 0
    _plan: _LargeFiles | None = field(default=None, repr=False)

    def write_rank_timings(self, path: Path, *, chunk_rows: int = 1 << 21) -> None:
        """Every `timings_every`-th step of every rank, in chunks of about `chunk_rows` rows."""
        assert self._plan is not None
        with path.open("wb") as fh:
            _write_timings(self._plan, fh, chunk_rows)

    def write_telemetry(self, path: Path, *, chunk_bytes: int = 1 << 26) -> None:
        """The DCGM exporter's samples, in chunks of about `chunk_bytes` bytes."""
        assert self._plan is not None
        with path.open("wb") as fh:
            _write_telemetry(self._plan, fh, chunk_bytes)

    @property
    def rank_timings(self) -> bytes:
        assert self._plan is not None
        sink = io.BytesIO()
        _write_timings(self._plan, sink, 1 << 21)
        return sink.getvalue()

    @property
    def telemetry(self) -> str:
        assert self._plan is not None
        sink = io.BytesIO()
        _write_telemetry(self._plan, sink, 1 << 26)
        return sink.getvalue().decode("ascii")


@dataclass(frozen=True)
class _LargeFiles:
    """What the large files are rendered from: the finished timeline and the random state after it."""

    job: ResilienceJob
    topology: Topology
    steps: list[_Step]
    events: list[_Ev]
    slow: list[Fault]
    attempts: list[tuple[float, float, tuple[str, ...], str]]
    end_s: float
    rng_state: dict[str, Any]


@dataclass
class _Step:
    step: int
    end_s: float
    dur_s: float
    attempt: int


@dataclass
class _Ev:
    t: float
    type: str
    extra: dict[str, object]


def _iso(start: datetime, t: float) -> str:
    return (start + timedelta(seconds=round(t, 3))).isoformat(timespec="milliseconds")


def simulate_resilience(job: ResilienceJob, topology: Topology) -> ResilienceFiles:
    """Run the job's timeline forward step by step, then render every file from it."""
    rng = np.random.default_rng(job.seed)
    run = _Timeline(job, topology)
    end_s = job.hours * 3600.0
    slow = [f for f in job.faults if f.kind is FaultKind.SLOW_GPU]
    pending = sorted((f for f in job.faults if f.kind is not FaultKind.SLOW_GPU and f.kind is not FaultKind.BAD_LINK),
                     key=lambda f: f.at_s)
    straggler_pending = [f for f in slow if f.reported]
    while True:
        warm = 2.2 if run.first_in_attempt else 1.0
        dur = job.mean_step_s * run.pace(slow) * warm * (1.0 + 0.003 * float(rng.standard_normal()))
        fault = pending[0] if pending and pending[0].at_s <= run.t + dur else None
        if fault is not None and fault.kind in (FaultKind.LOST_STEPS, FaultKind.HANG, FaultKind.NODE_FAIL):
            pending.pop(0)
            run.fault(fault)
            continue
        seen = next((f for f in straggler_pending
                     if f.node in run.alloc and run.t + dur >= f.at_s + DETECT_STRAGGLER_S), None)
        if seen is not None:
            straggler_pending.remove(seen)
            run.straggler_detected(seen, run.t + dur)
            continue
        run.advance(dur)
        if run.t >= end_s:
            break
    run.ev(run.t + 5.0, "job_finished", by="scheduler", job_id=run.job_id, step=run.step - 1)
    run.attempts.append((run.attempt_start, run.t + 5.0, tuple(run.alloc), "COMPLETED"))
    run.events.sort(key=lambda e: e.t)
    return ResilienceFiles(
        nemo_log=_render_nemo(job, topology, run.steps, run.events),
        sacct=_render_sacct(job, run.attempts),
        events=_render_events(job, run.events),
        allocations=[a[2] for a in run.attempts],
        steps=len(run.steps),
        _plan=_LargeFiles(job, topology, run.steps, run.events, slow, run.attempts, end_s,
                          dict(rng.bit_generator.state)),
    )


class _Timeline:
    """The job as it is run forward: its clock, step counter, allocation and attempts, and what happened."""

    def __init__(self, job: ResilienceJob, topology: Topology) -> None:
        self.job = job
        self.gpus_per_node = topology.gpus_per_node
        self.alloc = list(topology.allocation_of(job.gpus))
        self.spares = [n for n in topology.spares if n not in self.alloc]
        self.events: list[_Ev] = []
        self.steps: list[_Step] = []
        self.attempts: list[tuple[float, float, tuple[str, ...], str]] = []  # start, end, nodes, final state
        self.replaced: set[str] = set()
        self.step = 0
        self.last_ckpt = -1
        self.attempt = 0
        self.attempt_start = 0.0
        self.first_in_attempt = True
        self.saving: int | None = None  # the step whose asynchronous save is under way
        self.ev(0.0, "job_started", by="scheduler", job_id=self.job_id, nodes=list(self.alloc))
        self.t = STARTUP_S

    @property
    def job_id(self) -> str:
        """Each requeue is a new job id."""
        return str(self.job.job_id + self.attempt)

    def ev(self, t: float, type_: str, **extra: object) -> None:
        self.events.append(_Ev(t, type_, {k: v for k, v in extra.items() if v is not None}))

    def pace(self, slow: list[Fault]) -> float:
        """How much slower than healthy a step runs now: the slowest GPU on the allocation sets the pace of a
        synchronous step."""
        factor = 1.0
        for f in slow:
            if f.node in self.alloc and f.node not in self.replaced and self.t >= f.at_s:
                factor = max(factor, 1.0 + COMPUTE_SHARE * (f.slowdown - 1.0))
        return factor

    def advance(self, dur: float) -> None:
        """One step of `dur` seconds."""
        self.t += dur
        self.steps.append(_Step(self.step, self.t, dur, self.attempt))
        self.first_in_attempt = False
        # async save: scheduled after its step, durable once finalized during the next step
        if self.saving is not None:
            self.last_ckpt = self.saving
            self.ev(self.t, "checkpoint_saved", by="trainer", step=self.saving, job_id=self.job_id)
            self.saving = None
        if (self.step + 1) % self.job.checkpoint_every == 0:
            self.saving = self.step
        self.step += 1

    def fault(self, fault: Fault) -> None:
        """A lost-steps, hang or node-fail fault that strikes during the next step."""
        if fault.kind is FaultKind.LOST_STEPS:
            self.step += fault.steps  # the counter jumps: those steps never ran and nothing says so
        elif fault.kind is FaultKind.HANG:
            if not fault.reported:
                self.t = fault.at_s + fault.duration_s
                return
            det = fault.at_s + 3.0 * self.job.mean_step_s + 30.0
            self.ev(det, "stall_detected", by="watchdog", step=self.step, job_id=self.job_id,
                    detail=f"no step for {det - fault.at_s:.0f} s")
            self.restart(det, "hang")
        else:
            node = fault.node or self.alloc[len(self.alloc) // 2]
            tf = fault.at_s
            self.ev(tf, "fault_injected", by="injector", node=node, step=self.step, job_id=self.job_id,
                    detail="tray powered off: GPU fell off the bus (Xid 79)")
            if fault.reported:
                tr = tf + DETECT_FAULT_S
                self.ev(tr, "fault_detected", by="watchdog", node=node, job_id=self.job_id,
                        detail="heartbeat lost; NCCL watchdog timeout on peers")
                by = "scheduler"
            else:
                tr = tf + ADMIN_DELAY_S
                self.ev(tr, "admin_action", by="operator", node=node, detail="operator drained the node by hand")
                by = "operator"
            self.restart(tr, "node-fail", node, by=by, failed_at=tf)

    def straggler_detected(self, f: Fault, td: float) -> None:
        """The straggler detector reports slow GPU `f` at `td`: its node is swapped out and the job restarted."""
        node = f.node
        assert node is not None
        rank = self.alloc.index(node) * self.gpus_per_node + (f.gpu or 0)
        self.ev(td, "straggler_detected", by="straggler-detector", node=node, gpu=f.gpu, rank=rank,
                step=self.step, job_id=self.job_id,
                detail=f"relative GPU performance {1.0 / f.slowdown:.2f} below threshold 0.90")
        self.replaced.add(node)
        self.restart(td + 20.0, "straggler", node, failed_at=td)

    def restart(self, t_stop: float, why: str, bad: str | None = None, *, by: str = "scheduler",
                failed_at: float | None = None) -> None:
        """Stop the attempt at `t_stop`, swap node `bad` for a spare, requeue, restart from the last checkpoint."""
        state = {"straggler": "REQUEUED", "node-fail": "NODE_FAIL", "hang": "REQUEUED"}[why]
        old_nodes = tuple(self.alloc)
        spare = None
        if bad is not None:
            spare = self.spares.pop(0)
            self.alloc[self.alloc.index(bad)] = spare
        self.attempts.append((self.attempt_start, failed_at if why == "node-fail" and failed_at else t_stop,
                              old_nodes, state))
        old, new = self.job_id, str(self.job.job_id + self.attempt + 1)
        self.ev(t_stop, "restart_started", by=by, job_id=old,
                detail=f"restart {self.attempt + 1} after {why}: requeued as job {new}")
        if bad is not None and spare is not None:
            self.ev(t_stop + 5.0, "node_excluded", by=by, node=bad, job_id=old)
            self.ev(t_stop + RESCHEDULE_S - 10.0, "node_added", by=by, node=spare, job_id=new)
        start = t_stop + RESCHEDULE_S
        self.ev(start, "job_started", by=by, job_id=new, nodes=list(self.alloc))
        self.ev(start + STARTUP_S - 30.0, "checkpoint_loaded", by="trainer", step=self.last_ckpt, job_id=new)
        self.t, self.attempt, self.attempt_start = start + STARTUP_S, self.attempt + 1, start
        self.step = self.last_ckpt + 1
        self.first_in_attempt = True
        self.saving = None


def _ckpt_path(step: int, gbs: int, name: str) -> str:
    return (f"/lustre/ckpt/{name}/checkpoints/model_name=0--val_loss=0.00-step={step}-"
            f"consumed_samples={(step + 1) * gbs}.0-last")


def _render_nemo(job: ResilienceJob, topology: Topology, steps: list[_Step], events: list[_Ev]) -> str:
    """The console log of the whole job as NeMo-Run's fault-tolerance launcher prints it across restarts."""
    log = _NemoLog(job, topology, max(s.step for s in steps) + 1)
    by_time: list[tuple[float, int, str, object]] = []
    for s in steps:
        by_time.append((s.end_s, 0, "step", s))
    for e in events:
        by_time.append((e.t, 1, e.type, e))
    by_time.sort(key=lambda x: (x[0], x[1]))
    log.rendezvous(0.0)
    log.lines.append(f"{log.pre}[default0]:[NeMo W {log.ts_nemo(25)} resume:228] There were no checkpoints found in "
                     f"checkpoint_dir or no checkpoint folder at checkpoint_dir :/lustre/ckpt/{log.name}/checkpoints. "
                     "Training from scratch.")
    for t, _, kind, obj in by_time:
        if kind == "step":
            assert isinstance(obj, _Step)
            log.step(t, obj)
        else:
            assert isinstance(obj, _Ev)
            log.event(t, kind, obj)
    return "\n".join(log.lines) + "\n"


class _NemoLog:
    """The lines of a NeMo console log, written step by step and event by event in time order."""

    def __init__(self, job: ResilienceJob, topology: Topology, total: int) -> None:
        self.job, self.topology, self.total = job, topology, total
        self.name = f"{job.workload}-{job.precision}-resilience"
        self.pre = f"{self.name[-10:]}/0 "
        self.host = topology.allocation_of(job.gpus)[0]
        self.launcher = _LAUNCHER.format(host=self.host)
        self.lines: list[str] = []
        self.restart = 0
        self.resumed = False
        self.nodes_now: list[str] = []
        self.scheduled: list[int] = []  # steps whose async save was scheduled
        self.loss = 12.1
        self.rng = np.random.default_rng(job.seed + 1)

    def ts_launcher(self, t: float) -> str:
        return (self.job.start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S,") + f"{int(t * 1000) % 1000:03d}"

    def ts_nemo(self, t: float) -> str:
        return (self.job.start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")

    def rendezvous(self, t: float) -> None:
        pre, launcher, gpn = self.pre, self.launcher, self.topology.gpus_per_node
        self.lines.extend([
            f"{pre}[{self.ts_launcher(t)}] [INFO] [{launcher}] [default] starting workers for entrypoint: python",
            f"{pre}[{self.ts_launcher(t)}] [INFO] [{launcher}] [default] Rendezvous'ing worker group",
            f"{pre}[{self.ts_launcher(t + 0.3)}] [INFO] [{launcher}] [default] Rendezvous complete for workers. "
            "Result:",
            f"{pre}  restart_count={self.restart}",
            f"{pre}  master_addr={self.host}",
            f"{pre}  master_port={29500 + self.restart}",
            f"{pre}  group_rank=0",
            f"{pre}  group_world_size={self.job.gpus // gpn}",
            f"{pre}  local_ranks={list(range(gpn))}",
            f"{pre}  role_ranks={list(range(gpn))}",
            f"{pre}[default0]:[NeMo I {self.ts_nemo(t + 20)} nemo_logger:145] Experiments will be logged at "
            f"/lustre/ckpt/{self.name}",
        ])

    def step(self, t: float, obj: _Step) -> None:
        """A step's line (its fields in the order NeMo prints them before and after a resume), and the async save
        it schedules."""
        job, pre = self.job, self.pre
        self.loss = max(1.7, self.loss * (0.9985 - 0.001 * float(self.rng.random())))
        lr = 1.5e-07 * (obj.step + 1)
        head = f"Training epoch 0, iteration {obj.step}/{self.total - 1} | lr: {lr:.4g}"
        consumed = f"consumed_samples: {(obj.step + 1) * job.gbs}"
        rest = (f"global_batch_size: {job.gbs} | global_step: {obj.step} | reduced_train_loss: {self.loss:.4g} | "
                f"train_step_timing in s: {obj.dur_s:.4g}")
        if (obj.step + 1) % job.checkpoint_every == 0:
            self.scheduled.append(obj.step)
        if self.resumed:
            body = f"{head} | {consumed} | {rest}"
        elif obj.step == 0:
            body = f"{head} | {rest}"
        else:
            body = f"{head} | {rest} | {consumed}"
        self.lines.append(f"{pre}[default0]:{body}")
        if self.scheduled and self.scheduled[-1] == obj.step:
            path = _ckpt_path(obj.step, job.gbs, self.name)
            self.lines.append(f"{pre}[default0]:[NeMo I {self.ts_nemo(t)} model_checkpoint:497] "
                              f"Scheduled async checkpoint save for {path}.ckpt")

    def event(self, t: float, kind: str, obj: _Ev) -> None:
        """What the launcher and the trainer print of an event."""
        pre, launcher, lines = self.pre, self.launcher, self.lines
        step_val = obj.extra.get("step")
        if kind == "checkpoint_saved":
            assert isinstance(step_val, int)
            path = _ckpt_path(step_val, self.job.gbs, self.name)
            lines.append(f"{pre}[default0]:[NeMo I {self.ts_nemo(t)} model_checkpoint:522] Async checkpoint save for "
                         f"step {step_val + 1} ({path}.ckpt) finalized successfully.")
        elif kind == "straggler_detected":
            lines.extend(_straggler_report(f"{pre}[default0]:", self.ts_nemo(t), obj, self.nodes_now,
                                           self.topology.gpus_per_node, self.rng))
        elif kind == "fault_injected":
            lines.append(f"{pre}[default0]:[rank0]:[E {self.ts_nemo(t + DETECT_FAULT_S - 5)} "
                         "ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
                         f"WorkNCCL(SeqNum=184220, OpType=ALLREDUCE) ran for {int((DETECT_FAULT_S - 5) * 1000)} "
                         "milliseconds before timing out.")
        elif kind == "restart_started":
            lines.append(f"{pre}[{self.ts_launcher(t)}] [ERROR] [{launcher}] failed (exitcode: 1) local_rank: 0 "
                         "(pid: 418822) of binary: /usr/bin/python")
            lines.append(f"{pre}[{self.ts_launcher(t)}] [INFO] [{launcher}] [default] Worker group FAILED. "
                         f"{3 - self.restart}/3 attempts left; will restart worker group")
            lines.append(f"{pre}[{self.ts_launcher(t)}] [INFO] [{launcher}] [default] Stopping worker group")
        elif kind == "job_started":
            self.nodes_now = [str(n) for n in obj.extra["nodes"]]  # type: ignore[attr-defined]
            if t > 0:
                self.restart += 1
                self.rendezvous(t)
        elif kind == "checkpoint_loaded":
            assert isinstance(step_val, int)
            path = _ckpt_path(step_val, self.job.gbs, self.name)
            lines.append(f"{pre}[default0]:Restoring states from the checkpoint path at {path}/weights")
            lines.append(f"{pre}[default0]:Restored all states from the checkpoint at {path}/weights")
            self.resumed = True
        elif kind == "job_finished":
            lines.append(f"{pre}[default0]:`Trainer.fit` stopped: `max_steps={self.total}` reached.")
            lines.append(f"{pre}[{self.ts_launcher(t)}] [INFO] [{launcher}] [default] worker group successfully "
                         "finished. Waiting 300 seconds for other agents to finish.")
            lines.append(f"{pre}[{self.ts_launcher(t)}] [INFO] [{launcher}] Local worker group finished "
                         "(WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish")


def _straggler_report(
    pre: str, stamp: str, event: _Ev, nodes: list[str], gpn: int, rng: np.random.Generator
) -> list[str]:
    """NeMo's straggler-detection callback report: every rank's relative and individual score, then the verdict."""
    slow_rank = int(str(event.extra["rank"]))
    slow_score = float(str(event.extra["detail"]).split()[3])
    n = len(nodes) * gpn
    relative = np.round(np.clip(1.0 - np.abs(rng.normal(0.0, 0.008, n)), 0.95, 1.0), 2)
    relative[slow_rank] = slow_score
    individual = np.ones(n)
    individual[slow_rank] = slow_score
    out = [f"{pre}[NeMo I {stamp} straggler_det_callback:144] ", f"{pre}    GPU relative performance:"]
    for r in sorted(range(n), key=lambda r: (relative[r], r)):
        out.append(f"{pre}      Rank={r} Node={nodes[r // gpn]} Score={relative[r]:.2f}")
    out += [f"{pre}    ", f"{pre}[NeMo I {stamp} straggler_det_callback:153] ", f"{pre}    GPU individual performance:"]
    for r in sorted(range(n), key=lambda r: (individual[r], r)):
        out.append(f"{pre}      Rank={r} Node={nodes[r // gpn]} Score={individual[r]:.2f}")
    out += [
        f"{pre}    ",
        f"{pre}[NeMo W {stamp} straggler_det_callback:106] STRAGGLER DETECTION WARNING: Some GPUs have worse "
        f"relative performance. Affected ranks: {{StragglerId(rank={slow_rank}, node='{event.extra['node']}')}}",
        f"{pre}[NeMo E {stamp} straggler_det_callback:239] Detected stragglers. Terminating training...",
    ]
    return out


_SACCT_FIELDS = ("JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Submit|Start|End|Elapsed|NNodes|"
                 "NodeList")


def _elapsed(seconds: float) -> str:
    s = round(seconds)
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def _render_sacct(job: ResilienceJob, attempts: list[tuple[float, float, tuple[str, ...], str]]) -> str:
    """`sacct --parsable2 --format ...` with its header: one job per attempt, each requeue a new job id."""
    lines = [_SACCT_FIELDS]
    for index, (start, end, nodes, state) in enumerate(attempts):
        jid = job.job_id + index
        fmt = "%Y-%m-%dT%H:%M:%S"
        submit = (job.start + timedelta(seconds=start - (30.0 if index == 0 else 10.0))).strftime(fmt)
        s_txt = (job.start + timedelta(seconds=start)).strftime(fmt)
        e_txt = (job.start + timedelta(seconds=end)).strftime(fmt)
        exit_code = {"COMPLETED": "0:0", "NODE_FAIL": "1:0"}.get(state, "0:15")
        cpus = len(nodes) * 144
        host = compress_hostlist(nodes)
        el = _elapsed(end - start)
        lines.append(f"{jid}|{job.workload}-{job.precision}-resilience|batch|cert|{cpus}|{state}|{exit_code}|"
                     f"{submit}|{s_txt}|{e_txt}|{el}|{len(nodes)}|{host}")
        step_state = {"REQUEUED": "CANCELLED", "NODE_FAIL": "FAILED"}.get(state, state)
        lines.append(f"{jid}.batch|batch||cert|144|{step_state}|{exit_code}|{s_txt}|{s_txt}|{e_txt}|{el}|1|"
                     f"{nodes[0]}")
        lines.append(f"{jid}.extern|extern||cert|{cpus}|COMPLETED|0:0|{s_txt}|{s_txt}|{e_txt}|{el}|{len(nodes)}|"
                     f"{host}")
        lines.append(f"{jid}.0|python||cert|{cpus}|{step_state}|{exit_code}|{s_txt}|{s_txt}|{e_txt}|{el}|"
                     f"{len(nodes)}|{host}")
    return "\n".join(lines) + "\n"


def _render_events(job: ResilienceJob, events: list[_Ev]) -> str:
    out = []
    for e in events:
        record: dict[str, object] = {"ts": _iso(job.start, e.t), "type": e.type}
        record.update(e.extra)
        out.append(json.dumps(record, separators=(", ", ": ")))
    return "\n".join(out) + "\n"


def _write_timings(plan: _LargeFiles, sink: BinaryIO, chunk_rows: int) -> None:
    """Every `timings_every`-th step of every rank: compute (NCCL excluded) and the rest of the step as comm.
    Whole steps per chunk, one Parquet row group per 65,536 rows; the node column is dictionary-encoded with the
    nodes in order of first appearance."""
    job, gpn = plan.job, plan.topology.gpus_per_node
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = plan.rng_state
    starts = sorted((e.t, list(map(str, e.extra["nodes"]))) for e in plan.events  # type: ignore[call-overload]
                    if e.type == "job_started")
    sampled = [s for s in plan.steps if s.step % job.timings_every == 0]
    n = job.gpus
    step_nodes = [[nodes for t0, nodes in starts if t0 <= s.end_s][-1] for s in sampled]
    dictionary: dict[str, int] = {}
    for nodes in step_nodes:
        for node in nodes:
            dictionary.setdefault(node, len(dictionary))
    names = pa.array(list(dictionary), pa.string())
    base = job.mean_step_s * COMPUTE_SHARE
    schema = pa.schema([("rank", pa.int32()), ("node", pa.dictionary(pa.int32(), pa.string())),
                        ("gpu", pa.int16()), ("step", pa.int64()), ("compute_s", pa.float64()),
                        ("comm_s", pa.float64()), ("timestamp", pa.timestamp("us", tz="UTC"))])
    per_chunk = max(1, chunk_rows // max(1, n))
    ranks = np.arange(n, dtype=np.int32)
    start_s = job.start.timestamp()
    with pq.ParquetWriter(sink, schema, compression="zstd", write_statistics=True) as writer:
        for lo in range(0, len(sampled), per_chunk):
            chunk = sampled[lo:lo + per_chunk]
            k = len(chunk)
            c = base * (1.0 + 0.004 * rng.standard_normal((k, n)))
            node_index = np.empty((k, n), dtype=np.int32)
            for i, s in enumerate(chunk):
                nodes = step_nodes[lo + i]
                node_index[i] = np.repeat(np.array([dictionary[x] for x in nodes], dtype=np.int32), gpn)[:n]
                for f in plan.slow:
                    if f.node in nodes and s.end_s - s.dur_s >= f.at_s:
                        c[i, nodes.index(f.node) * gpn + (f.gpu or 0)] *= f.slowdown
            dur = np.array([s.dur_s for s in chunk], dtype=np.float64)[:, None]
            stamp = np.array([round((start_s + s.end_s) * 1e6) for s in chunk], dtype=np.int64)
            table = pa.table({
                "rank": pa.array(np.tile(ranks, k), pa.int32()),
                "node": pa.DictionaryArray.from_arrays(pa.array(node_index.ravel(), pa.int32()), names),
                "gpu": pa.array(np.tile((ranks % gpn).astype(np.int16), k), pa.int16()),
                "step": pa.array(np.repeat(np.array([s.step for s in chunk], dtype=np.int64), n), pa.int64()),
                "compute_s": pa.array(np.round(c, 4).ravel(), pa.float64()),
                "comm_s": pa.array(np.round(np.maximum(dur - c, 0.001), 4).ravel(), pa.float64()),
                "timestamp": pa.array(np.repeat(stamp, n), pa.timestamp("us", tz="UTC")),
            }, schema=schema)
            writer.write_table(table, row_group_size=65536)


_CLOCK_METRIC = "DCGM_FI_DEV_SM_CLOCK"


def _write_telemetry(plan: _LargeFiles, sink: BinaryIO, chunk_bytes: int) -> None:
    """DCGM exporter samples once every `telemetry_every_s`: SM clock (MHz) of every GPU of the running job, one
    line per GPU and sample, `DCGM_FI_DEV_SM_CLOCK{gpu="G",Hostname="N"} MHZ MS`. Written vectorised: at one
    sample time every GPU's line has a fixed layout (a 4-digit clock, a 13-digit millisecond stamp), so a block
    of sample times is a byte template with the digits filled in by numpy."""
    job, topology = plan.job, plan.topology
    rng = np.random.default_rng(job.seed + 2)
    gpn = topology.gpus_per_node
    nominal = 1965 if topology.system.value == "gb200-nvl72" else 1980
    sink.write(f"# HELP {_CLOCK_METRIC} SM clock frequency (in MHz).\n# TYPE {_CLOCK_METRIC} gauge\n".encode())
    # the sample times and the attempt running at each (repeated addition, as a sampling loop steps its clock)
    groups: list[tuple[int, list[float]]] = []
    t = 0.0
    while t <= plan.end_s:
        running = [i for i, a in enumerate(plan.attempts) if a[0] <= t < a[1]]
        if running:
            if groups and groups[-1][0] == running[0]:
                groups[-1][1].append(t)
            else:
                groups.append((running[0], [t]))
        t += job.telemetry_every_s
    start_s = job.start.timestamp()
    for attempt, times in groups:
        nodes = plan.attempts[attempt][2]
        series: list[tuple[str | None, int | None]] = [(node, g) for node in nodes for g in range(gpn)]
        heads = [f'{_CLOCK_METRIC}{{gpu="{g}",Hostname="{node}"}} '.encode() for node, g in series]
        template = bytearray()
        clock_at = np.empty(len(series), dtype=np.int64)
        ms_at = np.empty(len(series), dtype=np.int64)
        for i, head in enumerate(heads):
            template += head
            clock_at[i] = len(template)
            template += b"0000 "
            ms_at[i] = len(template)
            template += b"0000000000000\n"
        block = np.frombuffer(bytes(template), dtype=np.uint8)
        overrides = [(series.index((f.node, f.gpu)), f.at_s, int(nominal / f.slowdown)) for f in plan.slow
                     if f.reported and (f.node, f.gpu) in series]
        per_chunk = max(1, chunk_bytes // len(block))
        for lo in range(0, len(times), per_chunk):
            at = np.array(times[lo:lo + per_chunk], dtype=np.float64)
            clock = nominal - np.abs(rng.normal(0, 6, size=(len(at), len(series)))).astype(np.int64)
            for index, from_s, value in overrides:  # thermal throttling the monitoring sees
                clock[at >= from_s, index] = value
            ms = np.array([round((start_s + x) * 1000) for x in at], dtype=np.int64)
            if clock.min() < 1000 or clock.max() > 9999 or ms.min() < 10**12 or ms.max() >= 10**13:
                raise ValueError("telemetry writer: a clock of 4 digits and a stamp of 13 digits expected")
            out = np.tile(block, (len(at), 1))
            for d in range(4):
                out[:, clock_at + d] = 48 + (clock // 10 ** (3 - d)) % 10
            for d in range(13):
                out[:, ms_at + d] = (48 + (ms // 10 ** (12 - d)) % 10)[:, None]
            sink.write(out.tobytes())


def fixed_start(text: str) -> datetime:
    """The simulated start time: an ISO-8601 string read as UTC when it has no offset."""
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
