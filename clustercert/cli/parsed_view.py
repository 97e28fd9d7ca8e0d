"""What `clustercert evidence parse` prints: what a parser read from one file, as a person checks it against the
file (its counts, spans and lines, the figures a judge reads, a few rows); `--json` prints every value."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from clustercert.cli.health_view import HEALTH_VIEWS
from clustercert.cli.summary import counted, wrap
from clustercert.evidence.guards import amount

__all__ = ["parsed_lines"]

SHOWN_ROWS = 3  # the first and the last rows of a long list shown (a training log's steps, a dump's jobs)


def parsed_lines(result: dict[str, Any], width: int) -> list[str]:
    """The lines after `PATH: format NAME`, each wrapped to `width` (never cut; a continuation indented four
    columns deeper than its line), from the object `evidence parse --json` prints
    (`clustercert.parsers.inspect_evidence`)."""
    from clustercert.parsers import TRAINING_FORMATS

    fmt = str(result["format"])
    describe = _training if fmt in TRAINING_FORMATS else _BY_FORMAT[fmt]  # a test keeps one for every parser
    lines: list[str] = []
    for text in describe(result):  # a line of a list under a heading (a run, a row) starts with two spaces
        under = text.startswith("  ")
        lines += wrap(text[2:] if under else text, width, indent=4 if under else 2, hang=4)
    for warning in result.get("warnings") or []:
        lines += wrap(f"warning: {warning}", width, indent=2, hang=4)
    lines.append("  (--json prints every value read)")
    return lines


# ----------------------------------------------------------------------------------------------- helpers

def _num(value: float) -> str:
    """A figure as a person compares it with the file: an integer grouped (1,961), else six significant digits
    (12.953, 0.7514, 1960.76)."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.6g}"


def _spread(values: Sequence[float]) -> str:
    """'median M (min A, max B)' of `values`; the value alone when there is one."""
    if len(values) == 1:
        return _num(values[0])
    return f"median {_num(statistics.median(values))} (min {_num(min(values))}, max {_num(max(values))})"


def _lines(first: int | None, last: int | None) -> str:
    if first is None:
        return ""
    return f"line {first}" if last is None or last == first else f"lines {first}-{last}"


def _ends(rows: list[Any]) -> list[tuple[int, Any]]:
    """The first and last SHOWN_ROWS of `rows` with their indexes (all of them when that is every row)."""
    if len(rows) <= 2 * SHOWN_ROWS:
        return list(enumerate(rows))
    return [*enumerate(rows[:SHOWN_ROWS]), *((len(rows) - SHOWN_ROWS + i, r) for i, r in
                                             enumerate(rows[-SHOWN_ROWS:]))]


def _stretches(counters: list[int]) -> str:
    """'0..19'; where the counter does not go up (a restart from a checkpoint, a repeated step) each stretch:
    '0..15, 10..19' (one step's stretch: '7'); past SHOWN_ROWS stretches the first ones and how many more."""
    stretches = [[counters[0], counters[0]]]
    for counter in counters[1:]:
        if counter > stretches[-1][1]:
            stretches[-1][1] = counter
        else:
            stretches.append([counter, counter])
    text = ", ".join(f"{first}..{last}" if last != first else f"{first}" for first, last in stretches[:SHOWN_ROWS])
    return text + (f" and {counted(len(stretches) - SHOWN_ROWS, 'stretch', 'stretches')} more"
                   if len(stretches) > SHOWN_ROWS else "")


def _ms_time(ms: int | float) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


# ----------------------------------------------------------------------------------------------- formats

