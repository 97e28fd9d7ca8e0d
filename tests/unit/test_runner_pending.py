"""A job that cannot start until a node returns to service: the runner stops with the reason, not at its deadline.

The case seen in CI (2026-12-03): a requeued 2-node job on a cluster whose other two nodes its handler had drained
pended until the test's timeout, the runner silent. The oracles: Slurm's own output for the node states
(`sinfo -N -o '%N|%T|%E'` as Slurm 22.05 printed it) and a count by hand of the nodes that can run a job.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clustercert.runner.execute import JobRecord, Runner
from clustercert.runner.plan import RunnerError, load_plan
from clustercert.runner.slurm import NodeState, Slurm

_HEAD = ("schema_version: 1\ncluster: {name: c, provider: p}\nsystem: {id: cpu-loopback}\ncatalog: loopback-cpu\n"
         "recipe_version: clustercert-cpu-1\njobs:\n")


@pytest.mark.parametrize(("state", "usable"), [
    ("idle", True), ("allocated", True), ("mixed", True), ("completing", True), ("idle~", True),
    ("idle#", True), ("reserved", True), ("planned", True), ("allocated*", True),
    ("drained", False), ("draining", False), ("down", False), ("down*", False), ("fail", False),
    ("failing", False), ("maint", False), ("inval", False), ("future", False), ("idle+drain", False),
    ("MIXED+DRAIN", False), ("drained*", False),
])
def test_a_node_can_run_a_job_unless_drained_down_or_failed(state: str, usable: bool) -> None:
    assert NodeState("n", state, "none").usable is usable


class _Sinfo(Slurm):
    """Slurm whose commands answer with fixed text (what they printed on the loopback cluster)."""

    def __init__(self, stdout: str) -> None:
        super().__init__(UTC)
        self.stdout = stdout
        self.args: list[list[str]] = []

    def _run(self, args: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        self.args.append(list(args))
        return subprocess.CompletedProcess(list(args), 0, self.stdout, "")


def test_node_states_read_sinfo_once_per_node_keeping_a_reason_with_a_bar() -> None:
    slurm = _Sinfo("cc-n1|drained|straggler detected by job 12\ncc-n2|idle|none\ncc-n3|down*|a | b\n"
                   "cc-n1|drained|straggler detected by job 12\n\n")
    assert slurm.node_states(["cert", "debug"]) == [
        NodeState("cc-n1", "drained", "straggler detected by job 12"), NodeState("cc-n2", "idle", "none"),
        NodeState("cc-n3", "down*", "a | b")]
    assert slurm.args == [["sinfo", "-h", "-N", "-o", "%N|%T|%E", "-p", "cert,debug"]]
    slurm.node_states()
    assert slurm.args[-1] == ["sinfo", "-h", "-N", "-o", "%N|%T|%E"]


class _Pending(Slurm):
    """A job pending `polls` times, then running and completing; the partition's nodes as given."""

    def __init__(self, nodes: list[NodeState], polls: int, **fields: str) -> None:
        super().__init__(UTC)
        self.nodes, self.polls, self.fields = nodes, polls, fields
        self.cancelled: list[str] = []
        self.resumed: list[str] = []
        self.asked: list[list[str]] = []

    def job(self, job_id: str) -> dict[str, str] | None:
        base = {"JobId": job_id, "Restarts": "0", "NumNodes": "2-2", "NumTasks": "2", "Partition": "cert",
                "ExcNodeList": "(null)", "ReqNodeList": "(null)", **self.fields}
        if self.polls > 0:
            self.polls -= 1
            return {**base, "JobState": "PENDING", "StartTime": "Unknown", "NodeList": "",
                    "Reason": "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_"
                              "partitions"}
        return {**base, "JobState": "COMPLETED", "StartTime": "2026-12-04T03:00:00",
                "EndTime": "2026-12-04T03:00:10", "NodeList": "cc-n1,cc-n3"}

    def node_states(self, partitions: Sequence[str] = ()) -> list[NodeState]:
        self.asked.append(list(partitions))
        return self.nodes

    def hostnames(self, nodelist: str) -> list[str]:
        return [] if nodelist in ("", "(null)") else nodelist.split(",")

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)

    def resume(self, node: str) -> None:
        self.resumed.append(node)


