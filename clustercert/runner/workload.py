"""The shipped CPU training workload: a NumPy transformer LM trained data-parallel across Slurm tasks.

Run one process per task (`srun python -m clustercert.runner.workload ...`). Every step each rank computes
the gradient of its own batch, the ranks sum their gradients with a ring all-reduce over TCP sockets
(clustercert.runner.comm), and rank 0 prints the step as NeMo 2 does (`Training epoch E, iteration N/M |
... | reduced_train_loss: L | train_step_timing in s: T`), so clustercert's own `nemo` parser reads the log.
Checkpoints are written by a background thread (the step loop only copies the state); after a requeue
(SLURM_RESTART_COUNT > 0, or any checkpoint in the folder) training resumes from the last complete one.
A straggler detector in the manner of NVIDIA's resiliency extension compares each rank's median compute
time with the fastest rank's (relative score); a rank below the threshold is reported with NeMo's wording
and the job exits with code 3 so that the scheduler restarts it without that node.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from clustercert.runner.comm import ProcessGroup, Rendezvous, rendezvous_from_env
from clustercert.runner.model import Adam, ModelConfig, corpus, encode, init_params, loss_and_grads, sample_batch

__all__ = ["STALL_EXIT", "STRAGGLER_EXIT", "latest_checkpoint", "main"]

STRAGGLER_EXIT = 3
STALL_EXIT = 4
_CKPT = re.compile(r"^cc-lm--step=(\d+)-consumed_samples=(\d+)\.npz$")
_print_lock = threading.Lock()


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(level: str, where: str) -> str:
    return f"[NeMo {level} {_now().strftime('%Y-%m-%d %H:%M:%S')} {where}]"


def say(text: str) -> None:
    with _print_lock:
        print(text, flush=True)


class EventWriter:
    """Appends the trainer's own events (events.jsonl schema, clustercert/parsers/events.py)."""

    def __init__(self, path: Path | None, job_id: str) -> None:
        self.path, self.job_id = path, job_id

    def write(self, kind: str, **fields: Any) -> None:
        if self.path is None:
            return
        record = {"ts": _now().isoformat(timespec="milliseconds"), "type": kind, "by": fields.pop("by", "trainer"),
                  "job_id": self.job_id, **fields}
        with _print_lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


def latest_checkpoint(folder: Path) -> tuple[int, Path] | None:
    """The highest-step complete checkpoint in the folder (a `.tmp` being written is not one)."""
    best: tuple[int, Path] | None = None
    if not folder.is_dir():
        return None
    for f in folder.iterdir():
        m = _CKPT.match(f.name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), f)
    return best


class AsyncCheckpointer:
    """Writes snapshots in a background thread; the step loop only pays for the copy."""

    def __init__(self, folder: Path, events: EventWriter, keep: int = 2) -> None:
        self.folder, self.events, self.keep = folder, events, keep
        self.thread: threading.Thread | None = None

    def save(self, step: int, consumed: int, state: dict[str, np.ndarray]) -> None:
        self.wait()
        snapshot = {k: v.copy() for k, v in state.items()}
        path = self.folder / f"cc-lm--step={step}-consumed_samples={consumed}.npz"
        say(f"{_stamp('I', 'model_checkpoint:497')} Scheduled async checkpoint save for {path}")

        def write() -> None:
            tmp = path.with_name(path.name + ".tmp")
            with tmp.open("wb") as fh:
                np.savez(fh, **snapshot)  # type: ignore[arg-type]
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            say(f"{_stamp('I', 'model_checkpoint:522')} Async checkpoint save for step {step + 1} ({path}) "
                "finalized successfully.")
            self.events.write("checkpoint_saved", step=step)
            done = sorted((int(m.group(1)), f) for f in self.folder.iterdir() if (m := _CKPT.match(f.name)))
            for _, old in done[:-self.keep]:
                old.unlink(missing_ok=True)

        self.thread = threading.Thread(target=write, name="async-checkpoint")
        self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None


def _pack(params: dict[str, np.ndarray], adam: Adam) -> dict[str, np.ndarray]:
    state = {f"p/{k}": v for k, v in params.items()}
    state.update({f"m/{k}": v for k, v in adam.m.items()})
    state.update({f"v/{k}": v for k, v in adam.v.items()})
    state["adam_t"] = np.array(adam.t)
    return state


def _unpack(path: Path, params: dict[str, np.ndarray], adam: Adam) -> None:
    with np.load(path) as z:
        for k in params:
            params[k][...] = z[f"p/{k}"]
            adam.m[k][...] = z[f"m/{k}"]
            adam.v[k][...] = z[f"v/{k}"]
        adam.t = int(z["adam_t"])


def relative_scores(medians: Sequence[float]) -> list[float]:
    """NVIDIA's relative straggler score per rank: fastest rank's median compute time / this rank's."""
    best = min(medians)
    return [best / m if m > 0 else 1.0 for m in medians]