def _training(result: dict[str, Any]) -> list[str]:
    steps: list[dict[str, Any]] = result.get("steps") or []
    out = [f"{counted(len(steps), 'step')} read of {counted(int(result.get('lines') or 0), 'line')}"]
    if steps:
        # the step counter a judge reads: NeMo's global step where every step has one (its iteration starts again
        # at 0 with each epoch), else the iteration
        key, name = (("global_step", "global step") if all(s.get("global_step") is not None for s in steps)
                     else ("iteration", "iteration"))
        out[0] += (f": {name}{'s' if len(steps) > 1 else ''} {_stretches([int(s[key]) for s in steps])}, "
                   f"{_lines(steps[0]['line'], steps[-1]['line'])}")
        for field, label in (("step_time_s", "step time (s)"), ("tflops_per_gpu", "TFLOPS per GPU"),
                             ("samples_per_s", "samples per second")):
            values = [float(s[field]) for s in steps if s.get(field) is not None]
            if values:
                out.append(f"{label}: {_spread(values)} over {counted(len(values), 'step')}")
        timeless = [s for s in steps if s.get("step_time_s") is not None and float(s["step_time_s"]) <= 0.0]
        if timeless:  # a timer's glitch (NeMo's around a checkpoint save): read as printed, validation reports it
            out.append(f"step time zero or negative: {counted(len(timeless), 'step')} ("
                       + ", ".join(f"{_num(float(s['step_time_s']))} s at line {s['line']}"
                                   for s in timeless[:SHOWN_ROWS]) + (", ..." if len(timeless) > SHOWN_ROWS else "")
                       + ")")
        losses = [(s[key], s["loss"]) for s in steps if s.get("loss") is not None]
        if losses:
            out.append(f"loss: {_num(losses[0][1])} at {name} {losses[0][0]}" + (
                f", {_num(losses[-1][1])} at {name} {losses[-1][0]}" if len(losses) > 1 else ""))
        paused = [s for s in steps if s.get("pause_s") or s.get("untimed_pause")]
        if paused:
            seconds = sum(float(s.get("pause_s") or 0.0) for s in paused)
            out.append(f"paused before {counted(len(paused), 'step')} (checkpoint saves, evaluations): "
                       f"{_num(seconds)} s timed")
        out.append(f"steps ({name}, step time s, TFLOPS per GPU, loss, line):")
        shown = [(i, (f"{s[key]}", _opt(s.get("step_time_s")), _opt(s.get("tflops_per_gpu")),
                      _opt(s.get("loss")), f"{s['line']}")) for i, s in _ends(steps)]
        out += _table(shown, len(steps), "step", "rrrrr")
    nan = result.get("nan") or []
    if nan:
        out.append(f"not a number: {counted(len(nan), 'value')} ("
                   + ", ".join(f"{m.get('field')} at line {m.get('line')}" for m in nan[:SHOWN_ROWS])
                   + (", ..." if len(nan) > SHOWN_ROWS else "") + ")")
    events: list[dict[str, Any]] = result.get("events") or []
    if events:
        kinds = Counter(str(e.get("kind")) for e in events)
        out.append(f"resilience events: {counted(len(events), 'event')} ("
                   + ", ".join(f"{kind} {count:,}" for kind, count in kinds.items()) + ")")
        # a load is where a restart (a step printed again) may start: each with its step and line
        loads = [e for e in events if e.get("kind") == "checkpoint_loaded"]
        if loads:  # NeMo names a checkpoint by its global step, Megatron by its iteration
            word = "iteration" if str(result.get("format")).startswith("megatron") else "step"
            out.append("checkpoints loaded: " + ", ".join(
                f"{word} {'?' if e.get('step') is None else e.get('step')} at line {e.get('line')}"
                for e in loads[:SHOWN_ROWS]) + (", ..." if len(loads) > SHOWN_ROWS else ""))
    reports = result.get("straggler_reports") or []
    if reports:
        out.append(f"straggler reports: {len(reports):,}, "
                   + ", ".join(f"{r.get('kind')} at line {r.get('line')} "
                               f"({counted(len(r.get('scores') or []), 'rank')})"
                               for r in reports[:SHOWN_ROWS]) + (", ..." if len(reports) > SHOWN_ROWS else ""))
    return out


def _opt(value: float | None) -> str:
    return "-" if value is None else _num(float(value))


