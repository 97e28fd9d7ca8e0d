"""Write the table of the latest benchmark figures in bench/README.md from the records in bench/results/*.json.

    .venv/bin/python bench/table.py            # rewrite the table between its two markers in bench/README.md
    .venv/bin/python bench/table.py --check    # exit 1 when the table is not what the records give
    .venv/bin/python bench/table.py --print    # print the table only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["BEGIN", "COLUMNS", "END", "Row", "TableError", "main", "render", "replace_table", "rows"]

HERE = Path(__file__).resolve().parent
BEGIN = "<!-- latest figures: written by bench/table.py from bench/results/*.json; edit the records, not this table -->"
END = "<!-- end of the latest figures -->"
COLUMNS = ("benchmark", "figure", "latest", "target", "met", "measured", "machine")
# The parsers' bar (issue 13) is not written into parsers.json by bench_parsers.py, so it is stated here once.
PARSER_TARGET_MB_S = 50.0
# Per-rank timings are Parquet read by pyarrow, not one of the text parsers the bar was set for.
_PARSERS_WITHOUT_TARGET = frozenset({"rank-timings"})


class TableError(Exception):
    """A result file the table cannot be written from."""


@dataclass(frozen=True)
class Row:
    """One line of the table: one figure of one benchmark's latest record."""

    benchmark: str
    figure: str
    latest: str
    target: str = ""
    met: str = ""
    measured: str = ""
    machine: str = ""


Record = dict[str, Any]


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _measured(record: Record) -> str:
    stamp = record.get("measured_at") or record.get("when")
    if not stamp:
        return "not recorded"
    return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _machine(record: Record) -> str:
    machine = record.get("machine")
    if isinstance(machine, dict):
        processor, cores = machine.get("processor"), machine.get("cores")
    else:
        processor, cores = record.get("processor") or machine, record.get("processor_count")
    words = [str(processor)] if processor else []
    if cores:
        words.append(f"{cores} cores")
    gauge = record.get("gauge_s")
    if isinstance(gauge, dict) and "before" in gauge and "after" in gauge:
        words.append(f"gauge {gauge['before']['best_s']:.3f} -> {gauge['after']['best_s']:.3f} s")
    return ", ".join(words)


def _certify(record: Record) -> Iterator[Row]:
    targets = record["targets"]
    runs = len(record["certify_runs"])
    seconds, ratio = record["median_certify_s"], record["ratio_to_import"]
    yield Row("certify", f"sample certification, median of {runs} (s)", f"{seconds:.2f}",
              f"<= {targets['certify_s']:g}", _met(seconds <= targets["certify_s"]))
    yield Row("certify", "bare import of the same stack, median (s)", f"{record['median_import_stack_s']:.2f}")
    yield Row("certify", "certification over bare import", f"{ratio:.2f}x", f"<= {targets['ratio_to_import']:g}x",
              _met(ratio <= targets["ratio_to_import"]))


def _loaded(record: Record) -> Iterator[Row]:
    name = "loaded_at_once" if record.get("at_once", 1) > 1 else "loaded"
    beside = f"beside {record['busy_processes']} busy processes"
    if record.get("at_once", 1) > 1:
        beside = f"{record['at_once']} at once {beside}"
    seconds = [run["seconds"] for run in record["runs"]]
    yield Row(name, f"sample certifications that succeeded, {beside}", f"{record['succeeded']} of {record['of']}",
              "all", _met(bool(record["met"])))
    yield Row(name, "seconds each: median (fastest-slowest)",
              f"{statistics.median(seconds):.1f} ({min(seconds):.1f}-{max(seconds):.1f})")


def _parsers(record: Record) -> Iterator[Row]:
    for result in record["results"]:
        fmt, speed = result["format"], result["mb_per_s"]
        figure = f"{fmt}: {record['file_mb']:g} MB parsed, best of {record['repeat']} (MB/s)"
        if fmt in _PARSERS_WITHOUT_TARGET:
            yield Row("parsers", figure, f"{speed:.1f}")
        else:
            yield Row("parsers", figure, f"{speed:.1f}", f">= {PARSER_TARGET_MB_S:g}",
                      _met(speed >= PARSER_TARGET_MB_S))


