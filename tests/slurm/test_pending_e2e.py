"""A requeued job that the cluster has too few nodes left for, on a real Slurm cluster: the run stops and says why.

A 3-node resilience job on the 3-node loopback cluster loses a node (set DOWN by the fault injector): Slurm requeues
it, and it cannot start again until that node returns. The runner must see it pending without enough nodes, stop
after the plan's `node_wait_s` with one line naming the node and its state, cancel the job and return the node it
took out to service. (Seen for real in CI on 2026-12-03: a requeued job pended silently until the test's timeout.)
Oracles: the job's and the nodes' state as squeue, sacct and sinfo report them afterwards.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.conftest import run_cli
from tests.slurm.conftest import PLAN_HEADER

PLAN = PLAN_HEADER.replace("slurm: {poll_s: 0.5}", "slurm: {poll_s: 0.5, node_wait_s: 5}") + """\
  - id: no-spare
    kind: resilience
    nodes: 3
    workload: {steps: 400, batch: 8, checkpoint_every: 5, straggler_threshold: 0}
    faults:
      - {kind: node-down, at_step: 5, node: last}
"""


def test_a_requeued_job_without_enough_nodes_stops_the_run_naming_the_node(slurm_cluster: dict[str, str],
                                                                          tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    done = run_cli("run", str(plan), "--bundle", str(tmp_path / "b"), env=slurm_cluster, timeout=600)
    env = {**os.environ, **slurm_cluster}
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    events = [json.loads(line) for line in
              (tmp_path / "b" / "resilience" / "no-spare" / "runner-events.jsonl").read_text().splitlines()]
    (fault,) = [e for e in events if e["type"] == "fault_injected"]
    node, job = fault["node"], fault["job_id"]
    (line,) = done.stderr.strip().splitlines()
    waited = re.match(rf"error: no-spare: expected Slurm job {job} to start, got it pending for (\d+) s, and it "
                      rf"needs 3 node\(s\) while partition cert has 2 that can run it: {node} down\S* "
                      r"\(clustercert fault injection\)\. It was cancelled\. ", line)
    assert waited is not None, line
    assert int(waited.group(1)) >= 5  # the plan's node_wait_s
    assert [e["type"] for e in events].count("restart_started") == 1  # Slurm requeued it once, after the fault
    assert f"run: no-spare: Slurm job {job} is pending and it needs 3 node(s)" in done.stdout
    assert f"run: no-spare: stopped on an error; cancelled Slurm job {job}" in done.stdout
    assert f"run: no-spare: node {node} returned to service" in done.stdout
    # The job is gone (cancelled) and every node is back in service for the next plan
    queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True)
    assert queued.stdout.strip() in ("", "CANCELLED"), queued.stdout
    acct = subprocess.run(["sacct", "-j", job, "-X", "-n", "-P", "-o", "State"], env=env, capture_output=True,
                          text=True, check=True)
    # its last incarnation as accounting recorded it (`CANCELLED by 0`: the user who cancelled it)
    assert acct.stdout.strip().splitlines()[-1].split()[0] == "CANCELLED", acct.stdout
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=env, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    states = dict(row.split() for row in nodes if row.strip())
    assert sorted(states) == ["cc-n1", "cc-n2", "cc-n3"]
    assert all(state.rstrip("*") in ("idle", "completing", "mixed", "allocated") for state in states.values()), states
