"""Run the expectation suites of checks/ with Great Expectations and gate the checks on their results."""

from __future__ import annotations

import functools
import gc
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from clustercert.errors import ChecksError
from clustercert.evidence.bundle import LoadedBundle
from clustercert.evidence.facts import BundleFacts
from clustercert.evidence.parse import ParsedBundle
from clustercert.evidence.provenance import Span
from clustercert.heap import frozen
from clustercert.validation.tables import CROSS_SOURCE, TableInput, build_tables
from clustercert.verdicts import Check, Severity, Status

__all__ = [
    "SCHEMA_VERSION",
    "SUITE_NAMES",
    "ExpectationResult",
    "ExpectationSpec",
    "ResultStatus",
    "SuiteSpec",
    "TableReport",
    "ValidationReport",
    "apply_gating",
    "import_great_expectations",
    "load_suites",
    "run_tables",
    "validate_bundle",
]

SCHEMA_VERSION = 1
SAMPLE_SIZE = 20
SUITE_NAMES = (
    "training_steps",
    "collective_results",
    "rank_timings",
    "telemetry",
    "scheduler_records",
    "job_events",
    "mlperf_runs",
    "gpu_health",
    CROSS_SOURCE,
)
_ID = re.compile(r"^[a-z][a-z0-9_]*$")
# expectations whose result can be summed over row-group batches (row-wise maps and schema checks)
_BATCHABLE = re.compile(
    r"^expect_(column_values_to_|column_pair_values_|multicolumn_values_|table_columns_to_|column_to_exist)"
)
_HINT = "Fix the file in checks/ (see checks/README.md)."


class ResultStatus(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"  # the expectation could not run (Great Expectations raised): not a finding about the data


@dataclass(frozen=True)
class ExpectationSpec:
    """One expectation of a suite as checks/ declares it."""

    id: str
    type: str
    kwargs: dict[str, Any]
    required: bool
    rationale: str
    table: str
    needs: tuple[str, ...] = ()

    @property
    def parameters(self) -> list[str]:
        """Run-time parameters the expectation needs: those its kwargs use (`{"$PARAMETER": name}`) and those
        meta.needs names; without them it is not applicable to the table."""
        used = [v["$PARAMETER"] for v in self.kwargs.values() if isinstance(v, dict) and "$PARAMETER" in v]
        return used + list(self.needs)


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    path: Path
    batched: bool
    expectations: tuple[ExpectationSpec, ...]


@dataclass(frozen=True)
class Sample:
    file: str
    line: int | None
    value: Any
    run: str | None = None  # the run of the row, for cross-source tables (not in validation.json)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "value": self.value}


@dataclass(frozen=True)
class ExpectationResult:
    """The typed outcome of one expectation on one table."""

    expectation: str
    type: str
    kwargs: dict[str, Any]
    required: bool
    status: ResultStatus
    unexpected_count: int | None
    unexpected_percent: float | None
    sample: tuple[Sample, ...]
    message: str
    run: str
    file: str

    def to_json(self) -> dict[str, Any]:
        return {
            "expectation": self.expectation,
            "type": self.type,
            "kwargs": self.kwargs,
            "required": self.required,
            "status": self.status.value,
            "unexpected_count": self.unexpected_count,
            "unexpected_percent": self.unexpected_percent,
            "sample": [s.to_json() for s in self.sample],
            "message": self.message,
        }

    @property
    def blocking(self) -> bool:
        """A required expectation that did not pass: the table cannot be trusted."""
        return self.required and self.status is not ResultStatus.PASS

    def problem(self) -> str:
        """One line naming file, line, expectation and what was wrong (`<where>: required expectation ...`)."""
        span = self.where()
        where = span.file if not span.first else f"{span.file} line {span.first}"
        verb = "could not run" if self.status is ResultStatus.ERROR else "failed"
        kind = "required" if self.required else "advisory"
        return f"{where}: {kind} expectation '{self.expectation}' {verb}: {self.message}"

    def where(self) -> Span:
        """The first offending row (or the table's file when no row can be named)."""
        first = self.sample[0] if self.sample else None
        line = first.line if first is not None and first.line is not None else 0
        return Span(first.file if first is not None else self.file, line, line, 1)


@dataclass(frozen=True)
class TableReport:
    suite: str
    table: str
    run: str
    file: str
    rows: int
    results: tuple[ExpectationResult, ...]
    not_applicable: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "table": self.table,
            "run": self.run,
            "file": self.file,
            "rows": self.rows,
            "results": [r.to_json() for r in self.results],
            "not_applicable": list(self.not_applicable),
        }


