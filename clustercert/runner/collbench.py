"""A collective benchmark for clusters without nccl-tests: real collectives over TCP, nccl-tests' text format.

One process per Slurm task (`srun python -m clustercert.runner.collbench`). For each collective and each
message size it times `--iters` runs after `--warmup` runs (out-of-place, then in-place: over sockets both
are the same code path and are timed separately), takes the slowest rank's mean time as nccl-tests does,
checks the result against the expected values (#wrong), and prints the table nccl-tests prints, with
algbw = bytes / time and busbw = algbw x nccl-tests' factor (all_reduce 2(n-1)/n; all_gather,
reduce_scatter, alltoall (n-1)/n; sendrecv 1). Sizes follow nccl-tests' conventions: all_gather's size
is the gathered output, reduce_scatter's the input. The header says what was measured: CPU processes
and TCP sockets, not GPUs and NCCL.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from clustercert.runner.comm import F32, ProcessGroup, rendezvous_from_env

__all__ = ["BUS_FACTORS", "bus_factor", "main"]

BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}


def bus_factor(collective: str, ranks: int) -> float:
    return BUS_FACTORS[collective](ranks)


def _op(group: ProcessGroup, name: str, count: int) -> tuple[Callable[[], F32], Callable[[F32], int]]:
    """The collective on `count` float32 elements (nccl-tests' count) and a checker counting wrong values."""
    n, r = group.world, group.rank
    if name == "all_reduce":
        data = np.full(count, r + 1, dtype=np.float32)
        want = n * (n + 1) / 2
        return (lambda: group.all_reduce(data)), (lambda out: int(np.count_nonzero(out != want)))
    if name == "all_gather":
        per = count // n
        data = np.full(per, r + 1, dtype=np.float32)
        want_ag = np.repeat(np.arange(1, n + 1, dtype=np.float32), per)
        return (lambda: group.all_gather(data, per * n)), (lambda out: int(np.count_nonzero(out != want_ag)))
    if name == "reduce_scatter":
        data = np.full(count, r + 1, dtype=np.float32)
        want = n * (n + 1) / 2
        return (lambda: group.reduce_scatter(data)), (lambda out: int(np.count_nonzero(out != want)))
    if name == "alltoall":
        per = count // n
        data = np.repeat(np.arange(n, dtype=np.float32) + 10 * r, per)  # chunk j carries 10 r + j
        want_a2a = np.repeat(10 * np.arange(n, dtype=np.float32) + r, per)
        return (lambda: group.alltoall(data)), (lambda out: int(np.count_nonzero(out != want_a2a)))
    if name == "sendrecv":
        data = np.full(count, r, dtype=np.float32)
        prev = (r - 1) % n
        return (lambda: group.sendrecv((r + 1) % n, data, prev)), (lambda out: int(np.count_nonzero(out != prev)))
    raise ValueError(f"collective: expected one of {sorted(BUS_FACTORS)}, got {name!r}")


def _time(group: ProcessGroup, run: Callable[[], F32], check: Callable[[F32], int], warmup: int,
          iters: int) -> tuple[float, int]:
    for _ in range(warmup):
        run()
    group.barrier()
    t0 = time.perf_counter()
    out = run()
    for _ in range(iters - 1):
        out = run()
    mean_us = (time.perf_counter() - t0) / iters * 1e6
    wrong = check(out)
    worst = group.gather_floats([mean_us, float(wrong)])
    return max(row[0] for row in worst), int(sum(row[1] for row in worst))


def _fmt_time(us: float) -> str:
    return f"{us:7.2f}" if us < 1e4 else f"{us:7.1f}" if us < 1e5 else f"{us:7.0f}"


def _fmt_bw(gbps: float) -> str:
    # nccl-tests prints two decimals; socket bandwidths of small messages would all print 0.00
    return f"{gbps:7.2f}" if gbps >= 1 else f"{gbps:7.4f}"


def run_test(group: ProcessGroup, name: str, sizes: Sequence[int], warmup: int, iters: int) -> list[str]:
    n = group.world
    lines = [
        "# nccl-tests version 2.17.8 (format only: clustercert.runner.collbench, CPU processes over TCP sockets)",
        f"# Collective test starting: {name}_perf",
        f"# nThread 1 nGpus 1 minBytes {min(sizes)} maxBytes {max(sizes)} step: 2(factor) warmup iters: {warmup} "
        f"iters: {iters} agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    lines += [f"#  Rank {r:2d} Group  0 Pid {os.getpid() if r == group.rank else 0:7d} on {group.nodes[r]:>10} "
              "device  0 [cpu] CPU process (TCP sockets, no GPU)" for r in range(n)]
    lines += [
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
        "busbw  #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  "
        "(GB/s)",
    ]
    factor = bus_factor(name, n)
    busbws: list[float] = []
    redop = "sum" if name in ("all_reduce", "reduce_scatter") else "none"
    for size in sizes:
        count = size // 4
        if name in ("all_gather", "alltoall", "reduce_scatter"):
            count -= count % n
        if count == 0:
            continue
        cells = []
        for _ in ("out-of-place", "in-place"):
            run, check = _op(group, name, count)
            us, wrong = _time(group, run, check, warmup, iters)
            algbw = count * 4 / (us * 1e-6) / 1e9
            busbw = algbw * factor
            busbws.append(busbw)
            cells.append(f"{_fmt_time(us)} {_fmt_bw(algbw)} {_fmt_bw(busbw)} {wrong:7d}")
        lines.append(f"{count * 4:12d}  {count:12d}     float  {redop:>6}      -1  {cells[0]}  {cells[1]}")
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f} ", "#",
              f"# Collective test concluded: {name}_perf", "#", ""]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m clustercert.runner.collbench", description=__doc__.splitlines()[0])
    ap.add_argument("--collectives", default="all_reduce,all_gather,reduce_scatter,alltoall,sendrecv")
    ap.add_argument("--min-bytes", type=int, default=1 << 12)
    ap.add_argument("--max-bytes", type=int, default=1 << 20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args(argv)
    sizes = []
    size = args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 2
    group = ProcessGroup(rendezvous_from_env(os.environ))
    if group.world < 2:
        print("collbench: expected at least 2 tasks, got 1: a collective needs peers (srun -n 2 or more)",
              file=sys.stderr)
        return 2
    out: list[str] = []
    for name in args.collectives.split(","):
        out += run_test(group, name.strip(), sizes, args.warmup, args.iters)
    if group.rank == 0:
        print("\n".join(out), flush=True)
    group.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
