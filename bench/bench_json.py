"""How long results.json and validation.json take to write: json.dumps(indent=2) (Python's indenting encoder, what
clustercert used) against dump_json_bytes (orjson where it writes the same bytes), on a document shaped like a
512-GPU sweep's results, written to bench/results/json.json. The two outputs must be the same bytes.

    .venv/bin/python bench/bench_json.py                 # 8,141 pairs x 20 message sizes, best of 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clustercert.runs.results import dump_json_bytes  # noqa: E402


def document(pairs: int, seed: int = 0) -> dict[str, Any]:
    """A sweep's results: per pair, its nodes, bus bandwidth and 20 message sizes (a tenth of the deltas tiny)."""
    rng = random.Random(seed)
    return {"phases": {"scaling": {"pairs": [
        {"a": f"gb-r{i % 32:02d}-n{i % 18:02d}", "b": f"gb-r{i * 7 % 32:02d}-n{i * 3 % 18:02d}",
         "busbw_gbps": rng.uniform(300, 400), "status": "PASS", "line": i,
         "sizes": [{"bytes": 2**k, "busbw_gbps": rng.uniform(1, 400), "time_us": rng.uniform(1, 1e5),
                    "delta": rng.uniform(-1e-3, 1e-3), "status": "PASS"} for k in range(20)]}
        for i in range(pairs)]}}}


def best(fn: Any, repeat: int) -> tuple[float, bytes]:
    times, out = [], b""
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=8141)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "json.json")
    args = parser.parse_args()
    data = document(args.pairs)
    old_s, old = best(lambda: (json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode(),
                      args.repeat)
    new_s, new = best(lambda: dump_json_bytes(data), args.repeat)
    if new != old:
        raise SystemExit("dump_json_bytes wrote other bytes than json.dumps: not a measurement")
    result = {
        "schema_version": 1, "benchmark": "json",
        "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "command": "bench/bench_json.py " + " ".join(sys.argv[1:]),
        "machine": {"processor": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version()},
        "load_average_1m": round(os.getloadavg()[0], 2),
        "pairs": args.pairs, "bytes": len(new), "repeat": args.repeat,
        "json_dumps_indent_s": round(old_s, 3), "dump_json_bytes_s": round(new_s, 3),
        "speedup": round(old_s / new_s, 2), "same_bytes": True,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{len(new) / 1e6:.1f} MB: json.dumps(indent=2) {old_s:.2f} s, dump_json_bytes {new_s:.2f} s "
          f"({old_s / new_s:.2f}x), same bytes; wrote {args.out}")


if __name__ == "__main__":
    main()
