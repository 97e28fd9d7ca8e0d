"""How long `make test`'s pytest command takes: wall and CPU seconds, its pass/skip/fail counts, the machine's load.

Runs the Makefile's test command (two pytest-xdist workers, `--dist loadfile`) with the real samples required, as
CI does, and records under a label (`--label before`, `--label after`; other labels in the file are kept) in
bench/results/suite.json: wall seconds, CPU seconds (user and system of the pytest process tree as it reaped it:
the workers and every command they waited for), the counts of pytest's last line, the load average and the gauge
(bench/gauge.py) before and after. The budget is 600 s of wall time on 2 cores. Other work on the machine lengthens
the wall time in full and the CPU seconds less: compare runs made at like load averages.

`--log FILE` records a run already made instead: the pytest command's output followed by `/usr/bin/time -v`'s.

    .venv/bin/python bench/bench_suite.py --label after
    /usr/bin/time -v .venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder \\
        > run.log 2>&1; .venv/bin/python bench/bench_suite.py --label before --log run.log
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gauge import gauge, processor  # bench/ is the script's folder: first on its path

ROOT = Path(__file__).resolve().parents[1]
# The Makefile's `test` target, after its bootstrap.
COMMAND = ("-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")
TARGET_WALL_S = 600.0
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")


def counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line (`3631 passed, 12 skipped in 1201.00s`, between `=` under -v)."""
    lines = [ln for ln in output.splitlines() if re.search(r"\d+ (passed|failed|skipped|errors?)\b.* in [\d.]+s", ln)]
    if not lines:
        raise ValueError("expected pytest's summary line ('N passed ... in S s'), found none")
    found = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in _COUNT.findall(lines[-1])}
    return {kind: found.get(kind, 0) for kind in ("passed", "failed", "skipped", "error")} | {
        k: v for k, v in found.items() if k not in ("passed", "failed", "skipped", "error")}


def _time_v(output: str) -> dict[str, float]:
    """Wall, user and system seconds from `/usr/bin/time -v`'s report."""
    def field(name: str) -> str:
        match = re.search(rf"^\s*{re.escape(name)}: (.+)$", output, re.MULTILINE)
        if match is None:
            raise ValueError(f"expected /usr/bin/time -v's {name!r} line, found none")
        return match.group(1).strip()

    parts = [float(p) for p in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")]
    wall = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return {"wall_s": wall, "user_s": float(field("User time (seconds)")),
            "system_s": float(field("System time (seconds)"))}


def _run(log: Path) -> dict[str, float]:
    env = {**os.environ, "CLUSTERCERT_REQUIRE_REAL_SAMPLES": "1"}
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    with log.open("w") as out:
        subprocess.run([sys.executable, *COMMAND], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                       check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": wall, "user_s": after.ru_utime - before.ru_utime, "system_s": after.ru_stime - before.ru_stime}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default="after", help="the name this run is recorded under (default: after)")
    parser.add_argument("--log", type=Path, help="record this saved run (pytest's output, then /usr/bin/time -v's)")
    parser.add_argument("--note", default="", help="what this run measured (the commit, what shared the machine)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "suite.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    speed_before = gauge() if args.log is None else None
    if args.log is None:
        with tempfile.TemporaryDirectory(prefix="clustercert-bench-suite-") as tmp:
            log = Path(tmp) / "pytest.log"
            times = _run(log)
            output = log.read_text(errors="replace")
    else:
        output = args.log.read_text(errors="replace")
        times = _time_v(output)
    ended = datetime.now(UTC) if args.log is None else datetime.fromtimestamp(args.log.stat().st_mtime, UTC)
    run: dict[str, Any] = {
        "measured_at": ended.replace(microsecond=0).isoformat(),
        "command": " ".join(["python", *COMMAND]),
        "wall_s": round(times["wall_s"], 1),
        "cpu_s": round(times["user_s"] + times["system_s"], 1),
        "user_s": round(times["user_s"], 1),
        "system_s": round(times["system_s"], 1),
        "tests": counts(output),
        # pytest's short summary lines of what failed: a run with a failure is not a time of the suite passing
        "failures": [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))],
        "note": args.note,
    }
    run["met"] = times["wall_s"] <= TARGET_WALL_S and not run["failures"]
    if speed_before is not None:
        run["loadavg_before"] = [round(x, 2) for x in load_before]
        run["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        run["gauge_s"] = {"before": speed_before, "after": gauge()}
    record: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    record.update({"schema_version": 1, "benchmark": "suite", "python": platform.python_version(),
                   "processor": processor(), "processor_count": os.cpu_count(),
                   "targets": {"wall_s": TARGET_WALL_S}})
    record.setdefault("runs", {})[args.label] = run
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"{args.label}: {run['wall_s']} s wall, {run['cpu_s']} s CPU, {run['tests']}; wrote {args.out}")
    for line in run["failures"]:
        print(line)
    return 1 if run["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
