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

import os
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import check_parquet_bounds
from clustercert.parsers.common import DEFAULT_LIMIT, check_size, refuse_binary

__all__ = ["COLUMNS", "RankTimings", "parse_rank_timings"]

FORMAT = "rank-timings"
_T = TypeVar("_T")
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


@dataclass(frozen=True, eq=False)
class RankTimings:
    """The per-rank timings table (pyarrow, never pandas) with its summary; rows are 1-based in provenance.

    A Parquet file's columns are read from the file when asked (`column`, `batches`), one column or a batch of
    rows at a time, cast as parsed; the table is never held whole: a large cluster's day is tens of millions of
    rows, gigabytes once cast. They are read from the bytes that were parsed: the parser keeps open what it was
    given (in a certification, the private in-memory copy of the bytes read and hashed:
    clustercert/evidence/parse.py), so a file changed on disk meanwhile changes nothing; what cannot be read again
    is refused. Pickled (a persisted result, a Dask worker's), it travels as the whole table. A CSV file's table is
    held (Arrow reads CSV whole)."""

    file: str
    rows: int
    column_names: tuple[str, ...]
    ranks: int
    nodes: int
    first_step: int
    last_step: int
    head: tuple[dict[str, Any], ...]  # the first rows, cast, as Python values
    source: _Source | None = None  # the Parquet file parsed, kept open, read again column by column
    held: pa.Table | None = None  # or the table itself (CSV)

    def __reduce__(self) -> tuple[type[RankTimings], tuple[Any, ...]]:
        return RankTimings, (self.file, self.rows, self.column_names, self.ranks, self.nodes, self.first_step,
                             self.last_step, self.head, None, self.table)

    @classmethod
    def from_table(cls, file: str, table: pa.Table, ranks: int, nodes: int, first_step: int,
                   last_step: int) -> RankTimings:
        """A table held in memory, with its summary as given (tests and small inputs)."""
        return cls(file, table.num_rows, tuple(table.column_names), ranks, nodes, first_step, last_step,
                   tuple(table.slice(0, _HEAD_ROWS).to_pylist()), held=table)

    @property
    def table(self) -> pa.Table:
        """The whole table, cast (small files and tests: a large one is read by column or by batch)."""
        if self.held is not None:
            return self.held
        table = self._reread(lambda: pq.read_table(self._parquet()))
        for name, kind in COLUMNS.items():
            table = table.set_column(table.column_names.index(name), name,
                                     _cast(table.column(name), name, kind, self.file))
        return table

    def column(self, name: str) -> pa.ChunkedArray:
        """One column of every row, cast as parsed."""
        if self.held is not None:
            return self.held.column(name)
        values = self._reread(lambda: pq.read_table(self._parquet(), columns=[name]).column(name))
        return _cast(values, name, COLUMNS[name], self.file) if name in COLUMNS else values

    def batches(self, names: list[str], rows: int) -> Iterator[pa.RecordBatch]:
        """The named columns, cast as parsed, `rows` rows at a time (the last batch may be shorter), in order."""
        if self.held is not None:
            yield from self.held.select(names).to_batches(max_chunksize=rows)
            return
        reader = self._reread(lambda: pq.ParquetFile(self._parquet()).iter_batches(batch_size=rows, columns=names))
        while True:
            batch = self._reread(lambda: next(reader, None))
            if batch is None:
                return
            yield pa.RecordBatch.from_arrays(
                [_cast(pa.chunked_array([batch.column(name)]), name, COLUMNS[name], self.file).combine_chunks()
                 if name in COLUMNS else batch.column(name) for name in names], names=names)

    def array(self, name: str, dtype: Any) -> Any:
        """One column as a numpy array of `dtype` (a timestamp as int64 microseconds), filled a batch at a time:
        no more memory than the array itself and one batch."""
        out = np.empty(self.rows, dtype=dtype)
        at = 0
        for batch in self.batches([name], _ARRAY_ROWS):
            values = batch.column(0)
            if pa.types.is_timestamp(values.type):
                values = pc.cast(pc.cast(values, pa.timestamp("us", "UTC")), pa.int64())
            out[at:at + len(values)] = values.to_numpy(zero_copy_only=False)
            at += len(values)
        assert at == self.rows, (at, self.rows)
        return out

    def _parquet(self) -> Path:
        assert self.source is not None
        return self.source.path

    def _reread(self, read: Callable[[], _T]) -> _T:
        try:
            return read()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError, KeyError) as exc:
            message = " ".join(str(exc).split())[:160]
            raise EvidenceError(self.file, f"expected the Parquet table read a moment ago, got: {message}. The "
                                "bytes parsed could not be read again") from None

    def to_json(self) -> dict[str, object]:
        head = [dict(row) for row in self.head]
        for index, row in enumerate(head, start=1):
            row["timestamp"] = row["timestamp"].isoformat() if row.get("timestamp") is not None else None
            row["row"] = index
        return {
            "format": FORMAT,
            "file": self.file,
            "rows": self.rows,
            "columns": list(self.column_names),
            "ranks": self.ranks,
            "nodes": self.nodes,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "head": head,
        }


