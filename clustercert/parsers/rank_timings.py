"""Per-rank step timings (Parquet or CSV), read column-wise with pyarrow and checked without pandas.

Schema (one row per rank per step; column names exact, extra columns kept):

| column | type | unit | meaning |
|---|---|---|---|
| `rank` | integer >= 0 | | global rank |
| `node` | string | | host name of the rank's node |
| `gpu` | integer >= 0 | | GPU index on that node |
| `step` | integer >= 0 | | training step as the job counts it |
| `compute_s` | float >= 0 | seconds | compute time of the step on this rank (NCCL kernels excluded) |
| `comm_s` | float >= 0 | seconds | communication (collective) time of the step on this rank |
| `timestamp` | timestamp with time zone, or ISO-8601 text with offset | | when the step ended on this rank |

Row provenance is the 1-based data row (CSV: the header is row 0; file line = row + 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import check_parquet_bounds
from clustercert.parsers.common import DEFAULT_LIMIT, check_size

__all__ = ["COLUMNS", "RankTimings", "parse_rank_timings"]

FORMAT = "rank-timings"
_HINT = "Write the per-rank timings with the schema documented in clustercert/parsers/rank_timings.py."
COLUMNS: dict[str, str] = {
    "rank": "int",
    "node": "str",
    "gpu": "int",
    "step": "int",
    "compute_s": "float",
    "comm_s": "float",
    "timestamp": "timestamp",
}


@dataclass(frozen=True)
class RankTimings:
    """The whole table (pyarrow, never pandas) with its summary; rows are 1-based in provenance."""

    file: str
    table: pa.Table
    ranks: int
    nodes: int
    first_step: int
    last_step: int

    def to_json(self) -> dict[str, object]:
        head = self.table.slice(0, 5).to_pylist()
        for index, row in enumerate(head, start=1):
            row["timestamp"] = row["timestamp"].isoformat() if row.get("timestamp") is not None else None
            row["row"] = index
        return {
            "format": FORMAT,
            "file": self.file,
            "rows": self.table.num_rows,
            "columns": self.table.column_names,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "head": head,
        }


def parse_rank_timings(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> RankTimings:
    """The per-rank timings table, checked column-wise against the schema in this module's docstring."""
    check_size(path, display, limit)
    table = _read(path, display)
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise EvidenceError(
            display,
            f"expected columns {', '.join(COLUMNS)}, got {', '.join(table.column_names)[:120]}"
            f" (missing {', '.join(missing)}). {_HINT}",
            field=missing[0],
        )
    if table.num_rows == 0:
        raise EvidenceError(display, f"expected at least one row, got none. {_HINT}")
    columns: dict[str, pa.ChunkedArray] = {}
    for name, kind in COLUMNS.items():
        columns[name] = _cast(table.column(name), name, kind, display)
    for name in ("rank", "gpu", "step", "compute_s", "comm_s"):
        values = columns[name]
        nulls = values.null_count
        if nulls:
            row = _first_row(pc.is_null(values))
            raise EvidenceError(
                display, f"expected a value in every row, got {nulls} empty. {_HINT}", line=row, field=name
            )
        bad = pc.less(values, 0)
        if _any(bad):
            row = _first_row(bad)
            raise EvidenceError(
                display, f"expected values >= 0, got {values[row - 1].as_py()}. {_HINT}", line=row, field=name
            )
    finite = pc.and_(pc.is_finite(columns["compute_s"]), pc.is_finite(columns["comm_s"]))
    if not pc.all(finite).as_py():
        row = _first_row(pc.invert(finite))
        raise EvidenceError(
            display, f"expected finite times in seconds, got nan or inf. {_HINT}", line=row, field="compute_s"
        )
    out = table
    for name, values in columns.items():
        out = out.set_column(out.column_names.index(name), name, values)
    bounds = pc.min_max(columns["step"]).as_py()
    return RankTimings(
        file=display,
        table=out,
        ranks=pc.count_distinct(columns["rank"]).as_py(),
        nodes=pc.count_distinct(columns["node"]).as_py(),
        first_step=int(bounds["min"]),
        last_step=int(bounds["max"]),
    )


def _any(mask: pa.ChunkedArray) -> bool:
    """True when any value of a boolean column is true."""
    return bool(pc.any(mask).as_py())


def _first_row(mask: pa.ChunkedArray) -> int:
    index = pc.index(mask, True).as_py()
    return int(index) + 1


def _read(path: Path, display: str) -> pa.Table:
    with path.open("rb") as handle:
        magic = handle.read(4)
    try:
        if magic == b"PAR1":
            check_parquet_bounds(pq.ParquetFile(path).metadata, display)
            table = pq.read_table(path)
        else:
            table = _read_csv(path)
        table.column_names  # noqa: B018  (decodes the names: a bad header fails here, not later)
        return table
    except (
        pa.ArrowInvalid,
        pa.ArrowNotImplementedError,
        pa.ArrowTypeError,
        OSError,
        UnicodeDecodeError,
    ) as exc:
        message = " ".join(str(exc).split())[:160]
        raise EvidenceError(display, f"expected a Parquet or CSV table, got: {message}. {_HINT}") from None


def _read_csv(path: Path) -> pa.Table:
    options = pacsv.ConvertOptions(
        strings_can_be_null=True,
        column_types={"node": pa.string(), "timestamp": pa.timestamp("us", "UTC")},
    )
    return pacsv.read_csv(path, convert_options=options)


def _cast(values: pa.ChunkedArray, name: str, kind: str, display: str) -> pa.ChunkedArray:
    target = {
        "int": pa.int64(),
        "str": pa.string(),
        "float": pa.float64(),
        "timestamp": pa.timestamp("us", "UTC"),
    }[kind]
    try:
        if kind == "timestamp" and pa.types.is_timestamp(values.type) and values.type.tz is None:
            raise EvidenceError(
                display, f"expected timestamps with a time zone, got naive ones. {_HINT}", field=name
            )
        return values.cast(target) if values.type != target else values
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        message = " ".join(str(exc).split())[:120]
        raise EvidenceError(
            display, f"expected {kind} values, got {values.type} ({message}). {_HINT}", field=name
        ) from None
