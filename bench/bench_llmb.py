"""Time of taking a full 26.08 GB200 submission as llmb-run packs it (every workload and dtype of the suite, the NCCL
microbenchmark, the prescreen) through `evidence init ARCHIVE` and `certify --baselines`, beside the shipped
sample's certification in the same run.

Each repetition builds the archive in a temporary folder (not timed), then times, each in a fresh process with a
fresh PREFECT_HOME: `evidence init` of the archive (unpack, hash, draft), `evidence seal`, `certify --baselines`
of the unpacked folder, and `certify` of evidence/gb200-seed. Target: the archive's init, seal and certification
take at most 30 s more than the sample's certification. Writes bench/results/llmb.json (schema_version 1).

    .venv/bin/python bench/bench_llmb.py               # 1 repetition
    .venv/bin/python bench/bench_llmb.py --repeat 3
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

from bench_certify import _env  # bench/ is the script's folder: first on its path
from gauge import gauge, processor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT / "evidence" / "gb200-seed"
TARGET_EXTRA_S = 30.0
NODES = [f"gb-r{r}-n{n:02d}" for r in range(1, 9) for n in range(1, 17)]


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "clustercert", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=False)
    return time.perf_counter() - started, proc.returncode, (proc.stderr or proc.stdout)[-500:]


def _archive(work: Path) -> tuple[Path, Path, int]:
    """The full GB200 26.08 suite packed as llmb-run packs it, and a baselines file 2 % slower than its runs."""
    import yaml

    from clustercert.catalog import load_catalog
    from clustercert.simulate.llmb import baseline_entry, pack_llmb_archive, suite_jobs, write_llmb_install

    catalog = load_catalog("exemplar-gb200-26.08", ROOT / "references")
    jobs = suite_jobs(catalog)
    install = write_llmb_install(work / "install", catalog, jobs, nodes=NODES)
    archive = pack_llmb_archive(install, work)
    targets = work / "targets.yaml"
    targets.write_text(yaml.safe_dump({
        "schema_version": 1, "supplied_by": "bench", "date": "2026-11-15", "source": "bench/bench_llmb.py",
        "baselines": [baseline_entry(j, catalog, 1.02) for j in jobs]}))
    return archive, targets, len(jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "llmb.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    speed_before = gauge()
    runs: list[dict[str, Any]] = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="clustercert-bench-llmb-") as tmp:
            work = Path(tmp)
            archive, targets, workloads = _archive(work)
            folder = work / archive.name.removesuffix(".tar.zst")
            init_s, init_rc, init_tail = _timed(["evidence", "init", str(archive)], _env(work / "a"))
            draft = folder / "bundle.yaml"
            if draft.is_file():
                draft.write_text(draft.read_text().replace('provider: "FILL_IN"', 'provider: "bench"'))
            seal_s, seal_rc, _ = _timed(["evidence", "seal", str(folder)], _env(work / "a"))
            certify_s, certify_rc, certify_tail = _timed(
                ["certify", str(folder), "--baselines", str(targets), "--json"], _env(work / "a"))
            sample_s, sample_rc, _ = _timed(["certify", str(SAMPLE), "--json"], _env(work / "b"))
            extra = init_s + seal_s + certify_s - sample_s
            runs.append({"archive_bytes": archive.stat().st_size, "workloads": workloads,
                         "init_s": round(init_s, 2), "seal_s": round(seal_s, 2), "certify_s": round(certify_s, 2),
                         "sample_certify_s": round(sample_s, 2), "extra_s": round(extra, 2),
                         "exit_codes": [init_rc, seal_rc, certify_rc, sample_rc],
                         **({"tail": init_tail + certify_tail} if init_rc or certify_rc else {})})
            print(f"repeat {i + 1}: init {init_s:.2f} s, seal {seal_s:.2f} s, certify {certify_s:.2f} s (exit "
                  f"{certify_rc}), sample {sample_s:.2f} s: {extra:+.2f} s beyond the sample", flush=True)
    extra_s = statistics.median(r["extra_s"] for r in runs)
    report: dict[str, Any] = {
        "schema_version": 1, "benchmark": "llmb",
        "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "python": platform.python_version(), "machine": platform.machine(), "processor": processor(),
        "processor_count": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "note": "load averages above the processor count mean other work shared the machine: not an idle figure",
        "gauge_s": {"before": speed_before, "after": gauge()},
        "runs": runs, "median_extra_s": extra_s,
        "targets": {"extra_s": TARGET_EXTRA_S},
        "meets_targets": extra_s <= TARGET_EXTRA_S and all(r["exit_codes"][2] == 0 for r in runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"median {extra_s:+.2f} s beyond the sample's certification (target <= {TARGET_EXTRA_S:g} s); "
          f"wrote {args.out}")


if __name__ == "__main__":
    main()
