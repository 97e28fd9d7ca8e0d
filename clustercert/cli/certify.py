"""`clustercert certify BUNDLE`: refuse unusable input in one line, run the certify flow, print its summary."""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from clustercert import PROJECT_ROOT
from clustercert.cli import ops as cli_ops
from clustercert.cli import safety
from clustercert.cli.common import Exit, err, now, options_command, out, quiet_prefect
from clustercert.errors import ClusterCertError, SigningError, UsageError

if TYPE_CHECKING:
    import datetime as dt

    from clustercert.attest.signing import KeyPair
    from clustercert.cli.progress import Progress
    from clustercert.settings import Settings
    from flows.request import CertifyRequest
    from flows.runtime import TemporaryServer

__all__ = ["DEFAULT_BUNDLE", "CertifyOptions", "InternalError", "certify"]

DEFAULT_BUNDLE = PROJECT_ROOT / "evidence" / "gb200-seed"


class InternalError(ClusterCertError):
    """A failure of clustercert itself, not of its input: one line, the traceback in a crash log."""

    exit_code = 4


@dataclass(frozen=True)
class CertifyOptions:
    """The arguments and options of `clustercert certify`."""

    bundle: Annotated[Path, typer.Argument(help="Evidence bundle folder (or its bundle.yaml).")] = DEFAULT_BUNDLE
    catalog: Annotated[
        str | None, typer.Option(help="Catalog id in references/ or a path; default: the shipped edition of the "
                                      "bundle's recipe release, else bundle.yaml's (a shipped one).")
    ] = None
    baselines: Annotated[
        Path | None, typer.Option(help="A baselines file (the program's targets per workload, dtype and scale, "
                                       "with who supplied them): they replace the catalog's.")
    ] = None
    reports_dir: Annotated[
        Path | None, typer.Option(help="Where run folders go (default CLUSTERCERT_REPORTS_DIR).")
    ] = None
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False
    dask: Annotated[bool, typer.Option("--dask", help="Run the phase tasks on a local Dask cluster "
                                       "(CLUSTERCERT_DASK_WORKERS workers, default 2).")] = False
    redact: Annotated[
        bool, typer.Option(help="Also write report.redacted.html/.pdf for customers: hostnames, user names and "
                                "process ids replaced by stable pseudonyms.")
    ] = False
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print the table of every check.")] = False
    profile: Annotated[
        str | None, typer.Option(help="Certification profile of the catalog: full, network (network acceptance: "
                                      "collectives and node pairs only) or health (node health); default: "
                                      "bundle.yaml's, else full.")
    ] = None


@options_command(CertifyOptions)
def certify(options: CertifyOptions) -> None:
    """Certify BUNDLE: exit 0 CERTIFIED, 1 NOT CERTIFIED, 2 usage/configuration error, 3 INCOMPLETE or unreadable."""
    started = time.monotonic()
    from clustercert.settings import load_settings

    settings = load_settings(prefect=True)
    clock = now()
    reports = options.reports_dir or settings.reports_dir
    bundle = _usable(options.bundle, reports, settings)
    from clustercert.catalog import typed_catalog

    catalog = typed_catalog(options.catalog, bundle)  # a path typed here: absolute, as the run records it
    if options.baselines is not None and not options.baselines.is_file():
        raise UsageError(f"{options.baselines}: no such baselines file. Give the file of targets (docs/reference.md)")
    from clustercert.cli.progress import Progress

    progress = Progress(err, enabled=not options.as_json, started=started)
    with progress:
        ready = _prepare(bundle, catalog, reports, settings, clock, progress, options)
        summary = _run(ready.request, ready.server, settings, reports, dask=options.dask, progress=progress)
    _print_certify(summary, Path(ready.request.run_dir), options.as_json, dev_key=ready.key.dev_key,
                   redacted=options.redact, verbose=options.verbose, bundle=Path(ready.request.bundle_path))
    from clustercert.verdicts import Outcome, exit_code_for

    raise Exit(exit_code_for(Outcome(summary["outcome"])))


