"""GPU telemetry: DCGM exporter Prometheus text with timestamps, or `dcgmi dmon` with start and interval.

Prometheus text: `METRIC{gpu="0",Hostname="n1",...} VALUE TIMESTAMP_MS`; `# HELP`/`# TYPE` lines
skipped; the timestamp (ms since the epoch, UTC) is required: the exporter's live page has none, so a dump
must add it. `promtool tsdb dump` prints a Prometheus server's stored samples so, the metric as the series'
`__name__` label: `{__name__="DCGM_FI_DEV_GPU_UTIL", gpu="0", Hostname="n1", ...} 97 1700000000000`.
`dcgmi dmon`: a `#Entity  FIELD ...` header, an optional units line, then `GPU N  v1 v2 ...` rows
(`N/A` -> null).
dmon prints no time: sample k of a GPU (k = 0, 1, ...) is at `start_time + k * interval_s`, both given by the
caller
(`dcgmi dmon -d` is in milliseconds; its default of 1000 ms is interval_s = 1.0).

A day of 1 Hz telemetry on 512 GPUs is 44 million samples per metric, so the result is columns, not one object
per sample: `Telemetry` holds metric, gpu and host dictionary-encoded (sorted distinct strings + int32 codes),
value (float64, NaN where not finite or N/A), time_ms and line (int64). The file is read in chunks cut at line
ends (`clustercert.evidence.guards.read_chunks`, which records one whole read with the file's sha256 and reads
the next chunk ahead on a thread), so what is resident is the columns and a few chunks, never the file's text;
the columnar path reads two chunks at a time on threads and adds them in file order (`_prometheus`).

Two ways through a Prometheus file, chosen by the environment variable `CLUSTERCERT_TABLE_PATH`:
- `columnar` (the default, also when unset): the regular lines, `HEAD VALUE TIMESTAMP` in printable ASCII with
  single spaces, a value matching `-?[0-9]+(\\.[0-9]+)?` and a timestamp of 1 to 15 digits, are split and
  converted in bulk (numpy finds the line ends and spaces, Arrow dictionary-encodes the heads and casts the
  numbers); each distinct head is read once by `_series_head`. Every other line (comments and blanks aside:
  tabs, doubled or trailing spaces, CR and other line breaks, non-ASCII, NaN/Inf, exponents, a head that does
  not parse or lacks the gpu label) is read by the per-line code, so results and errors are the per-line ones.
- `rows`: every line is read by the per-line code (the small-table path the equivalence tests compare against).
Both give the same Telemetry, column for column, and the same first error.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import threading
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from clustercert.errors import EvidenceError, UsageError
from clustercert.evidence.guards import read_chunks
from clustercert.parsers.common import DEFAULT_LIMIT, plain_chunks, refuse_binary, to_float
from clustercert.settings import TABLE_PATH_VARIABLE, TELEMETRY_MEMORY_VARIABLE, table_path, telemetry_memory_bytes

__all__ = ["CHUNK_BYTES", "TABLE_PATH_VARIABLE", "DcgmSample", "Telemetry", "parse_dcgm", "table_path"]

FORMAT = "dcgm"
_HINT = "Export DCGM telemetry as documented in clustercert/parsers/dcgm.py."
# Each line is read left to right with anchored matches only: no regex here restarts a scan at every offset
# of a line (a 64 KB label line otherwise takes minutes in Python's backtracking engine).
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL = re.compile(r'[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*,?')
_HEAD_LIMIT = 20
# What is read at a time: the columns take 36 bytes per sample; a chunk costs about 16x its size while cut up
CHUNK_BYTES = 8 * 1024**2
_CHUNK_THREADS = 2  # chunks read at once (NumPy and Arrow release the GIL); each costs about 16x its size while cut up
# the numbers taken in bulk: exactly what float() reads the same way as Arrow's correctly rounded cast, and
# timestamps short enough that int(float(text)) == int(text)
_BULK_VALUE = r"^-?[0-9]{1,40}(\.[0-9]{1,40})?$"
_BULK_VALUE_DIGITS = 40  # a value of digits alone, at most so many: what _BULK_VALUE matches without a point
_BULK_STAMP_DIGITS = 15  # a timestamp: digits alone, at most so many
# 9999-12-31T23:59:59.999Z: a later stamp is not milliseconds (nor fits a datetime)
_LAST_MS = 253_402_300_799_999

Codes = npt.NDArray[np.int32]
Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class DcgmSample:
    """One value of one metric of one GPU at one time (ms since the epoch, UTC), with its line."""

    metric: str
    gpu: str
    host: str | None
    value: float | None
    time_ms: int
    line: int


_COLUMNS = ("metric", "gpu", "host", "value", "time_ms", "line")
_DTYPES = (np.int32, np.int32, np.int32, np.float64, np.int64, np.int64)  # of each of _COLUMNS
_BYTES_PER_SAMPLE = sum(np.dtype(dtype).itemsize for dtype in _DTYPES)  # 36
_BLOCK_ROWS = 1 << 20  # rows read (and codes remapped) at a time


class _Resident:
    """A Telemetry's columns held in memory."""

    __slots__ = ("arrays",)

    def __init__(self, arrays: list[Any]) -> None:
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays[5])

    def read(self, index: int, start: int, stop: int) -> Any:
        return self.arrays[index][start:stop]

    def whole(self, index: int) -> Any:
        return self.arrays[index]


class _Spilled:
    """A Telemetry's columns in scratch files of the temporary folder, one per column (unnamed: removed when
    closed, and by the system whatever way the process ends), read back a block at a time; the codes are
    renumbered to the sorted dictionaries as they are read. Pickled (a persisted result, a Dask worker's), it
    travels as the columns themselves."""

    __slots__ = ("__weakref__", "count", "files", "remaps")

    def __init__(self, files: list[Any], count: int, remaps: list[Codes]) -> None:
        self.files = files
        self.count = count
        self.remaps = remaps
        weakref.finalize(self, _close_all, files)  # the scratch files go when the columns do

    def __len__(self) -> int:
        return self.count

    def read(self, index: int, start: int, stop: int) -> Any:
        start, stop = max(0, min(start, self.count)), max(0, min(stop, self.count))
        dtype = np.dtype(_DTYPES[index])
        out = np.empty(max(stop - start, 0), dtype=dtype)
        view = memoryview(out.view(np.uint8))  # type: ignore[arg-type]
        fd, offset, done = self.files[index].fileno(), start * dtype.itemsize, 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], offset + done)
            if got <= 0:
                raise OSError(f"a telemetry scratch file ended at byte {offset + done}, {len(view) - done} short")
            done += got
        return self.remaps[index][out] if index < len(self.remaps) else out

    def whole(self, index: int) -> Any:
        return self.read(index, 0, self.count)

    def __reduce__(self) -> tuple[type[_Resident], tuple[list[Any]]]:
        return _Resident, ([self.whole(index) for index in range(len(_DTYPES))],)


