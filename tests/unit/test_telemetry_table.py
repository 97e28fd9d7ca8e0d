"""The telemetry table Great Expectations validates is built batch by batch from the columns: the same frames,
row for row, as one table of every sample cut into batches (the per-sample construction it replaced)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import clustercert.validation.tables as tables
from clustercert.evidence.bundle import RunKind
from clustercert.evidence.parse import ParsedFile
from clustercert.parsers.dcgm import parse_dcgm
from tests.conftest import ROOT

SAMPLE = ROOT / "evidence" / "gb200-seed" / "resilience" / "dcgm.prom"


def _per_sample_frames(path: Path, rows: int) -> list[pd.DataFrame]:
    telemetry = parse_dcgm(path, "d.prom")
    samples = [telemetry.sample(i) for i in range(len(telemetry))]
    table = pa.table({
        "metric": pa.array([s.metric for s in samples], pa.string()),
        "gpu": pa.array([s.gpu for s in samples], pa.string()),
        "value": pa.array([s.value for s in samples], pa.float64()),
        "time_s": pa.array([s.time_ms / 1000.0 for s in samples], pa.float64()),
        "_line": pa.array([s.line for s in samples], pa.int64()),
    })
    return [batch.to_pandas() for batch in table.to_batches(max_chunksize=rows)]


@pytest.mark.parametrize(("rows", "spill"), [(1000, False), (7_001, False), (tables.BATCH_ROWS, False),
                                             (7_001, True), (tables.BATCH_ROWS, True)])
def test_telemetry_batches_are_the_samples(tmp_path: Path, rows: int, spill: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """In memory or read back from scratch files (CLUSTERCERT_TELEMETRY_MEMORY_MIB=0), the same frames."""
    monkeypatch.setenv("CLUSTERCERT_TELEMETRY_MEMORY_MIB", "0" if spill else "1024")
    path = tmp_path / "d.prom"
    # the shipped sample, with a NaN, an N/A-like +Inf and a line without Hostname
    path.write_text(SAMPLE.read_text() + 'DCGM_FI_DEV_GPU_UTIL{gpu="3"} NaN 1793610000000\n'
                    'DCGM_FI_DEV_GPU_UTIL{gpu="4",Hostname="x"} +Inf 1793610001000\n')
    monkeypatch.setattr(tables, "BATCH_ROWS", rows)
    telemetry = parse_dcgm(path, "d.prom")
    assert telemetry.spilled is spill
    parsed = ParsedFile("tel", RunKind.TELEMETRY, "d.prom", "d.prom", telemetry)
    table = tables.telemetry_table(parsed, (1.0, 2.0))
    got = list(table.batches())
    want = _per_sample_frames(path, rows)
    assert table.rows == sum(len(f) for f in want) == 22_530
    assert len(got) == len(want) == -(-table.rows // rows)
    for a, b in zip(got, want, strict=True):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert int(got[-1]["value"].isna().sum()) == 2  # NaN and Inf are nulls, as None was
    assert table.parameters == {"span_start_s": 1.0, "span_end_s": 2.0}