def _flatten(grads: dict[str, np.ndarray], keys: list[str], extra: float) -> np.ndarray:
    return np.concatenate([grads[k].ravel() for k in keys] + [np.array([extra], dtype=np.float32)]).astype(
        np.float32)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m clustercert.runner.workload", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="steps to train in all (a resumed run counts on)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    ap.add_argument("--checkpoint-dir", type=Path, required=True)
    ap.add_argument("--checkpoint-every", type=int, default=20)
    ap.add_argument("--events", type=Path, default=None, help="append the trainer's events (JSON lines) here")
    ap.add_argument("--rank-timings", type=Path, default=None,
                    help="append each rank's per-step compute and all-reduce times here (rank-R.csv)")
    ap.add_argument("--straggler-threshold", type=float, default=0.75)
    ap.add_argument("--straggler-window", type=int, default=10, help="steps per straggler report")
    ap.add_argument("--hang-timeout", type=float, default=120.0,
                    help="seconds without an answer from a peer before this rank reports a stall and exits")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=3e-3)
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Train until the last step (0), or until a stall (STALL_EXIT) or a straggler (STRAGGLER_EXIT) stops it."""
    args = parse_args(argv)
    trainer = _Trainer(args, rendezvous_from_env(os.environ))
    start = trainer.resume()
    trainer.open_timings()
    for step in range(start, args.steps):
        stopped = trainer.step(step)
        if stopped is not None:
            return stopped
    trainer.ckpt.wait()
    if trainer.rdv.rank == 0:
        say(f"{_stamp('I', 'launcher')} Worker group SUCCEEDED: {args.steps} steps")
    trainer.group.barrier()
    trainer.group.close()
    return 0


class _Trainer:
    """One rank of the data-parallel job: its model, optimizer, process group, checkpointer and event writers."""

    def __init__(self, args: argparse.Namespace, rdv: Rendezvous) -> None:
        self.args, self.rdv = args, rdv
        job_id = os.environ.get("SLURM_JOB_ID", "local")
        restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        self.events = EventWriter(args.events if rdv.rank == 0 else None, job_id)
        self.watchdog = EventWriter(args.events, job_id)  # any rank may be the one that sees a stall
        self.cfg = ModelConfig()
        self.data = encode(corpus(), self.cfg.vocab)
        self.params = init_params(self.cfg, args.seed)
        self.adam = Adam(self.params, lr=args.lr)
        self.keys = sorted(self.params)
        args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.group = group = ProcessGroup(rdv, timeout_s=args.hang_timeout)
        pid_file = os.environ.get("CLUSTERCERT_PID_DIR")
        if pid_file:  # where a fault injector finds this rank's process
            Path(pid_file).mkdir(parents=True, exist_ok=True)
            (Path(pid_file) / f"rank-{rdv.rank}.pid").write_text(f"{os.getpid()} {rdv.node} {restart}\n",
                                                                 encoding="utf-8")
        self.gbs = args.batch * group.world
        if rdv.rank == 0:
            cfg = self.cfg
            say(f"# clustercert CPU workload (clustercert.runner.workload): a NumPy transformer language model "
                f"({cfg.n_params()} parameters, {cfg.layers} layers, d_model {cfg.d_model}, seq_len {cfg.seq_len}) "
                f"trained data-parallel on {group.world} Slurm task(s) {group.nodes} with a ring all-reduce over "
                "TCP; log lines in NeMo 2's format; train_step_timing is rank 0's measured wall time of the step "
                "(compute, all-reduce, update)")
            say(f"{_stamp('I', 'launcher')} Starting worker group: job {job_id} restart_count={restart} "
                f"world_size={group.world} nodes={','.join(group.nodes)}")
        self.ckpt: AsyncCheckpointer
        self.timings: TextIO | None = None  # this rank's per-step timings file, when asked for
        self.compute: list[float] = []  # compute times since the last straggler report

    def resume(self) -> int:
        """The step to start from: after the last complete checkpoint (its state loaded), else 0."""
        args, rdv = self.args, self.rdv
        start = 0
        found = latest_checkpoint(args.checkpoint_dir)
        if found is not None:
            _unpack(found[1], self.params, self.adam)
            start = found[0] + 1
            if rdv.rank == 0:
                say(f"{_stamp('I', 'checkpoint_io:87')} Restored all states from the checkpoint at {found[1]}")
                self.events.write("checkpoint_loaded", step=found[0])
        elif rdv.rank == 0:
            say(f"{_stamp('W', 'resume:228')} There were no checkpoints found in {args.checkpoint_dir}. "
                "Training from scratch.")
        self.ckpt = AsyncCheckpointer(args.checkpoint_dir, self.events)
        return start

    def open_timings(self) -> None:
        if self.args.rank_timings is None:
            return
        self.args.rank_timings.mkdir(parents=True, exist_ok=True)
        path = self.args.rank_timings / f"rank-{self.rdv.rank}.csv"
        new = not path.exists()
        self.timings = path.open("a", encoding="utf-8")
        if new:
            self.timings.write("rank,node,gpu,step,compute_s,comm_s,timestamp\n")

    def step(self, step: int) -> int | None:
        """One training step; the exit code where the job stops here."""
        args, rdv, group, params = self.args, self.rdv, self.group, self.params
        t0 = time.perf_counter()
        x, y = sample_batch(self.data, args.batch, self.cfg.seq_len,
                            seed=args.seed * 1_000_003 + step * 1009 + rdv.rank)
        loss, grads = loss_and_grads(params, self.cfg, x, y)
        t1 = time.perf_counter()
        self.compute.append(t1 - t0)
        try:
            total = group.all_reduce(_flatten(grads, self.keys, loss))
        except (TimeoutError, ConnectionError) as exc:
            return self._stalled(step, exc)
        comm = time.perf_counter() - t1
        offset = 0
        for k in self.keys:
            n = params[k].size
            grads[k] = (total[offset:offset + n] / group.world).reshape(params[k].shape)
            offset += n
        self.adam.step(params, grads)
        reduced_loss = float(total[-1]) / group.world
        dt = time.perf_counter() - t0
        if self.timings is not None:
            self.timings.write(f"{rdv.rank},{rdv.node},0,{step},{self.compute[-1]:.6f},{comm:.6f},"
                               f"{_now().isoformat(timespec='milliseconds')}\n")
            self.timings.flush()
        gbs = self.gbs
        if rdv.rank == 0:
            say(f"Training epoch 0, iteration {step}/{args.steps - 1} | lr: {args.lr:.3g} | global_batch_size: "
                f"{gbs} | global_step: {step} | reduced_train_loss: {reduced_loss:.4f} | train_step_timing in s: "
                f"{dt:.4f} | consumed_samples: {(step + 1) * gbs}")
        if (step + 1) % args.checkpoint_every == 0 and rdv.rank == 0:
            self.ckpt.save(step, (step + 1) * gbs, _pack(params, self.adam))
        if len(self.compute) >= args.straggler_window:
            return self._straggler_report(step)
        return None

    def _stalled(self, step: int, exc: BaseException) -> int:
        """A peer did not answer the all-reduce within the hang timeout: report the stall and stop for a restart."""
        args, rdv = self.args, self.rdv
        say(f"{_stamp('E', 'watchdog')} Stall detected on rank {rdv.rank} ({rdv.node}) at step {step}: no answer "
            f"from a peer for {args.hang_timeout:.0f} s ({exc.__class__.__name__}). Stopping the job for a "
            "restart")
        self.watchdog.write("stall_detected", by="watchdog", node=rdv.node, rank=rdv.rank, step=step,
                            detail=f"all-reduce: no answer from a peer for {args.hang_timeout:.0f} s")
        self.ckpt.wait()
        marker = os.environ.get("CLUSTERCERT_STALL_FILE")
        if marker:
            Path(marker).write_text(f"{rdv.node} rank {rdv.rank} step {step}\n", encoding="utf-8")
        return STALL_EXIT

    def _straggler_report(self, step: int) -> int | None:
        """Every rank's relative score over the last window (printed by rank 0); a rank below the threshold is
        reported and the job stops so that the scheduler restarts it without that node."""
        args, rdv, group = self.args, self.rdv, self.group
        medians = [row[0] for row in group.gather_floats([statistics.median(self.compute)])]
        self.compute.clear()
        scores = relative_scores(medians)
        slow = [r for r, s in enumerate(scores) if s < args.straggler_threshold]
        if rdv.rank == 0 and group.world > 1:
            lines = [f"{_stamp('I', 'straggler_det_callback:144')} ", "    GPU relative performance:"]
            order = sorted(range(group.world), key=lambda r: scores[r])
            lines += [f"      Rank={r} Node={group.nodes[r]} Score={scores[r]:.2f}" for r in order]
            say("\n".join(lines))
        if not slow:
            return None
        if rdv.rank == 0:
            ids = ", ".join(f"StragglerId(rank={r}, node='{group.nodes[r]}')" for r in slow)
            say(f"{_stamp('W', 'straggler_det_callback:106')} STRAGGLER DETECTION WARNING: Some GPUs have "
                f"worse relative performance. Affected ranks: {{{ids}}}")
            for r in slow:
                self.events.write("straggler_detected", by="straggler-detector", node=group.nodes[r], rank=r,
                                  step=step, detail=f"relative performance {scores[r]:.2f} below threshold "
                                  f"{args.straggler_threshold:.2f}")
            say(f"{_stamp('E', 'straggler_det_callback:239')} Detected stragglers. Terminating training...")
            self.ckpt.wait()
            out = os.environ.get("CLUSTERCERT_STRAGGLER_FILE")
            if out:
                Path(out).write_text("\n".join(group.nodes[r] for r in slow) + "\n", encoding="utf-8")
        group.close()
        return STRAGGLER_EXIT


if __name__ == "__main__":
    sys.exit(main())
