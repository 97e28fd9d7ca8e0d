"""The `clustercert evidence` commands: seal a bundle, check it (seal, parsers, expectation suites), parse one file."""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from clustercert.cli.common import err, options_command, out, printable
from clustercert.cli.summary import counted
from clustercert.errors import ClusterCertError, UsageError

if TYPE_CHECKING:
    from clustercert.evidence.parse import ParsedFile
    from clustercert.validation.suites import ValidationReport

__all__ = ["EvidenceUnusable", "evidence_app"]

evidence_app = typer.Typer(
    help="Seal, check and inspect evidence bundles (exit 0 fine, 2 usage, 3 evidence unusable).",
    short_help="Draft, seal, check and parse evidence bundles.",
    no_args_is_help=True,
)


class EvidenceUnusable(ClusterCertError):
    """Some evidence of a bundle cannot be used (the details were printed before)."""

    exit_code = 3


def _bundle_path(bundle: Path) -> Path:
    if not bundle.exists():
        raise UsageError(f"{bundle}: no such bundle. Give a bundle folder or its bundle.yaml.")
    return bundle


@evidence_app.command("init", short_help="Draft a bundle.yaml from the files of a folder.")
def init(
    folder: Annotated[Path, typer.Argument(help="A folder of evidence files as collected, an $LLMB_INSTALL tree, "
                                           "or an llmb-archive_*.tar.zst (unpacked beside it).")],
    system: Annotated[
        str | None, typer.Option(help="System id (e.g. h100-sxm); default: from nccl-tests' rank lines.")
    ] = None,
    catalog: Annotated[
        str | None, typer.Option(help="Catalog id in references/ or a path; default: the system's shipped one.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing bundle.yaml.")] = False,
) -> None:
    """Draft FOLDER/bundle.yaml from the files themselves; FILL_IN marks each value they do not show."""
    from clustercert.evidence.archive import is_archive
    from clustercert.evidence.init import write_draft
    from clustercert.evidence.llmb import is_llmb_tree
    from clustercert.settings import load_settings

    settings = load_settings()
    if is_archive(folder) or (folder.is_dir() and is_llmb_tree(folder)):
        _init_llmb(folder, settings.references_dir, force=force, limit=settings.max_evidence_bytes)
        return
    path, draft = write_draft(folder, settings.references_dir, system=system, catalog=catalog, force=force,
                              limit=settings.max_evidence_bytes)
    unused = len(draft.unused)
    out.print(f"drafted {path}: {counted(draft.runs, 'run')}, {counted(unused, 'file')} not used"
              + (" (listed at its end)" if unused else ""), markup=False)
    for line in draft.inferred:  # what nvidia-smi's reports gave, and where from: a person checks it
        out.print(f"from nvidia-smi: {line}", markup=False)
    if draft.placeholders:
        out.print(f"{counted(len(draft.placeholders), 'value')} to fill in (FILL_IN), first: {draft.placeholders[0]}; "
                  f"then run `clustercert evidence seal {folder}` and `clustercert certify {folder}`", markup=False)
    else:
        out.print(f"nothing to fill in: run `clustercert evidence seal {folder}` and `clustercert certify {folder}`",
                  markup=False)
    if "system.interconnect" in draft.optional:
        out.print("optional: the network between the nodes (system.interconnect, commented out in the draft): "
                  "with it, busbw between nodes is judged against targets", markup=False)


