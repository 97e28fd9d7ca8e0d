"""Peak memory of reading a 1,000,000-row Slurm accounting dump (`sacct -P` and `sacct --json`), written to
bench/results/sacct_memory.json."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_parsers import resident_kib  # bench/ is the script's folder: first on its path
from gauge import processor

from clustercert.parsers.sacct import parse_sacct

# The field list of `sacct -P --format ...` as a site's accounting export prints it (the simulator's, with the
# header line sacct writes first)
FIELDS = "JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Submit|Start|End|Elapsed|NNodes|NodeList"
_STATES = ("COMPLETED", "COMPLETED", "COMPLETED", "FAILED", "CANCELLED by 1234", "TIMEOUT", "NODE_FAIL")
_T0 = datetime(2025, 3, 7, 22, 0, 0)


def _jobs(rows: int) -> Iterator[tuple[int, str, datetime, datetime, datetime, int, str, str]]:
    """(job id, name, submit, start, end, nodes, node list, state) of each job: 4 rows per job (the job, its batch,
    extern and first srun steps), times and sizes varying from job to job as an accounting export's do."""
    for index in range(rows // 4):
        nodes = 1 << (index % 5)
        first = 1 + (index * 7) % 480
        submit = _T0 + timedelta(seconds=index * 37)
        start = submit + timedelta(seconds=5 + index % 300)
        end = start + timedelta(seconds=60 + (index * 13) % 86000)
        node_list = f"gb200-[{first:03d}-{first + nodes - 1:03d}]" if nodes > 1 else f"gb200-{first:03d}"
        yield (4_000_000 + index, f"llama3-{index % 9}-bf16", submit, start, end, nodes, node_list,
               _STATES[index % len(_STATES)])


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def write_parsable(path: Path, rows: int) -> None:
    """A `sacct -P` dump of `rows` rows after its header."""
    fmt = "%Y-%m-%dT%H:%M:%S"
    with path.open("w") as out:
        out.write(FIELDS + "\n")
        for job_id, name, submit, start, end, nodes, node_list, state in _jobs(rows):
            s, e, el = start.strftime(fmt), end.strftime(fmt), _elapsed((end - start).total_seconds())
            code = "0:0" if state == "COMPLETED" else "1:0"
            step = "CANCELLED" if state.startswith("CANCELLED") else state
            cpus = nodes * 144
            out.write(f"{job_id}|{name}|batch|cert|{cpus}|{state}|{code}|{submit.strftime(fmt)}|{s}|{e}|{el}|{nodes}|"
                      f"{node_list}\n"
                      f"{job_id}.batch|batch||cert|144|{step}|{code}|{s}|{s}|{e}|{el}|1|{node_list.split('[')[0]}\n"
                      f"{job_id}.extern|extern||cert|{cpus}|COMPLETED|0:0|{s}|{s}|{e}|{el}|{nodes}|{node_list}\n"
                      f"{job_id}.0|python||cert|{cpus}|{step}|{code}|{s}|{s}|{e}|{el}|{nodes}|{node_list}\n")


def write_parsable_by_line(path: Path, rows: int) -> None:
    """The `sacct -P` dump with its last job printed before NodeList was added to the field list (a row short of
    its last field): the fast reading refuses such a dump and the line-by-line reading reads it, with a warning."""
    write_parsable(path, rows - 4)
    with path.open("a") as out:
        out.write("4999999|late|batch|cert|144|COMPLETED|0:0|2025-03-08T00:00:00|2025-03-08T00:00:05|"
                  "2025-03-08T01:00:05|01:00:00|1\n"
                  "4999999.batch|batch||cert|144|COMPLETED|0:0|2025-03-08T00:00:05|2025-03-08T00:00:05|"
                  "2025-03-08T01:00:05|01:00:00|1|gb200-001\n"
                  "4999999.extern|extern||cert|144|COMPLETED|0:0|2025-03-08T00:00:05|2025-03-08T00:00:05|"
                  "2025-03-08T01:00:05|01:00:00|1|gb200-001\n"
                  "4999999.0|python||cert|144|COMPLETED|0:0|2025-03-08T00:00:05|2025-03-08T00:00:05|"
                  "2025-03-08T01:00:05|01:00:00|1|gb200-001\n")


def write_json(path: Path, rows: int) -> None:
    """The same jobs as `sacct --json` prints them (Slurm 23.02 and later: states as lists, times as numbers, a
    step's id whole), each job's object on lines of its own as sacct indents them."""
    with path.open("w") as out:
        out.write('{\n  "meta": {"plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld"}},\n'
                  '  "jobs": [\n')
        for number, (job_id, name, submit, start, end, nodes, node_list, state) in enumerate(_jobs(rows)):
            epoch = {key: int(moment.replace(tzinfo=UTC).timestamp())
                     for key, moment in (("submission", submit), ("start", start), ("end", end))}
            elapsed = epoch["end"] - epoch["start"]
            words = state.split(" ")[0]
            steps = [
                {"step": {"id": f"{job_id}.{sid}", "name": sname}, "state": [words if sid != "extern" else "COMPLETED"],
                 "nodes": {"count": 1 if sid == "batch" else nodes, "list": [node_list]},
                 "time": {"elapsed": elapsed, "start": {"set": True, "number": epoch["start"]},
                          "end": {"set": True, "number": epoch["end"]}}}
                for sid, sname in (("batch", "batch"), ("extern", "extern"), ("0", "python"))
            ]
            job = {"job_id": job_id, "name": name, "partition": "batch", "account": "cert",
                   "state": {"current": [words], "reason": "None"},
                   "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
                   "nodes": node_list, "allocation_nodes": nodes,
                   "time": {"elapsed": elapsed, "submission": epoch["submission"], "start": epoch["start"],
                            "end": epoch["end"]},
                   "steps": steps}
            out.write(("    " if number == 0 else ",\n    ") + json.dumps(job))
        out.write('\n  ]\n}\n')


FORMS = {"parsable": write_parsable, "parsable-by-line": write_parsable_by_line, "json": write_json}


def measure(path: Path) -> dict[str, float]:
    """Parse `path` once in this (fresh) process: the seconds, the resident set before, its peak, the rows read."""
    before = resident_kib()  # the interpreter and its imports, resident now
    start = time.perf_counter()
    result = parse_sacct(path, path.name)
    seconds = time.perf_counter() - start
    rows = len(result.jobs) + sum(len(job.steps) for job in result.jobs)
    assert len(result.warnings) == (path.name == "sacct-parsable-by-line.txt"), result.warnings
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "rss_before_kib": before, "rss_peak_kib": peak, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of each dump (jobs and steps)")
    parser.add_argument("--only", nargs="*", default=None, choices=list(FORMS), help="dumps to read")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sacct_memory.json")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # the child process each dump is read in, so its peak RSS is its own
        print(json.dumps(measure(args.measure)))
        return
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for form, write in FORMS.items():
            if args.only and form not in args.only:
                continue
            path = Path(folder) / f"sacct-{form}.txt"
            write(path, args.rows)
            size = path.stat().st_size
            child = subprocess.run([sys.executable, __file__, "--measure", str(path)], check=True,
                                   capture_output=True, text=True)
            got = json.loads(child.stdout)
            assert got["rows"] == args.rows // 4 * 4, got  # every row read: a dump half read would look frugal
            added = (got["rss_peak_kib"] - got["rss_before_kib"]) * 1024
            results.append({
                "form": form,
                "rows": got["rows"],
                "bytes": size,
                "seconds": round(got["seconds"], 2),
                "peak_rss_mib": round(got["rss_peak_kib"] / 1024, 1),
                # what reading added to the process's peak (the parsed jobs included), per byte of the dump
                "peak_added_per_file_byte": round(added / size, 2),
            })
            print(f"{form:16s} {got['rows']:>9,} rows {size / 1e6:7.1f} MB {got['seconds']:6.1f} s "
                  f"peak +{added / 2**20:7.1f} MiB = {added / size:5.2f}x the file", flush=True)
            path.unlink()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "schema_version": 1,
        "benchmark": "sacct_memory",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": processor(),
        "processor_count": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "target": "peak added at most about 3x the dump's size",
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
