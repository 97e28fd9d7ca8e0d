"""Parsing throughput (MB/s) of each text parser on a large generated file, written to bench/results."""
# ruff: noqa: E501  (generated lines mirror the tools' long log lines)

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gauge import gauge, processor  # bench/ is the script's folder: first on its path

from clustercert.parsers import FORMATS


def nemo(i: int) -> str:
    return (
        f"ining-demo/0 [default0]:Training epoch 0, iteration {i}/999999 | lr: 1.499e-07 | global_batch_size: 512 | "
        f"global_step: {i} | reduced_train_loss: 11.03 | train_step_timing in s: 7.6{i % 10} | consumed_samples: {i * 512}\n"
        "ining-demo/0 [default0]:[NeMo I 2025-03-07 22:38:36 nemo_logging:381] some other line the parser skips\n"
    )


def megatron(i: int) -> str:
    return (
        f" [2025-08-29 17:02:51] iteration {i:8d}/ 9999999 | consumed samples: {i * 8:12d} | elapsed time per "
        f"iteration (ms): 751.{i % 10} | learning rate: 5.000000E-05 | global batch size:     8 | lm loss: "
        f"1.057679E+01 | loss scale: 1.0 | grad norm: 16.560 | number of skipped iterations:   0 | number of nan "
        # each step's throughput line its own, as a real log's (the same line after every record would let the
        # bulk reading read it once: 4 % faster than a real log is read)
        f"iterations:   0 |\nStep Time : 0.75{i % 10}s GPU utilization: 663.{i % 10}MODEL_TFLOP/s/GPU\n"
    )


def deepspeed(i: int) -> str:
    return (
        f" iteration {i:8d}/ 9999999 | consumed samples: {i * 8} | elapsed time per iteration (s): 1.2{i % 10} | "
        "learning rate: 1.0E-04 | global batch size: 8 | lm loss: 7.5E+00 | grad norm: 2.0 | samples per second: "
        "6.4 | TFLOPs: 150.25 |\n"
    )


def dllogger(i: int) -> str:
    return (
        f'DLLL {{"timestamp": "1700000000.{i}", "type": "LOG", "step": {i}, "data": {{"train_step_timing in s": '
        f'1.{i % 10}, "reduced_train_loss": 2.0, "grad_norm": 0.5, "TFLOPS_per_GPU": 400.0}}}}\n'
    )


def nccl(i: int) -> str:
    head = (
        "# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor)\n"
        "#  Rank  0 Group  0 Pid   6899 on host-a device  0 [0000:04:00] NVIDIA H100 80GB HBM3\n"
        "#  Rank  1 Group  0 Pid   6900 on host-b device  0 [0000:05:00] NVIDIA H100 80GB HBM3\n"
    )
    row = "    33554432       4194304    double     sum      -1   182.87  183.49  321.10       0   182.88  183.48  321.08       0\n"
    debug = "host-a:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] via NET/IB\n"
    return (
        head
        + (row + debug) * 20
        + "# Avg bus bandwidth    : 321.09 \n# Collective test concluded: all_reduce_perf\n"
    )


def sacct(i: int) -> str:
    return (
        f"COMPLETED|{i}|2024-01-02T03:04:05|2024-01-02T03:04:05|1-02:03:04|2024-01-03T05:07:09\n"
        f"COMPLETED|{i}.batch|2024-01-02T03:04:05|2024-01-02T03:04:05|1-02:03:04|2024-01-03T05:07:09\n"
    )


def events(i: int) -> str:
    return (
        f'{{"ts": "2025-03-07T22:39:36+00:00", "type": "checkpoint_saved", "step": {i}, "node": "n{i % 128}", '
        '"by": "trainer", "detail": "async save"}\n'
    )


def dcgm(i: int) -> str:
    return "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",UUID="GPU-{g}",device="nvidia{g}",Hostname="node{i % 64}"}} 97 '
        f"{1700000000000 + i * 1000}\n"
        for g in range(8)
    )


def mlperf(i: int) -> str:
    line = (
        f':::MLLOG {{"namespace": "", "time_ms": {1713994395504 + i}, "event_type": "POINT_IN_TIME", "key": '
        f'"train_loss", "value": 0.9, "metadata": {{"file": "x.py", "lineno": 1}}}}\n'
    )
    if i == 0:
        return line.replace('"train_loss"', '"run_start"')
    return line


def rank_timings(i: int) -> str:
    head = "rank,node,gpu,step,compute_s,comm_s,timestamp\n" if i == 0 else ""
    return head + "".join(
        f"{r},node{r // 8},{r % 8},{i},0.5{r % 10},0.1,2025-03-07T22:39:36+00:00\n" for r in range(16)
    )


