"""A fresh PREFECT_HOME's database made from a template instead of every migration at each first start.

Prefect's server creates its SQLite database on its first start in a PREFECT_HOME: every Alembic migration from the
first one, then every block type registered, a large part of a temporary server's start in a fresh home. The result
is the same empty database each time for one Prefect release, so it is made once, when clustercert is installed
(`scripts/bootstrap` runs `python -m flows.prefect_db`), by starting Prefect's own server on a scratch home and
keeping its database (less the telemetry session Prefect gives each server), and a fresh home gets a copy before
its server starts.

The copy changes nothing Prefect decides: its server still runs its migrations (none are left when the template is
of this release: it is named by Prefect's version) and registers its block types (its memo of them is keyed by the
database's URL, so a copy starts without one: it upserts what the template has). A home that
has a database, or what one leaves behind (a WAL or journal), a database elsewhere than a local SQLite file or in a
folder that does not exist, or no template: nothing is copied, and Prefect creates (or refuses) its database as it
always did.

The temporary server's app is Prefect's own, made by `create_app` with one change: its SQLite write transactions
wait their turn for the lock instead of failing (`immediate_sqlite_writes`, PrefectHQ/prefect#18934).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

__all__ = ["build_template", "create_app", "immediate_sqlite_writes", "seed_database", "template_path"]

_SQLITE = "sqlite+aiosqlite:///"
# what a database's last session can leave beside it: never put a template under them
_LEFTOVERS = ("-wal", "-journal", "-shm")


def create_app() -> Any:
    """Prefect's server app (`prefect.server.api.server:create_app`, as Prefect's temporary server makes it), its
    SQLite write transactions begun IMMEDIATE (`immediate_sqlite_writes`)."""
    from prefect.server.api.server import create_app as prefect_app

    immediate_sqlite_writes()
    return prefect_app()


def immediate_sqlite_writes() -> None:
    """Every transaction Prefect's server begins on SQLite takes the write lock when it begins (BEGIN IMMEDIATE,
    Prefect's own mode for a transaction `with_for_update`), so that it waits its turn (SQLite's busy timeout,
    60 s in Prefect) instead of failing.

    Prefect begins them DEFERRED: the lock is taken at the first write. A transaction that reads before it writes
    cannot take it once another connection has written since its read began; SQLite then fails at once ("database
    is locked"), whatever the busy timeout. The API's task-run creation reads the flow run's labels, then inserts,
    while the server's task-run recorder writes the runs that the client's events report: when a certification
    starts a phase (a subflow, whose tracking task run the API creates), the phase before has just reported its
    tasks. The API answers 503 and Prefect's client waits 2 s (its back-off, not a setting) before it asks again,
    a wait on the certification's path (PrefectHQ/prefect#18934, open)."""
    from prefect.server.database.configurations import AioSqliteConfiguration

    deferred = AioSqliteConfiguration.begin_transaction
    if getattr(deferred, "clustercert_immediate", False):
        return

    @asynccontextmanager
    async def begin_transaction(self: Any, session: Any, with_for_update: bool = False) -> AsyncIterator[Any]:
        async with deferred(self, session, with_for_update=True) as transaction:
            yield transaction

    begin_transaction.clustercert_immediate = True  # type: ignore[attr-defined]
    AioSqliteConfiguration.begin_transaction = begin_transaction  # type: ignore[method-assign]


def template_path() -> Path:
    """This environment's template for the installed Prefect: <sys.prefix>/share/clustercert/prefect-<version>.db."""
    from importlib.metadata import version  # not prefect itself: bootstrap asks without paying its import

    return Path(sys.prefix) / "share" / "clustercert" / f"prefect-{version('prefect')}.db"


def seed_database(settings: Any = None) -> bool:
    """Copy the template into place when the server of `settings` (the current ones by default) will create a
    fresh SQLite database; True when it did. Never over a database or its leftovers, never through a link: the copy
    is linked into place, which fails when the file appeared meanwhile (another run seeding the same home)."""
    from prefect.settings import get_current_settings

    settings = settings or get_current_settings()
    secret = settings.server.database.connection_url
    url = secret.get_secret_value() if secret is not None else ""
    if not url.startswith(_SQLITE) or "?" in url or url.endswith(":memory:"):
        return False
    database = Path(url[len(_SQLITE):])
    template = template_path()
    if not template.is_file() or not database.is_absolute():
        return False
    if any(os.path.lexists(f"{database}{end}") for end in ("", *_LEFTOVERS)):
        return False
    if not database.parent.is_dir():  # a folder Prefect cannot open its database in is Prefect's error to report
        return False
    copy = database.with_name(f".{database.name}.{secrets.token_hex(4)}.seed")
    try:
        shutil.copyfile(template, copy)
        try:
            os.link(copy, database)
        except OSError:  # the database appeared meanwhile, or links are not to be had here: Prefect creates it
            return False
    finally:
        copy.unlink(missing_ok=True)
    return True


def build_template(target: Path | None = None, timeout_s: float = 600.0) -> Path:
    """Start Prefect's server on a scratch home (none of this process' Prefect settings, profiles or project files
    reach it), wait until it answers, stop it, and keep its database as `target` (template_path() by default):
    written under a temporary name, the telemetry session removed, then renamed into place."""
    from flows.runtime import TemporaryServer

    target = target or template_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="clustercert-prefect-db.") as scratch:
        home = Path(scratch) / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(PREFECT_HOME=str(home), PREFECT_PROFILES_PATH=str(Path(scratch) / "profiles.toml"),
                   PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="0", PREFECT__SERVER_EPHEMERAL="1",
                   PREFECT__SERVER_FINAL="1")
        server = TemporaryServer(Path(scratch) / "server.log", env=env, cwd=Path(scratch))
        server.spawn()
        try:
            server.wait(timeout_s)
        finally:
            server.stop()
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
        try:
            source = sqlite3.connect(home / "prefect.db")
            copy = sqlite3.connect(partial)
            try:
                source.backup(copy)
                copy.execute("DELETE FROM configuration WHERE key = 'TELEMETRY_SESSION'")
                copy.commit()
                copy.execute("VACUUM")
            finally:
                copy.close()
                source.close()
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target


def main() -> int:
    """`python -m flows.prefect_db [--force]`: make this environment's template unless it has one."""
    target = template_path()
    if target.is_file() and "--force" not in sys.argv[1:]:
        return 0
    started = time.monotonic()
    try:
        build_template(target)
    except (OSError, RuntimeError, sqlite3.Error) as exc:
        # not fatal: without a template Prefect creates each fresh home's database itself, only slower
        print(f"bootstrap: no Prefect database template ({str(exc).splitlines()[0][:200]}); fresh Prefect homes "
              "create their database at first start", file=sys.stderr)
        return 0
    print(f"bootstrap: Prefect database template {target} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