@dataclass(frozen=True, eq=False)
class Telemetry:
    """Every sample of one telemetry file, as columns in file order.

    metric, gpu, host: int32 codes into the sorted distinct strings `metrics`, `gpus`, `hosts` (host -1: the
    line has no Hostname label); value: float64, NaN where the file's value was not finite or N/A; time_ms
    (ms since the epoch, UTC) and line (1-based) int64.

    The columns are held in memory up to CLUSTERCERT_TELEMETRY_MEMORY_MIB (36 bytes a sample), beyond that in
    scratch files (`_Spilled`): a large cluster's day is hundreds of millions of samples. What clustercert
    computes from them reads a block at a time (`blocks`); the whole-column attributes (`metric` ... `line`)
    are for small files and tests."""

    file: str
    source: str  # "prometheus" or "dmon"
    metrics: tuple[str, ...]
    gpus: tuple[str, ...]
    hosts: tuple[str, ...]
    columns: _Resident | _Spilled
    # the (metric, gpu, host) codes of each series the file holds, one row a series, met while it was read (None:
    # not known, the columns are scanned): what the resilience phase counts, without reading the columns back
    series_codes: Codes | None = None

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def spilled(self) -> bool:
        """Whether the columns are kept in scratch files rather than in memory."""
        return isinstance(self.columns, _Spilled)

    @property
    def metric(self) -> Codes:
        return self.columns.whole(0)  # type: ignore[no-any-return]

    @property
    def gpu(self) -> Codes:
        return self.columns.whole(1)  # type: ignore[no-any-return]

    @property
    def host(self) -> Codes:
        return self.columns.whole(2)  # type: ignore[no-any-return]

    @property
    def value(self) -> Floats:
        return self.columns.whole(3)  # type: ignore[no-any-return]

    @property
    def time_ms(self) -> Ints:
        return self.columns.whole(4)  # type: ignore[no-any-return]

    @property
    def line(self) -> Ints:
        return self.columns.whole(5)  # type: ignore[no-any-return]

    @property
    def rows(self) -> int:
        """How many samples."""
        return len(self)

    def blocks(self, *names: str, rows: int | None = None) -> Iterator[tuple[int, list[Any]]]:
        """(first row, [the named columns' values]) of each block of `rows` rows (default _BLOCK_ROWS), in order."""
        step = rows or _BLOCK_ROWS
        indexes = [_COLUMNS.index(name) for name in names]
        for at in range(0, len(self), step):
            yield at, [self.columns.read(index, at, at + step) for index in indexes]

    @classmethod
    def from_samples(cls, file: str, source: str, samples: Iterable[DcgmSample]) -> Telemetry:
        """The columns of `samples` (small inputs: dmon files and tests)."""
        columns = _Columns()
        columns.add_rows([(s.metric, s.gpu, s.host, math.nan if s.value is None else s.value, s.time_ms, s.line)
                          for s in samples])
        return columns.finish(file, source)

    def sample(self, index: int) -> DcgmSample:
        """Row `index` as one object (for a few rows: the head, a finding)."""
        metric, gpu, host, value, time_ms, line = (self.columns.read(i, index, index + 1)[0].item()
                                                   for i in range(len(_DTYPES)))
        return DcgmSample(self.metrics[metric], self.gpus[gpu], None if host < 0 else self.hosts[host],
                          None if math.isnan(value) else value, time_ms, line)

    def metric_names(self) -> list[str]:
        """The distinct metrics, sorted."""
        if self.series_codes is not None:
            return [self.metrics[i] for i in np.unique(self.series_codes[:, 0]).tolist()]
        counts = np.zeros(len(self.metrics), dtype=np.int64)
        for _, (metric,) in self.blocks("metric"):
            counts += np.bincount(metric, minlength=len(self.metrics))
        return [self.metrics[i] for i in np.flatnonzero(counts)]

    def gpu_count(self) -> int:
        """How many distinct (host, gpu) pairs."""
        if self.series_codes is not None:
            return len({(host, gpu) for _, gpu, host in self.series_codes.tolist()})
        n_gpu = max(len(self.gpus), 1)
        bound = (len(self.hosts) + 1) * n_gpu
        seen = np.zeros(bound, dtype=bool) if bound <= _DENSE_KEYS else None
        keys: Ints = np.empty(0, dtype=np.int64)
        for _, (gpu, host) in self.blocks("gpu", "host"):
            key = (host.astype(np.int64) + 1) * n_gpu + gpu
            if seen is not None:
                seen[key] = True
            else:
                keys = np.union1d(keys, key)
        return int(np.count_nonzero(seen)) if seen is not None else len(keys)

    def host_first_lines(self) -> list[tuple[str, int]]:
        """Each host named by a Hostname label, with its first line, in the order of first appearance."""
        first: dict[int, int] = {}  # host code -> first row, found piece by piece: a cluster's hosts all report in
        # the first seconds, so the scan stops early and never reads the whole column
        for at, (host,) in self.blocks("host", rows=_HOST_SCAN_ROWS):
            codes, rows = np.unique(host, return_index=True)
            for code, row in zip(codes.tolist(), rows.tolist(), strict=True):
                if code >= 0 and code not in first:
                    first[code] = at + row
            if len(first) == len(self.hosts):
                break
        return [(self.hosts[code], int(self.columns.read(5, row, row + 1)[0]))
                for code, row in sorted(first.items(), key=lambda kv: kv[1])]

    def series(self) -> list[dict[str, object]]:
        """Per (metric, gpu, host) in the order of first appearance: count, first and last time and line, and
        the number (values), min, max and mean of the finite values (the mean a left-to-right sum over the file,
        like sum()).

        Read a block at a time: each block's series are numbered after those met before (new ones in the order
        they first appear in it), and the per-series sums are added block after block in file order."""
        n_gpu, n_host = max(len(self.gpus), 1), len(self.hosts) + 1
        groups = _Groups()
        for _, (metric, gpu, host, value, time_ms, line) in self.blocks(*_COLUMNS):
            key = (metric.astype(np.int64) * n_gpu + gpu) * n_host + (host + 1)
            groups.add(key, value, time_ms, line)
        out: list[dict[str, object]] = []
        low, high = groups.extremes()
        for g in range(groups.count):
            key, kept = int(groups.keys[g]), int(groups.kept[g])
            host = key % n_host - 1
            out.append({
                "metric": self.metrics[key // n_host // n_gpu],
                "gpu": self.gpus[key // n_host % n_gpu],
                "host": None if host < 0 else self.hosts[host],
                "count": int(groups.rows[g]),
                "values": kept,  # the finite values of `count`, those min, max and mean are of
                "first_ms": int(groups.first_ms[g]),
                "last_ms": int(groups.last_ms[g]),
                "line": int(groups.first_line[g]),
                "last_line": int(groups.last_line[g]),
                "min": float(low[g]) if kept else None,
                "max": float(high[g]) if kept else None,
                "mean": float(groups.total[g]) / kept if kept else None,
            })
        return out

    def head(self, count: int = _HEAD_LIMIT) -> list[DcgmSample]:
        """The first `count` samples."""
        return [self.sample(i) for i in range(min(count, len(self)))]

    def to_json(self) -> dict[str, object]:
        head = [
            {"metric": s.metric, "gpu": s.gpu, "host": s.host, "value": s.value, "time_ms": s.time_ms,
             "line": s.line}
            for s in self.head()
        ]
        return {
            "format": FORMAT,
            "file": self.file,
            "source": self.source,
            "samples": len(self),
            "series": self.series(),
            "head": head,
        }


# a dense table of one slot per possible key up to this many slots; beyond, the keys are sorted
_DENSE_KEYS = 1 << 24
_HOST_SCAN_ROWS = 1 << 20  # rows per piece of the scan for each host's first line


def _grown(array: Any, size: int, fill: float) -> Any:
    """`array` with room for `size` entries, the new ones `fill`."""
    if len(array) >= size:
        return array
    out = np.full(max(size, 2 * len(array)), fill, dtype=array.dtype)
    out[:len(array)] = array
    return out


class _Groups:
    """The per-series accumulators of Telemetry.series(), fed block after block in file order."""

    _FILLS = (("keys", 0), ("rows", 0), ("kept", 0), ("total", 0.0), ("low", np.inf), ("high", -np.inf),
              ("first_zero", np.nan), ("first_ms", 0), ("first_line", 0), ("last_ms", 0), ("last_line", 0))

    def __init__(self) -> None:
        self.count = 0
        self.keys = np.empty(0, dtype=np.int64)  # each series' key, by series number (order of first appearance)
        self._sorted = np.empty(0, dtype=np.int64)  # the keys sorted, and the number of each
        self._number = np.empty(0, dtype=np.int64)
        self.rows = np.zeros(0, dtype=np.int64)
        self.kept = np.zeros(0, dtype=np.int64)  # finite values
        self.total = np.zeros(0)
        self.low = np.zeros(0)
        self.high = np.zeros(0)
        self.first_zero = np.zeros(0)  # NaN until the series' first 0.0 or -0.0, then that zero
        self.first_ms = np.zeros(0, dtype=np.int64)
        self.first_line = np.zeros(0, dtype=np.int64)
        self.last_ms = np.zeros(0, dtype=np.int64)
        self.last_line = np.zeros(0, dtype=np.int64)

    def add(self, key: Ints, value: Floats, time_ms: Ints, line: Ints) -> None:
        found, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        place = np.searchsorted(self._sorted, found)
        known = place < len(self._sorted)
        known[known] = self._sorted[place[known]] == found[known]
        number = np.empty(len(found), dtype=np.int64)
        number[known] = self._number[place[known]]
        new = np.flatnonzero(~known)
        new = new[np.argsort(first[new], kind="stable")]  # numbered in the order they first appear
        before, self.count = self.count, self.count + len(new)
        number[new] = np.arange(before, self.count)
        if len(new):
            for name, fill in self._FILLS:
                setattr(self, name, _grown(getattr(self, name), self.count, fill))
            self.keys[before:self.count] = found[new]
            self.first_ms[before:self.count] = time_ms[first[new]]
            self.first_line[before:self.count] = line[first[new]]
            order = np.argsort(self.keys[:self.count], kind="stable")
            self._sorted, self._number = self.keys[:self.count][order], order.astype(np.int64)
        _, from_end = np.unique(key[::-1], return_index=True)  # the same keys, sorted alike
        last = len(key) - 1 - from_end
        self.last_ms[number] = time_ms[last]
        self.last_line[number] = line[last]
        group = number[inverse.reshape(-1)]
        count = self.count
        self.rows[:count] += np.bincount(group, minlength=count)
        finite = ~np.isnan(value)
        where, values = group[finite], value[finite]
        self.kept[:count] += np.bincount(where, minlength=count)
        np.add.at(self.total, where, values)  # in file order, one addition at a time: sum()'s rounding
        np.minimum.at(self.low, where, values)
        np.maximum.at(self.high, where, values)
        zeros = np.flatnonzero(value == 0)
        if zeros.size:
            series_of_zeros, first_zero = np.unique(group[zeros], return_index=True)
            unset = np.isnan(self.first_zero[series_of_zeros])
            signs = np.signbit(value[zeros[first_zero[unset]]])
            self.first_zero[series_of_zeros[unset]] = np.where(signs, -0.0, 0.0)

    def extremes(self) -> tuple[Floats, Floats]:
        """Each series' min and max: min() and max() keep the first of equal values, numpy the last, so a 0.0 or
        -0.0 extreme is the series' first zero."""
        low, high = self.low[:self.count].copy(), self.high[:self.count].copy()
        first_zero = self.first_zero[:self.count]
        zeroed = ~np.isnan(first_zero)
        for extreme in (low, high):
            at_zero = zeroed & (extreme == 0)
            extreme[at_zero] = first_zero[at_zero]
        return low, high


Row = tuple[str, str, str | None, float, int, int]  # metric, gpu, host, value (NaN: none), time_ms, line


_SHORTEST_SAMPLE = len('M{gpu=""} 0 0\n')


class _Columns:
    """The columns as they are read, written in place into arrays reserved for the whole file (pages never
    written are never resident, so a generous reservation costs nothing), grown only when a file holds more
    samples than reserved; or, with `spill`, appended to scratch files (`_Spilled`). The dictionaries are shared
    by every chunk."""

    def __init__(self, reserve: int = 0, *, spill: bool = False, display: str = "") -> None:
        self.codes: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
        self.display = display
        self.files: list[Any] | None = None
        self.arrays: list[Any] = []
        if spill:
            self.files = []
            self._closer = weakref.finalize(self, _close_all, self.files)  # a file that fails to parse: closed
            try:
                for name in _COLUMNS:
                    self.files.append(tempfile.TemporaryFile(prefix=f"clustercert-{name}-"))
            except OSError as exc:
                self._closer()
                raise _scratch_error(display, exc) from None
        else:
            self.arrays = [np.empty(reserve, dtype=dtype) for dtype in _DTYPES]
        self.filled = 0
        self._coding = threading.Lock()  # chunks are read on two threads; each string gets one code
        # the (metric, gpu, host) codes of every sample added: a row read per line adds its own, the bulk reader
        # each head it reads in bulk when it first codes it (a head's lines then give its samples or the error)
        self.series: set[tuple[int, int, int]] = set()

    def code(self, which: int, text: str | None) -> int:
        if text is None:
            return -1
        table = self.codes[which]
        found = table.get(text)
        if found is None:
            with self._coding:
                found = table.get(text)
                if found is None:
                    found = table[text] = len(table)
        return found

    def encode(self, rows: list[Row]) -> list[Any]:
        code = self.code
        metric, gpu, host = ([code(0, r[0]) for r in rows], [code(1, r[1]) for r in rows],
                             [code(2, r[2]) for r in rows])
        self.series.update(zip(metric, gpu, host, strict=True))
        return [np.array(metric, dtype=np.int32), np.array(gpu, dtype=np.int32), np.array(host, dtype=np.int32),
                np.array([r[3] for r in rows], dtype=np.float64),
                np.array([r[4] for r in rows], dtype=np.int64),
                np.array([r[5] for r in rows], dtype=np.int64)]

    def add_rows(self, rows: list[Row]) -> None:
        if rows:
            self.add(self.encode(rows))

    def add(self, part: list[Any]) -> None:
        count = len(part[5])
        end = self.filled + count
        if self.files is not None:
            try:
                for scratch, column, dtype in zip(self.files, part, _DTYPES, strict=True):
                    scratch.write(np.ascontiguousarray(column, dtype=dtype).data)
            except OSError as exc:
                raise _scratch_error(self.display, exc) from None
            self.filled = end
            return
        if end > len(self.arrays[5]):  # more than reserved: grow by half again (a copy, once in a while)
            size = max(end, len(self.arrays[5]) * 3 // 2, 1024)
            for index, dtype in enumerate(_DTYPES):
                grown = np.empty(size, dtype=dtype)
                grown[:self.filled] = self.arrays[index][:self.filled]
                self.arrays[index] = grown
        for index in range(len(_DTYPES)):
            self.arrays[index][self.filled:end] = part[index]
        self.filled = end

    def empty(self) -> bool:
        return self.filled == 0

    def finish(self, file: str, source: str) -> Telemetry:
        """The Telemetry, its dictionaries sorted (the same whichever order the strings were met in): in memory
        the reserved arrays themselves, the codes renumbered in place; spilled, the scratch files, the codes
        renumbered as they are read."""
        names: list[tuple[str, ...]] = []
        remaps: list[Codes] = []
        for table in self.codes:
            ordered = sorted(table)
            remap = np.empty(len(table) + 1, dtype=np.int32)  # slot -1 (the last) keeps a missing host at -1
            remap[-1] = -1
            for new, text in enumerate(ordered):
                remap[table[text]] = new
            names.append(tuple(ordered))
            remaps.append(remap)
        store: _Resident | _Spilled
        if self.files is not None:
            try:
                for scratch in self.files:
                    scratch.flush()
            except OSError as exc:
                raise _scratch_error(self.display, exc) from None
            store = _Spilled(self.files, self.filled, remaps)
            self._closer.detach()
            self.files = None
        else:
            columns: list[Any] = [array[:self.filled] for array in self.arrays]
            for index, remap in enumerate(remaps):
                column = columns[index]
                for at in range(0, self.filled, _BLOCK_ROWS):
                    block = column[at:at + _BLOCK_ROWS]
                    block[:] = remap[block]
            store = _Resident(columns)
        self.arrays = []
        series = np.array(sorted(self.series), dtype=np.int32).reshape(-1, 3)
        for index, remap in enumerate(remaps):
            series[:, index] = remap[series[:, index]]
        return Telemetry(file, source, names[0], names[1], names[2], store, series)


def _close_all(files: list[Any]) -> None:
    for scratch in files:
        scratch.close()


def _scratch_error(display: str, exc: OSError) -> UsageError:
    return UsageError(f"{display}: could not keep the telemetry's columns in the temporary folder "
                      f"{tempfile.gettempdir()}: {exc.strerror or exc}. Free space there, point TMPDIR at a folder "
                      f"with room (36 bytes a sample), or raise {TELEMETRY_MEMORY_VARIABLE} to hold them in memory.")


def parse_dcgm(
    path: Path,
    display: str,
    *,
    start_time: datetime | None = None,
    interval_s: float = 1.0,
    limit: int = DEFAULT_LIMIT,
    chunk_bytes: int = CHUNK_BYTES,
) -> Telemetry:
    """Every telemetry sample of the file; `start_time` (with offset) is required for `dcgmi dmon` output.

    The file is read `chunk_bytes` at a time (cut at line ends); CLUSTERCERT_TABLE_PATH picks the path;
    columns larger than CLUSTERCERT_TELEMETRY_MEMORY_MIB are kept in scratch files (Telemetry)."""
    path_kind = table_path()
    memory = telemetry_memory_bytes()
    with closing(read_chunks(path, display, limit=limit, chunk_bytes=chunk_bytes)) as read:
        chunks = plain_chunks(read)  # no byte order mark, no terminal colours (each chunk is cut at a line end)
        # the first 64 KiB decide, as read_text_lines() did: NUL bytes there are binary; the first line that is
        # not blank or a comment (or a '#Entity' header) tells Prometheus text from dmon
        ahead: list[bytes] = []
        seen = 0
        kind: str | None = None
        for chunk in chunks:
            ahead.append(chunk)
            seen += len(chunk)
            kind = kind or _kind(chunk)
            if kind is not None and seen >= 65536:
                break
        head = b"".join(ahead)[:65536]
        refuse_binary(head, display)
        if kind == "dmon":
            data = b"".join([*ahead, *chunks])
            del ahead
            if not data.strip():
                raise EvidenceError(display, "expected log text, got an empty file")
            lines = data.decode("utf-8", errors="replace").splitlines()
            del data
            return _dmon(lines, display, start_time, interval_s)
        return _prometheus(_chained(ahead, chunks), display, bulk=path_kind == "columnar",
                           size=os.stat(path).st_size, memory=memory)


def _chained(ahead: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    while ahead:
        yield ahead.pop(0)
    yield from rest


def _kind(chunk: bytes) -> str | None:
    """"dmon" or "prometheus" when a line of `chunk` decides, else None (blank lines and comments only)."""
    for raw in chunk.decode("utf-8", errors="replace").splitlines():
        text = raw.strip()
        if text.startswith("#Entity") or text.startswith("# Entity"):
            return "dmon"
        if text and not text.startswith("#"):
            return "prometheus"
    return None


def _head(text: str) -> tuple[str, dict[str, str], int] | None:
    """METRIC, labels and the offset after them of the `METRIC{labels}` (or METRIC) that starts `text`, or of a
    `{__name__="METRIC",labels}` (a series as `promtool tsdb dump` prints it: its name is a label); None when
    `text` starts with neither."""
    name = _NAME.match(text)
    if name is None and not text.startswith("{"):
        return None
    labels: dict[str, str] = {}
    at = 0 if name is None else name.end()
    if text.startswith("{", at):
        at += 1
        while not text.startswith("}", at):
            label = _LABEL.match(text, at)
            if label is None:
                return None
            labels[label.group(1)] = label.group(2)
            at = label.end()
        at += 1
    named = labels.pop("__name__", None)
    metric = name.group(0) if name is not None else named
    if metric is None or _NAME.fullmatch(metric) is None:
        return None
    return metric, labels, at


def _prometheus_line(text: str) -> tuple[str, dict[str, str], str, str | None] | None:
    """METRIC, labels, VALUE and TIMESTAMP (or None) of one exposition line, or None when it has another shape."""
    head = _head(text)
    if head is None:
        return None
    metric, labels, at = head
    rest = text[at:]
    fields = rest.split()
    if not rest[:1].isspace() or len(fields) not in (1, 2):
        return None
    return metric, labels, fields[0], fields[1] if len(fields) == 2 else None


def _series_head(head: str) -> tuple[str, dict[str, str]] | None:
    """METRIC and labels when `head` is exactly `METRIC{labels}` (or METRIC) as _prometheus_line() reads it."""
    parts = _head(head)
    return (parts[0], parts[1]) if parts is not None and parts[2] == len(head) else None


# distinct series heads remembered per file (a file has one per metric and GPU), each of at most so many characters:
# hostile files of long, all different heads cost no more memory than the file itself
_HEADS_KEPT = 1 << 16
_HEAD_CHARS_KEPT = 1024

Heads = dict[str, tuple[str, dict[str, str]] | None]


def _line_row(raw: str, number: int, display: str, heads: Heads) -> Row | None:
    """The sample on one line (None for a blank line or a comment), or the line's located EvidenceError.

    A line is `HEAD VALUE TIMESTAMP`, and a file repeats each series' HEAD (`METRIC{labels}`) at every sample:
    each distinct HEAD is read once; a line of another shape is read whole by _prometheus_line()."""
    text = raw.strip()
    if not text or text.startswith("#"):
        return None
    split = text.rsplit(None, 2)
    known = None
    if len(split) == 3:
        head = split[0]
        if head in heads:
            known = heads[head]
        else:
            known = _series_head(head)
            if len(heads) < _HEADS_KEPT and len(head) <= _HEAD_CHARS_KEPT:
                heads[head] = known
    if known is not None:
        parts: tuple[str, dict[str, str], str, str | None] | None = (*known, split[1], split[2])
    else:
        parts = _prometheus_line(text)
    if parts is None:
        raise EvidenceError(
            display,
            f"expected 'METRIC{{labels}} VALUE TIMESTAMP', got {text[:60]!r}. {_HINT}",
            line=number,
        )
    metric, labels, value_text, ts_text = parts
    if ts_text is None:
        raise EvidenceError(
            display,
            "expected a timestamp in milliseconds after the value, got none (the exporter's live page prints "
            "none): take the samples with their times from Prometheus (`promtool tsdb dump`)",
            line=number,
            field="timestamp",
        )
    try:  # to_float(), whose strip() float() does itself
        value = float(value_text)
    except ValueError:
        value = to_float(value_text, file=display, line=number, field=metric, hint=_HINT, allow_nan=True)
    try:
        stamp = float(ts_text)
    except ValueError:
        stamp = to_float(ts_text, file=display, line=number, field="timestamp", hint=_HINT)
    if not math.isfinite(stamp):
        stamp = to_float(ts_text, file=display, line=number, field="timestamp", hint=_HINT)
    if not stamp.is_integer() or stamp < 0:
        raise EvidenceError(
            display,
            f"expected a timestamp in whole milliseconds, got {ts_text[:30]!r}. {_HINT}",
            line=number,
            field="timestamp",
        )
    if stamp > _LAST_MS:
        raise EvidenceError(
            display,
            f"expected a timestamp in milliseconds since 1970 before the year 10000, got {ts_text[:30]!r}. {_HINT}",
            line=number,
            field="timestamp",
        )
    gpu = labels.get("gpu")
    if gpu is None:
        raise EvidenceError(
            display,
            f"expected a 'gpu' label, got {', '.join(labels)[:60] or 'none'}. {_HINT}",
            line=number,
            field="gpu",
        )
    return (metric, gpu, labels.get("Hostname"), value if math.isfinite(value) else math.nan, int(stamp),
            number)


def _prometheus(chunks: Iterator[bytes], display: str, *, bulk: bool, size: int, memory: int) -> Telemetry:
    columns: _Columns | None = None
    heads: Heads = {}
    codes = _HeadCodes()  # per distinct head met by the bulk reader: its codes, or None (read per line)
    number = 1  # the number of the next line
    content = False
    # Bulk chunks are read on two threads (numpy and Arrow release the GIL for most of the work) and added in file
    # order: a chunk's first line number is known before the previous chunk is read, from its count of "\n",
    # unless a line break of another kind may be in it (then the next chunk waits for it). An error is raised
    # when its chunk's turn comes: an earlier chunk's error first.
    with ThreadPoolExecutor(max_workers=_CHUNK_THREADS, thread_name_prefix="clustercert-dcgm") as pool:
        # each chunk being read, with the number of the line after it when it was known before (else None)
        reading: deque[tuple[Future[tuple[list[Any] | None, int]], int | None]] = deque()

        def add_oldest() -> int:
            future, expected = reading.popleft()
            part, after = future.result()
            assert expected is None or after == expected, (after, expected)  # the lines the next chunk counted on
            if part is not None:
                assert columns is not None
                columns.add(part)
            return after

        for chunk in chunks:
            if columns is None:
                # as many samples as the first chunk has lines per byte, for the whole file, and a margin; never
                # more than the file can hold (a sample line has at least _SHORTEST_SAMPLE bytes)
                expected = size * (chunk.count(b"\n") + 1) / len(chunk)
                reserve = min(int(expected * 1.25) + 1024, size // _SHORTEST_SAMPLE + 1)
                # beyond the memory they may take, the columns go to scratch files as they are read
                columns = _Columns(reserve, spill=min(expected, reserve) * _BYTES_PER_SAMPLE > memory,
                                   display=display)
            content = content or bool(chunk.strip())
            if bulk:
                future = pool.submit(_bulk_chunk, chunk, number, display, columns, heads, codes)
                lines = _plain_lines(chunk)
                reading.append((future, None if lines is None else number + lines))
                if lines is None:
                    while reading:
                        number = add_oldest()
                else:
                    number += lines
                while len(reading) >= _CHUNK_THREADS or (reading and reading[0][0].done()):
                    add_oldest()
            else:
                rows: list[Row] = []
                for raw in chunk.decode("utf-8", errors="replace").splitlines():
                    row = _line_row(raw, number, display, heads)
                    if row is not None:
                        rows.append(row)
                    number += 1
                columns.add_rows(rows)
        while reading:
            add_oldest()
    if not content or columns is None:
        raise EvidenceError(display, "expected log text, got an empty file")
    if columns.empty():
        raise EvidenceError(display, f"expected DCGM samples, found none. {_HINT}")
    return columns.finish(display, "prometheus")


# the line breaks str.splitlines() knows besides "\n" that are ASCII (CR, VT, FF, FS, GS, RS; NEL, LS and PS are not)
_OTHER_BREAKS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")


def _plain_lines(chunk: bytes) -> int | None:
    """How many lines _bulk_chunk() counts in `chunk`: its "\n" count, when it is ASCII without another line
    break (else None: its lines are known once it is read)."""
    if not chunk.isascii():
        return None
    data = np.frombuffer(chunk, dtype=np.uint8)  # numpy counts quicker than bytes.count(), without the GIL
    newlines = int(np.count_nonzero(data == 10))
    if int(np.count_nonzero(data < 32)) != newlines and any(mark in chunk for mark in _OTHER_BREAKS):
        return None
    return newlines + (0 if chunk.endswith(b"\n") else 1)


def _arrow_ints(values: Ints) -> Any:
    """An Arrow int64 array over the numpy array's memory (pa.array() of numpy data would import pandas)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _numpy(array: Any, dtype: Any) -> Any:
    """The values of an Arrow array without nulls, as numpy over its memory (to_numpy() would import pandas)."""
    assert array.null_count == 0
    kind = np.dtype(dtype)
    return np.frombuffer(array.buffers()[1], dtype=kind, count=len(array), offset=array.offset * kind.itemsize)


def _booleans(array: Any) -> Any:
    """A boolean Arrow array without nulls as a numpy bool array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return _numpy(pc.cast(array, pa.uint8()), np.uint8).view(bool)


def _bulk_numbers(value_text: Any, stamp_text: Any, value_chars: Ints, stamp_chars: Ints) -> Any:
    """Which (value, timestamp) pairs are read in bulk: a value matching _BULK_VALUE and a timestamp of 1 to
    _BULK_STAMP_DIGITS digits. Digits alone are told by Arrow's character classes (much quicker than a pattern):
    a timestamp always, a value unless it has a sign or a point (then matched)."""
    import pyarrow.compute as pc

    stamps = _booleans(pc.ascii_is_decimal(stamp_text)) & (stamp_chars <= _BULK_STAMP_DIGITS)
    values = _booleans(pc.ascii_is_decimal(value_text)) & (value_chars <= _BULK_VALUE_DIGITS)
    other = np.flatnonzero(~values)
    if len(other):
        values[other] = _booleans(pc.match_substring_regex(value_text.take(_arrow_ints(other)), _BULK_VALUE))
    return values & stamps


_FEW_HEADS = 16  # a chunk with fewer distinct heads than 1/16 of those met looks them up in Python


class _HeadCodes:
    """The (metric, gpu, host) codes of each distinct series head the bulk reader met (None: read per line), at
    most _HEADS_KEPT heads of at most _HEAD_CHARS_KEPT characters. A chunk's distinct heads are looked up in C
    (`pc.index_in` over an Arrow copy of the heads, made again each time the heads have doubled); only heads
    met since are looked up one by one in Python, and every head of a chunk that holds few of the heads met (a
    file of series one after the other, as `promtool tsdb dump` prints them: index_in hashes every head met
    first, each time). Shared by the threads that read chunks."""

    def __init__(self) -> None:
        self._codes: dict[str, tuple[int, int, int] | None] = {}
        self._adding = threading.Lock()
        self._copy: tuple[Any, Codes, Any] | None = None  # the heads, their codes, whether each is read in bulk

    def lookup(self, distinct: Any, columns: _Columns) -> tuple[Codes, Any]:
        """The codes of each head of `distinct` (an Arrow string array) and whether its lines are read in bulk."""
        import pyarrow.compute as pc

        count = len(distinct)
        per_head = np.zeros((count, 3), dtype=np.int32)
        known = np.zeros(count, dtype=bool)
        missed = np.arange(count)
        copy = self._copy
        if copy is not None and count * _FEW_HEADS >= len(copy[1]):
            heads, table, bulk = copy
            places = pc.index_in(distinct, value_set=heads)  # null: not among them
            hit = _booleans(pc.is_valid(places))
            at = np.frombuffer(places.buffers()[1], dtype=np.int32, count=count, offset=places.offset * 4)[hit]
            del places
            per_head[hit] = table[at]
            known[hit] = bulk[at]
            missed = np.flatnonzero(~hit)
        if not len(missed):
            return per_head, known
        for i, head in zip(missed.tolist(), distinct.take(_arrow_ints(missed)).to_pylist(), strict=True):
            found = self._codes.get(head, False)
            if found is False:
                parsed = _series_head(head)
                gpu = None if parsed is None else parsed[1].get("gpu")
                found = None if parsed is None or gpu is None else (
                    columns.code(0, parsed[0]), columns.code(1, gpu), columns.code(2, parsed[1].get("Hostname")))
                if found is not None:
                    columns.series.add(found)
                if len(self._codes) < _HEADS_KEPT and len(head) <= _HEAD_CHARS_KEPT:
                    with self._adding:
                        self._codes.setdefault(head, found)
            if found is not None:
                per_head[i] = found
                known[i] = True
        copied = 0 if copy is None else len(copy[1])
        if len(self._codes) > 2 * copied or (len(self._codes) >= _HEADS_KEPT and len(self._codes) > copied):
            self._copy_again()
        return per_head, known

    def _copy_again(self) -> None:
        import pyarrow as pa

        with self._adding:
            items = list(self._codes.items())
        table = np.array([codes or (0, 0, 0) for _, codes in items], dtype=np.int32).reshape(-1, 3)
        bulk = np.array([codes is not None for _, codes in items], dtype=bool)
        # built from its buffers (pa.array() of a list would import pandas); a head is printable ASCII
        offsets = np.zeros(len(items) + 1, dtype=np.int32)
        np.cumsum([len(head) for head, _ in items], out=offsets[1:])
        text = "".join(head for head, _ in items).encode("ascii")
        heads = pa.Array.from_buffers(pa.string(), len(items), [None, pa.py_buffer(offsets), pa.py_buffer(text)])
        self._copy = (heads, table, bulk)


def _bulk_chunk(chunk: bytes, number: int, display: str, columns: _Columns, heads: Heads,
                codes: _HeadCodes) -> tuple[list[Any] | None, int]:
    """Read one chunk (whole lines) whose first line is line `number`: the regular lines in bulk, every other
    line by _line_row(). Returns the chunk's columns in file order (None when it has no sample) for
    `columns.add`, and the number of the line after the chunk."""
    data = np.frombuffer(chunk, dtype=np.uint8)
    starts, ends = _line_bounds(data, chunk.endswith(b"\n"))
    count = len(ends)
    filled = ends > starts
    comment, candidate = _line_kinds(chunk, data, starts, ends)
    s1, s2 = _last_two_spaces(data, starts, ends, candidate)
    rows = np.flatnonzero(candidate)
    bulk_ok = np.zeros(len(rows), dtype=bool)
    if len(rows):
        bulk_ok, values, stamps, chosen = _bulk_samples(chunk, (starts[rows], s1[rows], s2[rows], ends[rows]),
                                                        columns, codes)
    del data, s1, s2
    handled = np.zeros(count, dtype=bool)
    handled[rows[bulk_ok]] = True
    handled |= ~filled | comment
    slow_rows, shift, extra = _slow_lines(chunk, (starts, ends), np.flatnonzero(~handled), number, display, heads)
    if len(rows):
        fast = rows[bulk_ok]
        lines = number + fast
        if extra:
            lines = lines + np.cumsum(shift)[fast]
        part = [chosen[:, 0].copy(), chosen[:, 1].copy(), chosen[:, 2].copy(), values, stamps,
                lines.astype(np.int64)]
        if slow_rows:
            slow = columns.encode(slow_rows)
            order = np.argsort(np.concatenate([part[5], slow[5]]), kind="stable")
            part = [np.concatenate([a, b])[order] for a, b in zip(part, slow, strict=True)]
        return part, number + count + extra
    return (columns.encode(slow_rows) if slow_rows else None), number + count + extra


def _line_bounds(data: np.ndarray, ends_with_newline: bool) -> tuple[np.ndarray, np.ndarray]:
    """Where each line of a chunk starts and ends (its line break, or the chunk's end)."""
    ends = np.flatnonzero(data == 10)
    if not ends_with_newline:
        ends = np.append(ends, len(data))
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    return starts, ends


def _line_kinds(chunk: bytes, data: np.ndarray, starts: np.ndarray,
                ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which lines are comments ('#' first: a comment, or Prometheus' HELP and TYPE) and which may be samples
    read in bulk (neither starting nor ending with a space); a line with a byte outside printable ASCII (tab,
    CR, other line breaks, UTF-8) is neither: it is read per line."""
    size = len(data)
    irregular = np.zeros(len(ends), dtype=bool)
    # a chunk of ASCII whose only control bytes are its line ends has none (told in three C scans, not looked for)
    newlines = len(ends) - (not chunk.endswith(b"\n"))
    if not (chunk.isascii() and b"\x7f" not in chunk and int(np.count_nonzero(data < 32)) == newlines):
        odd = np.flatnonzero(np.subtract(data, 32, dtype=np.uint8) > 94)
        odd = odd[data[odd] != 10]
        irregular[np.searchsorted(ends, odd)] = True
        del odd
    filled = ends > starts
    first_byte = np.where(filled, data[np.minimum(starts, size - 1)], 0)
    last_byte = np.where(filled, data[np.maximum(ends - 1, 0)], 0)
    comment = filled & ~irregular & (first_byte == ord("#"))
    candidate = filled & ~irregular & ~comment & (first_byte != 32) & (last_byte != 32)
    return comment, candidate


def _last_two_spaces(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The places of each line's last two spaces (`HEAD s1 VALUE s2 TIMESTAMP`); `candidate` keeps only the lines
    with one space before each of the last two fields, each field at least a character."""
    count = len(ends)
    spaces = np.flatnonzero(data == 32)
    last = np.searchsorted(spaces, ends) - 1
    s2 = spaces[np.maximum(last, 0)] if len(spaces) else np.zeros(count, dtype=np.int64)
    s1 = spaces[np.maximum(last - 1, 0)] if len(spaces) else np.zeros(count, dtype=np.int64)
    candidate &= (last >= 1) & (s2 > starts) & (s1 > starts) & (s2 - s1 >= 2) & (ends - s2 >= 2)
    candidate &= data[np.maximum(s1 - 1, 0)] != 32
    return s1, s2


def _bulk_samples(chunk: bytes, bounds: tuple[np.ndarray, ...], columns: _Columns,
                  codes: _HeadCodes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The samples of the plain lines whose `bounds` (start, the two spaces, end) are given: which read in bulk
    (a number, a timestamp and a known series head), their values, timestamps and series codes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    starts, s1, s2, ends = bounds
    rows = len(starts)
    places = np.empty((rows, 6), dtype=np.int64)
    places[:, 0], places[:, 1], places[:, 2] = starts, s1, s1 + 1
    places[:, 3], places[:, 4], places[:, 5] = s2, s2 + 1, ends
    offsets = np.append(places.ravel(), len(chunk)).astype(np.int32)
    del places
    # text, not bytes: a candidate line is printable ASCII (Arrow's string kernels, no UTF-8 check to pay)
    pieces = pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets),
                                                                   pa.py_buffer(chunk)])
    picks = np.arange(0, 6 * rows, 6, dtype=np.int64)
    head_text = pieces.take(_arrow_ints(picks))
    value_text = pieces.take(_arrow_ints(picks + 2))
    stamp_text = pieces.take(_arrow_ints(picks + 4))
    del pieces, offsets, picks
    good = _bulk_numbers(value_text, stamp_text, s2 - s1 - 1, ends - s2 - 1)
    encoded = pc.dictionary_encode(head_text)
    del head_text
    assert encoded.indices.type == pa.int32()
    index = _numpy(encoded.indices, np.int32)
    per_head, known = codes.lookup(encoded.dictionary, columns)
    del encoded
    bulk_ok = good & known[index]
    taken = _arrow_ints(np.flatnonzero(bulk_ok))
    values = _numpy(pc.cast(value_text.take(taken), pa.float64()), np.float64)
    stamps = _numpy(pc.cast(stamp_text.take(taken), pa.int64()), np.int64)
    del value_text, stamp_text
    return bulk_ok, values, stamps, per_head[index[bulk_ok]]


def _slow_lines(chunk: bytes, bounds: tuple[np.ndarray, np.ndarray], which: np.ndarray, number: int, display: str,
                heads: Heads) -> tuple[list[Row], np.ndarray, int]:
    """The rows of the lines `which` by the per-line code, in file order; a physical line may hold several lines
    as splitlines() counts them (a lone CR, a form feed, U+2028): for each line, how many more lines come before
    the next (`shift`), and how many in all."""
    starts, ends = bounds
    shift = np.zeros(len(ends) + 1, dtype=np.int64)
    slow_rows: list[Row] = []
    extra = 0
    for i in which.tolist():
        text = (chunk[starts[i]:ends[i]] + b"\n").decode("utf-8", errors="replace")
        pieces_of_line = text.splitlines()
        at = number + i + extra
        for offset, raw in enumerate(pieces_of_line):
            row = _line_row(raw, at + offset, display, heads)
            if row is not None:
                slow_rows.append(row)
        if len(pieces_of_line) != 1:
            shift[i + 1] += len(pieces_of_line) - 1
            extra += len(pieces_of_line) - 1
    return slow_rows, shift, extra


def _dmon(lines: list[str], display: str, start_time: datetime | None, interval_s: float) -> Telemetry:
    if start_time is None or start_time.tzinfo is None:
        raise EvidenceError(
            display,
            f"expected a start time with offset for dcgmi dmon output, got "
            f"{start_time!r}. Pass --start-time.",
            field="start_time",
        )
    if not interval_s > 0 or not math.isfinite(interval_s):
        raise EvidenceError(
            display, f"expected a positive interval in seconds, got {interval_s}.", field="interval_s"
        )
    fields: list[str] = []
    seen: dict[str, int] = {}
    columns = _Columns()
    samples: list[Row] = []
    for number, raw in enumerate(lines, start=1):
        tokens = raw.split()
        if not tokens:
            continue
        if tokens[0] in ("#Entity", "#"):
            names = tokens[1:] if tokens[0] == "#Entity" else tokens[2:]
            if names and names[0] == "ID":
                names = names[1:]
            fields = names
            continue
        if tokens[0] == "ID" or tokens[0].startswith("#"):
            continue
        if not fields:
            raise EvidenceError(
                display, f"expected a '#Entity' header before data rows. {_HINT}", line=number
            )
        if len(tokens) != len(fields) + 2:
            raise EvidenceError(
                display,
                f"expected {len(fields) + 2} columns (entity, id, {len(fields)} fields), got "
                f"{len(tokens)}. {_HINT}",
                line=number,
                field="row",
            )
        entity = f"{tokens[0]} {tokens[1]}"
        index = seen.get(entity, 0)
        seen[entity] = index + 1
        moment = start_time + timedelta(seconds=index * interval_s)
        time_ms = round(moment.timestamp() * 1000)
        for name, text in zip(fields, tokens[2:], strict=True):
            value = (
                math.nan if text == "N/A" else to_float(text, file=display, line=number, field=name, hint=_HINT)
            )
            samples.append((name, tokens[1], None, value, time_ms, number))
    if not samples:
        raise EvidenceError(display, f"expected dcgmi dmon rows, found none. {_HINT}")
    columns.add_rows(samples)
    return columns.finish(display, "dmon")