def _scale(record: Record) -> Iterator[Row]:
    targets = record["targets"]
    verdicts = targets["verdicts"]
    for size in record["sizes"]:
        gpus, bundle, certify = size["gpus"], size["bundle"], size["certify"]
        verdict = verdicts[str(gpus)]
        context = {"measured": _measured(size), "machine": _machine({**record, **size})}
        what = f"{gpus:,} GPUs ({bundle['gib']:.1f} GiB, {bundle['files']:,} files)"
        limit = targets.get(f"{gpus}_gpus_s")
        if limit is None:
            yield Row("scale", f"{what}: certification (s)", f"{certify['seconds']:.1f}", **context)
        else:
            yield Row("scale", f"{what}: certification (s)", f"{certify['seconds']:.1f}", f"<= {limit:g}",
                      _met(bool(verdict["seconds_ok"])), **context)
        yield Row("scale", f"{what}: peak memory of the process tree (GiB)", f"{certify['peak_rss_tree_gib']:.2f}",
                  f"<= {targets['peak_rss_gib']:g}", _met(bool(verdict["memory_ok"])), **context)
        ratios = ", ".join(f"{stage} {ratio:g}x" for stage, ratio in verdict["floor_ratios"].items())
        yield Row("scale", f"{what}: each analysis stage over its pyarrow floor", ratios,
                  f"<= {targets['analysis_stage_over_floor']:g}x each", _met(bool(verdict["floor_ok"])), **context)
    growth = verdicts.get("4096_over_512")
    if growth is not None:
        yield Row("scale", "4,096-GPU time over 512-GPU time", f"{growth['ratio']:.2f}x",
                  f"<= {targets['4096_over_512']:g}x", _met(bool(growth["ok"])))


def _subflow(record: Record) -> Iterator[Row]:
    summary, repeat = record["medians"]["summary"], record["repeat"]
    yield Row("subflow", f"the efficiency stage as certify runs it, median of {repeat} (s)",
              f"{summary['efficiency_stage_s']:.3f}")
    yield Row("subflow", "a Prefect subflow that does nothing (s)", f"{summary['bare_subflow_s']:.3f}")
    yield Row("subflow", "the stage's own work outside any flow (s)", f"{summary['own_work_s']:.4f}")


def _validation(record: Record) -> Iterator[Row]:
    what = f"{record['table']} suite, {record['rows']:,} rows"
    yield Row("validation", f"{what}: validation in batches (s)", f"{record['seconds']['validate_batches']:.1f}")
    yield Row("validation", f"{what}: rows validated per second", f"{record['rows_per_s_validated']:,}")
    yield Row("validation", f"{what}: peak memory (MB)", f"{record['peak_rss_mb']:,}")


def _hostile(record: Record) -> Iterator[Row]:
    for figure in record["figures"]:
        outcome = figure["outcome"].split(":", 1)[0]
        yield Row("hostile", f"{figure['case']} ({outcome})", f"{figure['seconds']:.3g} s")


def _json(record: Record) -> Iterator[Row]:
    megabytes = record["bytes"] / 1e6
    yield Row("json", f"{megabytes:.1f} MB document: dump_json_bytes and json.dumps, best of {record['repeat']} (s)",
              f"{record['dump_json_bytes_s']:.2f} and {record['json_dumps_indent_s']:.2f} ({record['speedup']:.2f}x)",
              "the same bytes", _met(bool(record["same_bytes"])))


def _render(record: Record) -> Iterator[Row]:
    for report, found in record["findings"].items():
        pdf = found["pdf"]
        yield Row("render", f"{report}: HTML and PDF pages checked",
                  f"{pdf['pages']} pages, {pdf['images']} charts", "no overflow, blank page or missing chart",
                  _met(bool(found["html"]["ok"] and pdf["ok"])))


# Keyed by the result file's name: loaded.json and loaded_at_once.json are one benchmark run two ways.
def _health(record: Record) -> Iterator[Row]:
    what = f"{record['nodes']} nodes' health outputs ({record['bytes'] / 1e6:.1f} MB, {record['files']:,} files)"
    yield Row("health", f"{what}: parsed, best of {record['repeat']} (MB/s)", f"{record['mb_per_s']:.1f}",
              f">= {record['target_mb_per_s']:g}", _met(record["mb_per_s"] >= record["target_mb_per_s"]))
    yield Row("health", f"{what}: judged (s)", f"{record['judge_seconds']:.2f}")


