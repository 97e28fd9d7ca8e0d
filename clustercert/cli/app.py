"""The `clustercert` command line: parse arguments, call a flow (imported lazily), print, exit."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from clustercert import PROJECT_ROOT
from clustercert.cli import ops as cli_ops
from clustercert.cli import run as cli_run
from clustercert.cli import safety
from clustercert.cli.evidence import evidence_app
from clustercert.errors import ClusterCertError, SigningError, UsageError, unwritten

if TYPE_CHECKING:
    from clustercert.settings import Settings
    from flows.runtime import TemporaryServer

__all__ = ["app", "entry", "main"]

DEFAULT_BUNDLE = PROJECT_ROOT / "evidence" / "gb200-seed"
# the write failures a command meets on a full disk or quota, a file-size limit (ulimit -f), a file system mounted
# read-only
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})

app = typer.Typer(
    name="clustercert",
    help="Certify a GPU training cluster from the evidence its tools wrote: parse, validate, measure, "
    "judge against versioned references, and issue a signed, verifiable HTML/PDF report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
keys_app = typer.Typer(help="Manage the signing keys (the key directory is CLUSTERCERT_KEY_DIR).",
                       short_help="Manage the signing keys.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(evidence_app, name="evidence")

out = Console(highlight=False, soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)


class Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _quiet_prefect() -> None:
    # Findings and errors are printed by clustercert itself; Prefect's console logs would repeat them with
    # tracebacks. Its logs still reach the Prefect API when a server is configured.
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    # Prefect's internal services log at ERROR on their own logger ("EventsWorker failed to process item").
    os.environ.setdefault("PREFECT_INTERNAL_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_LOGGING_LOG_PRINTS", "false")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _ensure_key(settings: Settings, now: dt.datetime) -> None:
    from clustercert.attest.signing import ensure_dev_key

    try:
        # Created exclusively: a certification started at the same moment uses the key the first one created.
        created = ensure_dev_key(settings.key_dir, passphrase=settings.key_passphrase, now=now)
    except OSError as exc:
        raise SigningError(f"{settings.key_dir}: cannot create a development key there ({exc.strerror}). "
                           "Set CLUSTERCERT_KEY_DIR to a writable folder or run `clustercert keys init`") from None
    if created:
        err.print(f"note: no signing key in {settings.key_dir}; created a development key there. "
                  "Run `clustercert keys init` for a real one.")


@app.command(short_help="Certify a bundle: a signed run folder, HTML and PDF report.")
def certify(
    bundle: Annotated[Path, typer.Argument(help="Evidence bundle folder (or its bundle.yaml).")] = DEFAULT_BUNDLE,
    catalog: Annotated[
        str | None, typer.Option(help="Catalog id in references/ or a path; default: bundle.yaml's.")
    ] = None,
    reports_dir: Annotated[
        Path | None, typer.Option(help="Where run folders go (default CLUSTERCERT_REPORTS_DIR).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    dask: Annotated[bool, typer.Option("--dask", help="Run the phase tasks on a local Dask cluster "
                                       "(CLUSTERCERT_DASK_WORKERS workers, default 2).")] = False,
    redact: Annotated[
        bool, typer.Option(help="Also write report.redacted.html/.pdf for customers: hostnames, user names and "
                                "process ids replaced by stable pseudonyms.")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print the table of every check.")] = False,
) -> None:
    """Certify BUNDLE: exit 0 CERTIFIED, 1 NOT CERTIFIED, 2 usage/configuration error, 3 INCOMPLETE or unreadable."""
    started = time.monotonic()
    from clustercert.settings import load_settings

    settings = load_settings()
    now = _now()
    reports = reports_dir or settings.reports_dir
    if not bundle.exists():
        raise UsageError(f"{bundle}: no such bundle. Give a bundle folder (default: {DEFAULT_BUNDLE}).")
    # the bundle by its whole path, as the run records it (`rerun` and `verify` read it there from any folder); the
    # results and reports name each evidence file by its path in the bundle, wherever the bundle lies
    bundle = Path(os.path.abspath(bundle))
    safety.check_reports_dir(reports)  # an unusable output folder or key directory is refused before any work
    safety.check_key_dir(settings.key_dir)
    from clustercert.catalog import typed_catalog
    from clustercert.runs.folder import check_seal, load_inputs

    catalog = typed_catalog(catalog, bundle)  # a path typed here: absolute, as the run records it

    spawned: list[TemporaryServer | None] = []

    def spawn() -> None:  # the temporary Prefect server starts on the other core while the run gets ready
        _quiet_prefect()
        from flows.runtime import spawn_api

        spawned.append(spawn_api())

    # Unreadable input is refused here, with one line, before any flow starts (and before the server starts when
    # bundle.yaml or the catalog is the problem; one that is started is stopped at exit). Progress starts with the
    # evidence's hashing (20 s of a 4,096-GPU bundle's 23.5 GB).
    from clustercert.cli.progress import Progress

    progress = Progress(err, enabled=not as_json, started=started)
    with progress:
        inputs = load_inputs(bundle, settings.references_dir, catalog, described=spawn, progress=progress)
        check_seal(inputs.bundle, inputs.digests)
        loaded = inputs.bundle
        server = spawned[0]
        _ensure_key(settings, now)
        from clustercert.attest.signing import load_pdf_signer, load_signing_key
        from clustercert.runs.meta import new_run_meta

        key = load_signing_key(settings.key_dir, settings.key_passphrase)
        load_pdf_signer(key)  # a PDF key that cannot be used is refused now, not after the whole run
        meta = new_run_meta(loaded, now, key.fingerprint, key.dev_key, reports, catalog, key_dir=settings.key_dir)
        run_id = meta["run_id"]
        run_dir = reports / run_id
        try:
            from flows.certify import IMPORT_STEPS, certify_flow
            from flows.progress import listening
            from flows.runners import received
            from flows.runtime import prefect_runtime

            safety.own_prefect_sigterm()
            workers = (settings.dask_workers or 2) if dask else settings.dask_workers
            progress("start", "Prefect API")
            with safety.running(run_dir), listening(progress), prefect_runtime(server, IMPORT_STEPS), \
                    cli_ops.dask_address(workers, settings.dask_address) as address:
                summary = received(certify_flow(
                    bundle_path=str(loaded.root), run_dir=str(run_dir), run_meta=meta, key_dir=str(settings.key_dir),
                    references_dir=str(settings.references_dir), templates_dir=str(settings.templates_dir),
                    catalog=catalog, limit=settings.max_evidence_bytes, dask_address=address, redact=redact,
                ))
        except ClusterCertError:
            raise
        except Exception as exc:  # an internal error: one line here, the traceback in the run folder
            log = safety.write_crash_log(traceback.format_exc(), reports, run_id)  # beside the run folder, never in it
            raise InternalError(f"internal error ({exc.__class__.__name__}); traceback written to "
                                f"{log or 'nowhere (no writable folder)'}") from exc
    _print_certify(summary, run_dir, as_json, dev_key=key.dev_key, redacted=redact, verbose=verbose,
                   bundle=loaded.root)
    from clustercert.verdicts import Outcome, exit_code_for

    raise Exit(exit_code_for(Outcome(summary["outcome"])))


class InternalError(ClusterCertError):
    exit_code = 4


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
        print(json.dumps({"outcome": results["outcome"], "run_id": results["run_id"], "run_dir": str(run_dir),
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


@app.command(short_help="Verify a run folder: its signatures and every file's hash.")
def verify(
    run_dir: Annotated[Path, typer.Argument(help="A run folder under reports/.")],
    trust: Annotated[
        list[Path] | None,
        typer.Option(help="Trust only this Ed25519 public key or X.509 certificate (PEM; repeatable); "
                     "default: the key directory's."),
    ] = None,
    bundle: Annotated[Path | None, typer.Option(help="Where the evidence bundle is now, if it moved.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Verify a run folder: the DSSE envelope, the PDF signature over the whole file, every file's hash,
    no unlisted file. Exit 0 valid, 1 invalid; warns when the certification has expired."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a run folder")
    from clustercert.attest.manifest import verify_run
    from clustercert.settings import load_settings

    settings = load_settings()
    result = verify_run(run_dir, key_dir=settings.key_dir, trust=trust or None, bundle=bundle, today=_now().date())
    if as_json:
        print(json.dumps({"valid": result.ok, "signer": result.signer, "pdf_signer": result.pdf_signer,
                          "checked": result.checked, "problems": result.problems, "warnings": result.warnings},
                         indent=2))
    elif result.ok:
        out.print(f"valid: {result.checked} files match the manifest signed by {result.signer}; "
                  f"the PDF signature covers the whole file (signed by {result.pdf_signer})")
    else:
        err.print(f"invalid: {result.problems[0]}", markup=False)
        for extra in result.problems[1:5]:
            err.print(f"  also: {extra}", markup=False)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    raise Exit(0 if result.ok else 1)


@keys_app.command("init", short_help="Create the signing keys of the manifest and the PDF.")
def keys_init(
    common_name: Annotated[str, typer.Option(help="Subject of the PDF signing certificate.")] = "clustercert signer",
) -> None:
    """Create the signing keys: Ed25519 for the manifest, a P-256 key and X.509 certificate for the PDF.

    The passphrase, if any, comes from CLUSTERCERT_KEY_PASSPHRASE; private files are mode 0600.
    """
    from clustercert.attest.signing import init_keys
    from clustercert.settings import load_settings

    settings = load_settings()
    pair = init_keys(settings.key_dir, passphrase=settings.key_passphrase, common_name=common_name, dev=False,
                     now=_now())
    out.print(f"created keys in {settings.key_dir}; manifest key {pair.fingerprint}")


@app.command(short_help="Write a sealed synthetic bundle of a scenario.")
def simulate(
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write the bundle into (must not exist).")],
    scenario: Annotated[str, typer.Option(help="seed (GB200, CERTIFIED), degraded (GB200, NOT CERTIFIED) "
                                               "or h100 (H100, CERTIFIED).")] = "seed",
    system: Annotated[str | None, typer.Option(help="gb200-nvl72 or h100-sxm (must match the scenario).")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs of the certification (default: the scenario's).",
                                             min=128)] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed: the same arguments give byte-identical files.")]
    = None,
    repeats: Annotated[int | None, typer.Option(help="Repeats per workload at 512 GPUs.", min=1, max=10)] = None,
    start: Annotated[str | None, typer.Option(help="Simulated start time, ISO-8601 (never the wall clock).")]
    = None,
    fault: Annotated[list[str] | None, typer.Option(
        help="Replace the scenario's faults (repeatable; 'none' for none): slow-gpu:node=N,gpu=G,pct=X,at=1h"
             "[,reported=no] | bad-link:a=N,b=M,pct=X | node-fail:node=N,at=2h[,reported=no] | "
             "hang:at=T,duration=D[,reported=no] | lost-steps:at=T,steps=K")] = None,
) -> None:
    """Write a sealed synthetic bundle of a scenario (see evidence/README.md for the shipped ones)."""
    if out_dir.exists():
        raise UsageError(f"{out_dir}: already exists; choose a new folder")
    from clustercert.catalog import load_catalog
    from clustercert.simulate.faults import parse_fault
    from clustercert.simulate.scenario import ScenarioName, scenario_for, write_bundle
    from clustercert.simulate.topology import System, build_topology

    try:
        name = ScenarioName(scenario)
        chosen = System(system) if system is not None else None
    except ValueError as exc:
        raise UsageError(f"simulate: {exc}; scenarios: seed, degraded, h100; systems: gb200-nvl72, h100-sxm") from None
    faults = None if fault is None else tuple(parse_fault(f) for f in fault if f != "none")
    sc = scenario_for(name, seed=seed, gpus=gpus, system=chosen, faults=faults, repeats=repeats, start=start)
    from clustercert.settings import load_settings

    settings = load_settings()
    catalog = load_catalog(build_topology(sc.system, sc.gpus).catalog, settings.references_dir)
    try:
        with safety.output_folder(out_dir):  # a signal meanwhile removes it
            write_bundle(out_dir, sc, catalog)
    except OSError as exc:  # a full disk: the folder this command made, half written, is not left as a bundle
        shutil.rmtree(out_dir, ignore_errors=True)
        raise UsageError(f"{unwritten(out_dir, exc)}; the partial bundle was removed. Free space there, or choose "
                         "another --out") from None
    out.print(f"wrote {out_dir}")


# --help lists the commands in the order they are mounted: certify, verify and simulate (above) first, then these
cli_run.register(app)  # run: a certification plan on Slurm (issue 15)
cli_ops.register(app)  # runs, rerun, schedule, server (issue 7)


def _click_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(usage-or-Click errors, exits) of Typer's vendored Click and, where installed, of Click itself: Typer 0.29
    raises its own copies, which are not the `click` package's classes."""
    from typer._click import exceptions as vendored

    shown: list[type[BaseException]] = [vendored.ClickException]
    exits: list[type[BaseException]] = [typer.Exit]
    try:
        import click
    except ImportError:  # pragma: no cover - Click comes with Prefect
        pass
    else:
        shown.append(click.exceptions.ClickException)
        exits.append(click.exceptions.Exit)
    return tuple(shown), tuple(exits)