@dataclass(frozen=True)
class ValidationReport:
    """Every suite's results per table; cross-source results kept apart."""

    tables: tuple[TableReport, ...]
    cross_source: tuple[ExpectationResult, ...]
    cross_tables: tuple[TableReport, ...] = field(default=())
    # what parsers read with a caveat (run id, file, message naming the lines): advisory WARN checks at the gate
    parse_warnings: tuple[tuple[str, str, str], ...] = field(default=())

    def all_results(self) -> list[ExpectationResult]:
        return [r for t in self.tables for r in t.results] + list(self.cross_source)

    def summary(self) -> dict[str, int]:
        results = self.all_results()
        return {
            "required_failed": sum(1 for r in results if r.required and r.status is ResultStatus.FAIL),
            "errors": sum(1 for r in results if r.status is ResultStatus.ERROR),
            "passed": sum(1 for r in results if r.status is ResultStatus.PASS),
        }

    @property
    def blocking(self) -> list[ExpectationResult]:
        return [r for r in self.all_results() if r.blocking]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tables": [t.to_json() for t in self.tables],
            "cross_source": [r.to_json() for r in self.cross_source],
            "parse_warnings": [{"run": run, "file": file, "message": message}
                               for run, file, message in self.parse_warnings],
            "summary": self.summary(),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def load_suites(checks_dir: Path) -> dict[str, SuiteSpec]:
    """Every suite of `checks_dir` (`<name>.json`, Great Expectations' suite JSON with our meta), checked."""
    suites: dict[str, SuiteSpec] = {}
    for name in SUITE_NAMES:
        path = checks_dir / f"{name}.json"
        if not path.is_file():
            raise ChecksError(f"{path}: expected the expectation suite '{name}', got no file. {_HINT}")
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ChecksError(f"{path}: expected a JSON expectation suite, got {exc}. {_HINT}") from None
        suites[name] = _suite(doc, path, name)
    return suites


def _suite(doc: object, path: Path, name: str) -> SuiteSpec:
    if not isinstance(doc, dict) or doc.get("name") != name or not isinstance(doc.get("expectations"), list):
        raise ChecksError(f"{path}: expected an object with name '{name}' and a list of expectations. {_HINT}")
    meta = doc.get("meta") or {}
    batched = bool(meta.get("batched", False))
    seen: set[str] = set()
    out: list[ExpectationSpec] = []
    for index, item in enumerate(doc["expectations"]):
        where = f"{path} expectations[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("type"), str) or not isinstance(
            item.get("kwargs"), dict
        ):
            raise ChecksError(f"{where}: expected an object with 'type' and 'kwargs'. {_HINT}")
        em = item.get("meta")
        if not isinstance(em, dict):
            raise ChecksError(f"{where}: expected 'meta' with id, required and rationale. {_HINT}")
        eid, required, rationale = em.get("id"), em.get("required"), em.get("rationale")
        if not isinstance(eid, str) or not _ID.match(eid) or eid in seen:
            raise ChecksError(f"{where}: expected a unique lower-case id in meta, got {eid!r}. {_HINT}")
        if not isinstance(required, bool):
            raise ChecksError(f"{where} ({eid}): expected meta.required true or false, got {required!r}. {_HINT}")
        if not isinstance(rationale, str) or not rationale.strip() or "\n" in rationale:
            raise ChecksError(f"{where} ({eid}): expected a one-line meta.rationale. {_HINT}")
        table = em.get("table", name)
        if name == CROSS_SOURCE and not isinstance(em.get("table"), str):
            raise ChecksError(f"{where} ({eid}): a cross-source expectation names its table in meta. {_HINT}")
        if batched and not _BATCHABLE.match(item["type"]):
            raise ChecksError(
                f"{where} ({eid}): a batched suite takes row-wise expectations only (summable over row "
                f"groups), got {item['type']}. Compute the reduction as a column instead. {_HINT}"
            )
        needs = em.get("needs", [])
        if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
            raise ChecksError(f"{where} ({eid}): expected meta.needs as a list of parameter names. {_HINT}")
        seen.add(eid)
        out.append(ExpectationSpec(eid, item["type"], dict(item["kwargs"]), required, rationale.strip(), str(table),
                                   tuple(needs)))
    return SuiteSpec(name, path, batched, tuple(out))


