"""`clustercert run PLAN --bundle DIR [--certify]`: run a certification plan on Slurm, then certify its bundle."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from clustercert.cli.certify import certify as certify_command
from clustercert.cli.common import Exit, err, quiet_prefect

__all__ = ["register"]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (a cancelled flow run, a killed CLI) unwinds like Ctrl-C, so the running job is cancelled
    raise KeyboardInterrupt(f"signal {signum}")


def register(app: typer.Typer) -> None:
    @app.command(short_help="Run a certification plan's jobs on Slurm into a bundle.")
    def run(
        plan: Annotated[Path, typer.Argument(help="Certification plan (YAML; see docs/plan-schema.md).")],
        bundle: Annotated[Path, typer.Option(help="Bundle folder to write (created; a re-run resumes it).")],
        certify: Annotated[bool, typer.Option("--certify", help="Certify the sealed bundle afterwards.")] = False,
        reports_dir: Annotated[
            Path | None, typer.Option(help="With --certify: where run folders go (default CLUSTERCERT_REPORTS_DIR).")
        ] = None,
    ) -> None:
        """Run PLAN's jobs on Slurm into BUNDLE and seal it: exit 0, 2 bad plan, 3 a job could not be run or
        collected; with --certify, certify's exit codes."""
        import datetime as dt

        from clustercert.runner.plan import load_plan
        from clustercert.runner.slurm import Slurm
        from clustercert.settings import load_settings

        load_plan(plan)  # a bad plan is one line and exit 2, before anything is submitted
        load_settings(prefect=True)  # so is an environment the flow cannot run in
        Slurm(dt.UTC).nodes()  # so is a cluster that cannot be reached (exit 3), before the flow starts
        quiet_prefect()
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            from flows.run import run_flow

            summary = run_flow(plan_path=str(plan.resolve()), bundle_dir=str(bundle.resolve()))
        except KeyboardInterrupt:
            err.print("run: interrupted; the plan's running Slurm job was cancelled. Re-run to resume.")
            raise Exit(130) from None
        finally:
            signal.signal(signal.SIGTERM, previous)
        err.print(f"run: bundle written and sealed: {summary['bundle']}")
        if certify:
            certify_command(bundle=bundle, catalog=None, reports_dir=reports_dir, as_json=False, dask=False,
                            redact=False)
