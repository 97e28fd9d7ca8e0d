"""The printed times of a log and the resolution they are printed at."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.parsers.log_clock import parse_log_clock


def test_whole_second_stamps_have_a_one_second_resolution(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("[2025-03-07 22:39:36] step 1\nno time here\n[2025-03-07 22:39:37] step 2\n")
    clock = parse_log_clock(log, "a.log")
    assert [line for line, _ in clock.stamps] == [1, 3]
    assert clock.stamps[1][1] - clock.stamps[0][1] == pytest.approx(1.0)
    assert clock.resolution_s == 1.0


def test_the_coarsest_stamp_sets_the_resolution(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    log.write_text("[2025-03-07 22:39:36.125] a\n[2025-03-07 22:39:36.5] b\n")
    clock = parse_log_clock(log, "b.log")
    assert clock.stamps[1][1] - clock.stamps[0][1] == pytest.approx(0.375)
    assert clock.resolution_s == pytest.approx(0.1)