def _gx_suite(gx: Any, name: str, specs: Sequence[ExpectationSpec]) -> Any:
    return gx.ExpectationSuite(
        name=name,
        expectations=[{"type": s.type, "kwargs": s.kwargs, "meta": {"id": s.id}} for s in specs],
    )


# Great Expectations' modules that take SciPy's statistics at import (`from scipy import stats`) and use it only
# inside the expectations and metrics that call it: KL divergence and the two KS tests, none in checks/.
_DEFERRED = "scipy.stats"
_UNUSED = "sqlalchemy"


def import_great_expectations() -> Any:
    """Great Expectations imported (its analytics off unless GX_ANALYTICS_ENABLED says otherwise), with
    scipy.stats loaded only when something first uses it, and without its SQL data sources (see below).

    Three of Great Expectations' modules import scipy.stats at import time for the three expectations above; the
    import of scipy.stats (and of the linear algebra, sparse, spatial and optimisation packages it takes in,
    hundreds of modules) is much of Great Expectations' own, on a certification's path to its first flow.
    Here scipy.stats is made a lazy module (`importlib.util.LazyLoader`, the standard library's own) and set where
    `from scipy import stats` finds it: the first attribute read from it loads it, in full, as an eager import
    would; nothing else changes. Where scipy.stats is already loaded, or SciPy is not there, Great Expectations is
    imported as it is."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    if "great_expectations" in sys.modules:
        return sys.modules["great_expectations"]
    if _DEFERRED not in sys.modules:
        _defer(_DEFERRED)
    # SQLAlchemy, which Great Expectations takes only for its SQL data sources (an optional dependency: it runs
    # without it, as where it is not installed), is hidden from it while it is imported, unless loaded already:
    # `checks/` validates pandas frames only, and a certification loads SQLAlchemy for nothing else (the Prefect
    # server that needs it is a process of its own), and its import is on the run's path to its first flow.
    hidden = _UNUSED not in sys.modules
    if hidden:
        sys.modules[_UNUSED] = None  # type: ignore[assignment]  # `import sqlalchemy` raises ImportError
    try:
        import great_expectations
    finally:
        if hidden and sys.modules.get(_UNUSED, ...) is None:
            del sys.modules[_UNUSED]  # importable as before, by anything else
    return great_expectations


def _defer(name: str) -> None:
    """Module `name` (a package's submodule) made lazy: in sys.modules and on its package, executed on first use.

    Both places: `from package import module` reads the package's attribute (SciPy's own `__getattr__` would call
    `import_module`, which reads the module's `__spec__` and so loads it at once)."""
    import importlib
    import importlib.util

    parent, _, child = name.rpartition(".")
    try:
        package = importlib.import_module(parent)
        spec = importlib.util.find_spec(name)
    except ImportError:
        return
    if spec is None or spec.loader is None:
        return
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    setattr(package, child, module)


def _context(data_docs: Path | None = None) -> tuple[Any, Any, Any]:
    """Great Expectations (imported here: it costs seconds), an in-memory context without any docs site
    unless `data_docs` names a folder for one, and a batch definition for in-memory frames."""
    gx = import_great_expectations()
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    sites: dict[str, Any] = {}
    if data_docs is not None:
        sites["clustercert"] = {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(data_docs)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites=sites,
        progress_bars=ProgressBarsConfig(globally=False),
        analytics_enabled=False,
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    asset = context.data_sources.add_pandas("clustercert").add_dataframe_asset("tables")
    return gx, context, asset.add_batch_definition_whole_dataframe("whole")


def _release(batch_definition: Any) -> None:
    """Drop the batches Great Expectations keeps: its execution engine holds the data of every batch it loaded (the
    batch manager's cache) for the context's life, where the validation needs only the batch in hand."""
    manager = batch_definition.data_asset.datasource.get_execution_engine().batch_manager
    manager.batch_data_cache.clear()
    manager.reset_batch_cache()


def _raised(info: object) -> str | None:
    """The exception message when Great Expectations could not run the expectation, else None."""
    if not isinstance(info, dict):
        return None
    if info.get("raised_exception"):
        return str(info.get("exception_message") or "raised an exception")
    for value in info.values():
        found = _raised(value)
        if found is not None:
            return found
    return None


def _plain(value: Any) -> Any:
    """JSON-safe Python values from numpy scalars, tuples and non-finite floats."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)


@dataclass
class _Tally:
    spec: ExpectationSpec
    error: str | None = None
    success: bool = True
    unexpected: int = 0
    counted: int = 0
    has_counts: bool = False
    samples: list[Sample] = field(default_factory=list)
    observed: Any = None
    details: dict[str, Any] = field(default_factory=dict)


def _absorb(tally: _Tally, result: Any, table: TableInput) -> None:
    error = _raised(result.exception_info)
    if error is not None:
        tally.error = tally.error or error
        return
    tally.success = tally.success and bool(result.success)
    data = result.result or {}
    if "unexpected_count" in data:
        tally.has_counts = True
        tally.unexpected += int(data.get("unexpected_count") or 0)
        tally.counted += int(data.get("element_count") or 0) - int(data.get("missing_count") or 0)
        values = data.get("partial_unexpected_list") or []
        indices = data.get("partial_unexpected_index_list") or []
        for value, index in zip(values, indices, strict=False):
            if len(tally.samples) >= SAMPLE_SIZE:
                break
            row = index if isinstance(index, dict) else {}
            file, line, run = str(row.get("_file", table.file)), _plain(row.get("_line")), row.get("_run")
            tally.samples.append(Sample(file, int(line) if isinstance(line, int | float) else None, _plain(value),
                                        None if run is None else str(run)))
    else:
        tally.observed = _plain(data.get("observed_value"))
        for key in ("details", "partial_missing_list"):
            if key in data:
                tally.details[key] = data[key]


def _finish(tally: _Tally, table: TableInput) -> ExpectationResult:
    spec = tally.spec
    kwargs = _resolved(spec.kwargs, table.parameters)
    if tally.error is not None:
        status, message = ResultStatus.ERROR, f"could not run: {tally.error}"
    elif tally.success:
        status, message = ResultStatus.PASS, "passed"
    else:
        status = ResultStatus.FAIL
        if tally.has_counts:
            message = f"{tally.unexpected} of {tally.counted} rows outside the expectation ({spec.rationale})"
        else:
            missing = tally.details.get("partial_missing_list")
            shown = f"missing {_plain(missing)}" if missing else f"observed {tally.observed}"
            message = f"{shown} ({spec.rationale})"
    sample = tuple(tally.samples)
    if status is ResultStatus.FAIL and not sample:
        sample = (Sample(table.file, None, tally.observed if not tally.details else _plain(
            tally.details.get("partial_missing_list"))),)
    percent = (100.0 * tally.unexpected / tally.counted if tally.counted else 0.0) if tally.has_counts else None
    return ExpectationResult(
        expectation=spec.id, type=spec.type, kwargs=kwargs, required=spec.required, status=status,
        unexpected_count=tally.unexpected if tally.has_counts else None, unexpected_percent=percent,
        sample=sample, message=message, run=table.run, file=table.file,
    )


def _resolved(kwargs: Mapping[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if isinstance(value, dict) and "$PARAMETER" in value:
            value = parameters.get(value["$PARAMETER"])
        out[key] = _plain(value)
    return out


# Expectations whose outcome on tables stacked together decides each table's (with no `mostly`, for rows): a row-wise
# map passes on the stack iff it passes on every table (Great Expectations counts unexpected rows and passes
# vacuously where none are considered); a schema check sees the same columns in every table of a stack.
_ROW_WISE = frozenset({
    "expect_column_values_to_not_be_null", "expect_column_values_to_be_null", "expect_column_values_to_be_between",
    "expect_column_values_to_be_in_set", "expect_column_values_to_not_be_in_set",
    "expect_column_values_to_match_regex", "expect_column_values_to_not_match_regex",
    "expect_column_pair_values_a_to_be_greater_than_b", "expect_column_pair_values_to_be_equal",
})
_SCHEMA = frozenset({
    "expect_table_columns_to_match_set", "expect_table_columns_to_match_ordered_list", "expect_column_to_exist",
    "expect_table_column_count_to_equal",
})
# a column type check decides each table of a stack where the stack keeps the column's (one, non-object) dtype
_DTYPE = frozenset({"expect_column_values_to_be_of_type", "expect_column_values_to_be_in_type_list"})


def _stackable(spec: ExpectationSpec, dtypes: Mapping[str, str]) -> bool:
    if spec.type in _ROW_WISE:
        return "mostly" not in spec.kwargs
    if spec.type in _SCHEMA:
        return True
    return spec.type in _DTYPE and dtypes.get(str(spec.kwargs.get("column")), "object") not in ("object", "category")


def _frame_dtype(array: Any) -> str:
    """The dtype a frame built from `array` gives its column: a numeric array's own; an object array's is what pandas
    infers from its values (strings read as pandas' string dtype)."""
    if array.dtype.kind != "O":
        return str(array.dtype)
    import pandas as pd

    return str(pd.Series(array, copy=False).dtype)


def _stacked_passes(gx: Any, batch_definition: Any, tables: Sequence[TableInput],
                    runnable: Sequence[Sequence[ExpectationSpec]]) -> list[dict[str, bool]]:
    """Per table, the expectations decided by one validation of its stack, with whether they count rows.

    Small tables of one kind whose columns, dtypes and resolved kwargs agree are stacked into one frame and
    validated once: Great Expectations' cost is per expectation and validation, not per row, and a sweep has a
    table per file (thousands on a cluster). An expectation that passes on the stack passes on
    each table with no unexpected row, which is all validation.json records of a pass. Where a row-wise one fails,
    the stack's unexpected rows name the tables that hold them; those tables (all of them, for any other
    expectation that does not pass or cannot run) validate it on their own, so its counts, samples and messages
    are each table's own.
    """
    import numpy as np
    import pandas as pd

    groups: dict[tuple[Any, ...], list[int]] = {}
    frames: dict[int, Any] = {}  # a table's frame, or its columns (TableInput.columns: no frame built)
    kinds: dict[int, list[str]] = {}  # each table's dtypes, in its columns' order
    stacked_specs: dict[int, list[ExpectationSpec]] = {}
    for number, table in enumerate(tables):
        if table.batched or table.rows == 0:
            continue
        frame = table.columns() if table.columns is not None else next(iter(table.batches()))
        dtypes = ({str(c): _frame_dtype(a) for c, a in frame.items()} if isinstance(frame, dict)
                  else {str(c): str(t) for c, t in frame.dtypes.items()})
        specs = [s for s in runnable[number] if _stackable(s, dtypes)]
        if not specs:
            continue
        key = (table.suite, table.table, tuple(dtypes.items()),
               tuple((s.id, json.dumps(_resolved(s.kwargs, table.parameters), sort_keys=True)) for s in specs))
        groups.setdefault(key, []).append(number)
        frames[number], kinds[number], stacked_specs[number] = frame, list(dtypes.values()), specs
    passes: list[dict[str, bool]] = [{} for _ in tables]
    for members in groups.values():
        if len(members) < 2:
            continue
        first = tables[members[0]]
        parts = [frames[n] for n in members]
        if all(isinstance(p, dict) for p in parts):  # columns of one key (names and dtypes): joined column-wise
            stack = pd.DataFrame({name: np.concatenate([p[name] for p in parts]) for name in parts[0]}, copy=False)
        else:
            stack = pd.concat([p if not isinstance(p, dict) else pd.DataFrame(p, copy=False) for p in parts],
                              ignore_index=True)
        if [str(t) for t in stack.dtypes] != kinds[members[0]]:
            continue  # the stack changed a dtype: each table is validated on its own
        starts = np.cumsum([0] + [len(next(iter(p.values()))) if isinstance(p, dict) else len(p) for p in parts[:-1]])
        specs = stacked_specs[members[0]]
        try:
            outcome = batch_definition.get_batch(batch_parameters={"dataframe": stack}).validate(
                _gx_suite(gx, f"{first.suite}.{first.table}", specs), expectation_parameters=first.parameters,
                result_format={"result_format": "COMPLETE"})
        except Exception:  # each table's own validation says what went wrong
            continue
        finally:
            _release(batch_definition)
        for item in outcome.results:
            eid = (item.expectation_config.meta or {}).get("id")
            data = item.result or {}
            if not isinstance(eid, str) or _raised(item.exception_info) is not None:
                continue
            if item.success:
                failing: set[int] = set()
            elif item.expectation_config.type in _ROW_WISE and isinstance(data.get("unexpected_index_list"), list):
                # the stack's row numbers of the unexpected rows name the tables that hold them
                try:
                    rows = np.asarray([int(i) for i in data["unexpected_index_list"]], dtype=np.int64)
                except (TypeError, ValueError):
                    continue
                failing = {members[i] for i in np.unique(np.searchsorted(starts, rows, side="right") - 1)}
            else:
                continue
            for number in members:
                if number not in failing:
                    passes[number][eid] = "unexpected_count" in data
    return passes


def _witnessed_passes(gx: Any, batch_definition: Any, table: TableInput,
                      runnable: Sequence[ExpectationSpec], told: Callable[[int, int], None] | None = None,
                      ) -> dict[str, bool]:
    """The expectations of a batched table decided by one validation of its batches' witness rows (see
    `clustercert.validation.witness`), with whether they count rows.

    Each batch is reduced with numpy to the rows that decide its row-wise ranges and null checks, its schema and
    its column dtypes; the witness rows of every batch are validated together (per set of dtypes the batches
    have), so Great Expectations runs once per table instead of once per million rows. An expectation that passes
    there passes on every batch with no unexpected row; one that fails, raises or cannot be decided that way is
    left to the batch-by-batch validation, whose counts, samples and messages are the whole table's. `told` is
    told the number of each batch and its rows as it is reduced.
    """
    import pandas as pd

    from clustercert.validation.witness import witness_rows, witnessed

    candidates = {s.id: s for s in runnable}
    frames: dict[tuple[tuple[str, str], ...], list[Any]] = {}
    for part, frame in enumerate(table.batches(), start=1):
        if told is not None:
            told(part, len(frame))
        columns = [str(c) for c in frame.columns]
        dtypes = {str(c): str(t) for c, t in frame.dtypes.items()}
        rowwise: list[tuple[str, tuple[str, str, tuple[str, ...]]]] = []
        for spec in list(candidates.values()):
            if not _stackable(spec, dtypes):
                del candidates[spec.id]
            elif spec.type in _ROW_WISE:
                found = witnessed(spec.type, _resolved(spec.kwargs, table.parameters), columns)
                if found is None:
                    del candidates[spec.id]
                else:
                    rowwise.append((spec.id, (spec.type, *found)))
        if not candidates:
            return {}
        rows, undecided = witness_rows(frame, [w for _, w in rowwise])
        for position in undecided:
            candidates.pop(rowwise[position][0], None)
        signature = tuple(dtypes.items())
        frames.setdefault(signature, []).append(frame.iloc[rows])
        del frame
    decided: dict[str, bool] = {}
    specs = list(candidates.values())
    for parts in frames.values():
        if not specs:
            break
        witnesses = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
        try:
            outcome = batch_definition.get_batch(batch_parameters={"dataframe": witnesses}).validate(
                _gx_suite(gx, f"{table.suite}.{table.table}", specs), expectation_parameters=table.parameters,
                result_format={"result_format": "BASIC"})
        except Exception:  # the batch-by-batch validation says what went wrong
            return {}
        finally:
            _release(batch_definition)
        passing: set[str] = set()
        for item in outcome.results:
            eid = (item.expectation_config.meta or {}).get("id")
            if isinstance(eid, str) and item.success and _raised(item.exception_info) is None:
                passing.add(eid)
                decided.setdefault(eid, "unexpected_count" in (item.result or {}))
        specs = [s for s in specs if s.id in passing]
    return {s.id: decided[s.id] for s in specs}


def run_tables(
    tables: Iterable[TableInput], suites: Mapping[str, SuiteSpec], *, data_docs: Path | None = None,
    stack: bool = True, told: Callable[[str], None] | None = None,
) -> ValidationReport:
    """Run each table's suite with Great Expectations (batch by batch for large tables) and type the results.

    Small tables of one kind are first validated stacked (`_stacked_passes`), large ones on their batches'
    witness rows (`_witnessed_passes`); what these do not pass is validated table by table, batch by batch.
    `stack=False` validates everything that way, as `data_docs` does: the same report. With `data_docs`, Great
    Expectations' own Data Docs are also built into that folder (they load remote scripts and styles: keep them
    out of signed run folders). `told` is told what is validated: the step, the table, the batch of a large one (a
    cluster's validation is a minute).
    """
    say = told or _silent
    say("start Great Expectations")  # its import and its context: a second or more
    gx, context, batch_definition = _context(data_docs)
    tables = list(tables)
    # What exists now (the parsed evidence: millions of objects at cluster scale) lives on: frozen, it is left out
    # of the collections below, which free the cyclic garbage each batch's validation leaves (Great Expectations'
    # objects; with such a heap Python's own full collections are rare, and a cluster's telemetry batches would
    # grow the process by gigabytes before one came).
    with frozen():
        return _run_tables(_GxRun(gx, context, batch_definition, data_docs, say), tables, suites, stack)


def _silent(what: str) -> None:
    """Nobody listens."""


def _batch_told(say: Callable[[str], None], shown: str, part: int, rows: int) -> None:
    say(f"{shown} {part:,} ({rows:,} rows)")


@dataclass
class _GxRun:
    """One run of Great Expectations over the tables: the module, its context, the batch definition frames are
    validated through, the Data Docs folder (None: none built) with the validations kept for it, and who is told."""

    gx: Any
    context: Any
    batch_definition: Any
    data_docs: Path | None
    say: Callable[[str], None]
    kept: list[tuple[str, str, Any]] = field(default_factory=list)  # (suite, batch, outcome) for the Data Docs


def _run_tables(run: _GxRun, tables: list[TableInput], suites: Mapping[str, SuiteSpec],
                stack: bool) -> ValidationReport:
    gx, batch_definition, say = run.gx, run.batch_definition, run.say
    reports: list[TableReport] = []
    cross: list[TableReport] = []
    declared = [[s for s in suites[t.suite].expectations if s.table == t.table] for t in tables]
    applicable = [[s for s in specs if all(p in t.parameters for p in s.parameters)]
                  for t, specs in zip(tables, declared, strict=True)]
    passed: list[dict[str, bool]] = [{} for _ in tables]
    if stack and run.data_docs is None:
        say(f"{len(tables):,} tables, small ones stacked by kind")
        passed = _stacked_passes(gx, batch_definition, tables, applicable)
        for number, table in enumerate(tables):
            if table.batched and table.rows and applicable[number]:
                shown = f"{table.run} ({table.table}, {table.rows:,} rows): the witness rows of batch"
                passed[number] = _witnessed_passes(gx, batch_definition, table, applicable[number],
                                                   functools.partial(_batch_told, say, shown))
                gc.collect()
    for number, table in enumerate(tables):
        suite = suites[table.suite]
        specs, runnable = declared[number], applicable[number]
        skipped = tuple(s.id for s in specs if s not in runnable)
        tallies = {s.id: _Tally(s, has_counts=passed[number].get(s.id, False)) for s in runnable}
        own = [s for s in runnable if s.id not in passed[number]]
        if own:  # named only for a table validated on its own, not for each of a sweep's stacked ones
            shown = f"{table.run} ({table.table}, {table.rows:,} rows), table {number + 1:,} of {len(tables):,}"
            say(shown)
            _validate_batches(run, table, _gx_suite(gx, f"{suite.name}.{table.table}", own), tallies,
                              (shown, f"{number:03d}-{table.run}"))
        results = tuple(_finish(tallies[s.id], table) for s in runnable)
        report = TableReport(suite.name, table.table, table.run, table.file, table.rows, results, skipped)
        (cross if table.suite == CROSS_SOURCE else reports).append(report)
    if run.data_docs is not None:
        _build_data_docs(run.context, run.kept)
    return ValidationReport(
        tables=tuple(reports),
        cross_source=tuple(r for t in cross for r in t.results),
        cross_tables=tuple(cross),
    )


def _validate_batches(run: _GxRun, table: TableInput, gx_suite: Any, tallies: dict[str, _Tally],
                      names: tuple[str, str]) -> None:
    """Validate `table` batch by batch with `gx_suite`, each result added to its expectation's tally; `names`:
    how progress names the table, and how the Data Docs name its batches."""
    shown, docs_name = names
    index = ["_file", "_line", "_run"]
    for part, frame in enumerate(table.batches()):
        if table.batched:
            run.say(f"{shown}: batch {part + 1:,} ({len(frame):,} rows)")
        batch = run.batch_definition.get_batch(batch_parameters={"dataframe": frame})
        result_format = {
            "result_format": "SUMMARY",
            "unexpected_index_column_names": [c for c in index if c in frame.columns],
            "partial_unexpected_count": SAMPLE_SIZE,
        }
        try:
            outcome = batch.validate(gx_suite, expectation_parameters=table.parameters, result_format=result_format)
        except Exception as exc:  # Great Expectations failed as a whole: every expectation is an ERROR
            for tally in tallies.values():
                tally.error = tally.error or f"{exc.__class__.__name__}: {exc}"
            break
        finally:
            if run.data_docs is None:  # Data Docs are built from the batches at the end
                _release(run.batch_definition)
                if table.batched:
                    gc.collect()
        if run.data_docs is not None:
            run.kept.append((gx_suite.name, f"{docs_name}-{part}", outcome))
        for item in outcome.results:
            eid = (item.expectation_config.meta or {}).get("id")
            if eid in tallies:
                _absorb(tallies[eid], item, table)


def _build_data_docs(context: Any, kept: Sequence[tuple[str, str, Any]]) -> None:
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    run_id = RunIdentifier(run_name="clustercert")
    for suite_name, batch_name, outcome in kept:
        key = ValidationResultIdentifier(ExpectationSuiteIdentifier(suite_name), run_id, batch_name)
        context.validation_results_store.set(key, outcome)
    context.build_data_docs()


def validate_bundle(
    bundle: LoadedBundle,
    facts: BundleFacts,
    parsed: ParsedBundle,
    *,
    checks_dir: Path | None = None,
    data_docs: Path | None = None,
    told: Callable[[str], None] | None = None,
) -> ValidationReport:
    """Validate every usable table of the bundle and the cross-source tables with the suites of checks/
    (`checks_dir`, default settings.checks_dir); `facts` are the catalog's facts of each run
    (`evidence.facts.bundle_facts`); `told`, what is validated (`run_tables`)."""
    if checks_dir is None:
        from clustercert.settings import load_settings

        checks_dir = load_settings().checks_dir
    if told is not None:
        told("build the tables from the parsed evidence")  # a list: built before any is validated (seconds at scale)
    report = run_tables(build_tables(bundle, facts, parsed, told), load_suites(checks_dir), data_docs=data_docs,
                        told=told)
    warnings = tuple((run, pf.display, str(w)) for run, files in parsed.items() for pf in files
                     for w in (getattr(pf.result, "warnings", None) or []))
    return replace(report, parse_warnings=warnings) if warnings else report


def _subject(result: ExpectationResult) -> str:
    """`validation.<run>_<expectation>`; for a cross-source table, the run of its first offending row."""
    run = next((s.run for s in result.sample if s.run), result.run)
    return f"validation.{run}_{result.expectation}"


def _blocking_files(result: ExpectationResult) -> set[str]:
    return {s.file for s in result.sample} | ({result.file} if result.run != "bundle" else set())


def apply_gating(checks: list[Check], report: ValidationReport) -> list[Check]:
    """Checks whose evidence is in a table with a failed required expectation become ERROR (the outcome is
    then INCOMPLETE); each such expectation also adds a required `validation.<run>_<expectation>` ERROR check."""
    blocking = report.blocking
    warned: dict[str, list[tuple[str, str]]] = {}
    for run, file, message in report.parse_warnings:
        warned.setdefault(run, []).append((file, message))
    advisories = [Check(
        id=f"validation.{run}_read_with_warnings", title=f"Evidence of {run} was read without caveats",
        phase="validation", severity=Severity.ADVISORY, status=Status.WARN, measured=float(len(found)), target=0.0,
        unit="warnings", message="; ".join(m for _, m in found), evidence=tuple(Span(f, 0, 0, 1) for f, _ in found[:1]),
    ) for run, found in warned.items()]
    if not blocking:
        return [*checks, *advisories]
    by_file: dict[str, ExpectationResult] = {}
    for result in blocking:
        for file in _blocking_files(result):
            by_file.setdefault(file, result)
    gated: list[Check] = []
    for check in checks:
        hit = next((by_file[s.file] for s in check.evidence if s.file in by_file), None)
        if hit is None or check.status is Status.ERROR:
            gated.append(check)
            continue
        gated.append(replace(check, status=Status.ERROR,
                             message=f"{hit.problem()}; the check cannot be judged on this evidence"))
    seen: set[str] = set()
    for result in blocking:
        check_id = _subject(result)
        if check_id in seen:
            continue
        seen.add(check_id)
        gated.append(Check(
            id=check_id,
            title=f"Evidence of {result.run} meets expectation {result.expectation}",
            phase="validation", severity=Severity.REQUIRED, status=Status.ERROR, measured=None, target=None,
            unit="", message=result.problem(), evidence=(result.where(),),
        ))
    return [*gated, *advisories]
