"""Write nccl-tests text output (2.17 layout) with NCCL INFO debug lines mixed in as real runs print them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["COLLECTIVES", "NcclRun", "render_nccl_tests"]

# collective -> (busbw factor numerator kind, redop, in-place #wrong printed as)
COLLECTIVES: dict[str, tuple[str, str]] = {
    "all_reduce": ("sum", "0"),
    "all_gather": ("none", "0"),
    "reduce_scatter": ("sum", "0"),
    "alltoall": ("none", "N/A"),
    "sendrecv": ("sum", "N/A"),
}
_SIZES = [1 << k for k in range(25, 35)]  # 32 MiB .. 16 GiB, step factor 2


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests invocation: ranks placed on nodes, the large-message busbw each collective reaches."""

    nodes: tuple[str, ...]
    gpus_per_node: int
    device_name: str
    peak_busbw: dict[str, float]  # collective -> busbw (GB/s) at the largest sizes
    half_size: float  # message size (bytes) at which busbw is half its peak (latency-bound below)
    seed: int
    debug_row: bool = True  # cut one table row with a debug print, as NCCL_DEBUG=INFO runs do


def _factor(collective: str, n: int) -> float:
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in {"all_gather", "reduce_scatter", "alltoall"}:
        return (n - 1) / n
    return 1.0


def _time_text(us: float) -> str:
    if us >= 100000:
        return f"{us:7.0f}"
    if us >= 10000:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def render_nccl_tests(run: NcclRun) -> str:
    """Every collective of `run.peak_busbw`, one after another, as one nccl-tests log."""
    rng = np.random.default_rng(run.seed)
    n = len(run.nodes) * run.gpus_per_node
    ranks = [(node, gpu) for node in run.nodes for gpu in range(run.gpus_per_node)]
    pids = {node: int(rng.integers(10000, 4000000)) for node in run.nodes}
    host0, pid0 = run.nodes[0], pids[run.nodes[0]]
    debug = f"{host0}:{pid0}:{pid0} [0] NCCL INFO"
    lines: list[str] = []
    for index, (collective, peak) in enumerate(run.peak_busbw.items()):
        redop, inplace_wrong = COLLECTIVES[collective]
        lines += [
            "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902",
            f"# Collective test starting: {collective}_perf",
            f"# nThread 1 nGpus 1 minBytes {_SIZES[0]} maxBytes {_SIZES[-1]} step: 2(factor) warmup iters: 5 "
            "iters: 20 agg iters: 1 validation: 1 graph: 0",
            "#",
            "# Using devices",
        ]
        for rank, (node, gpu) in enumerate(ranks):
            bus = ["1b", "43", "52", "61", "9d", "c3", "d1", "df"][gpu % 8]
            lines.append(
                f"#  Rank {rank:2d} Group  0 Pid {pids[node] + gpu:6d} on {node:>10s} device {gpu:2d} "
                f"[0000:{bus}:00] {run.device_name}"
            )
        if index == 0:
            lines += _init_debug(debug, host0, n, len(run.nodes) > 1)
        lines += [
            "#",
            "#                                                              out-of-place                       "
            "in-place          ",
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   "
            "algbw   busbw  #wrong ",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  "
            "(GB/s)  (GB/s)         ",
        ]
        factor = _factor(collective, n)
        busbws: list[float] = []
        cut = int(rng.integers(3, len(_SIZES) - 2)) if run.debug_row and index == 0 else -1
        for row_index, size in enumerate(_SIZES):
            per = 8 * (n if collective in {"all_gather", "reduce_scatter", "alltoall"} else 1)
            size_b = size // per * per
            count = size_b // 8 // (n if collective in {"all_gather", "reduce_scatter", "alltoall"} else 1)
            cells = [f"{size_b:12d}  {count:12d}  {'double':>8s}  {redop:>6s}  {-1:6d}"]
            for place in ("out", "in"):
                shape = size_b / (size_b + run.half_size)
                busbw = peak * shape * (1.0 + 0.012 * float(rng.standard_normal()))
                algbw = busbw / factor
                us = size_b / (algbw * 1e3)
                algbw_r, busbw_r = round(algbw, 2), round(busbw, 2)
                busbws.append(busbw_r)
                wrong = "0" if place == "out" else inplace_wrong
                cells.append(f"  {_time_text(us)}  {algbw_r:6.2f}  {busbw_r:6.2f}  {wrong:>6s}")
            if row_index == cut:
                lines.append(cells[0] + f"{debug} Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM")
                lines.append("".join(cells[1:]))
            else:
                lines.append("".join(cells))
        avg = sum(busbws) / len(busbws)
        lines += [
            "# Out of bounds values : 0 OK",
            f"# Avg bus bandwidth    : {avg:g} ",
            "#",
            f"# Collective test concluded: {collective}_perf",
            "#",
            "",
        ]
    return "\n".join(lines) + "\n"


def _init_debug(debug: str, host: str, n: int, multi_node: bool) -> list[str]:
    """What rank 0 prints at NCCL_DEBUG=INFO while the communicator comes up."""
    out = [
        f"{debug} Bootstrap: Using ibp0s0:10.40.0.1<0>",
        f"{debug} cudaDriverVersion 12080",
        f"{debug} NCCL version 2.26.5+cuda12.8",
    ]
    if multi_node:
        out.append(
            f"{debug} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; "
            "OOB ibp0s0:10.40.0.1<0>"
        )
    out += [
        f"{debug} ncclCommInitRank comm 0x5600a1c0 rank 0 nranks {n} cudaDev 0 nvmlDev 0 busId 1b000 "
        "commId 0x3c1f8e2d7a90b415 - Init START",
        f"{debug} NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)",
        f"{debug} Connected all rings, use ring PXN 0 GDR 1",
        f"{debug} ncclCommInitRank comm 0x5600a1c0 rank 0 nranks {n} cudaDev 0 nvmlDev 0 busId 1b000 "
        "commId 0x3c1f8e2d7a90b415 - Init COMPLETE",
    ]
    del host
    return out
