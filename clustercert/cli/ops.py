"""Operations commands: `schedule` (a served Prefect deployment), `server` (the Prefect server it runs against),
`rerun` (reproduce a run), `runs` (history)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from clustercert.cli.common import Exit, err, out, printable
from clustercert.errors import UsageError

if TYPE_CHECKING:
    from clustercert.settings import Settings

__all__ = ["dask_address", "register"]

@contextmanager
def dask_address(workers: int, address: str | None = None) -> Iterator[str | None]:
    """The Dask scheduler for the flow's phase tasks: `address` (a running cluster) when given, else a local
    cluster of `workers` workers started here; None (the default runner) when neither."""
    if address:
        err.print(f"note: the phase tasks run on the Dask cluster at {address}")
        yield address
        return
    if workers <= 0:
        with nullcontext():
            yield None
        return
    from flows.runners import local_dask_cluster

    with local_dask_cluster(workers) as address:
        err.print(f"note: the phase tasks run on the local Dask cluster at {address} ({workers} workers)")
        yield address


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def runs(
    cluster: Annotated[str | None, typer.Option(help="Only this cluster (bundle.yaml's cluster.name).")] = None,
    reports_dir: Annotated[Path | None, typer.Option(help="Default CLUSTERCERT_REPORTS_DIR.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON list.")] = False,
) -> None:
    """List past runs, oldest first: date, cluster, bundle, outcome and headline figures per workload."""
    from clustercert.runs.history import LeftOut, compare_headlines, index_runs
    from clustercert.settings import load_settings

    settings = load_settings()
    folder = reports_dir or settings.reports_dir
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder}: expected the reports folder, got a file")
    left_out: list[LeftOut] = []
    records = index_runs(folder, cluster, key_dir=settings.key_dir, left_out=left_out)
    if as_json:
        print(json.dumps([{"run_dir": str(r.run_dir), "cluster": r.cluster, "bundle_path": r.bundle_path,
                           **r.summary()} for r in records], indent=2))
        for gone in left_out:  # stdout stays the JSON list; what was not listed is said on stderr
            print(printable(f"runs: not listed: {gone.run_dir}: {gone.problem}"), file=sys.stderr)
        return
    last: dict[str, dict[str, Any]] = {}
    width = max(40, out.width)
    if records:
        title, legend = "clustercert runs, oldest first", "(per workload: delta vs baseline %, MFU)"
        for line in [f"{title} {legend}"] if len(title) + 1 + len(legend) <= width else [title, legend]:
            out.print(line, markup=False)
    for r in records:
        regressed = {c.workload for c in compare_headlines(last[r.cluster], r.headline)
                     if c.regressed} if r.cluster in last else set()
        figures = [f"{w} {_fmt(h['delta_pct'], '+.1f')} % {_fmt(h['mfu'], '.3f')}"
                   + (" REGRESSED" if w in regressed else "") for w, h in r.headline.items()]
        for line in _run_lines(r.started_at, r.outcome, r.cluster, r.run_id, r.bundle_path, figures, width):
            out.print(printable(line), markup=False, highlight=False)  # a folder's name may hold escapes
        last[r.cluster] = r.headline
    if not records:
        # a folder not there yet (no run so far, or a mistyped path) is said, not taken for an empty history
        out.print("no runs" + (f" of cluster {cluster}" if cluster else "")
                  + ("" if folder.is_dir() else f": {folder} does not exist"))
    if left_out:
        # a folder a killed run left, or one altered since it was signed: not history, and said so, not hidden
        folders = "1 folder that does" if len(left_out) == 1 else f"{len(left_out)} folders that do"
        out.print(f"not listed: {folders} not verify (`clustercert verify FOLDER` says why)", markup=False,
                  highlight=False)
        for gone in left_out:
            line = f"  {gone.run_dir.name}: {gone.problem}"
            lines = [line] if len(line) <= width else [f"  {gone.run_dir.name}:", f"    {gone.problem}"]
            for text in lines:
                out.print(printable(text), markup=False, highlight=False)


def _run_lines(started: str, outcome: str, cluster: str, run_id: str, bundle: str, figures: list[str],
               width: int) -> list[str]:
    """A run in a few lines of at most `width` characters: when, outcome, cluster and run id; the bundle; the
    headline figures (delta vs baseline %, MFU) packed onto as few lines as fit. A name or a path longer than a
    line is printed whole on a line of its own, never cut."""
    head = f"{started}  {outcome:<13} {cluster}  {run_id}"
    if len(head) <= width:
        lines = [head]
    elif len(f"{started}  {outcome:<13} {cluster}") <= width:
        lines = [f"{started}  {outcome:<13} {cluster}", f"  run {run_id}"]
    else:  # the cluster's name on a line of its own, whole (cut short, it could read as another cluster's)
        lines = [f"{started}  {outcome}", f"  cluster {cluster}", f"  run {run_id}"]
    lines.append(f"  bundle {bundle}")  # a path is printed whole, however long
    current = " "
    for figure in figures:
        if len(current) + 2 + len(figure) > width and current.strip():
            lines.append(current.rstrip())
            current = " "
        current += " " + figure + " "
    if current.strip():
        lines.append(current.rstrip())
    return lines


def rerun(
    run_dir: Annotated[Path, typer.Argument(help="A run folder written by `clustercert certify`.")],
    bundle: Annotated[Path | None, typer.Option(help="Where the evidence bundle is now, if it moved.")] = None,
    keep: Annotated[Path | None, typer.Option(help="Write the re-run folder here instead of a temporary one.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List every difference (by default, of many in "
                                          "one list, the first two and a count).")] = False,
) -> None:
    """Re-run a certification from its recorded metadata, catalog copy and reference files' copies (health rules,
    MLPerf benchmarks), bypassing every cache, and compare (results.json, and the HTML and unsigned PDF of the
    report and of its redacted copy where the run has one).

    Exit 0 reproduced identically, 1 differs (differences printed), 2 usage, 3 evidence missing or changed."""
    if not (run_dir / "manifest.json").is_file():
        raise UsageError(f"{run_dir}: not a run folder (no manifest.json)")
    from clustercert.attest.software import software_record
    from clustercert.runs.references import REFERENCES
    from clustercert.runs.replay import (
        REDACTED,
        check_recorded_evidence,
        compare_run_folders,
        compared_copies,
        key_difference,
        read_predicate,
        shown_differences,
        software_differences,
    )

    predicate = read_predicate(run_dir)
    run_id = str(predicate["run"]["run_id"])
    if not run_id or "/" in run_id or "\\" in run_id or run_id in (".", ".."):
        raise UsageError(f"{run_dir / 'manifest.json'}: expected a run id that names a folder, got {run_id[:80]!r}. "
                         "Give a run folder written by `clustercert certify`")
    from clustercert.settings import load_settings

    settings = load_settings(prefect=True)
    from clustercert.cli import safety

    signer = _rerun_checks(settings, keep, run_id)  # the output folder and the keys, before any work
    # a temporary folder goes, also on a signal
    with safety.scratch(_temporary_folder) if keep is None else nullcontext(keep) as work:
        root = bundle or Path(str(predicate["run"]["bundle_path"]))
        replay = work / run_id
        copies = compared_copies(run_dir)  # the redacted copy too, where the run wrote one (with this key's secret)
        other_key = key_difference(str(predicate["run"].get("signer") or ""), signer, copies)
        if other_key:
            err.print(f"warning: {other_key}", markup=False)
        check_recorded_evidence(run_dir, root)
        for line in software_differences(predicate.get("software", {}), software_record()):
            err.print(f"warning: software differs from the manifest's: {line}", markup=False)
        os.environ["PREFECT_TASKS_REFRESH_CACHE"] = "true"  # a re-run recomputes everything: no cached result
        _quiet()
        from clustercert.cli.progress import Progress
        from flows.certify import certify_flow
        from flows.progress import listening
        from flows.request import CertifyRequest
        from flows.runtime import prefect_runtime
        from flows.tactics import IMPORT_STEPS

        # a live line on a terminal, as certify's; nothing on a pipe, where stderr is the differences a script reads
        progress = Progress(err, enabled=err.is_terminal)
        progress("start", "Prefect API")
        with progress, listening(progress), prefect_runtime(meanwhile=IMPORT_STEPS):
            certify_flow(CertifyRequest(
                bundle_path=str(root), run_dir=str(replay), run_meta=predicate["run"], key_dir=str(settings.key_dir),
                references_dir=str(settings.references_dir), templates_dir=str(settings.templates_dir),
                catalog=str((run_dir / "catalog.yaml").resolve()), limit=settings.max_evidence_bytes,
                baselines=str((run_dir / "baselines.yaml").resolve()) if (run_dir / "baselines.yaml").is_file()
                else None,
                # the reference files the run judged with (its copies), never references/' as they are now
                references={r.key: str((run_dir / r.name).resolve()) for r in REFERENCES
                            if (run_dir / r.name).is_file()},
                redact=REDACTED in copies))
            progress("compare", f"with {run_dir}")
            diffs = compare_run_folders(run_dir, replay)
    if not diffs:
        reports = ", ".join(f"{stem}.html and the unsigned {stem}.pdf" for stem in copies)
        out.print(f"identical: results.json, {reports} of {run_dir} reproduced", markup=False)
        raise Exit(0)
    err.print(f"differs: {len(diffs)} difference(s) from {run_dir}", markup=False)
    for line in diffs if verbose else shown_differences(diffs):
        err.print(f"  {line}", markup=False)
    if other_key and any(line.startswith(REDACTED) for line in diffs):
        err.print("  the report.redacted.* differences follow from the other signing key (warning above)",
                  markup=False)
    raise Exit(1)


def _rerun_checks(settings: Settings, keep: Path | None, run_id: str) -> str:
    """What `certify` checks before any work, for a re-run: the key directory, the signing key and the PDF signer,
    then the folder the re-run writes into, where given (`keep`: created if need be, writable, without a folder of
    this run id; else a temporary folder is made next, `_temporary_folder`). Returns the signing key's
    fingerprint."""
    from clustercert.attest.signing import load_pdf_signer, load_signing_key
    from clustercert.cli import safety

    safety.check_key_dir(settings.key_dir)
    pair = load_signing_key(settings.key_dir, settings.key_passphrase)
    load_pdf_signer(pair)
    if keep is not None:
        safety.check_reports_dir(keep)
        if (keep / run_id).exists() or (keep / run_id).is_symlink():
            raise UsageError(f"{keep / run_id}: expected a new folder for the re-run, got one that exists. "
                             "Give another --keep folder or remove that one")
    return pair.fingerprint


def _temporary_folder() -> Path:
    """A new temporary folder for a re-run that keeps nothing; a UsageError where none can be made."""
    try:
        return Path(tempfile.mkdtemp(prefix="clustercert-rerun-"))
    except OSError as exc:
        raise UsageError(f"{tempfile.gettempdir()}: expected a writable temporary folder for the re-run, got "
                         f"{exc.strerror}. Set TMPDIR to a writable folder or give --keep DIR") from None


def schedule(
    source: Annotated[Path, typer.Argument(help="A bundle, or a folder of sealed bundles (the newest is certified).")],
    cron: Annotated[str, typer.Option(help="Cron schedule, e.g. '0 3 * * 1' (Mondays 03:00 UTC).")],
    name: Annotated[str | None, typer.Option(help="Deployment name (default certify-<folder name>).")] = None,
    catalog: Annotated[str | None, typer.Option(help="Catalog id or path; default: bundle.yaml's.")] = None,
) -> None:
    """Serve a deployment that certifies SOURCE on CRON against the Prefect server at PREFECT_API_URL."""
    if not source.exists():
        raise UsageError(f"{source}: no such bundle or folder")
    from clustercert.settings import load_settings

    load_settings(prefect=True)  # a malformed PREFECT_API_URL or an unwritable PREFECT_HOME: one line, exit 2
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise UsageError("schedule needs a Prefect server: PREFECT_API_URL is not set. Start one with "
                         "`clustercert server` and set PREFECT_API_URL=http://127.0.0.1:4200/api (see README)")
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
    except ValueError:
        raise UsageError(f"--cron: expected a cron expression such as '0 3 * * 1', got '{cron}'") from None
    from flows.runtime import wait_for_users_server
    from flows.schedule import serve_schedule

    wait_for_users_server(hint="Start one (`clustercert server`) and point PREFECT_API_URL at it (see README)")
    deployment = name or f"certify-{source.resolve().name}"
    err.print(f"serving deployment scheduled-certify/{deployment} ({cron}) on {PREFECT_API_URL.value()}; "
              "Ctrl-C stops it", markup=False)
    from clustercert.catalog import typed_catalog

    # a catalog path typed here is made absolute: the deployment certifies later, wherever its worker runs
    serve_schedule(str(source.resolve()), cron, deployment, typed_catalog(catalog, source))


def server(
    host: Annotated[str, typer.Option(help="The address to serve on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port to serve on.")] = 4200,
) -> None:
    """Run a Prefect server for schedules and repeated certifications until Ctrl-C: Prefect's own `prefect server
    start`, its SQLite writes waiting for the lock instead of failing (2-4 s of each certification otherwise)."""
    import socket

    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise UsageError(f"--host: expected an address of this machine to serve on, got '{host}'") from None
    try:
        with socket.create_server((host, port)):  # Prefect checks it too, in more words, after its imports
            pass
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise UsageError(f"--port: cannot serve on {host}:{port} ({why}); choose another with --port") from None
    import warnings

    # before Prefect's import reads its settings: nothing phones home (`serve_lasting` reads them again)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    with warnings.catch_warnings():  # a home it cannot create: Prefect warns at its import; said below in one line
        warnings.simplefilter("ignore", UserWarning)
        from prefect.settings import get_current_settings

    from flows.server_boot import serve_lasting

    home = Path(get_current_settings().home)
    try:  # where Prefect keeps its database by default: Prefect only warns, then fails at its start with a traceback
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"PREFECT_HOME {home}: cannot be created ({exc.strerror}); set PREFECT_HOME to a folder "
                         "you can write") from None

    code = serve_lasting(host, port)
    if code:
        raise Exit(code)


def _quiet() -> None:
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def register(app: typer.Typer) -> None:
    """Mount the commands on `app`."""
    app.command(short_help="List past runs and their headline figures.")(runs)
    app.command(short_help="Re-run a certification and compare it with the original.")(rerun)
    app.command(short_help="Certify a bundle on a cron schedule (a Prefect deployment).")(schedule)
    app.command(short_help="Run a Prefect server for schedules and repeated certifications.")(server)
