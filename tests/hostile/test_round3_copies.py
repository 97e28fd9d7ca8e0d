"""Hostile corpus, third round (issue 55 item 4): a copied repeat. A repeat whose log is another repeat's with the
run name changed (steps, losses and step times identical) counted as a second measurement: the distinctness check
compared file hashes, and one changed byte defeated it. Two runs whose measured windows are identical are now one
measurement: an ERROR naming both files, and the certification is not CERTIFIED. The same holds wherever the bundle
claims several measurements of one kind: efficiency repeats, scaling runs (a log copied under another GPU count
shows perfect weak scaling) and nccl-tests runs (a healthy pair's output copied as another pair's hides its link)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from clustercert.phases.efficiency import judge_efficiency
from clustercert.phases.scaling import judge_scaling
from clustercert.verdicts import Outcome, Severity, Status, decide_outcome
from tests.unit.phase_bundles import by_id, gb200, nccl_output, parse_all, write_bundle
from tests.unit.test_efficiency_judgements import _log, _run
from tests.unit.test_phase_scaling import GIB, _collectives, _training

Count = Callable[[int], None]


def test_a_copied_repeat_is_one_measurement_naming_both_files(tmp_path: Path, hostile: Count) -> None:
    own = _log(7.6)
    copied = "experiment name: l70-r2\n" + own  # its own name, then every step of r1's
    other = _log(7.62)  # a repeat of its own: other step times
    files = {"r1.log": own, "r2.log": copied, "r3.log": other}
    bundle = write_bundle(tmp_path / "b", [_run(1), _run(2), _run(3)], files)
    result = judge_efficiency(bundle.spec, gb200(), parse_all(bundle))  # type: ignore[arg-type]
    checks = by_id(result.checks)
    hostile(1)
    copy = checks["efficiency.l70-r2_valid"]
    assert copy.status is Status.ERROR and copy.severity is Severity.REQUIRED
    first, second = bundle.root / "r1.log", bundle.root / "r2.log"
    assert copy.message.startswith(f"{second} and {first}: the measured windows are identical (iteration, step "
                                   "time and loss of every step): one measurement, listed as runs l70-r1 and l70-r2")
    assert {span.file for span in copy.evidence} == {str(first), str(second)}
    assert checks["efficiency.l70-r1_valid"].status is Status.PASS
    assert checks["efficiency.l70-r3_valid"].status is Status.PASS
    assert [r.run_id for r in result.workloads[0].repeats] == ["l70-r1", "l70-r3"]  # the copy is not a repeat
    assert decide_outcome(result.checks) is not Outcome.CERTIFIED


def test_repeats_that_differ_in_one_step_are_two_measurements(tmp_path: Path) -> None:
    own = _log(7.6)
    lines = own.splitlines(keepends=True)
    lines[40] = lines[40].replace("train_step_timing in s: 7.6", "train_step_timing in s: 7.64")
    bundle = write_bundle(tmp_path / "b", [_run(1), _run(2)], {"r1.log": own, "r2.log": "".join(lines)})
    result = judge_efficiency(bundle.spec, gb200(), parse_all(bundle))  # type: ignore[arg-type]
    checks = by_id(result.checks)
    assert checks["efficiency.l70-r2_valid"].status is Status.PASS
    assert len(result.workloads[0].repeats) == 2


def test_a_scaling_run_copied_under_another_gpu_count_is_one_measurement(tmp_path: Path, hostile: Count) -> None:
    """A 128-GPU log copied as the 256-GPU run shows the same step time at twice the GPUs: perfect weak scaling.
    The weak-scaling check is an ERROR naming both files, required, whatever the copy's efficiency."""
    runs, files = [], {}
    for gpus, step_s in ((128, 7.0), (256, 7.0), (512, 7.3)):
        run, rel, text = _training(gpus, step_s, phase="efficiency" if gpus == 512 else "scaling")
        runs.append(run)
        files[rel] = text if gpus != 256 else "experiment name: l70-256\n" + files["training/llama3-70b/128.log"]
    bundle = write_bundle(tmp_path / "b", runs, files)
    checks = by_id(judge_scaling(bundle, gb200(), parse_all(bundle)).checks)
    hostile(1)
    weak = checks["scaling.llama3-70b-fp8_weak_scaling_efficiency"]
    first, second = bundle.root / "training/llama3-70b/128.log", bundle.root / "training/llama3-70b/256.log"
    assert weak.status is Status.ERROR and weak.severity is Severity.REQUIRED
    assert weak.message == (f"{second} and {first}: the measured windows are identical (iteration, step time and "
                            "loss of every step): one measurement, listed as runs llama3-70b-fp8-128 and "
                            "llama3-70b-fp8-256. Keep the run's own log and re-run llama3-70b-fp8-256")
    assert {str(first), str(second)} <= {span.file for span in weak.evidence}
    assert decide_outcome(list(checks.values())) is not Outcome.CERTIFIED