def _init_llmb(path: Path, references_dir: Path, *, force: bool, limit: int) -> None:
    """`evidence init` of what llmb-run writes: the archive unpacked beside it, then its draft and what is left."""
    from clustercert.evidence.llmb import write_llmb_draft

    out_path, draft, unpacked = write_llmb_draft(path, references_dir, force=force, limit=limit)
    folder = out_path.parent
    if unpacked is not None:
        how = "already unpacked there from the same bytes" if unpacked.reused else f"{unpacked.members} members"
        out.print(f"unpacked {path} into {folder} ({how}); archive sha256 {unpacked.sha256}", markup=False)
    unused = len(draft.unused)
    out.print(f"drafted {out_path}: {counted(draft.runs, 'run')}, {counted(unused, 'file')} not used"
              + (" (listed at its end)" if unused else ""), markup=False)
    if draft.placeholders:
        out.print(f"the files cannot say {counted(len(draft.placeholders), 'value')}; fill in each FILL_IN: "
                  + "; ".join(draft.placeholders), markup=False)
    out.print(f"then run `clustercert evidence seal {folder}` and `clustercert certify {folder} --baselines FILE`",
              markup=False)
    if "system.interconnect" in draft.optional:
        out.print("optional: the network between the nodes (system.interconnect, commented out in the draft): "
                  "with it, the NCCL sweeps between nodes are judged against targets", markup=False)


@evidence_app.command("seal", short_help="Seal a bundle: MANIFEST.sha256 over every file.")
def seal(bundle: Annotated[Path, typer.Argument(help="Evidence bundle folder (or its bundle.yaml).")]) -> None:
    """Write MANIFEST.sha256 over bundle.yaml and every evidence file the runs name."""
    from clustercert.evidence.bundle import load_bundle, seal_bundle

    loaded = load_bundle(_bundle_path(bundle))
    path = seal_bundle(loaded)
    out.print(f"sealed {len(loaded.evidence_files()) + 1} files: {path}")


def _found(pf: ParsedFile) -> str:
    """What a parser found in one file, in a few words."""
    from clustercert.parsers.dcgm import Telemetry
    from clustercert.parsers.events import EventLog
    from clustercert.parsers.mlperf import MlperfResult
    from clustercert.parsers.nccl_tests import NcclTestsResult
    from clustercert.parsers.rank_timings import RankTimings
    from clustercert.parsers.sacct import SacctResult
    from clustercert.parsers.training import TrainingLog

    r = pf.result
    if isinstance(r, TrainingLog):
        its = [s.iteration for s in r.steps]
        return f"{len(its):,} steps" + (f" (iterations {its[0]}..{its[-1]})" if its else "")
    if isinstance(r, NcclTestsResult):
        aborted = sum(1 for t in r.tests if t.error and not t.truncated)
        cut = sum(1 for t in r.tests if t.truncated)
        return f"{len(r.tests):,} tests ({', '.join(t.collective for t in r.tests)})" + (
            f", {aborted:,} aborted" if aborted else "") + (f", {cut:,} truncated capture" if cut else "")
    if isinstance(r, RankTimings):
        return f"{r.rows:,} rows, {r.ranks:,} ranks, steps {r.first_step}..{r.last_step}"
    if isinstance(r, Telemetry):
        return f"{len(r):,} samples ({r.source})"
    if isinstance(r, SacctResult):
        return f"{len(r.jobs):,} jobs, {sum(len(j.steps) for j in r.jobs):,} steps"
    if isinstance(r, EventLog):
        return f"{len(r.events):,} events"
    if isinstance(r, MlperfResult):
        score = "invalid" if r.score_minutes is None else f"score {r.score_minutes:.2f} min"
        return f"{counted(len(r.runs), 'run')}, {score}"
    return "parsed"


def _totals(files: list[ParsedFile]) -> str:
    """What the parsers read from several files of one kind, added up: steps of training logs, tests of
    nccl-tests outputs (and how many aborted); the number of files otherwise."""
    from clustercert.parsers.nccl_tests import NcclTestsResult
    from clustercert.parsers.training import TrainingLog

    results = [pf.result for pf in files if pf.usable]
    if results and all(isinstance(r, TrainingLog) for r in results):
        return f"{sum(len(r.steps) for r in results if isinstance(r, TrainingLog)):,} steps"
    if results and all(isinstance(r, NcclTestsResult) for r in results):
        tests = [t for r in results if isinstance(r, NcclTestsResult) for t in r.tests]
        aborted = sum(1 for t in tests if t.error and not t.truncated)
        cut = sum(1 for t in tests if t.truncated)
        return f"{len(tests):,} tests" + (f", {aborted:,} aborted" if aborted else "") + (
            f", {cut:,} truncated capture" if cut else "")
    return f"{len(results):,} files read"


