"""Validation time of a large per-rank timing table (default 10 million rows), written to bench/results."""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clustercert.evidence.bundle import RunKind
from clustercert.evidence.parse import ParsedFile
from clustercert.parsers.rank_timings import parse_rank_timings
from clustercert.validation.suites import ResultStatus, load_suites, run_tables
from clustercert.validation.tables import BATCH_ROWS, rank_timings_table

ROOT = Path(__file__).resolve().parents[1]
RANKS = 512
GPUS_PER_NODE = 4
START = datetime(2026, 11, 2, 3, 0, tzinfo=UTC).timestamp()


def write_table(path: Path, rows: int, seed: int) -> int:
    """A Parquet per-rank timing table: RANKS ranks, enough steps for at least `rows` rows, row groups of 1M."""
    steps = -(-rows // RANKS)
    rng = np.random.default_rng(seed)
    rank = np.tile(np.arange(RANKS, dtype=np.int64), steps)
    step = np.repeat(np.arange(steps, dtype=np.int64), RANKS)
    start = int(START * 1e6)
    table = pa.table({
        "rank": rank,
        "node": pa.array([f"gb-r{r // 72 + 1}-n{r % 72 // GPUS_PER_NODE + 1:02d}" for r in range(RANKS)])
        .take(pa.array(rank)),
        "gpu": rank % GPUS_PER_NODE,
        "step": step,
        "compute_s": rng.normal(6.0, 0.05, rank.size),
        "comm_s": rng.normal(0.4, 0.02, rank.size),
        "timestamp": pa.array(start + step * 6_500_000 + rank, pa.timestamp("us", "UTC")),
    })
    pq.write_table(table, path, row_group_size=1_000_000)
    return int(table.num_rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "validation.json")
    args = parser.parse_args()
    suites = load_suites(ROOT / "checks")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank_timings.parquet"
        rows = write_table(path, args.rows, seed=7)
        # import Great Expectations and build its context once, outside the timed part
        started = time.perf_counter()
        small = Path(tmp) / "small.parquet"
        write_table(small, RANKS * 2, seed=1)
        warm = parse_rank_timings(small, "small")
        run_tables([rank_timings_table(ParsedFile("w", RunKind.RANK_TIMINGS, "s", "s", warm), GPUS_PER_NODE,
                                       None)], suites)
        warmup_s = time.perf_counter() - started

        started = time.perf_counter()
        parsed = parse_rank_timings(path, path.name)
        parse_s = time.perf_counter() - started
        started = time.perf_counter()
        span = (START - 3600.0, START + 6.5 * parsed.last_step + 3600.0)  # the scheduler job around the run
        table = rank_timings_table(ParsedFile("bench", RunKind.RANK_TIMINGS, path.name, path.name, parsed),
                                   GPUS_PER_NODE, span)
        reduce_s = time.perf_counter() - started
        started = time.perf_counter()
        report = run_tables([table], suites)
        validate_s = time.perf_counter() - started
    results = report.tables[0].results
    assert all(r.status is ResultStatus.PASS for r in results), [r.message for r in results if r.status.value != "PASS"]
    doc = {
        "schema_version": 1,
        "benchmark": "validation",
        "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor_count": len(__import__("os").sched_getaffinity(0)),
        "table": "rank_timings",
        "rows": rows,
        "ranks": RANKS,
        "batch_rows": BATCH_ROWS,
        "expectations": len(results),
        "seconds": {
            "great_expectations_import_and_warmup": round(warmup_s, 2),
            "parse": round(parse_s, 2),
            "column_wise_reductions": round(reduce_s, 2),
            "validate_batches": round(validate_s, 2),
            "total_excluding_warmup": round(parse_s + reduce_s + validate_s, 2),
        },
        "rows_per_s_validated": round(rows / validate_s),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
