"""The `clustercert` command line: parse arguments, call a flow (imported lazily), print, exit."""

from __future__ import annotations

import errno
import json
import shutil
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from clustercert.cli import ops as cli_ops
from clustercert.cli import run as cli_run
from clustercert.cli import safety
from clustercert.cli.certify import certify
from clustercert.cli.common import Exit, err, fit_widths, now, options_command, out, printable
from clustercert.cli.evidence import evidence_app
from clustercert.errors import ClusterCertError, UsageError, unwritten

__all__ = ["app", "entry", "main"]
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

# --help lists the commands in the order they are mounted: certify first, then verify and simulate (below), then
# the others (`register` at the end)
app.command(short_help="Certify a bundle: a signed run folder, HTML and PDF report.")(certify)


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
    from clustercert.attest.signing import load_trust
    from clustercert.settings import load_settings

    settings = load_settings()
    load_trust(settings.key_dir, trust or None)  # a key that cannot be trusted is a usage error, before any file
    result = verify_run(run_dir, key_dir=settings.key_dir, trust=trust or None, bundle=bundle, today=now().date())
    if as_json:
        print(json.dumps({"valid": result.ok, "signer": result.signer, "pdf_signer": result.pdf_signer,
                          "checked": result.checked, "problems": result.problems, "warnings": result.warnings},
                         indent=2))
    elif result.ok:
        out.print(f"valid: {result.checked} files match the manifest signed by {result.signer}; "
                  f"the PDF signature covers the whole file (signed by {result.pdf_signer})")
    else:
        err.print(printable(f"invalid: {result.problems[0]}"), markup=False)
        for extra in result.problems[1:5]:
            err.print(printable(f"  also: {extra}"), markup=False)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    raise Exit(0 if result.ok else 1)


@keys_app.command("init", short_help="Create the signing keys of the manifest and the PDF.")
def keys_init(
    common_name: Annotated[str, typer.Option(help="Who signs: the common name of the PDF signing certificate "
                                                  "(a person or a role).")] = "clustercert signer",
    organisation: Annotated[str, typer.Option("--organisation", "--organization",
                                              help="The signer's organisation, in the certificate.")] = "clustercert",
    email: Annotated[str | None, typer.Option(help="The signer's e-mail address, in the certificate.")] = None,
) -> None:
    """Create the signing keys: Ed25519 for the manifest, a P-256 key and X.509 certificate for the PDF whose subject
    names the signer (common name, organisation, e-mail); every report names them on its first page.

    The passphrase, if any, comes from CLUSTERCERT_KEY_PASSPHRASE; private files are mode 0600.
    """
    import re

    from clustercert.attest.signing import init_keys, signer_identity
    from clustercert.settings import load_settings

    for option, value in (("--common-name", common_name), ("--organisation", organisation)):
        if not value.strip():
            raise UsageError(f"keys init {option}: expected a name, got an empty one")
    if email is not None and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", email):
        raise UsageError(f"keys init --email: expected an address such as name@example.com, got {email!r}")
    settings = load_settings()
    pair = init_keys(settings.key_dir, passphrase=settings.key_passphrase, common_name=common_name.strip(),
                     dev=False, now=now(), organisation=organisation.strip(), email=email)
    who = signer_identity(settings.key_dir)
    out.print(f"created keys in {settings.key_dir}; manifest key {pair.fingerprint}; PDF certificate SHA-256 "
              f"{who['cert_sha256']}")


@dataclass(frozen=True)
class SimulateOptions:
    """The options of `clustercert simulate`."""

    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write the bundle into (must not exist).")]
    scenario: Annotated[str, typer.Option(help="seed (GB200, CERTIFIED), degraded (GB200, NOT CERTIFIED) "
                                               "or h100 (H100, CERTIFIED).")] = "seed"
    system: Annotated[str | None, typer.Option(help="gb200-nvl72 or h100-sxm (must match the scenario).")] = None
    gpus: Annotated[int | None, typer.Option(help="GPUs of the certification (default: the scenario's).",
                                             min=128)] = None
    seed: Annotated[int | None, typer.Option(help="Random seed: the same arguments give byte-identical files.")] = None
    repeats: Annotated[int | None, typer.Option(help="Repeats per workload at 512 GPUs.", min=1, max=10)] = None
    start: Annotated[str | None, typer.Option(help="Simulated start time, ISO-8601 (never the wall clock).")] = None
    fault: Annotated[list[str] | None, typer.Option(
        help="Replace the scenario's faults (repeatable; 'none' for none): slow-gpu:node=N,gpu=G,pct=X,at=1h"
             "[,reported=no] | bad-link:a=N,b=M,pct=X | node-fail:node=N,at=2h[,reported=no] | "
             "hang:at=T,duration=D[,reported=no] | lost-steps:at=T,steps=K")] = None


@app.command(short_help="Write a sealed synthetic bundle of a scenario.")
@options_command(SimulateOptions)
def simulate(options: SimulateOptions) -> None:
    """Write a sealed synthetic bundle of a scenario (see evidence/README.md for the shipped ones)."""
    out_dir = options.out_dir
    if out_dir.exists():
        raise UsageError(f"{out_dir}: already exists; choose a new folder")
    from clustercert.catalog import load_catalog
    from clustercert.simulate.faults import parse_fault
    from clustercert.simulate.scenario import ScenarioName, scenario_for, write_bundle
    from clustercert.simulate.topology import System, build_topology

    try:
        name = ScenarioName(options.scenario)
        chosen = System(options.system) if options.system is not None else None
    except ValueError as exc:
        raise UsageError(f"simulate: {exc}; scenarios: seed, degraded, h100; systems: gb200-nvl72, h100-sxm") from None
    faults = None if options.fault is None else tuple(parse_fault(f) for f in options.fault if f != "none")
    sc = scenario_for(name, seed=options.seed, gpus=options.gpus, system=chosen, faults=faults,
                      repeats=options.repeats, start=options.start)
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
    fit_widths()
    try:
        app(args=argv, standalone_mode=False)
    except Exit as done:
        return done.code
    except ClusterCertError as exc:
        err.print(f"error: {printable(str(exc))}", markup=False)
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
    a certification's heap (Prefect, the parsed evidence, the report) is millions of objects, walked after the work
    is done. Frozen, they are left out of those collections; objects are still freed by their counts, and every exit
    handler (temporary folders, log flushes) still runs."""
    import gc

    code = main(argv)
    gc.freeze()
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(entry())
