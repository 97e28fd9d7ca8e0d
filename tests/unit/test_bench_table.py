"""bench/table.py: the latest figures table of bench/README.md, written from the result files a benchmark records."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT

_GAUGE = "bench/gauge.py: a fixed single-core Python workload"


@pytest.fixture(scope="module")
def table() -> Iterator[ModuleType]:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import table

        yield table
    finally:
        sys.path.remove(str(ROOT / "bench"))


def _write(folder: Path, name: str, record: dict[str, Any]) -> None:
    (folder / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _certify(seconds: float, ratio: float) -> dict[str, Any]:
    return {"schema_version": 1, "benchmark": "certify", "measured_at": "2026-12-06T12:11:25+01:00",
            "processor": "Test CPU", "processor_count": 2,
            "gauge_s": {"before": {"best_s": 0.2051, "what": _GAUGE}, "after": {"best_s": 0.203, "what": _GAUGE}},
            "certify_runs": [{"seconds": seconds, "exit_code": 0}] * 3, "median_certify_s": seconds,
            "median_import_stack_s": 5.094, "ratio_to_import": ratio,
            "targets": {"certify_s": 15.0, "ratio_to_import": 3.0}, "meets_targets": seconds <= 15.0}


def _parsers() -> dict[str, Any]:
    return {"schema_version": 2, "benchmark": "parsers", "measured_at": "2026-12-06T08:41:38+00:00",
            "machine": "x86_64", "processor": "Test CPU", "processor_count": 2, "file_mb": 50.0, "repeat": 3,
            "results": [{"format": "nemo", "mb_per_s": 104.63}, {"format": "sacct", "mb_per_s": 49.96},
                        {"format": "rank-timings", "mb_per_s": 440.3}]}


def _loaded(at_once: int, seconds: list[float]) -> dict[str, Any]:
    return {"schema_version": 1, "benchmark": "loaded", "measured_at": "2026-12-05T17:18:06+00:00",
            "processor": "Test CPU", "processor_count": 2, "busy_processes": 2, "at_once": at_once,
            "runs": [{"seconds": s, "exit_code": 0} for s in seconds], "succeeded": len(seconds),
            "of": len(seconds), "met": True}


def test_the_rows_come_from_every_record_in_name_order_with_targets_judged(table: ModuleType, tmp_path: Path) -> None:
    """One row per figure; a target is judged on the recorded figure (sacct's 49.96 MB/s misses 50 by a hair), the
    per-rank timings have no bar, the time is given in UTC whatever offset the record used."""
    _write(tmp_path, "certify", _certify(10.32, 2.03))
    _write(tmp_path, "parsers", _parsers())
    _write(tmp_path, "loaded_at_once", _loaded(3, [36.86, 35.51, 41.6, 39.3]))
    machine = "Test CPU, 2 cores, gauge 0.205 -> 0.203 s"
    assert [tuple(vars(row).values()) for row in table.rows(tmp_path)] == [
        ("certify", "sample certification, median of 3 (s)", "10.32", "<= 15", "yes", "2026-12-06 11:11 UTC",
         machine),
        ("certify", "bare import of the same stack, median (s)", "5.09", "", "", "2026-12-06 11:11 UTC", machine),
        ("certify", "certification over bare import", "2.03x", "<= 3x", "yes", "2026-12-06 11:11 UTC", machine),
        ("loaded_at_once", "sample certifications that succeeded, 3 at once beside 2 busy processes", "4 of 4", "all",
         "yes", "2026-12-05 17:18 UTC", "Test CPU, 2 cores"),
        ("loaded_at_once", "seconds each: median (fastest-slowest)", "38.1 (35.5-41.6)", "", "",
         "2026-12-05 17:18 UTC", "Test CPU, 2 cores"),
        ("parsers", "nemo: 50 MB parsed, best of 3 (MB/s)", "104.6", ">= 50", "yes", "2026-12-06 08:41 UTC",
         "Test CPU, 2 cores"),
        ("parsers", "sacct: 50 MB parsed, best of 3 (MB/s)", "50.0", ">= 50", "**no**", "2026-12-06 08:41 UTC",
         "Test CPU, 2 cores"),
        ("parsers", "rank-timings: 50 MB parsed, best of 3 (MB/s)", "440.3", "", "", "2026-12-06 08:41 UTC",
         "Test CPU, 2 cores"),
    ]


def test_a_missed_target_shows_as_no(table: ModuleType, tmp_path: Path) -> None:
    _write(tmp_path, "certify", _certify(16.5, 3.2))
    met = [(row.figure, row.met) for row in table.rows(tmp_path) if row.target]
    assert met == [("sample certification, median of 3 (s)", "**no**"), ("certification over bare import", "**no**")]


def test_the_table_replaces_only_what_lies_between_its_markers(table: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    _write(results, "certify", _certify(10.32, 2.03))
    readme = tmp_path / "README.md"
    readme.write_text(f"# Benchmarks\n\nbefore\n\n{table.BEGIN}\n| stale |\n{table.END}\n\nafter\n", encoding="utf-8")
    args = ["--results", str(results), "--readme", str(readme)]
    assert table.main([*args, "--check"]) == 1
    assert table.main(args) == 0
    lines = readme.read_text(encoding="utf-8").splitlines()
    assert lines[:5] == ["# Benchmarks", "", "before", "", table.BEGIN]
    assert lines[5:8] == ["| benchmark | figure | latest | target | met | measured | machine |",
                          "|---|---|---|---|---|---|---|",
                          "| certify | sample certification, median of 3 (s) | 10.32 | <= 15 | yes "
                          "| 2026-12-06 11:11 UTC | Test CPU, 2 cores, gauge 0.205 -> 0.203 s |"]
    assert lines[10:] == [table.END, "", "after"]
    assert table.main([*args, "--check"]) == 0


def test_a_result_file_of_an_unknown_benchmark_is_refused_by_name(table: ModuleType, tmp_path: Path) -> None:
    _write(tmp_path, "mystery", {"schema_version": 1})
    with pytest.raises(table.TableError, match=r"mystery\.json: expected one of the known benchmarks .* got "
                                               r"'mystery'\. Add its summary to bench/table.py _SUMMARIES\."):
        table.rows(tmp_path)


def test_a_record_without_the_fields_its_benchmark_writes_is_refused(table: ModuleType, tmp_path: Path) -> None:
    _write(tmp_path, "certify", {"schema_version": 1, "median_certify_s": 10.0})
    with pytest.raises(table.TableError, match=r"certify\.json: expected the fields bench/certify writes"):
        table.rows(tmp_path)


def test_bench_readme_holds_the_table_the_committed_records_give(table: ModuleType) -> None:
    """A benchmark re-run and recorded without its table rewritten fails here: run bench/table.py."""
    assert table.main(["--check"]) == 0