def _problems(parsed: dict[str, list[ParsedFile]]) -> list[str]:
    """Every finding that makes evidence unusable or a measurement fail, one line each."""
    from clustercert.parsers.nccl_tests import NcclTestsResult

    problems: list[str] = []
    for files in parsed.values():
        for pf in files:
            if pf.error is not None:
                problems.append(str(pf.error))
            elif isinstance(pf.result, NcclTestsResult):
                problems += [f"{pf.display} line {t.line}: {t.collective} test {t.error}"
                             for t in pf.result.tests if t.error]
    return problems


def _warnings(parsed: dict[str, list[ParsedFile]]) -> list[str]:
    """What parsers read with a caveat (rows short of trailing fields, ...), one line each."""
    out: list[str] = []
    for files in parsed.values():
        for pf in files:
            found = getattr(pf.result, "warnings", None)
            if isinstance(found, list):
                out += [str(w) for w in found]
    return out


def _validation_table(report: ValidationReport) -> Table:
    """One row per validated table: how many expectations passed and which did not."""
    table = Table(title="validation (expectation suites in checks/)")
    for col in ("table", "run", "file", "passed", "not passed (FAIL/ERROR, * required)"):
        table.add_column(col, overflow="fold")
    for t in (*report.tables, *report.cross_tables):
        passed = sum(1 for r in t.results if r.status.value == "PASS")
        bad = [f"{r.expectation}{'*' if r.required else ''} {r.status.value}" for r in t.results
               if r.status.value != "PASS"]
        table.add_row(t.table, t.run, t.file, f"{passed}/{len(t.results)}", ", ".join(bad) or "-")
    return table


