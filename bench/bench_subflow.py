"""What the efficiency stage is made of: its own work, and what a Prefect subflow costs whatever it does (issue 13).

At cluster scale the efficiency stage stays far from 3x its floor (bench/results/scale.json: 0.5-0.6 s against
5-6 ms, best of five, for twelve small training logs). This bench says how much of that is the work and how much
Prefect's: each repetition is two fresh processes, each with a fresh PREFECT_HOME (no cached result) and a
temporary Prefect server started as certify starts it (`flows.runtime.prefect_runtime`: flow-run heartbeats off),
in which a parent flow loads the sample bundle into an evidence set as certify's flow does (`load_task`), then
1. in the first process, times the real efficiency subflow (`flows.phases.efficiency_flow`, the call certify's
   efficiency stage makes) as the process's first subflow, as in certify; in the second, times a subflow that
   does nothing first, then the efficiency subflow (what the first subflow of a process pays the server and the
   client once is then paid by the bare one);
2. in both, times `--calls` times each a subflow that does nothing, a subflow with three task runs of trivial
   work whose results are persisted (the shape of a phase: load, parse, judge), and the stage's own work as one
   task run of the parent flow, persisted and not (the phase without a subflow of its own);
and, outside any flow, times the stage's own work as the subflow does it (every efficiency training log and MLPerf
run parsed afresh by `parse_run`, then `judge_efficiency`; the two parts timed apart), best of `--calls`. Writes
bench/results/subflow.json (schema_version 1) with the medians over the repetitions, a summary, the machine and its
gauge.

    .venv/bin/python bench/bench_subflow.py                 # 3 repetitions, 10 calls each
    .venv/bin/python bench/bench_subflow.py --repeat 1 --out /tmp/subflow.json
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

from bench_certify import ROOT, SAMPLE, _env  # bench/ is the script's folder: first on its path
from gauge import gauge, processor


def child(calls: int, bare_first: bool) -> dict[str, Any]:
    """One repetition, in this (fresh) process: the figures of one temporary server's run; with `bare_first` a
    subflow that does nothing runs before the efficiency subflow (which is otherwise the process's first, as in
    certify)."""
    sys.path.insert(0, str(ROOT))
    from prefect import flow, task

    from clustercert.evidence.bundle import Phase, RunKind
    from clustercert.phases.efficiency import judge_efficiency
    from clustercert.phases.evidence import parse_run
    from clustercert.runs.folder import load_inputs
    from clustercert.settings import load_settings
    from flows.caching import CACHED, UNCACHED
    from flows.phases import efficiency_flow
    from flows.request import CertifyRequest
    from flows.runtime import prefect_runtime
    from flows.tasks import load_task

    references = str(ROOT / "references")
    limit = load_settings().max_evidence_bytes  # what certify passes its flows and parsers
    inputs = load_inputs(SAMPLE, Path(references))
    spec = inputs.bundle.spec

    def own_work() -> tuple[Any, dict[str, Any]]:
        """The stage's own work as the subflow does it: every efficiency log and MLPerf run parsed afresh, then
        judged; the result and the two parts' times."""
        started = time.perf_counter()
        logs = {r.id: parse_run(inputs.bundle, r, limit) for r in spec.runs
                if r.phase is Phase.EFFICIENCY and r.kind is RunKind.TRAINING}
        mlperf = {r.id: parse_run(inputs.bundle, r, limit) for r in spec.runs if r.kind is RunKind.MLPERF}
        parsed = time.perf_counter()
        result = judge_efficiency(spec, inputs.catalog, logs, mlperf)  # type: ignore[arg-type]
        return result, {"parse": parsed - started, "judge": time.perf_counter() - parsed, "logs": len(logs)}

    @task(name="bench-efficiency-as-one-task", **CACHED)
    def efficiency_task(nonce: int) -> Any:  # the phase as one persisted task run of the parent flow, no subflow
        return own_work()[0]

    @task(name="bench-efficiency-as-one-unpersisted-task", **UNCACHED)
    def efficiency_unpersisted(nonce: int) -> Any:  # the same, its result not persisted (nothing to resume from)
        return own_work()[0]

    @task(name="bench-step", **CACHED)
    def step(value: int, nonce: int) -> int:  # `nonce` makes each call's cache key new: nothing is read back
        return value + 1

    @flow(name="bench-bare")
    def bare() -> None:
        return None

    @flow(name="bench-three-tasks")
    def three_tasks(nonce: int) -> int:
        return step(step(step(0, nonce), nonce), nonce)

    def timed(call: Any, *args: Any) -> float:
        started = time.perf_counter()
        call(*args)
        return time.perf_counter() - started

    @flow(name="bench-parent")
    def parent(bundle_path: str, references_dir: str) -> dict[str, Any]:
        settings = load_settings()  # a request as certify's flow gets one; nothing is written to its run folder
        evidence = load_task(CertifyRequest(
            bundle_path=bundle_path, run_dir="", run_meta={}, key_dir=str(settings.key_dir),
            references_dir=references_dir, templates_dir=str(settings.templates_dir), limit=limit))
        out: dict[str, Any] = {}
        if bare_first:  # the server's and the client's first subflow paid by a subflow that does nothing
            out["first_bare_subflow_s"] = timed(bare)
        out["efficiency_subflow_s"] = timed(efficiency_flow, bundle_path, evidence)
        out["bare_subflow_s"] = [timed(bare) for _ in range(calls)]
        out["three_task_subflow_s"] = [timed(three_tasks, time.time_ns() + call) for call in range(calls)]
        out["efficiency_as_one_task_s"] = [timed(efficiency_task, time.time_ns() + call) for call in range(calls)]
        out["efficiency_as_one_unpersisted_task_s"] = [timed(efficiency_unpersisted, call) for call in range(calls)]
        return out

    with prefect_runtime():
        figures = parent(str(SAMPLE), references)

    work = [own_work()[1] for _ in range(calls)]
    best = min(work, key=lambda w: w["parse"] + w["judge"])
    # its parse (what the floor's scan does) and its judge (the step means, and the seeded bootstrap intervals
    # that the floor does not compute)
    figures["own_work_s"], figures["own_parse_s"], figures["own_judge_s"] = (
        best["parse"] + best["judge"], best["parse"], best["judge"])
    for key in ("bare_subflow_s", "three_task_subflow_s", "efficiency_as_one_task_s",
                "efficiency_as_one_unpersisted_task_s"):
        figures[key] = statistics.median(figures[key])
    figures["logs"] = best["logs"]
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}