def test_scaling_runs_that_measured_apart_are_judged_as_before(tmp_path: Path) -> None:
    """The same step times at 128 and 256 GPUs but one step's loss apart: two measurements, weak scaling judged
    (hand-computed: the same step time at twice the GPUs and GBS is efficiency 1.0)."""
    runs, files = [], {}
    for gpus in (128, 256, 512):
        run, rel, text = _training(gpus, 7.0, phase="efficiency" if gpus == 512 else "scaling")
        runs.append(run)
        # iteration 40 lies in the measured window (36-45): its loss 11.01, 11.02 and 11.04 by GPU count
        files[rel] = text.replace("global_step: 40 | reduced_train_loss: 11.03",
                                  f"global_step: 40 | reduced_train_loss: 11.0{gpus // 128}")
    bundle = write_bundle(tmp_path / "b", runs, files)
    weak = by_id(judge_scaling(bundle, gb200(), parse_all(bundle)).checks)[
        "scaling.llama3-70b-fp8_weak_scaling_efficiency"]
    assert weak.status is Status.PASS and weak.measured == pytest.approx(1.0)


def test_a_collective_run_copied_under_another_run_is_one_measurement(tmp_path: Path, hostile: Count) -> None:
    """A healthy pair's nccl-tests output copied as another pair's (its rank lines' hosts edited) hides that
    pair's link: the copy's run is an ERROR naming both files, and its numbers are not judged."""
    healthy = nccl_output("all_reduce", 2, {GIB: 95.0, 2 * GIB: 96.0}, hosts=["n1", "n3"])
    copied = healthy.replace("n1", "n2").replace("n3", "n4")
    pairs = {"pair-0": (["n1", "n3"], healthy), "pair-1": (["n2", "n4"], copied),
             "pair-2": (["n1", "n5"], nccl_output("all_reduce", 2, {GIB: 94.0, 2 * GIB: 95.5}, hosts=["n1", "n5"]))}
    out = _collectives(tmp_path, {run_id: ("pair", nodes, text) for run_id, (nodes, text) in pairs.items()})
    hostile(1)
    copy = out["checks"]["scaling.pair-1_valid"]
    first, second = out["root"] / "nccl/pair-0.log", out["root"] / "nccl/pair-1.log"
    assert copy.status is Status.ERROR and copy.severity is Severity.REQUIRED
    assert copy.message == (f"{second} and {first}: the measured tables are identical (message size, times and bus "
                            "bandwidths of every row): one measurement, listed as runs pair-0 and pair-1. Keep the "
                            "run's own output and re-run pair-1")
    assert {span.file for span in copy.evidence} == {str(first), str(second)}
    assert [row["run"] for row in out["section"]["pairs"]] == ["pair-0", "pair-2"]  # the copy is not a pair measured
    assert "scaling.pair-0_valid" not in out["checks"] and "scaling.pair-2_valid" not in out["checks"]


def test_collective_runs_one_number_apart_are_two_measurements(tmp_path: Path) -> None:
    healthy = nccl_output("all_reduce", 2, {GIB: 95.0, 2 * GIB: 96.0}, hosts=["n1", "n3"])
    other = nccl_output("all_reduce", 2, {GIB: 95.0, 2 * GIB: 96.1}, hosts=["n2", "n4"])
    out = _collectives(tmp_path, {"pair-0": ("pair", ["n1", "n3"], healthy), "pair-1": ("pair", ["n2", "n4"], other)})
    assert not [c for c in out["checks"] if c.endswith("_valid")]
    assert [row["run"] for row in out["section"]["pairs"]] == ["pair-0", "pair-1"]
