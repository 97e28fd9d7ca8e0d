# ruff: noqa: E501  (the cases are one line each)
"""Time to refuse or read hostile inputs (issue 14): large bundle.yaml files, the long lines that made
backtracking regexes take minutes, and format detection; written to bench/results/hostile.json."""

from __future__ import annotations

import json
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clustercert.errors import ClusterCertError
from clustercert.evidence.bundle import load_bundle
from clustercert.parsers import detect_format
from clustercert.parsers.dcgm import parse_dcgm
from clustercert.parsers.nccl_tests import parse_nccl_tests

HEAD = ("schema_version: 1\ncluster: {name: c, provider: p}\nsystem:\n  gpu: gb200-nvl72\n  gpus_per_node: 4\n"
        "  nodes: [n1, n2]\ncatalog: exemplar-gb200\nrecipe_version: '25.05.05'\nruns:\n")
RUN = ("- id: nccl-pair-{i}\n  phase: scaling\n  kind: collective\n  format: nccl-tests\n  gpus: 2\n"
       "  nodes: [n1, n2]\n  files: [r.log]\n")


def _timed(action: Callable[[], object]) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        action()
        outcome = "read"
    except ClusterCertError as exc:
        outcome = "refused: " + str(exc)[-80:]
    return time.perf_counter() - start, outcome


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="clustercert-bench-hostile-"))
    try:
        figures = _measure(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # up to 43 MB of generated inputs
    out = {"schema_version": 1, "when": datetime.now(UTC).isoformat(timespec="seconds"),
           "machine": platform.machine(), "python": platform.python_version(), "figures": figures}
    target = Path(__file__).resolve().parent / "results" / "hostile.json"
    target.write_text(json.dumps(out, indent=2) + "\n")
    for f in figures:
        print(f"{f['seconds']:8.3f} s  {f['case']}: {f['outcome']}")
    return 0


def _measure(work: Path) -> list[dict[str, object]]:
    """Each hostile case written into `work` and timed."""
    figures: list[dict[str, object]] = []
    for mb in (1, 2, 40):
        root = work / f"b{mb}"
        root.mkdir()
        (root / "r.log").write_text("x\n")
        runs, i = [], 0
        size = len(HEAD)
        while size + len(RUN) + 8 < mb * 1024**2:
            runs.append(RUN.format(i=i))
            size += len(runs[-1])
            i += 1
        (root / "bundle.yaml").write_text(HEAD + "".join(runs))
        seconds, outcome = _timed(partial(load_bundle, root))
        figures.append({"case": f"bundle.yaml of {mb} MB ({i} runs)", "seconds": round(seconds, 3), "outcome": outcome})
    cases: list[tuple[str, str, Callable[[Path], object]]] = [
        ("nccl-tests: one 1 MB line of '0:'", "# nThread 1 nGpus 1\n" + "0:" * (1 << 19) + "\n", lambda p: parse_nccl_tests(p, str(p))),
        ("dcgm: one 64 KB label line", "DCGM_FI_DEV_GPU_UTIL{" + "a" * 65536 + "} 97 1700000000000\n", lambda p: parse_dcgm(p, str(p))),
        ("detect: a 1 MB 'rank compute_s' header", "rank " * 200_000 + "compute_s\n", detect_format),
        ("detect: 1 MB of '{\"ts\":'", '{"ts":' * 170_000 + "\n", detect_format),
    ]
    for name, text, action in cases:
        path = work / "f.txt"
        path.write_text(text)
        seconds, outcome = _timed(partial(action, path))
        figures.append({"case": name, "seconds": round(seconds, 3), "outcome": outcome})
    return figures


if __name__ == "__main__":
    sys.exit(main())