@evidence_app.command("check", short_help="Check a bundle: its seal, parsers and expectation suites.")
def check(
    bundle: Annotated[Path, typer.Argument(help="Evidence bundle folder (or its bundle.yaml).")],
    catalog: Annotated[
        str | None, typer.Option(help="Catalog id in references/ or a path; default: bundle.yaml's.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    data_docs: Annotated[
        Path | None,
        typer.Option("--data-docs", help="Also write Great Expectations' Data Docs into this folder "
                     "(they load remote scripts; never inside a run folder)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print a row per file and per validated "
                                          "table.")] = False,
) -> None:
    """Verify the seal, parse every file, run the expectation suites; exit 3 when anything is unusable.

    Prints, at the terminal's width, the files by kind and what their parsers read, the expectations that did not
    pass and every problem; --verbose adds the tables of every file and every validated table."""
    from clustercert.cli.progress import Progress
    from clustercert.evidence.guards import reading_told, told_reading
    from clustercert.evidence.parse import ParsedBundle, parse_run
    from clustercert.runs.folder import load_inputs, seal_problems
    from clustercert.settings import load_settings
    from clustercert.validation.suites import validate_bundle

    settings = load_settings()
    bundle = Path(os.path.abspath(bundle))  # named whole, as certify names it ('.: sealed' said nothing in a log)
    if data_docs is not None and any((d / "manifest.json").is_file() for d in (data_docs, *data_docs.parents)):
        raise UsageError(f"{data_docs}: Data Docs load remote scripts and never go inside a signed run folder; "
                         "choose a folder outside it")
    # a live line on a terminal (a cluster's bundle takes minutes to read and validate); nothing on a pipe, where
    # stdout and stderr stay what a script reads
    with Progress(err, enabled=not as_json and err.is_terminal) as progress:
        progress("load", str(bundle))
        from clustercert.catalog import typed_catalog

        inputs = load_inputs(_bundle_path(bundle), settings.references_dir, typed_catalog(catalog, bundle),
                             progress=progress, in_bundle_names=False)  # each file named whole, to be opened
        loaded = inputs.bundle
        problems: list[str] = []
        sealed = (loaded.root / "MANIFEST.sha256").is_file()
        problems += [str(exc) for exc in seal_problems(loaded, inputs.digests)]
        parsed: ParsedBundle = {}
        for number, run in enumerate(loaded.spec.runs, start=1):
            said = f"{run.id} ({run.files[0]}), {number:,} of {len(loaded.spec.runs):,}"
            progress("parse", said)
            with told_reading(reading_told(progress, "parse", said)):  # a long read: how far it is
                parsed[run.id] = parse_run(loaded, run, settings.max_evidence_bytes)
        problems += _problems(parsed)
        warnings = _warnings(parsed)
        progress("validate", "expectation suites over every table")
        report = validate_bundle(loaded, inputs.facts, parsed, checks_dir=settings.checks_dir, data_docs=data_docs,
                                 told=functools.partial(progress, "validate"))
    problems += [r.problem() for r in report.blocking]
    runs = [
        {"run": run.id, "kind": run.kind.value, "format": run.format, "phase": run.phase.value,
         "files": [{"file": pf.rel, "usable": pf.usable, "found": _found(pf) if pf.usable else None,
                    "error": None if pf.error is None else str(pf.error)} for pf in parsed[run.id]]}
        for run in loaded.spec.runs
    ]
    if as_json:
        print(json.dumps({"bundle": str(loaded.root), "sealed": sealed, "usable": not problems,
                          "runs": runs, "problems": problems, "warnings": warnings, "validation": report.to_json()},
                         indent=2, allow_nan=False))
    else:
        _print_check(_Checked(loaded.root, sealed, runs, parsed, problems, warnings, report), data_docs,
                     verbose=verbose)
    if problems:
        raise EvidenceUnusable(f"{loaded.root}: {len(problems)} problem(s); the evidence cannot be used as it is")


def _wrapped(text: str, indent: int = 2, hang: int = 4) -> list[str]:
    """`text` wrapped to the terminal's width as the certify summary wraps (`clustercert.cli.summary.wrap`)."""
    from clustercert.cli.summary import wrap

    return wrap(text, max(40, out.width), indent, hang)


@dataclass(frozen=True)
class _Checked:
    """What `evidence check` found in the bundle at `root`: its seal, each run's files and what their parsers read,
    the problems and warnings, and the validation's report."""

    root: Path
    sealed: bool
    runs: list[dict[str, Any]]
    parsed: dict[str, list[ParsedFile]]
    problems: list[str]
    warnings: list[str]
    report: ValidationReport


def _print_check(checked: _Checked, data_docs: Path | None, *, verbose: bool = False) -> None:
    """The check as a person reads it at the terminal's width: the seal, the files by kind and what their
    parsers read (a kind's one file by name), each unusable file, the expectations that did not pass, the
    warnings and problems, the verdict. With `verbose`, the tables of every file and every validated table."""
    root, sealed, runs, parsed = checked.root, checked.sealed, checked.runs, checked.parsed
    problems, warnings, report = checked.problems, checked.warnings, checked.report
    seal = "sealed" if sealed else "not sealed (run `clustercert evidence seal`)"
    if verbose:
        table = Table(title=f"{root}: {seal}")
        for col in ("run", "kind", "format", "file", "found"):
            table.add_column(col, overflow="fold")
        for run in runs:
            for f in run["files"]:
                table.add_row(run["run"], run["kind"], run["format"], printable(f["file"]),
                              printable(f["found"] or "UNUSABLE"))
        out.print(table)
        out.print(_validation_table(report))
    lines = [f"{root}: {seal}"]
    by_kind: dict[str, list[ParsedFile]] = {}
    for files in parsed.values():
        for pf in files:
            by_kind.setdefault(pf.kind.value, []).append(pf)
    total = sum(len(files) for files in by_kind.values())
    usable = sum(pf.usable for files in by_kind.values() for pf in files)
    lines.append(f"Files ({usable:,} of {total:,} read; by kind: read/files, what the parsers found)")
    width = max((len(kind) for kind in by_kind), default=0)
    counts = {kind: f"{sum(pf.usable for pf in files):,}/{len(files):,}" for kind, files in by_kind.items()}
    count_width = max((len(c) for c in counts.values()), default=0)
    for kind, files in by_kind.items():
        read = [pf for pf in files if pf.usable]
        found = f"{read[0].rel}: {_found(read[0])}" if len(files) == 1 and read else _totals(files)
        lines += _wrapped(f"{kind:<{width}}  {counts[kind]:>{count_width}}  {found}", hang=width + count_width + 4)
    for files in by_kind.values():
        lines += [ln for pf in files if not pf.usable for ln in _wrapped(f"UNUSABLE {pf.rel} (run {pf.run})")]
    summary = report.summary()
    lines.append(f"validation: {summary['passed']:,} passed, {summary['required_failed']:,} required failed, "
                 f"{summary['errors']:,} could not run ({len(report.tables) + len(report.cross_tables):,} tables)")
    for t in (*report.tables, *report.cross_tables):
        for r in t.results:
            if r.status.value != "PASS":
                where = ", ".join(part for part in (t.table, f"run {t.run}" if t.run else "", t.file) if part)
                lines += _wrapped(f"{r.expectation}{'*' if r.required else ''} {r.status.value} ({where})")
    if data_docs is not None:
        lines.append(f"data docs: {data_docs / 'index.html'}")
    lines += [ln for w in warnings for ln in _wrapped(f"warning: {w}", indent=0, hang=2)]
    lines += [ln for p in problems for ln in _wrapped(f"problem: {p}", indent=0, hang=2)]
    if not problems:
        lines.append("evidence usable")
    for line in lines:
        out.print(printable(line), markup=False)  # a file's name, as the bundle lists it, may hold escapes


@dataclass(frozen=True)
class ParseOptions:
    """The arguments and options of `clustercert evidence parse`."""

    path: Annotated[Path, typer.Argument(help="One evidence file (or an MLPerf result folder).")]
    fmt: Annotated[str | None, typer.Option("--format", help="Parser name; default: detected.")] = None
    as_json: Annotated[bool, typer.Option("--json", help="Print what the parser read as one JSON object.")] = False
    ruleset: Annotated[str | None, typer.Option(help="MLPerf ruleset, e.g. 4.0.0.")] = None
    fields: Annotated[
        str | None, typer.Option(help="sacct: the field list of a dump without a header, e.g. State,JobID,...")
    ] = None
    timezone: Annotated[str | None, typer.Option(help="sacct: timezone of times without offset.")] = None
    start_time: Annotated[
        str | None, typer.Option(help="dcgmi dmon: ISO-8601 time with offset of the first sample.")
    ] = None
    interval_s: Annotated[float | None, typer.Option(help="dcgmi dmon: seconds between samples.")] = None


@evidence_app.command("parse", short_help="Print what a parser reads from one file.")
@options_command(ParseOptions)
def parse(options: ParseOptions) -> None:
    """Print what a parser reads from PATH (the format named; detected when --format is not given)."""
    path, fmt, start_time, fields = options.path, options.fmt, options.start_time, options.fields
    from clustercert.parsers import inspect_evidence

    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    start: dt.datetime | None = None
    if start_time is not None:
        try:
            start = dt.datetime.fromisoformat(start_time)
        except ValueError:
            raise UsageError(f"--start-time: expected an ISO-8601 time with offset, got {start_time!r}") from None
    names = None if fields is None else [f.strip() for f in fields.split(",") if f.strip()]
    result = inspect_evidence(path, fmt, ruleset=options.ruleset, fields=names, timezone=options.timezone,
                              start_time=start, interval_s=options.interval_s)
    if options.as_json:
        print(json.dumps(result, indent=2, allow_nan=False, default=str))
        return
    from clustercert.cli.parsed_view import parsed_lines

    out.print(f"{path}: format {result['format']}" + ("" if fmt else " (detected)"))
    for line in parsed_lines(result, max(40, out.width)):
        out.print(line)