def _usable(bundle: Path, reports: Path, settings: Settings) -> Path:
    """The bundle by its whole path, once it exists and the output folder and key directory are usable: refused
    before any work. The run records the whole path (`rerun` and `verify` read it there from any folder); the
    results and reports name each evidence file by its path in the bundle, wherever the bundle lies."""
    if not bundle.exists():
        raise UsageError(f"{bundle}: no such bundle. Give a bundle folder (default: {DEFAULT_BUNDLE}).")
    bundle = Path(os.path.abspath(bundle))
    safety.check_reports_dir(reports)
    safety.check_key_dir(settings.key_dir)
    return bundle


@dataclass(frozen=True)
class _Ready:
    """What the run needs before its flow: the request, the signing key, and the temporary Prefect server that
    started meanwhile (None: the user's server)."""

    request: CertifyRequest
    key: KeyPair
    server: TemporaryServer | None


def _prepare(bundle: Path, catalog: str | None, reports: Path, settings: Settings, clock: dt.datetime,
             progress: Progress, options: CertifyOptions) -> _Ready:
    """The bundle loaded, hashed and checked against its seal, the key ready and the run's metadata drawn.
    Unreadable input is refused here, with one line, before any flow starts, and before the temporary Prefect
    server starts when bundle.yaml or the catalog is the problem (one that started is stopped at exit): the server
    starts on the other core once they are read, while the evidence is hashed (progress says how far)."""
    from clustercert.evidence.window import check_stamps
    from clustercert.runs.folder import GivenFiles, check_seal, load_inputs

    # --baselines as the run records it: a whole path
    baselines = os.path.abspath(options.baselines) if options.baselines is not None else None
    spawned: list[TemporaryServer | None] = []
    inputs = load_inputs(bundle, settings.references_dir, catalog, described=_spawn(spawned), progress=progress,
                         given=GivenFiles(baselines=baselines))
    check_seal(inputs.bundle, inputs.digests)
    check_stamps(inputs.bundle, clock)
    from clustercert.phases.profile import choose_profile

    chosen = choose_profile(options.profile, inputs.bundle, inputs.catalog)  # an unknown one refused before any work
    _ensure_key(settings, clock)
    from clustercert.attest.signing import load_pdf_signer, load_signing_key
    from clustercert.runs.meta import new_run_meta
    from flows.request import CertifyRequest

    key = load_signing_key(settings.key_dir, settings.key_passphrase)
    load_pdf_signer(key)  # a PDF key that cannot be used is refused now, not after the whole run
    meta = new_run_meta(inputs.bundle, clock, key, reports, catalog, profile=chosen)
    if baselines is not None:  # runs without one record what they always did
        meta["baselines_arg"] = baselines
    request = CertifyRequest(
        bundle_path=str(inputs.bundle.root), run_dir=str(reports / meta["run_id"]), run_meta=meta,
        key_dir=str(settings.key_dir), references_dir=str(settings.references_dir),
        templates_dir=str(settings.templates_dir), catalog=catalog, baselines=baselines,
        limit=settings.max_evidence_bytes, redact=options.redact)
    return _Ready(request, key, spawned[0])


def _spawn(spawned: list[TemporaryServer | None]) -> Callable[[], None]:
    """What the load calls once bundle.yaml and the catalog are read: the temporary Prefect server spawned (into
    `spawned`), to start on the other core while the run gets ready."""
    def spawn() -> None:
        quiet_prefect()
        from flows.runtime import spawn_api

        spawned.append(spawn_api())

    return spawn