def _nccl(result: dict[str, Any]) -> list[str]:
    tests: list[dict[str, Any]] = result.get("tests") or []
    cut = sum(1 for t in tests if t.get("error") and t.get("truncated"))  # a capture cut short is no abort
    aborted = sum(1 for t in tests if t.get("error")) - cut
    out = [f"{counted(len(tests), 'test')}" + (f", {aborted:,} aborted" if aborted else "")
           + (f", {cut:,} cut short" if cut else "")
           + "; busbw in GB/s at the largest size, out of place / in place; the average as printed / as computed"]
    for t in tests:
        rows: list[dict[str, Any]] = t.get("rows") or []
        hosts = len(set(t.get("hosts") or []))
        head = (f"{t.get('collective') or 'unknown collective'}: {counted(int(t.get('ranks') or 0), 'rank')}"
                + (f" on {counted(hosts, 'host')}" if hosts else "") + f", {_lines(t.get('line'), t.get('last_line'))}")
        if t.get("error"):
            cause = f" (cause at line {t['cause_line']}: {t['cause']})" if t.get("cause") else ""
            out.append(f"{head}: {'CUT SHORT' if t.get('truncated') else 'ABORTED'}, {t['error']}{cause}")
            continue
        if not rows:
            out.append(f"{head}: no rows")
            continue
        top = max(rows, key=lambda r: r["size_bytes"])
        least = min(r["size_bytes"] for r in rows)
        sizes = f"{counted(len(rows), 'size')} {amount(least)}" + (
            f"..{amount(top['size_bytes'])}" if top["size_bytes"] != least else "")
        average = f"{_opt(t.get('reported_avg_busbw'))} / {_opt(t.get('computed_avg_busbw'))}"
        out.append(f"{head}, {sizes}: busbw {_num(top['busbw_oop'])} / {_num(top['busbw_ip'])} "
                   f"(line {top['line']}); average {average}")
    return out


def _sacct(result: dict[str, Any]) -> list[str]:
    jobs: list[dict[str, Any]] = result.get("jobs") or []
    steps = sum(len(j.get("steps") or []) for j in jobs)
    states = Counter(str(j.get("state")) for j in jobs)
    fields = result.get("fields") or []
    out = [f"{counted(len(jobs), 'job')} ({', '.join(f'{s} {c:,}' for s, c in states.most_common())}), "
           f"{counted(steps, 'step')}; times in {result.get('timezone')}"
           + (f"; {counted(len(fields), 'field')}" if fields else "")]
    out.append("jobs (id, state, elapsed, start to end, steps, line):")
    shown = []
    for index, job in _ends(jobs):
        again = f"/{job['incarnation']}" if (job.get("incarnation") or 1) > 1 else ""  # `--duplicates`: 845/2
        shown.append((index, (f"{job.get('job_id')}{again}", str(job.get("state_raw") or job.get("state")),
                              _elapsed(job.get("elapsed_s")), _span(job.get("start"), job.get("end")),
                              f"{len(job.get('steps') or []):,}", f"{job.get('line')}")))
    return out + _table(shown, len(jobs), "job", "llrlrr")


def _span(start: str | None, end: str | None) -> str:
    """'START to END', END's date and offset left out where they are START's."""
    if start and end and len(start) == len(end) == 25 and start[:11] == end[:11] and start[19:] == end[19:]:
        return f"{start} to {end[11:19]}"
    return f"{start or '-'} to {end or '-'}"


def _table(rows: Sequence[tuple[int, tuple[str, ...]]], total: int, noun: str, align: str) -> list[str]:
    """Rows of cells (with their indexes in a list of `total`), each column aligned as `align` says ('l' left,
    'r' right), and a line counting the rows left out between the first and the last ones."""
    if not rows:
        return []
    widths = [max(len(cells[c]) for _, cells in rows) for c in range(len(align))]
    out = []
    for index, cells in rows:
        if total > 2 * SHOWN_ROWS and index == total - SHOWN_ROWS:
            out.append(f"  ... {counted(total - 2 * SHOWN_ROWS, noun)} more")
        out.append("  " + "  ".join(cell.rjust(w) if side == "r" else cell.ljust(w)
                                    for cell, w, side in zip(cells, widths, align, strict=True)).rstrip())
    return out


