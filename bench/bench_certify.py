"""End-to-end time of certifying the shipped sample, beside the bare import of its stack, in one run.

Each repetition runs `clustercert certify evidence/gb200-seed` in a fresh process with a fresh PREFECT_HOME (no
cross-run cache, a temporary Prefect server of its own) into a temporary reports folder, and separately times a
fresh interpreter that only imports what a certification's own process imports (Prefect and the flows, Great
Expectations, WeasyPrint and the renderer, pyHanko; the temporary server's app is imported by its own process).
The machine's load average is recorded before and after: the figures mean little without it. Writes
bench/results/certify.json (schema_version 1).

    .venv/bin/python bench/bench_certify.py               # 3 repetitions
    .venv/bin/python bench/bench_certify.py --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gauge import gauge, processor  # bench/ is the script's folder: first on its path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "evidence" / "gb200-seed"
# What the certify process imports (Prefect's server app is no longer among them: flows/runtime.py starts it in a
# process of its own, which imports it on the other core while the run gets ready).
STACK = ("import flows.certify, clustercert.validation.suites, clustercert.report, clustercert.runs.folder, "
         "clustercert.attest.manifest, great_expectations, weasyprint, pyhanko.sign")
TARGET_S = 15.0
TARGET_RATIO = 3.0


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "CLUSTERCERT_"))}
    (work / "home").mkdir(parents=True, exist_ok=True)
    env.update({"HOME": str(work / "home"), "PREFECT_HOME": str(work / "prefect"), "PYTHONPATH": str(ROOT),
                "CLUSTERCERT_KEY_DIR": str(work / "keys"), "CLUSTERCERT_REPORTS_DIR": str(work / "reports"),
                "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    return env


def time_import(env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", STACK], cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def time_certify(env: dict[str, str]) -> tuple[float, int, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "clustercert", "certify", str(SAMPLE), "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, proc.returncode, proc.stderr[-500:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "certify.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    speed_before = gauge()
    imports: list[float] = []
    runs: list[dict[str, Any]] = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="clustercert-bench-") as tmp:
            env = _env(Path(tmp))
            imports.append(round(time_import(env), 2))
            seconds, rc, tail = time_certify(env)
            runs.append({"seconds": round(seconds, 2), "exit_code": rc, "loadavg_1m_after": os.getloadavg()[0],
                         **({"stderr_tail": tail} if rc != 0 else {})})
            print(f"repeat {i + 1}: import {imports[-1]:.2f} s, certify {seconds:.2f} s (exit {rc})", flush=True)
    certify_s = statistics.median(r["seconds"] for r in runs)
    import_s = statistics.median(imports)
    report: dict[str, Any] = {
        "schema_version": 1,
        "benchmark": "certify",
        "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": processor(),
        "processor_count": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "note": "load averages above the processor count mean other work shared the machine: not an idle figure",
        # how fast the machine ran Python before and after (bench/gauge.py: lower is faster)
        "gauge_s": {"before": speed_before, "after": gauge()},
        "sample": str(SAMPLE.relative_to(ROOT)),
        "import_stack_s": imports,
        "certify_runs": runs,
        "median_import_stack_s": import_s,
        "median_certify_s": certify_s,
        "ratio_to_import": round(certify_s / import_s, 2),
        "targets": {"certify_s": TARGET_S, "ratio_to_import": TARGET_RATIO},
        "meets_targets": certify_s <= TARGET_S and certify_s / import_s <= TARGET_RATIO,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"median certify {certify_s:.2f} s, import {import_s:.2f} s, ratio {certify_s / import_s:.2f}; "
          f"load {report['loadavg_before']} -> {report['loadavg_after']}; gauge {speed_before['best_s']} -> "
          f"{report['gauge_s']['after']['best_s']} s; wrote {args.out}")


if __name__ == "__main__":
    main()
