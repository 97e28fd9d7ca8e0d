"""MLPerf Training result folders: `:::MLLOG` runs, `scaling.json`, the system JSON, and the score."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT, read_json, to_float
from clustercert.parsers.training import line_record, read_text

__all__ = ["MlperfResult", "MlperfRun", "listed_files", "olympic_score", "parse_mlperf", "parse_mlperf_files"]

FORMAT = "mlperf"
_HINT = "Use the submission's results folder as MLCommons publishes it."
_MARK = ":::MLLOG"
_LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: a time past it is no time in ms since the epoch
# the records a run's score reads, and those its step time is derived from
_SCORED = ("run_start", "run_stop", "submission_benchmark", "seed", "tracked_stats", "global_batch_size")


@dataclass(frozen=True)
class MlperfRun:
    """One result file: `run_start` to `run_stop`; status is `success` only when run_stop says so."""

    file: str
    status: str
    start_ms: int | None
    stop_ms: int | None
    start_line: int | None
    stop_line: int | None
    seed: int | None = None
    # MLPerf's per-step `tracked_stats`: each `train_step_time` (s) and `throughput` (samples/s) logged
    step_times_s: tuple[float, ...] = ()
    throughputs: tuple[float, ...] = ()
    global_batch_size: int | None = None

    @property
    def step_time_s(self) -> float | None:
        """The mean step time: of the logged `train_step_time`s, else global batch / mean throughput (samples/s)."""
        if self.step_times_s:
            return sum(self.step_times_s) / len(self.step_times_s)
        if self.throughputs and self.global_batch_size:
            mean = sum(self.throughputs) / len(self.throughputs)
            return self.global_batch_size / mean if mean > 0 else None
        return None

    @property
    def minutes(self) -> float | None:
        if self.status != "success" or self.start_ms is None or self.stop_ms is None:
            return None
        return (self.stop_ms - self.start_ms) / 60000.0

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "status": self.status,
            "minutes": self.minutes,
            "start_ms": self.start_ms,
            "stop_ms": self.stop_ms,
            "start_line": self.start_line,
            "stop_line": self.stop_line,
            "seed": self.seed,
            "tracked_steps": max(len(self.step_times_s), len(self.throughputs)),
            "global_batch_size": self.global_batch_size,
            "step_time_s": self.step_time_s,
        }


@dataclass(frozen=True)
class MlperfResult:
    """A result folder with its score (DOMAIN.md section 8); `score_minutes` None when invalid."""

    folder: str
    benchmark: str | None
    ruleset: str | None
    runs: list[MlperfRun]
    scaling_factor: float | None
    system_name: str | None
    score_minutes: float | None
    error: str | None
    # the system JSON's number_of_nodes x accelerators_per_node, where it states both
    system_gpus: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "folder": self.folder,
            "benchmark": self.benchmark,
            "ruleset": self.ruleset,
            "runs": [r.to_json() for r in self.runs],
            "scaling_factor": self.scaling_factor,
            "system_name": self.system_name,
            "system_gpus": self.system_gpus,
            "score_minutes": self.score_minutes,
            "error": self.error,
        }


def olympic_score(minutes: list[float], scaling_factor: float | None) -> float:
    """Drop the fastest and the slowest run, average the rest, times the scaling factor."""
    ordered = sorted(minutes)
    kept = ordered[1:-1]
    return sum(kept) / len(kept) * (scaling_factor if scaling_factor is not None else 1.0)


def parse_mlperf(
    path: Path, display: str, *, ruleset: str | None = None, limit: int = DEFAULT_LIMIT
) -> MlperfResult:
    """Every `result_*.txt` of the folder (or one file), `scaling.json`, the system JSON, the score."""
    if not path.is_dir():
        return parse_mlperf_files([(path, display)], display, ruleset=ruleset, limit=limit)
    results = sorted(path.glob("result_*.txt"), key=_run_order)
    if not results:
        raise EvidenceError(display, f"expected result_*.txt files in the folder, found none. {_HINT}")
    others = [p for p in sorted(path.glob("*.json")) if p.is_file()]
    base = display.rstrip("/")
    return parse_mlperf_files([(p, f"{base}/{p.name}") for p in [*results, *others]], display,
                              ruleset=ruleset, limit=limit)


def listed_files(entries: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """The files of a result listed in bundle.yaml (path, display): a listed folder by its `result_*.txt` and JSON
    files (as parse_mlperf() reads one), a file as it is (MLCommons' `systems/<system>.json` sits outside the
    result folder)."""
    out: list[tuple[Path, str]] = []
    for path, shown in entries:
        if not path.is_dir():
            out.append((path, shown))
            continue
        base = shown.rstrip("/")
        inner = [*sorted(path.glob("result_*.txt"), key=_run_order), *sorted(path.glob("*.json"))]
        out += [(p, f"{base}/{p.name}") for p in inner if p.is_file()]
    return out


def parse_mlperf_files(
    files: list[tuple[Path, str]], display: str, *, ruleset: str | None = None, limit: int = DEFAULT_LIMIT
) -> MlperfResult:
    """The runs of a result folder listed file by file (path, display): every `result_*` log is a run,
    `scaling.json` gives the scaling factor and another JSON with `system_name` the system; all are scored."""
    logs = [(p, d) for p, d in files if p.suffix != ".json"]
    if not logs:
        raise EvidenceError(display, f"expected result_*.txt files among the files, found none. {_HINT}")
    runs: list[MlperfRun] = []
    benchmark: str | None = None
    for file, shown in sorted(logs, key=lambda item: _run_order(item[0])):
        run, bench = _parse_run(file, shown, limit)
        runs.append(run)
        if bench is not None:
            if benchmark is not None and bench != benchmark:
                raise EvidenceError(
                    shown,
                    f"expected benchmark '{benchmark}' as in the other runs, got '{bench}'. {_HINT}",
                    field="submission_benchmark",
                )
            benchmark = bench
    scaling: float | None = None
    system_name: str | None = None
    system_gpus: int | None = None
    for file, shown in files:
        if file.suffix != ".json":
            continue
        doc = read_json(file, shown, limit=limit)
        if file.name == "scaling.json":
            scaling = _scaling_factor(doc, shown)
        elif system_name is None and isinstance(doc, dict) and isinstance(doc.get("system_name"), str):
            system_name = doc["system_name"]
            nodes, per_node = _count(doc.get("number_of_nodes")), _count(doc.get("accelerators_per_node"))
            system_gpus = nodes * per_node if nodes and per_node else None
    times = [r.minutes if r.minutes is not None else math.inf for r in runs]
    failed = sum(1 for t in times if math.isinf(t))
    score: float | None = None
    error: str | None = None
    if failed > 1:
        error = f"invalid: {failed} runs did not finish with status success (at most one may)"
    elif len(times) < 3:
        error = f"invalid: the olympic mean needs at least 3 runs, got {len(times)}"
    else:
        score = olympic_score(times, scaling)
    return MlperfResult(
        folder=display,
        benchmark=benchmark,
        ruleset=ruleset,
        runs=runs,
        scaling_factor=scaling,
        system_name=system_name,
        score_minutes=score,
        error=error,
        system_gpus=system_gpus,
    )


def _count(value: object) -> int | None:
    """A count as MLCommons' system JSON writes it (a string, "8"), None where it is not a positive whole number."""
    text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    return int(text) if text.isdigit() and int(text) > 0 else None


