"""Hostile corpus, third round (issue 55 item 2): evidence dates. A stamp outside datetime's range once in UTC
crashed certify after the whole run; a stamp later than certify's own clock, or far from its file's other stamps,
stretched the validity (one appended 2099 line made the seed sample CERTIFIED until 2100). Each is now refused
at its file and line before any flow starts."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import load_bundle
from clustercert.evidence.window import check_stamps
from tests.conftest import ROOT, run_cli
from tests.hostile.helpers import NEMO_LINE, write_bundle
from tests.hostile.test_round3_files import BOUND_S, one_line

Count = Callable[[int], None]
NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
STAMPED = "[NeMo I 2026-11-20 08:00:{s:02d} nemo_logging:393] step {s}\n"


def _log(extra: str = "", *, pad: int = 0) -> str:
    """A NeMo log whose lines 1-10 are stamped 2026-11-20, `pad` unstamped step lines after them, then `extra`."""
    stamped = "".join(STAMPED.format(s=s) for s in range(10))
    steps = "".join(NEMO_LINE.format(i=i % 19 + 1) for i in range(pad))
    return stamped + steps + extra


def _refusal(tmp_path: Path, text: str) -> EvidenceError:
    root = tmp_path / "b"
    root.mkdir(exist_ok=True)
    (root / "r1.log").write_text(text)
    write_bundle(root)
    with pytest.raises(EvidenceError) as caught:
        check_stamps(load_bundle(root), NOW)
    return caught.value


@pytest.mark.parametrize(("stamp", "problem"), [
    ("9999-12-31 23:59:59", "no later than certify's clock (2026-12-01T09:00:00Z), got 9999-12-31T23:59:59+00:00"),
    ("0001-01-01T00:00:00+14:00", "between years 1 and 9999 once in UTC, got 0001-01-01T00:00:00+14:00"),
    ("9999-12-31T23:00:00-02:00", "between years 1 and 9999 once in UTC, got 9999-12-31T23:00:00-02:00"),
    ("2099-01-01 00:00:00", "no later than certify's clock"),
    ("2026-12-03 00:00:00", "no later than certify's clock"),  # two days ahead: past the day's allowance
    ("2020-01-01 00:00:00", "within 92 days of its file's other stamps (their median 2026-11-20T08:00:04Z), got "
                            "2020-01-01T00:00:00+00:00"),
])
def test_a_stamp_out_of_range_ahead_or_apart_is_refused_at_its_line(tmp_path: Path, stamp: str, problem: str,
                                                                    hostile: Count) -> None:
    hostile(1)
    error = _refusal(tmp_path, _log(f"# appended {stamp}\n"))
    assert (error.file, error.line) == (str(tmp_path / "b" / "r1.log"), 11)
    assert error.message.startswith(f"expected a timestamp {problem}"), error.message


def test_the_line_is_counted_in_a_large_files_tail(tmp_path: Path, hostile: Count) -> None:
    """A file larger than its two read edges: the stamp in its tail is named by its line in the whole file."""
    text = _log("# 2099-01-01 00:00:00\n" + NEMO_LINE.format(i=1), pad=3000)
    assert len(text.encode()) > 3 * 64 * 1024
    hostile(1)
    error = _refusal(tmp_path, text)
    assert error.line == 3011 == text.splitlines().index("# 2099-01-01 00:00:00") + 1


@pytest.mark.parametrize("stamp", ["2026-12-01 20:00:00", "2026-09-01 00:00:00", ""])
def test_honest_stamps_pass(tmp_path: Path, stamp: str) -> None:
    """A stamp within a day of the clock (a time zone declared wrong) or a season of its neighbours is kept."""
    root = write_bundle(tmp_path / "b")
    (root / "r1.log").write_text(_log(f"# {stamp}\n" if stamp else ""))
    check_stamps(load_bundle(root), NOW)


def test_an_appended_2099_line_no_longer_certifies_the_seed_until_2100(tmp_path: Path, hostile: Count) -> None:
    """The attack as the audited party makes it: a comment line with a far date appended to one log, the bundle
    sealed again. certify refuses it at that line before any flow starts (exit 3, no run folder)."""
    bundle = tmp_path / "seed"
    shutil.copytree(ROOT / "evidence" / "gb200-seed", bundle)
    log = next(p for p in sorted((bundle / "training").rglob("*.log")))
    lines = log.read_text().count("\n")
    with log.open("a") as handle:
        handle.write("# checkpoint kept until 2099-12-31 00:00:00\n")
    assert run_cli("evidence", "seal", str(bundle), timeout=BOUND_S).returncode == 0
    reports = tmp_path / "reports"
    hostile(1)
    one_line(run_cli("certify", str(bundle), "--reports-dir", str(reports), timeout=120), 3,
             f"{log.relative_to(bundle)} line {lines + 1}: expected a timestamp no later than certify's clock")
    assert not reports.exists() or list(reports.iterdir()) == []
