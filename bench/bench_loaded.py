"""Certification on a busy machine: the sample certified N times in a row while 4 CPU-bound processes run beside
it; records each run's exit code and time (a busy machine may make a run slower, never a failure).

Each run is a fresh `clustercert certify` process with a fresh PREFECT_HOME, so each starts its own temporary
Prefect server (the case that timed out under load). Writes bench/results/loaded.json (schema_version 1).

    .venv/bin/python bench/bench_loaded.py                 # 10 runs beside 4 busy processes
    .venv/bin/python bench/bench_loaded.py --runs 3 --busy 4
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_certify import ROOT, SAMPLE, _env, time_certify
from gauge import gauge, processor  # bench/ is the script's folder: first on its path


def _spin() -> None:  # pragma: no cover - runs in a child process until terminated
    x = 0
    while True:
        x = (x * 1103515245 + 12345) % 2147483648


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--busy", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "loaded.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    speed_before = gauge()  # before the busy processes start, and after they stop
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    runs: list[dict[str, Any]] = []
    try:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="clustercert-loaded-") as tmp:
                seconds, rc, tail = time_certify(_env(Path(tmp)))
            runs.append({"seconds": round(seconds, 2), "exit_code": rc, "loadavg_1m": os.getloadavg()[0],
                         **({"stderr_tail": tail} if rc not in (0, 1) else {})})
            print(f"run {i + 1}/{args.runs}: exit {rc} in {seconds:.1f} s (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    finally:
        for p in busy:
            p.terminate()
            p.join()
    succeeded = sum(1 for r in runs if r["exit_code"] == 0)
    report = {
        "schema_version": 1,
        "benchmark": "loaded",
        "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": processor(),
        "processor_count": os.cpu_count(),
        "busy_processes": args.busy,
        "loadavg_before": [round(x, 2) for x in load_before],
        # how fast the machine ran Python, idle, before and after (bench/gauge.py: lower is faster)
        "gauge_s": {"before": speed_before, "after": gauge()},
        "sample": str(SAMPLE.relative_to(ROOT)),
        "runs": runs,
        "succeeded": succeeded,
        "of": len(runs),
        "target": "every run succeeds (exit 0)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{succeeded} of {len(runs)} succeeded; wrote {args.out}")


if __name__ == "__main__":
    main()
