"""Witness rows: the few rows of a large batch on which row-wise expectations decide as on the whole batch.

A row-wise map expectation without `mostly` passes on a batch iff no row of it is unexpected, and whether a row is
unexpected depends only on the columns the expectation reads. For the expectations a cluster's certification spends
its validation on (tens of millions of telemetry samples in row-group batches), a handful of rows per batch decide
it:

- `expect_column_values_to_be_between`: within each group of rows that agree on the columns the row condition
  reads (every row one group without a condition), a value is out of range iff the group's smallest or largest
  value is (the bounds, strict or not, are an interval): the rows holding them, and the first null (a missing
  value is skipped by the expectation), decide the group;
- `expect_column_values_to_(not_)be_null`: the first null and the first non-null row of each group;
- schema checks and column type checks on a column of one non-object dtype: any row of the batch with its columns
  and dtypes, which the rows taken keep (`DataFrame.iloc`, and the first null of every column that has one, so a
  column's dtype, which nulls can change, is the batch's).

The witnesses are a subset of the batch's rows: an expectation that fails on them fails on the batch; one that
passes on them passes on the batch by the argument above. Anything else (another expectation type, `mostly`, a row
condition that is not a plain row-wise comparison of columns with literals, a non-numeric range column, too many
groups) is not decided here and is validated on the whole batches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["MAX_GROUPS", "WITNESSED", "condition_columns", "witness_rows", "witnessed"]

MAX_GROUPS = 10_000
_BETWEEN = "expect_column_values_to_be_between"
_NULLS = frozenset({"expect_column_values_to_not_be_null", "expect_column_values_to_be_null"})
WITNESSED = frozenset({_BETWEEN, *_NULLS})
_KWARGS = {
    _BETWEEN: {"column", "min_value", "max_value", "strict_min", "strict_max", "row_condition", "condition_parser"},
    **{t: {"column", "row_condition", "condition_parser"} for t in _NULLS},
}
_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(==|!=|<=|>=|[<>\[\](),.\-]))")
_METHODS = frozenset({"str", "startswith", "endswith"})
_WORDS = frozenset({"in", "not", "and", "or", "True", "False", *_METHODS})


def condition_columns(condition: str, columns: Iterable[str]) -> tuple[str, ...] | None:
    """The columns a pandas row condition reads, or None unless it only compares columns with literals row by row
    (`metric in ["A", "B"]`, `metric.str.startswith("DCGM_FI_PROF_")`, joined by and/or/not)."""
    names = set(columns)
    rest = _LITERAL.sub(" 0 ", condition)
    read: list[str] = []
    at, previous = 0, ""
    while rest[at:].strip():
        match = _TOKEN.match(rest, at)
        if match is None:
            return None
        word = match.group(1)
        if previous == "." and word not in _METHODS:  # no attribute but the string predicates: no aggregates
            return None
        if word is not None and word not in _WORDS:
            if word not in names:
                return None
            if word not in read:
                read.append(word)
        previous, at = match.group(0).strip(), match.end()
    return tuple(read)


def witnessed(kind: str, kwargs: Mapping[str, Any], columns: Iterable[str]) -> tuple[str, tuple[str, ...]] | None:
    """(column, row-condition columns) of an expectation witness rows can decide, else None."""
    if kind not in WITNESSED or not set(kwargs) <= _KWARGS[kind]:
        return None
    column = kwargs.get("column")
    names = list(columns)
    if not isinstance(column, str) or column not in names:
        return None
    condition = kwargs.get("row_condition")
    if condition is None:
        return column, ()
    if not isinstance(condition, str) or kwargs.get("condition_parser") != "pandas":
        return None
    read = condition_columns(condition, names)
    return None if read is None else (column, read)


def _groups(frame: pd.DataFrame, columns: tuple[str, ...], cache: dict[tuple[str, ...], Any]) -> Any:
    """Group codes 0..G-1 of each row by its values in `columns` (nulls a value of their own), or None."""
    import numpy as np
    import pandas as pd

    if columns in cache:
        return cache[columns]
    codes = np.zeros(len(frame), dtype=np.int64)
    count = 1
    for name in columns:
        own, uniques = pd.factorize(frame[name], use_na_sentinel=False)
        codes = codes * len(uniques) + own
        count *= max(len(uniques), 1)
        if count > MAX_GROUPS:
            codes, found = pd.factorize(codes)
            count = len(found)
            if count > MAX_GROUPS:
                cache[columns] = None
                return None
    cache[columns] = (codes, count)
    return cache[columns]


def _firsts(codes: np.ndarray, count: int, mask: np.ndarray) -> np.ndarray:
    """The first row of each group where `mask` holds."""
    import numpy as np

    rows = np.flatnonzero(mask)
    first = np.full(count, len(codes), dtype=np.int64)
    np.minimum.at(first, codes[rows], rows)
    return first[first < len(codes)]


def witness_rows(frame: pd.DataFrame,
                 specs: Sequence[tuple[str, str, tuple[str, ...]]]) -> tuple[np.ndarray, set[int]]:
    """Row positions of `frame` that decide each (kind, column, condition columns) of `specs`, and the positions in
    `specs` of those they cannot decide (a range over a non-numeric column, too many groups)."""
    import numpy as np
    import pandas as pd

    taken: list[np.ndarray] = [np.zeros(1 if len(frame) else 0, dtype=np.int64)]
    missing = {str(name): frame[name].isna().to_numpy() for name in frame.columns}
    for nulls in missing.values():  # the first null of each column keeps the column's dtype
        if nulls.any():
            taken.append(np.asarray([int(np.argmax(nulls))], dtype=np.int64))
    cache: dict[tuple[str, ...], Any] = {}
    undecided: set[int] = set()
    done: dict[tuple[bool, str, tuple[str, ...]], bool] = {}  # ranges (or null checks) of one column by one grouping
    for position, (kind, column, by) in enumerate(specs):
        again = (kind in _NULLS, column, by)
        if again in done:
            if not done[again]:
                undecided.add(position)
            continue
        done[again] = False
        grouped = _groups(frame, by, cache)
        if grouped is None:
            undecided.add(position)
            continue
        codes, count = grouped
        series, nulls = frame[column], missing[column]
        taken.append(_firsts(codes, count, nulls))
        if kind in _NULLS:
            taken.append(_firsts(codes, count, ~nulls))
            done[again] = True
            continue
        if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
            undecided.add(position)
            continue
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        present = ~np.isnan(values)
        for fill, extreme in ((np.inf, np.minimum), (-np.inf, np.maximum)):
            filled = np.where(present, values, fill)
            if count == 1:  # one group: its extreme directly
                taken.append(np.asarray([int(np.argmin(filled) if fill > 0 else np.argmax(filled))]))
                continue
            best = np.full(count, fill)
            extreme.at(best, codes, filled)
            taken.append(_firsts(codes, count, present & (filled == best[codes])))
        done[again] = True
    return np.unique(np.concatenate(taken)), undecided
