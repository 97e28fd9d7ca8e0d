"""Certification on a busy machine: the sample certified N times in a row while 4 CPU-bound processes run beside
it; records each run's exit code and time (a busy machine may make a run slower, never a failure).

Each run is a fresh `clustercert certify` process with a fresh PREFECT_HOME, so each starts its own temporary
Prefect server (the case that timed out under load). Writes bench/results/loaded.json (schema_version 1).

With `--at-once K`, each round starts K certifications at the same moment that share one account's folders (one
PREFECT_HOME, one key folder, one reports folder), as one operator's certifications beside each other do: the
issue's "two other certifications on the same 2 cores". Writes bench/results/loaded_at_once.json.

    .venv/bin/python bench/bench_loaded.py                 # 10 runs beside 4 busy processes
    .venv/bin/python bench/bench_loaded.py --runs 3 --busy 4
    .venv/bin/python bench/bench_loaded.py --runs 4 --at-once 3 --busy 2   # 4 rounds of 3 at once, 2 busy
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
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
    parser.add_argument("--at-once", type=int, default=1, help="certifications started together in each run")
    parser.add_argument("--out", type=Path, help="default bench/results/loaded.json (loaded_at_once.json with "
                        "--at-once above 1)")
    args = parser.parse_args()
    if args.at_once < 1:
        parser.error("--at-once must be at least 1")
    out: Path = args.out or ROOT / "bench" / "results" / ("loaded.json" if args.at_once == 1 else "loaded_at_once.json")
    load_before = os.getloadavg()
    speed_before = gauge()  # before the busy processes start, and after they stop
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    runs: list[dict[str, Any]] = []
    folder_counts: list[int] = []
    try:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="clustercert-loaded-") as tmp:
                env = _env(Path(tmp))  # one account's folders, shared by the round's certifications
                with ThreadPoolExecutor(max_workers=args.at_once) as pool:
                    together = list(pool.map(time_certify, [env] * args.at_once))
                reports = Path(env["CLUSTERCERT_REPORTS_DIR"])
                folders = sum(1 for p in reports.iterdir() if p.is_dir()) if reports.is_dir() else 0
            for j, (seconds, rc, tail) in enumerate(together):
                runs.append({"seconds": round(seconds, 2), "exit_code": rc, "loadavg_1m": os.getloadavg()[0],
                             **({"round": i + 1} if args.at_once > 1 else {}),
                             **({"stderr_tail": tail} if rc not in (0, 1) else {})})
                print(f"run {i + 1}/{args.runs}" + (f" ({j + 1} of {args.at_once} at once)" if args.at_once > 1 else "")
                      + f": exit {rc} in {seconds:.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
            folder_counts.append(folders)  # each certification its own run folder: at_once a round
    finally:
        for p in busy:
            p.terminate()
            p.join()
    succeeded = sum(1 for r in runs if r["exit_code"] == 0)
    own_folders = all(n == args.at_once for n in folder_counts)
    report = {
        "schema_version": 1,
        "benchmark": "loaded",
        "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": processor(),
        "processor_count": os.cpu_count(),
        "busy_processes": args.busy,
        "at_once": args.at_once,
        "loadavg_before": [round(x, 2) for x in load_before],
        # how fast the machine ran Python, idle, before and after (bench/gauge.py: lower is faster)
        "gauge_s": {"before": speed_before, "after": gauge()},
        "sample": str(SAMPLE.relative_to(ROOT)),
        "runs": runs,
        "succeeded": succeeded,
        "run_folders_per_round": folder_counts,
        "of": len(runs),
        "target": "every run succeeds (exit 0)" + (", each into a run folder of its own" if args.at_once > 1 else ""),
        "met": succeeded == len(runs) and own_folders,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{succeeded} of {len(runs)} succeeded" + ("" if own_folders else ", not each into a folder of its own")
          + f"; wrote {out}")


if __name__ == "__main__":
    main()
