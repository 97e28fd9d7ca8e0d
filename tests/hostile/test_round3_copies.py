"""Hostile corpus, third round (issue 55 item 4): a copied repeat. A repeat whose log is another repeat's with the
run name changed (steps, losses and step times identical) counted as a second measurement: the distinctness check
compared file hashes, and one changed byte defeated it. Two runs whose measured windows are identical are now one
measurement: an ERROR naming both files, and the certification is not CERTIFIED."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clustercert.phases.efficiency import judge_efficiency
from clustercert.verdicts import Outcome, Severity, Status, decide_outcome
from tests.unit.phase_bundles import by_id, gb200, parse_all, write_bundle
from tests.unit.test_efficiency_judgements import _log, _run

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