def run_child(calls: int, bare_first: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="clustercert-bench-subflow-") as tmp:
        env = {**_env(Path(tmp)), "PREFECT_LOGGING_LEVEL": "WARNING"}  # a fresh account, as bench_certify's
        proc = subprocess.run([sys.executable, __file__, "--child", "--calls", str(calls),
                               *(["--bare-first"] if bare_first else [])], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"bench_subflow: a repetition failed (exit {proc.returncode}): {proc.stderr[-800:]}")
        figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes, each with its own server")
    parser.add_argument("--calls", type=int, default=10, help="calls of each small subflow per process")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "subflow.json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare-first", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeat < 1 or args.calls < 1:
        parser.error("--repeat and --calls must be at least 1")
    if args.child:
        print(json.dumps(child(args.calls, args.bare_first)))
        return 0
    before = gauge()
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {"efficiency_first": [], "bare_first": []}
    for number in range(1, args.repeat + 1):
        for order, bare_first in (("efficiency_first", False), ("bare_first", True)):
            runs[order].append(run_child(args.calls, bare_first))
            print(f"repeat {number} ({order}): " + ", ".join(f"{k} {v:.3f}" for k, v in runs[order][-1].items()
                                                           if k.endswith("_s")), file=sys.stderr)
    medians = {order: {k: round(statistics.median(r[k] for r in done), 4) for k in done[0] if k.endswith("_s")}
               for order, done in runs.items()}
    first, warm = medians["efficiency_first"], medians["bare_first"]
    medians["summary"] = {
        "efficiency_stage_s": first["efficiency_subflow_s"],  # as in certify: the process's first subflow
        "own_work_s": first["own_work_s"],
        "own_parse_s": first["own_parse_s"],
        "own_judge_s": first["own_judge_s"],
        "first_subflow_extra_s": round(warm["first_bare_subflow_s"] - warm["bare_subflow_s"], 4),
        "efficiency_after_a_first_subflow_s": warm["efficiency_subflow_s"],
        "bare_subflow_s": warm["bare_subflow_s"],
        "three_task_subflow_s": warm["three_task_subflow_s"],
        # the alternative to a subflow: the phase's parse and judge as one persisted task run of the parent flow
        "efficiency_as_one_task_s": first["efficiency_as_one_task_s"],
        "efficiency_as_one_unpersisted_task_s": first["efficiency_as_one_unpersisted_task_s"],
    }
    result = {
        "schema_version": 1, "benchmark": "subflow", "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(), "machine": platform.machine(), "processor": processor(),
        "processor_count": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "gauge_s": {"before": before, "after": gauge()}, "sample": str(SAMPLE.relative_to(ROOT)),
        "repeat": args.repeat, "calls": args.calls, "medians": medians, "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print("medians: " + ", ".join(f"{k} {v}" for k, v in medians["summary"].items()) + f"; wrote {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