def _runner(tmp_path: Path, slurm: Slurm, wait_s: float = 0.05) -> tuple[Runner, list[str]]:
    path = tmp_path / "plan.yaml"
    path.write_text(_HEAD + "  - {id: r, kind: resilience, nodes: 2}\n"
                    f"slurm: {{poll_s: 0.001, node_wait_s: {wait_s}}}\n", encoding="utf-8")
    lines: list[str] = []
    runner = Runner(load_plan(path), tmp_path / "b", slurm, lambda: datetime(2026, 12, 4, 3, tzinfo=UTC),
                    lines.append)
    (tmp_path / "b" / "resilience" / "r").mkdir(parents=True)
    return runner, lines


_DRAINED = [NodeState("cc-n1", "idle", "none"), NodeState("cc-n2", "drained", "straggler detected by job 7"),
            NodeState("cc-n3", "down*", "Not responding")]


def test_a_job_its_partition_has_too_few_nodes_for_stops_the_run_naming_them(tmp_path: Path) -> None:
    slurm = _Pending(_DRAINED, polls=10**6)
    runner, lines = _runner(tmp_path, slurm)
    with pytest.raises(RunnerError) as info:
        runner._track(runner.plan.jobs[0], JobRecord("r", slurm_id="7"))
    message = str(info.value)
    assert message.startswith("r: expected Slurm job 7 to start, got it pending for 0 s, and it needs 2 node(s) "
                              "while partition cert has 1 that can run it: cc-n2 drained (straggler detected by "
                              "job 7), cc-n3 down* (Not responding). It was cancelled.")
    assert "\n" not in message and "scontrol update nodename=NODE state=resume" in message
    assert slurm.asked[0] == ["cert"] and slurm.polls > 0
    assert lines == ["r: Slurm job 7 is pending and it needs 2 node(s) while partition cert has 1 that can run it: "
                     "cc-n2 drained (straggler detected by job 7), cc-n3 down* (Not responding); the run stops if "
                     "it still is in 0 s"]


def test_a_job_waiting_for_busy_nodes_is_waited_for(tmp_path: Path) -> None:
    """Nodes running other jobs free up by themselves: the job pends, the run waits, and it runs."""
    busy = [NodeState("cc-n1", "allocated", "none"), NodeState("cc-n2", "mixed", "none"),
            NodeState("cc-n3", "drained", "operator")]
    slurm = _Pending(busy, polls=200)
    runner, lines = _runner(tmp_path, slurm, wait_s=0.001)
    record = JobRecord("r", slurm_id="8")
    runner._track(runner.plan.jobs[0], record)
    assert record.state == "COMPLETED" and slurm.polls == 0 and len(slurm.asked) == 200
    assert lines == ["r: job 8 running on cc-n1,cc-n3 (restart 0)"]


def test_a_node_back_in_service_restarts_the_wait(tmp_path: Path) -> None:
    """The wait counts while the shortfall lasts: a node that returns in time lets the job start."""
    slurm = _Pending(list(_DRAINED), polls=6)
    runner, lines = _runner(tmp_path, slurm, wait_s=30.0)
    states = iter([_DRAINED, _DRAINED, [NodeState("cc-n1", "idle", "none"), NodeState("cc-n2", "idle", "none")]])
    original = slurm.node_states

    def node_states(partitions: Sequence[str] = ()) -> list[NodeState]:
        original(partitions)
        return next(states, slurm.nodes)

    slurm.node_states = node_states  # type: ignore[method-assign]
    slurm.nodes = [NodeState("cc-n1", "idle", "none"), NodeState("cc-n2", "idle", "none")]
    record = JobRecord("r", slurm_id="9")
    runner._track(runner.plan.jobs[0], record)
    assert record.state == "COMPLETED"
    assert [line.split(" is pending")[0] for line in lines if "pending" in line] == ["r: Slurm job 9"]