def _llmb(record: Record) -> Iterator[Row]:
    run = min(record["runs"], key=lambda r: abs(r["extra_s"] - record["median_extra_s"]))
    yield Row("llmb", f"26.08 GB200 archive ({run['workloads']} workloads, NCCL sweeps): init + seal + certify "
              f"beyond the sample's certification, median of {len(record['runs'])} (s)",
              f"{record['median_extra_s']:.2f} ({run['init_s']:.2f} + {run['seal_s']:.2f} + {run['certify_s']:.2f} "
              f"- {run['sample_certify_s']:.2f})", f"<= {record['targets']['extra_s']:g}",
              _met(bool(record["meets_targets"])))


def _sacct_memory(record: Record) -> Iterator[Row]:
    for result in record["results"]:
        ratio = result["peak_added_per_file_byte"]
        yield Row("sacct_memory", f"{result['form']}: {result['rows']:,}-row dump ({result['bytes'] / 1e6:.1f} MB) "
                  "read, peak memory added per byte of the dump", f"{ratio:.2f}x", f"<= {_SACCT_MEMORY_TARGET:g}x",
                  _met(ratio <= _SACCT_MEMORY_TARGET))


_SACCT_MEMORY_TARGET = 3.0  # the bar set when issue 55 was taken up: a large dump adds at most about 3x its size


def _suite(record: Record) -> Iterator[Row]:
    limit = record["targets"]["wall_s"]
    for label, run in record["runs"].items():
        tests = run["tests"]
        what = f"{tests['passed']} passed, {tests['skipped']} skipped, {tests['failed']} failed"
        yield Row("suite", f"`make test` ({label}; {what}): wall, CPU (s)", f"{run['wall_s']:.0f}, {run['cpu_s']:.0f}",
                  f"<= {limit:g} wall, none failed", _met(run["wall_s"] <= limit and not tests["failed"]),
                  _measured(run))


_SUMMARIES: dict[str, Callable[[Record], Iterator[Row]]] = {
    "certify": _certify, "loaded": _loaded, "loaded_at_once": _loaded, "parsers": _parsers, "scale": _scale,
    "subflow": _subflow, "validation": _validation, "hostile": _hostile, "json": _json, "render": _render,
    "health": _health, "llmb": _llmb, "sacct_memory": _sacct_memory, "suite": _suite,
}


def rows(results: Path) -> list[Row]:
    """Every figure of every record in `results`, file by file in name order."""
    found: list[Row] = []
    for path in sorted(results.glob("*.json")):
        summary = _SUMMARIES.get(path.stem)
        if summary is None:
            raise TableError(f"{path}: expected one of the known benchmarks ({', '.join(sorted(_SUMMARIES))}), got "
                             f"{path.stem!r}. Add its summary to bench/table.py _SUMMARIES.")
        record = json.loads(path.read_text(encoding="utf-8"))
        try:
            for row in summary(record):
                found.append(replace(row, measured=row.measured or _measured(record),
                                     machine=row.machine or _machine(record)))
        except (KeyError, TypeError, ValueError) as exc:
            raise TableError(f"{path}: expected the fields bench/{path.stem} writes, got none or another kind at "
                             f"{exc!s}. Re-run the benchmark or fix its summary in bench/table.py.") from exc
    return found


def render(table_rows: list[Row]) -> str:
    """The rows as a markdown table, `|` in a cell escaped."""
    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
    return "\n".join([line(COLUMNS), "|" + "---|" * len(COLUMNS), *(line(astuple(row)) for row in table_rows)])


def replace_table(text: str, table: str) -> str:
    """`text` with what lies between the BEGIN and END markers replaced by `table`."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise TableError(f"bench/README.md: expected the markers {BEGIN!r} and {END!r}, got "
                         f"{'neither' if not begin else 'no end marker'}. Put them back where the table goes.")
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=HERE / "results", help="folder of result files")
    parser.add_argument("--readme", type=Path, default=HERE / "README.md", help="the file whose table to rewrite")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true", help="exit 1 when the table is not what the records give")
    what.add_argument("--print", action="store_true", help="print the table instead of writing it")
    args = parser.parse_args(argv)
    try:
        table = render(rows(args.results))
        if args.print:
            print(table)
            return 0
        text = args.readme.read_text(encoding="utf-8")
        updated = replace_table(text, table)
    except TableError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.check:
        if updated != text:
            print(f"{args.readme}: its table is not what {args.results} gives. Run bench/table.py to rewrite it.",
                  file=sys.stderr)
            return 1
        return 0
    if updated != text:
        args.readme.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
