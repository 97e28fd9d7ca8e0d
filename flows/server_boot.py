"""The temporary Prefect server's own process: it reads Prefect's settings, opens its log, seeds its database, then
runs Prefect's app under uvicorn (`python -m flows.server_boot --port N ...`, started by `flows.runtime`).

The certification that starts it need not import Prefect first: `import prefect` reads every settings source and
builds Prefect's client context (a noticeable part of a certification's start), and the server, which imports
Prefect anyway, could not be started until that was done. The child reads the same sources (the same
environment, profiles, prefect.toml and .env in the same folder), so it finds the settings the parent would have
given it; settings a process set in-process (only a process that has imported Prefect can have any) are passed in
its environment by `flows.runtime.TemporaryServer.spawn`, as before.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flows.server_output import LOG_NAME, drop_if_empty, log_path

__all__ = ["LOG_NAME", "drop_if_empty", "log_path", "main", "serve", "serve_lasting", "server_args", "ui_api_url"]

# When its database was seeded from the template, the block types need no registration (see `main`)
_REGISTERED = ("PREFECT_API_BLOCKS_REGISTER_ON_START", "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION")


def server_args(port: int) -> list[str]:
    """uvicorn's arguments for Prefect's server app as Prefect's temporary server runs it (127.0.0.1:`port`), made by
    `flows.prefect_db.create_app`. Prefect's folder is found without importing it."""
    from importlib.util import find_spec

    spec = find_spec("prefect")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("prefect is not installed")
    site = Path(next(iter(spec.submodule_search_locations))).parent
    return ["--app-dir", str(site), "--factory", "flows.prefect_db:create_app", "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "error", "--lifespan", "on"]


def serve(port: int) -> int:
    """Prefect's app under uvicorn, in this process, until it is stopped; uvicorn's exit status (3: its start
    failed)."""
    from uvicorn.main import main as uvicorn_main

    try:
        uvicorn_main(args=server_args(port), prog_name="uvicorn")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def ui_api_url(host: str, port: int) -> str:
    """The API address the UI of a server on `host`:`port` is handed (in `/ui-settings`), as a browser on this machine
    reaches it: a wildcard address as loopback, an IPv6 address in brackets."""
    import ipaddress

    shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    try:
        if ipaddress.ip_address(shown).version == 6:
            shown = f"[{shown}]"
    except ValueError:
        pass  # a host name
    return f"http://{shown}:{port}/api"


def serve_lasting(host: str, port: int) -> int:
    """The server a user starts once, for schedules and repeated certifications (`clustercert server`): Prefect's
    own `prefect server start` in the foreground (its services, its UI and every other setting Prefect's), with
    the two changes of the temporary server that do not shorten its life: its SQLite write transactions begin
    IMMEDIATE (`flows.prefect_db.immediate_sqlite_writes`: no "database is locked" answered with the client's 2 s
    back-off, as Prefect's own server answers), and a fresh home's database is copied from the
    template; and two settings of its own unless the user set them: its UI is handed this server's address
    (Prefect hands it PREFECT_API_URL's, else port 4200's), and its telemetry is off. Prefect's exit status (0 when
    stopped with Ctrl-C or SIGTERM)."""
    from prefect.context import refresh_global_settings_context

    from flows.prefect_db import immediate_sqlite_writes, seed_database

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # as certify's: nothing phones home
    os.environ.setdefault("DO_NOT_TRACK", "1")
    refresh_global_settings_context()  # Prefect read its settings at its import, maybe before the lines above
    settings = _settings()
    if "api_url" not in settings.server.ui.model_fields_set:  # the user's UI address, from any source, is kept
        os.environ["PREFECT_UI_API_URL"] = ui_api_url(host, port)
    if seed_database(settings):
        for name in _REGISTERED:  # as for the temporary server (see `main`): the template has them
            os.environ.setdefault(name, "false")
    # every setting above read again: `prefect server start` reads them from the current context, not the
    # environment
    refresh_global_settings_context()
    immediate_sqlite_writes()  # in this process, where `prefect server start` makes its app in the foreground
    from prefect.cli import app  # Prefect's command line reads its arguments from sys.argv only

    # Ctrl-C and SIGTERM are how a server is stopped: uvicorn takes them while it serves, shuts down cleanly, then
    # raises them again, which ends here as a stop (exit 0), not as an interrupted certification's (130, 143)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    argv = sys.argv
    sys.argv = ["prefect", "server", "start", "--host", host, "--port", str(port)]
    try:
        app()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        return 0
    finally:
        sys.argv = argv
    return 0


def _log_to(log: Path, early: Path | None) -> None:
    """Standard output and error go to `log` (appended to; never through a link), after what was written to
    `early` before it was known: the starter gave the process that file, since the log's place is a setting."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        if early is not None:
            try:
                os.write(fd, early.read_bytes())
                early.unlink()
            except FileNotFoundError:
                pass
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)


def _leaving(early: Path | None) -> Callable[[], None]:
    """What the server does when its parent is gone (`clustercert.lifeline.stop_gracefully`), its early output file
    removed first when nothing was written to it: a parent killed while the server still started (before `_log_to`
    moved that file into its log) cannot remove it, and each such run left an empty file in the temporary folder."""
    from clustercert.lifeline import stop_gracefully

    def leave() -> None:
        drop_if_empty(early)
        stop_gracefully()

    return leave


def _settings() -> Any:
    from prefect.settings import get_current_settings

    return get_current_settings()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.server_boot",
                                     description="Prefect's temporary server for one certification.")
    parser.add_argument("--port", type=int, required=True, help="the loopback port to serve on")
    parser.add_argument("--log", type=Path, help=f"where its output goes (default: PREFECT_HOME/{LOG_NAME})")
    parser.add_argument("--early", type=Path, help="the file its output went to before the log was known")
    parser.add_argument("--parent", type=int,
                        help="the process that started it: the server stops when that one is gone (killed outright)")
    parser.add_argument("--seed", action="store_true",
                        help="a fresh home's database from the template (flows.prefect_db.seed_database)")
    args = parser.parse_args(argv)
    if args.parent is not None:
        from clustercert.lifeline import follow_parent

        # watched from here on, Prefect's import included: a certification killed outright leaves no server behind
        follow_parent(args.parent, _leaving(args.early))
    settings = _settings()
    _log_to(args.log or log_path(settings), args.early)
    if settings.api.url:  # the user's server, set where only Prefect looks (a profile, prefect.toml): none needed
        print(f"PREFECT_API_URL is set ({settings.api.url}): no temporary server", flush=True)
        return 0
    # A fresh home's database from the template: no migrations at first start, and no registration of block
    # types, which the template has (this release's, registered when it was made): Prefect would check them against
    # its memo of them (a memo keyed by the database's URL, so a copy has none) and upsert them all, on the
    # server's start. A later start in that home registers them as Prefect does; a variable the
    # user set is theirs. Prefect read its settings at import: it reads them again, as it does after its plugins.
    from flows.prefect_db import seed_database

    if args.seed and seed_database(settings):
        for name in _REGISTERED:
            os.environ.setdefault(name, "false")
        from prefect.context import refresh_global_settings_context

        refresh_global_settings_context()
    return serve(args.port)


if __name__ == "__main__":
    raise SystemExit(main())