def _scaling_factor(doc: object, shown: str) -> float:
    if not isinstance(doc, dict) or "scaling_factor" not in doc:
        raise EvidenceError(shown, f"expected an object with 'scaling_factor'. {_HINT}", field="scaling_factor")
    scaling = to_float(doc["scaling_factor"], file=shown, line=None, field="scaling_factor", hint=_HINT)
    if scaling <= 0:
        raise EvidenceError(
            shown, f"expected a positive scaling factor, got {scaling}. {_HINT}", field="scaling_factor"
        )
    return scaling


def _unscored(record: object) -> bool:
    """Whether a record is none of those a run's score reads (fast_record()'s reading is then as good as json's)."""
    return not (type(record) is dict and record.get("key") in _SCORED)


def _run_order(file: Path) -> tuple[int, str]:
    digits = file.stem.removeprefix("result_")
    return (int(digits), file.name) if digits.isdigit() else (1 << 30, file.name)


def _parse_run(file: Path, display: str, limit: int) -> tuple[MlperfRun, str | None]:
    """One result file's run (its start, stop and status, its seed) and the benchmark it names."""
    text = read_text(file, display, limit=limit)
    scored = _ScoredRecords(display)
    seen = False
    count = text.count
    number, counted = 1, 0  # the line at offset `counted`
    next_at = text.find(_MARK)
    while next_at >= 0:  # each line's first ':::MLLOG', found in the whole text
        at = next_at
        line_end = text.find("\n", at)
        if line_end < 0:
            line_end = len(text)
        next_at = text.find(_MARK, line_end)
        number += count("\n", counted, at)
        counted = at
        seen = True
        try:  # json.loads(text[at + 8:line_end]); the records a run's score reads, exactly as json reads them
            record = line_record(text, at + len(_MARK), line_end, _unscored)
        except (ValueError, RecursionError):  # json.JSONDecodeError, or an integer of over 4,300 digits
            raise EvidenceError(
                display,
                f"expected a JSON object after ':::MLLOG', got invalid JSON. {_HINT}",
                line=number,
                field="MLLOG",
            ) from None
        if not isinstance(record, dict):
            raise EvidenceError(
                display, f"expected a JSON object after ':::MLLOG'. {_HINT}", line=number, field="MLLOG"
            )
        key = record.get("key")
        if key not in _SCORED:
            continue
        scored.add(record, number)
    if not seen:
        raise EvidenceError(display, f"expected ':::MLLOG' lines, found none. {_HINT}")
    return scored.run(file.name), scored.benchmark