def _elapsed(seconds: float | None) -> str:
    """Seconds as Slurm prints a duration: [D-]HH:MM:SS."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def _dcgm(result: dict[str, Any]) -> list[str]:
    series: list[dict[str, Any]] = result.get("series") or []
    gpus = {(s.get("host"), s.get("gpu")) for s in series}
    hosts = {s.get("host") for s in series if s.get("host") is not None}
    out = [f"{counted(int(result.get('samples') or 0), 'sample')} ({result.get('source')}) in "
           f"{counted(len(series), 'series', 'series')}: {counted(len(gpus), 'GPU')}"
           + (f" on {counted(len(hosts), 'host')}" if hosts else "")]
    if series:
        first = min(s["first_ms"] for s in series)
        last = max(s["last_ms"] for s in series)
        out.append(f"from {_ms_time(first)} to {_ms_time(last)} ({_num((last - first) / 1000)} s)")
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for s in series:
        by_metric.setdefault(str(s.get("metric")), []).append(s)
    if by_metric:
        out.append("per metric: samples, min, mean, max (values that are not numbers left out):")
    for metric, parts in by_metric.items():
        finite = [p for p in parts if p.get("values")]  # each series' mean is of its `values` finite values
        count = sum(int(p["count"]) for p in parts)
        if finite:
            weight = sum(int(p["values"]) for p in finite)
            mean = sum(float(p["mean"]) * int(p["values"]) for p in finite) / weight
            figures = (f"{_num(min(float(p['min']) for p in finite))}, {_num(mean)}, "
                       f"{_num(max(float(p['max']) for p in finite))}")
        else:
            figures = "no numbers"
        out.append(f"  {metric}: {count:,}, {figures}")
    return out


def _events(result: dict[str, Any]) -> list[str]:
    events: list[dict[str, Any]] = result.get("events") or []
    kinds = Counter(str(e.get("type")) for e in events)
    first, last = (events[0].get("ts"), events[-1].get("ts")) if events else (None, None)
    out = [f"{counted(len(events), 'event')}" + ("" if first is None else f" at {first}" if first == last
                                            else f" from {first} to {last}")]
    if kinds:
        out.append("by type: " + ", ".join(f"{kind} {count:,}" for kind, count in kinds.items()))
    return out


def _rank_timings(result: dict[str, Any]) -> list[str]:
    return [f"{counted(int(result.get('rows') or 0), 'row')}: {counted(int(result.get('ranks') or 0), 'rank')} on "
            f"{counted(int(result.get('nodes') or 0), 'node')}, "
            f"steps {result.get('first_step')}..{result.get('last_step')}",
            f"columns: {', '.join(str(c) for c in result.get('columns') or [])}"]


def _mlperf(result: dict[str, Any]) -> list[str]:
    runs: list[dict[str, Any]] = result.get("runs") or []
    out = [f"{result.get('benchmark')} on {result.get('system_name') or 'an unnamed system'}, ruleset "
           f"{result.get('ruleset') or 'not given'}: {counted(len(runs), 'run')}"]
    for run in runs:
        minutes = "-" if run.get("minutes") is None else f"{run['minutes']:.2f} min"
        seed = f", seed {run['seed']}" if run.get("seed") is not None else ""
        where = _lines(run.get("start_line"), run.get("stop_line"))
        out.append(f"  {run.get('file')}: {run.get('status')}, {minutes}{seed}" + (f" ({where})" if where else ""))
    if result.get("error"):
        out.append(f"not scored: {result['error']}")
    elif result.get("score_minutes") is not None:
        factor = result.get("scaling_factor")
        out.append(f"score: {result['score_minutes']:.2f} min"
                   + (f" (scaling factor {factor:.4g})" if factor not in (None, 1, 1.0) else ""))
    return out


_BY_FORMAT: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "nccl-tests": _nccl,
    "sacct": _sacct,
    "dcgm": _dcgm,
    "events": _events,
    "rank-timings": _rank_timings,
    "mlperf": _mlperf,
    **HEALTH_VIEWS,
}