def _name_the_group(exc: BaseException) -> None:
    """`clustercert seal`, a command of a group given alone: the message names the commands it is (`clustercert
    evidence seal`), where Click's suggests look-alike top-level names or none."""
    import re

    found = re.fullmatch(r"No such command '(.+?)'\.(?: Did you mean .*)?", str(getattr(exc, "message", "")))
    ctx = getattr(exc, "ctx", None)
    if found is None or ctx is None or ctx.parent is not None:
        return
    name = found.group(1)
    groups = [group for group, command in ctx.command.commands.items() if name in getattr(command, "commands", {})]
    if groups:
        exc.message = (f"No such command '{name}'. Did you mean "  # type: ignore[attr-defined]
                       + " or ".join(f"'clustercert {group} {name}'" for group in sorted(groups)) + "?")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (never a traceback on the terminal)."""
    safety.install_signal_handlers()
    try:
        app(args=argv, standalone_mode=False)
    except Exit as done:
        return done.code
    except ClusterCertError as exc:
        err.print(f"error: {exc}", markup=False)
        return exc.exit_code
    except typer.Abort:
        err.print("aborted")
        return 2
    except Exception as exc:
        shown, exits = _click_errors()
        if isinstance(exc, shown):
            # Click's own message naming the problem (unknown option, missing argument, unknown command), with
            # the usage line; exit 2 for usage errors, Click's code for the others.
            _name_the_group(exc)
            exc.show()  # type: ignore[attr-defined]
            return int(getattr(exc, "exit_code", 2))
        if isinstance(exc, exits):
            return int(getattr(exc, "exit_code", 0))
        if isinstance(exc, OSError) and exc.errno in _NO_ROOM:
            # the machine's, not the program's (see _NO_ROOM)
            err.print(f"error: {unwritten(exc.filename or 'a file', exc)}. Free space there (or write elsewhere) and "
                      "run the command again", markup=False)
            return 2
        path = safety.write_crash_log(traceback.format_exc(), None, "clustercert")
        err.print(f"error: internal error ({exc.__class__.__name__}); traceback written to "
                  f"{path or 'nowhere (no writable temporary folder)'}", markup=False)
        return 4
    return 0


def entry(argv: list[str] | None = None) -> int:
    """`main` for a process that exits when it returns (the `clustercert` command, `python -m clustercert`).

    Everything the command made is garbage then, but the interpreter's last collections at exit walk it all first:
    a certification's heap (Prefect, the parsed evidence, the report) is millions of objects, 2.3 s of the sample's
    certify spent after the work was done. Frozen, they are left out of those collections; objects are still freed
    by their counts, and every exit handler (temporary folders, log flushes) still runs."""
    import gc

    code = main(argv)
    gc.freeze()
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(entry())