class _ScoredRecords:
    """What a result file's scored records say: its run's start and stop, its seed, its benchmark."""

    def __init__(self, display: str) -> None:
        self.display = display
        self.start: tuple[int, int] | None = None  # (time ms, line)
        self.stop: tuple[int, int, str] | None = None  # (time ms, line, status)
        self.benchmark: str | None = None
        self.seed: int | None = None
        self.global_batch_size: int | None = None
        self.step_times: list[float] = []
        self.throughputs: list[float] = []

    def add(self, record: dict[str, Any], number: int) -> None:
        """A record whose key is one of _SCORED, at line `number`."""
        display, key = self.display, record.get("key")
        if key == "submission_benchmark":
            self.benchmark = str(record.get("value"))
            return
        if key == "seed":
            value = record.get("value")
            self.seed = value if isinstance(value, int) and not isinstance(value, bool) else None
            return
        if key == "global_batch_size":
            value = record.get("value")
            self.global_batch_size = value if isinstance(value, int) and not isinstance(value, bool) else None
            return
        if key == "tracked_stats":
            self.tracked(record.get("value"), number)
            return
        time_ms = record.get("time_ms")
        if (not isinstance(time_ms, int | float) or isinstance(time_ms, bool)
                or not -_LAST_MS <= time_ms <= _LAST_MS):  # NaN and inf fail the range too
            raise EvidenceError(
                display,
                f"expected a numeric 'time_ms' (ms since the epoch), got {str(time_ms)[:40]!r}. {_HINT}",
                line=number,
                field="time_ms",
            )
        if key == "run_start":
            if self.start is not None:
                raise EvidenceError(
                    display,
                    f"expected one run_start, got a second (first at line {self.start[1]}). {_HINT}",
                    line=number,
                    field="run_start",
                )
            self.start = (int(time_ms), number)
        else:
            meta = record.get("metadata")
            status = str(meta.get("status", "unknown")) if isinstance(meta, dict) else "unknown"
            self.stop = (int(time_ms), number, status)

    def tracked(self, value: object, number: int) -> None:
        """A `tracked_stats` record's value at line `number`: its train_step_time and throughput, where logged."""
        if not isinstance(value, dict):
            return
        for key, into in (("train_step_time", self.step_times), ("throughput", self.throughputs)):
            if key in value:
                got = to_float(value[key], file=self.display, line=number, field=f"tracked_stats.{key}", hint=_HINT)
                if not 0 < got < math.inf:
                    raise EvidenceError(self.display, f"expected a positive tracked_stats {key}, got {got}. {_HINT}",
                                        line=number, field=f"tracked_stats.{key}")
                into.append(got)

    def run(self, name: str) -> MlperfRun:
        """The run of file `name`; an error where it has no start or stops before it starts."""
        start, stop, display = self.start, self.stop, self.display
        if start is None:
            raise EvidenceError(display, f"expected a 'run_start' record, found none. {_HINT}", field="run_start")
        if stop is not None and stop[0] < start[0]:
            raise EvidenceError(
                display,
                f"expected run_stop after run_start, got {stop[0]} < {start[0]}. {_HINT}",
                line=stop[1],
                field="time_ms",
            )
        return MlperfRun(
            file=name,
            status=stop[2] if stop is not None else "missing",
            start_ms=start[0],
            stop_ms=stop[0] if stop else None,
            start_line=start[1],
            stop_line=stop[1] if stop else None,
            seed=self.seed,
            step_times_s=tuple(self.step_times),
            throughputs=tuple(self.throughputs),
            global_batch_size=self.global_batch_size,
        )