def test_a_job_asking_for_a_drained_node_by_name_cannot_start(tmp_path: Path) -> None:
    """--nodelist: enough nodes in the partition, but the one the job names is drained."""
    nodes = [NodeState("cc-n1", "idle", "none"), NodeState("cc-n2", "drained", "bad DIMM"),
             NodeState("cc-n3", "idle", "none"), NodeState("cc-n4", "idle", "none")]
    slurm = _Pending(nodes, polls=10**6, ReqNodeList="cc-n1,cc-n2")
    runner, _ = _runner(tmp_path, slurm)
    with pytest.raises(RunnerError, match=r"and the job asks for node\(s\) cc-n2 by name, which cannot run it: "
                                          r"cc-n2 drained \(bad DIMM\)\. It was cancelled"):
        runner._track(runner.plan.jobs[0], JobRecord("r", slurm_id="10"))


def test_excluded_nodes_do_not_count_and_a_long_list_is_cut(tmp_path: Path) -> None:
    nodes = [NodeState(f"n{i:02d}", "down", "none") for i in range(12)] + [
        NodeState("n12", "idle", "none"), NodeState("n13", "idle", "none")]
    slurm = _Pending(nodes, polls=10**6, ExcNodeList="n13", NumNodes="2")
    runner, _ = _runner(tmp_path, slurm)
    with pytest.raises(RunnerError, match=r"it needs 2 node\(s\) while partition cert has 1 that can run it: "
                                          r"n00 down, n01 down, .*n07 down and 4 more\. It was"):
        runner._track(runner.plan.jobs[0], JobRecord("r", slurm_id="11"))


def test_a_failed_run_cancels_its_job_and_returns_the_injected_nodes_to_service_once(tmp_path: Path) -> None:
    slurm = _Pending(_DRAINED, polls=10**6)
    runner, lines = _runner(tmp_path, slurm)
    record = JobRecord("r", slurm_id="12", state="submitted", downed=["cc-n3"])
    runner.save(record)
    with pytest.raises(RunnerError, match="It was cancelled"):
        runner.run_job(runner.plan.jobs[0])
    assert slurm.cancelled == ["12"] and slurm.resumed == ["cc-n3"]
    assert lines[-2:] == ["r: stopped on an error; cancelled Slurm job 12",
                          "r: node cc-n3 returned to service after the job (fault injection cleanup)"]
    assert runner.load()["r"].downed == []  # a re-run of the plan does not resume it again


def test_the_nodes_of_a_long_pending_job_are_looked_at_every_15_s_at_most(tmp_path: Path) -> None:
    """A job waiting its turn on a busy cluster may pend for hours: sinfo is not asked at every poll."""
    busy = [NodeState("cc-n1", "allocated", "none"), NodeState("cc-n2", "allocated", "none")]
    slurm = _Pending(busy, polls=300)
    runner, _ = _runner(tmp_path, slurm, wait_s=600.0)
    runner._track(runner.plan.jobs[0], JobRecord("r", slurm_id="13"))
    assert slurm.polls == 0 and len(slurm.asked) == 1  # 300 polls of 1 ms: one look


def test_a_clean_up_that_fails_leaves_the_first_error_to_report(tmp_path: Path) -> None:
    """Slurm refusing the resume (the node is gone) is logged; the error the user sees is why the run stopped."""
    slurm = _Pending(_DRAINED, polls=10**6)

    def refuse(node: str) -> None:
        raise RunnerError(f"scontrol update nodename={node}: expected exit 0, got 1 (Invalid node name specified)")

    slurm.resume = refuse  # type: ignore[method-assign]
    runner, lines = _runner(tmp_path, slurm)
    runner.save(JobRecord("r", slurm_id="14", state="submitted", downed=["cc-n3"]))
    with pytest.raises(RunnerError, match=r"^r: expected Slurm job 14 to start, got it pending for"):
        runner.run_job(runner.plan.jobs[0])
    assert slurm.cancelled == ["14"]
    assert lines[-1] == ("r: could not return the nodes the run took out to service: scontrol update "
                         "nodename=cc-n3: expected exit 0, got 1 (Invalid node name specified)")