class _Source:
    """A descriptor of the Parquet file as it was parsed (opened again from the path the parser was given), open
    while the RankTimings that reads it lives."""

    __slots__ = ("__weakref__", "fd")

    def __init__(self, path: Path, display: str) -> None:
        self.fd = _guarded(display, lambda: os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        weakref.finalize(self, os.close, self.fd)

    @property
    def path(self) -> Path:
        return Path(f"/proc/self/fd/{self.fd}") if os.path.isdir("/proc/self/fd") else Path(f"/dev/fd/{self.fd}")


_HEAD_ROWS = 5
_ARRAY_ROWS = 1 << 20  # rows per batch while a column is copied into an array


def parse_rank_timings(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> RankTimings:
    """The per-rank timings table, checked column-wise against the schema in this module's docstring.

    Parquet is read one column at a time (never the whole table at once); every column is cast before any
    value is checked, and the checks' first failure, in the order below, is the error: as one table read whole."""
    if check_size(path, display, limit) == 0:  # said as the text parsers say it (Arrow: "Empty CSV file")
        raise EvidenceError(display, f"expected a Parquet or CSV table, got an empty file. {_HINT}")
    source = _Source(path, display) if _is_parquet(path, display) else None  # what is read now, and later again
    parquet = _parquet_file(source.path, display) if source is not None else None
    table = None if parquet is not None else _read(path, display)
    names = tuple(parquet.schema_arrow.names if parquet is not None else table.column_names)  # type: ignore[union-attr]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise EvidenceError(
            display,
            f"expected columns {', '.join(COLUMNS)}, got {', '.join(names)[:120]}"
            f" (missing {', '.join(missing)}). {_HINT}",
            field=missing[0],
        )
    rows = int(parquet.metadata.num_rows) if parquet is not None else table.num_rows  # type: ignore[union-attr]
    if rows == 0:
        raise EvidenceError(display, f"expected at least one row, got none. {_HINT}")

    def read(name: str) -> pa.ChunkedArray:
        if table is not None:
            return table.column(name)
        assert source is not None
        return _guarded(display, lambda: pq.read_table(source.path, columns=[name]).column(name))

    cast, summary = _checked_columns(read, display, keep=table is not None)
    if table is not None:
        for name, values in cast.items():
            table = table.set_column(table.column_names.index(name), name, values)
        head = table.slice(0, _HEAD_ROWS)
    else:
        assert parquet is not None
        head = _parquet_head(parquet, display)
    bounds = summary["bounds"]
    return RankTimings(
        file=display,
        rows=rows,
        column_names=names,
        ranks=summary["ranks"],
        nodes=summary["nodes"],
        first_step=int(bounds["min"]),
        last_step=int(bounds["max"]),
        head=tuple(head.to_pylist()),
        source=source,
        held=table,
    )


def _checked_columns(read: Callable[[str], pa.ChunkedArray], display: str,
                     keep: bool) -> tuple[dict[str, pa.ChunkedArray], dict[str, Any]]:
    """Each column read, cast and checked, one at a time (kept cast where `keep`), and the table's summary: its
    ranks, nodes and step bounds. The checks' first failure, in the order below, is the error, as one table read
    whole would give it."""
    findings: list[EvidenceError] = []  # the value checks' failures, in the order they are reported
    first_bad: dict[str, int] = {}  # compute_s, comm_s: the first row with a non-finite value
    cast: dict[str, pa.ChunkedArray] = {}
    summary: dict[str, Any] = {}
    for name, kind in COLUMNS.items():
        values = _cast(read(name), name, kind, display)
        if name in ("rank", "gpu", "step", "compute_s", "comm_s"):
            nulls = values.null_count
            if nulls:
                findings.append(EvidenceError(display, f"expected a value in every row, got {nulls} empty. {_HINT}",
                                              line=_first_row(pc.is_null(values)), field=name))
            else:
                bad = pc.less(values, 0)
                if _any(bad):
                    row = _first_row(bad)
                    findings.append(EvidenceError(display, f"expected values >= 0, got {values[row - 1].as_py()}. "
                                                  f"{_HINT}", line=row, field=name))
        if name in ("compute_s", "comm_s") and values.null_count == 0:
            finite = pc.is_finite(values)
            if not pc.all(finite).as_py():
                first_bad[name] = _first_row(pc.invert(finite))
        if name == "rank":
            summary["ranks"] = pc.count_distinct(values).as_py()
        elif name == "node":
            summary["nodes"] = pc.count_distinct(values).as_py()
        elif name == "step" and not values.null_count:
            summary["bounds"] = pc.min_max(values).as_py()
        if keep:
            cast[name] = values
        del values
    if findings:
        raise findings[0]
    if first_bad:
        raise EvidenceError(display, f"expected finite times in seconds, got nan or inf. {_HINT}",
                            line=min(first_bad.values()), field="compute_s")
    return cast, summary


def _parquet_head(parquet: pq.ParquetFile, display: str) -> pa.Table:
    """The first rows of a Parquet table, each column cast as the whole column is."""
    first = next(parquet.iter_batches(batch_size=_HEAD_ROWS), None)
    head = pa.Table.from_batches([first]) if first is not None else pa.table({})
    for name, kind in COLUMNS.items():
        head = head.set_column(head.column_names.index(name), name, _cast(head.column(name), name, kind, display))
    return head


def _is_parquet(path: Path, display: str) -> bool:
    """True for a Parquet file; False for text (a CSV table); an EvidenceError for compressed or other binary data
    (Arrow would unpack a `.gz` CSV by its name, not as the file reads)."""
    with path.open("rb") as handle:
        head = handle.read(65536)
    if head[:4] == b"PAR1":
        return True
    refuse_binary(head, display)
    return False


def _parquet_file(path: Path, display: str) -> pq.ParquetFile:
    """The Parquet file to read column by column, its footer's bounds checked."""
    parquet = _guarded(display, lambda: pq.ParquetFile(path))
    check_parquet_bounds(parquet.metadata, display)
    _guarded(display, lambda: parquet.schema_arrow.names)  # decodes the names: a bad header fails here
    return parquet


def _guarded(display: str, read: Callable[[], _T]) -> _T:
    """`read()`, its Arrow or system error the located EvidenceError `_read` gives."""
    try:
        return read()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError, UnicodeDecodeError) as exc:
        message = " ".join(str(exc).split())[:160]
        raise EvidenceError(display, f"expected a Parquet or CSV table, got: {message}. {_HINT}") from None


def _any(mask: pa.ChunkedArray) -> bool:
    """True when any value of a boolean column is true."""
    return bool(pc.any(mask).as_py())


def _first_row(mask: pa.ChunkedArray) -> int:
    index = pc.index(mask, True).as_py()
    return int(index) + 1


def _read(path: Path, display: str) -> pa.Table:
    """A CSV file's whole table."""
    table = _guarded(display, lambda: _read_csv(path))
    _guarded(display, lambda: table.column_names)  # decodes the names: a bad header fails here, not later
    return table


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