def _run(request: CertifyRequest, server: TemporaryServer | None, settings: Settings, reports: Path, *, dask: bool,
         progress: Progress) -> dict[str, Any]:
    """The certify flow's summary, against the Prefect API (`server`, or the user's) and the Dask cluster
    asked for; an internal error is one line here, its traceback written beside the run folder, never in it."""
    try:
        from flows.certify import certify_flow
        from flows.progress import listening
        from flows.runners import received
        from flows.runtime import prefect_runtime
        from flows.tactics import IMPORT_STEPS

        safety.own_prefect_sigterm()
        workers = (settings.dask_workers or 2) if dask else settings.dask_workers
        progress("start", "Prefect API")
        with safety.running(Path(request.run_dir)), listening(progress), prefect_runtime(server, IMPORT_STEPS), \
                cli_ops.dask_address(workers, settings.dask_address) as address:
            return received(certify_flow(request.model_copy(update={"dask_address": address})))
    except ClusterCertError:
        raise
    except Exception as exc:
        log = safety.write_crash_log(traceback.format_exc(), reports, str(request.run_meta["run_id"]))
        raise InternalError(f"internal error ({exc.__class__.__name__}); traceback written to "
                            f"{log or 'nowhere (no writable folder)'}") from exc


def _ensure_key(settings: Settings, clock: dt.datetime) -> None:
    from clustercert.attest.signing import ensure_dev_key

    try:
        # Created exclusively: a certification started at the same moment uses the key the first one created.
        created = ensure_dev_key(settings.key_dir, passphrase=settings.key_passphrase, now=clock)
    except OSError as exc:
        raise SigningError(f"{settings.key_dir}: cannot create a development key there ({exc.strerror}). "
                           "Set CLUSTERCERT_KEY_DIR to a writable folder or run `clustercert keys init`") from None
    if created:
        err.print(f"note: no signing key in {settings.key_dir}; created a development key there. "
                  "Run `clustercert keys init` for a real one.")


def _named_whole(check: dict[str, Any], bundle: Path) -> str:
    """A check's message with the bundle file it starts with named by its whole path, for the error lines a person
    opens the file from (results and reports name it by its path in the bundle)."""
    message: str = check["message"]
    for name in [*(e["file"] for e in check.get("evidence") or []), "bundle.yaml"]:
        if message.startswith(name) and message[len(name):len(name) + 1] in (" ", ":", ""):
            return str(bundle / name) + message[len(name):]
    return message


def _print_certify(summary: dict[str, Any], run_dir: Path, as_json: bool, *, bundle: Path, dev_key: bool = False,
                   redacted: bool = False, verbose: bool = False) -> None:
    results = summary["results"]
    errors = [c for c in results["checks"] if c["status"] == "ERROR" and c["severity"] == "required"]
    if as_json:
        print(json.dumps({"outcome": results["outcome"], "profile": results["profile"]["id"],
                          "run_id": results["run_id"], "run_dir": str(run_dir),
                          "valid_until": results["valid_until"], "paths": summary["paths"],
                          "checks": results["checks"], "workloads": results["workloads"]}, indent=2))
        return
    from clustercert.cli.summary import check_list_lines, check_table_rows, summary_lines

    if verbose and out.width < 80:  # a table's columns would break its words: a list
        for line in check_list_lines(results, out.width):
            out.print(line, markup=False, highlight=False)
    elif verbose:
        table = Table(title=f"{results['cluster']['name']}: {results['outcome']}", expand=True)
        table.add_column("check", overflow="fold", ratio=3)
        table.add_column("status", no_wrap=True)
        table.add_column("measured / target", overflow="fold", ratio=1)
        table.add_column("delta (95% interval)", overflow="fold", ratio=1)
        for row in check_table_rows(results):
            table.add_row(*row)
        out.print(table)
    for line in summary_lines(results, summary["paths"], dev_key=dev_key, redacted=redacted, width=out.width,
                              verbose=verbose):
        out.print(line, markup=False, highlight=False)
    for e in errors[:5]:
        err.print(f"error: {_named_whole(e, bundle)}", markup=False)