GENERATORS: dict[str, Callable[[int], str]] = {
    "nemo": nemo,
    "megatron": megatron,
    "megatron-deepspeed": deepspeed,
    "dllogger": dllogger,
    "nccl-tests": nccl,
    "sacct": sacct,
    "events": events,
    "dcgm": dcgm,
    "mlperf": mlperf,
    "rank-timings": rank_timings,
}
OPTIONS: dict[str, dict[str, object]] = {
    "sacct": {"fields": ["State", "JobID", "Submit", "Start", "Elapsed", "End"]},
    "mlperf": {"ruleset": "4.0.0"},
}


def generate(path: Path, make: Callable[[int], str], megabytes: float) -> None:
    target = int(megabytes * 1e6)
    written = 0
    index = 0
    with path.open("w") as handle:
        while written < target:
            chunk = "".join(make(i) for i in range(index, index + 1000))
            handle.write(chunk)
            written += len(chunk)
            index += 1000


def measure(fmt: str, path: Path, repeat: int) -> dict[str, float]:
    """Parse `path` `repeat` times in this (fresh) process: the best wall and CPU time, and the peak RSS."""
    before = resident_kib()  # the interpreter and its imports, resident now
    wall = cpu = math.inf
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = FORMATS[fmt](path, path.name, **OPTIONS.get(fmt, {}))
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
        if fmt == "mlperf":
            assert result.runs[0].status == "missing"  # no run_stop in the generated file: read, not scored
        del result
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": wall, "cpu_seconds": cpu, "rss_before_kib": before, "rss_peak_kib": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--mb", type=float, default=100.0, help="size of each generated file in MB (1e6 bytes)"
    )
    parser.add_argument("--only", nargs="*", default=None, help="formats to run (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="parses per format; the best time is kept")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "parsers.json")
    parser.add_argument("--measure", nargs=2, metavar=("FORMAT", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # the child process each format is parsed in, so its peak RSS is its own
        print(json.dumps(measure(args.measure[0], Path(args.measure[1]), args.repeat)))
        return
    results = []
    load_before = os.getloadavg()
    speed_before = gauge()
    with tempfile.TemporaryDirectory() as folder:
        for fmt, make in GENERATORS.items():
            if args.only and fmt not in args.only:
                continue
            path = Path(folder) / f"{fmt}.txt"
            generate(path, make, args.mb)
            size = path.stat().st_size
            child = subprocess.run(
                [sys.executable, __file__, "--repeat", str(args.repeat), "--measure", fmt, str(path)],
                check=True, capture_output=True, text=True,
            )
            got = json.loads(child.stdout)
            seconds, cpu = got["seconds"], got["cpu_seconds"]
            extra_mib = (got["rss_peak_kib"] - got["rss_before_kib"]) / 1024
            results.append(
                {
                    "format": fmt,
                    "bytes": size,
                    "seconds": round(seconds, 3),
                    "mb_per_s": round(size / 1e6 / seconds, 1),
                    "cpu_seconds": round(cpu, 3),
                    "cpu_mb_per_s": round(size / 1e6 / cpu, 1),
                    "peak_rss_mib": round(got["rss_peak_kib"] / 1024, 1),
                    # what parsing added to the process's peak, per MB of input (the parsed table included)
                    "peak_rss_mib_per_input_mb": round(extra_mib / (size / 1e6), 2),
                }
            )
            print(
                f"{fmt:20s} {size / 1e6:8.1f} MB {seconds:7.2f} s {size / 1e6 / seconds:8.1f} MB/s "
                f"(CPU {size / 1e6 / cpu:6.1f} MB/s) peak +{extra_mib:7.1f} MiB",
                flush=True,
            )
            path.unlink()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "schema_version": 2,
        "benchmark": "parsers",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": processor(),
        "processor_count": os.cpu_count(),
        # the machine is shared: the 1-minute load average before and after (2 cores: 2.0 is fully busy)
        "load_average_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        # how fast the machine ran Python before and after (bench/gauge.py: lower is faster)
        "gauge_s": {"before": speed_before, "after": gauge()},
        "file_mb": args.mb,
        "repeat": args.repeat,
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")


def resident_kib() -> float:
    """This process's resident set now, in KiB (ru_maxrss, the peak, is in KiB on Linux too)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return pages * os.sysconf("SC_PAGE_SIZE") / 1024


if __name__ == "__main__":
    main()
