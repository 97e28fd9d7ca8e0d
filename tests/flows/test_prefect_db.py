"""A fresh PREFECT_HOME's database from the template (flows/prefect_db.py): copied only where Prefect would create
one, never over anything, and a server started on the copy answers from it.

Oracles: Prefect's own migration scripts (their head revision, read by Alembic) and the template's own rows."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from prefect.settings import Settings

from flows import prefect_db, server_boot
from flows.prefect_db import seed_database, template_path
from tests.conftest import ROOT


def _rows(database: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(database) as db:
        return db.execute(sql).fetchall()


def _migration_head() -> str:
    import prefect.server.database as database
    from alembic.script import ScriptDirectory

    versions = Path(database.__file__).parent / "_migrations" / "versions" / "sqlite"
    head = ScriptDirectory(str(versions.parent.parent), version_locations=[str(versions)]).get_current_head()
    assert head
    return head


def test_the_installed_template_is_prefects_schema_at_its_head_without_a_telemetry_session() -> None:
    template = template_path()
    assert template.is_file(), f"{template}: scripts/bootstrap makes it (python -m flows.prefect_db)"
    assert template.name == f"prefect-{__import__('prefect').__version__}.db"
    assert _rows(template, "SELECT version_num FROM alembic_version") == [(_migration_head(),)]
    assert _rows(template, "SELECT count(*) FROM configuration WHERE key = 'TELEMETRY_SESSION'") == [(0,)]
    assert _rows(template, "SELECT count(*) FROM flow_run") == [(0,)]
    assert _rows(template, "SELECT count(*) FROM block_type")[0][0] > 0  # registered when it was made


@pytest.fixture
def template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "share" / "prefect-x.db"
    path.parent.mkdir()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (v TEXT)")
        db.execute("INSERT INTO t VALUES ('template')")
    monkeypatch.setattr(prefect_db, "template_path", lambda: path)
    return path


def test_a_fresh_home_gets_a_copy(tmp_path: Path, template: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert seed_database(Settings(home=home)) is True
    assert (home / "prefect.db").read_bytes() == template.read_bytes()
    assert sorted(p.name for p in home.iterdir()) == ["prefect.db"]  # no temporary copy left behind


@pytest.mark.parametrize("present", ["prefect.db", "prefect.db-wal", "prefect.db-journal"])
def test_nothing_is_copied_over_a_database_or_what_one_left(tmp_path: Path, template: Path, present: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / present).write_bytes(b"the user's")
    assert seed_database(Settings(home=home)) is False
    assert [(p.name, p.read_bytes()) for p in home.iterdir()] == [(present, b"the user's")]


def test_a_link_where_the_database_goes_is_left_alone(tmp_path: Path, template: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "prefect.db").symlink_to(tmp_path / "elsewhere.db")  # dangling: lexists, not exists
    assert seed_database(Settings(home=home)) is False
    assert not (tmp_path / "elsewhere.db").exists()


def test_a_database_in_a_folder_that_does_not_exist_is_prefects_to_refuse(tmp_path: Path, template: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/missing/prefect.db"
    assert seed_database(Settings(home=tmp_path, server={"database": {"connection_url": url}})) is False
    assert not (tmp_path / "missing").exists()


def test_a_database_that_appears_meanwhile_is_kept(tmp_path: Path, template: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    real_copy = shutil.copyfile

    def racing_copy(source: Path, target: Path) -> object:  # another run's server creates it while we copy
        (home / "prefect.db").write_bytes(b"the other run's")
        return real_copy(source, target)

    monkeypatch.setattr(shutil, "copyfile", racing_copy)
    assert seed_database(Settings(home=home)) is False
    assert [(p.name, p.read_bytes()) for p in home.iterdir()] == [("prefect.db", b"the other run's")]


@pytest.mark.parametrize("url", ["postgresql+asyncpg://u:p@127.0.0.1/prefect", "sqlite+aiosqlite:///:memory:",
                                 "sqlite+aiosqlite:///relative/prefect.db"])
def test_a_database_elsewhere_than_a_local_sqlite_file_is_prefects_to_create(tmp_path: Path, template: Path,
                                                                              url: str) -> None:
    settings = Settings(home=tmp_path / "home", server={"database": {"connection_url": url}})
    assert seed_database(settings) is False
    assert not (tmp_path / "home").exists()


def test_without_a_template_prefect_creates_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefect_db, "template_path", lambda: tmp_path / "none.db")
    assert seed_database(Settings(home=tmp_path / "home")) is False
    assert not (tmp_path / "home").exists()



_SPAWN = """
import sys
from flows import runtime

def popen(command, env, **kwargs):
    print(" ".join(str(env.get(name)) for name in sys.argv[1:]))
    raise SystemExit(0)

runtime.subprocess.Popen = popen
runtime.TemporaryServer(runtime.server_log()).spawn()
"""


def _spawned_env(home: Path, names: list[str], user: dict[str, str]) -> str:
    """The values of `names` in the environment a temporary server on `home` is spawned with (the spawn stopped at
    Popen), given only the user's own `user` among them."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL" and k not in names}
    # TMPDIR: the file the server's early output would go to is made before Popen, and nothing here removes it
    home.mkdir(parents=True, exist_ok=True)
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(home), TMPDIR=str(home), **user)
    proc = subprocess.run([sys.executable, "-c", _SPAWN, *names], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


# A Prefect server transaction that reads, then writes, while another connection writes in between: what the API's
# task-run creation does while the task-run recorder writes (flows/prefect_db.py `immediate_sqlite_writes`).
_READ_THEN_WRITE = """
import asyncio, sqlite3, sys
import sqlalchemy as sa
from prefect.server.database.configurations import AioSqliteConfiguration

if sys.argv[2] == "clustercert":
    from flows.prefect_db import immediate_sqlite_writes
    immediate_sqlite_writes()
    immediate_sqlite_writes()  # a second call changes nothing more

async def main(path):
    config = AioSqliteConfiguration(connection_url=f"sqlite+aiosqlite:///{path}")
    engine = await config.engine()
    session = await config.session(engine)
    async with session:
        async with config.begin_transaction(session):
            await session.execute(sa.text("SELECT count(*) FROM task_run"))
            other = sqlite3.connect(path, timeout=0)
            try:
                other.execute("INSERT INTO task_run VALUES ('recorded')")
                other.commit()
                print("the other connection wrote")
            except sqlite3.OperationalError as exc:
                print(f"the other connection waits its turn ({exc})")
            finally:
                other.close()
            try:
                await session.execute(sa.text("INSERT INTO task_run VALUES ('created')"))
                print("the transaction wrote")
            except sa.exc.OperationalError as exc:
                print(f"the transaction failed ({exc.orig})")
    await engine.dispose()

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.parametrize(("mode", "expected"), [
    # Prefect's own mode: the transaction fails at once, whatever the busy timeout (the API answers 503, and the
    # client waits 2 s). If this case ever passes, Prefect has changed how it begins transactions: look again.
    ("prefect", ["the other connection wrote", "the transaction failed (database is locked)"]),
    ("clustercert", ["the other connection waits its turn (database is locked)", "the transaction wrote"]),
])
def test_the_temporary_servers_transactions_take_the_write_lock_when_they_begin(tmp_path: Path, mode: str,
                                                                                 expected: list[str]) -> None:
    database = tmp_path / "prefect.db"
    with sqlite3.connect(database) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE task_run (name TEXT)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _READ_THEN_WRITE, str(database), mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == expected
    # what was written: the other connection's row or the transaction's, never both
    assert _rows(database, "SELECT name FROM task_run") == [("recorded",) if mode == "prefect" else ("created",)]


def test_the_temporary_server_is_prefects_app_with_immediate_writes() -> None:
    import prefect

    args = server_boot.server_args(4200)  # Prefect's folder found without importing it: the same as Prefect's own
    assert args[args.index("--factory") + 1] == "flows.prefect_db:create_app"
    assert args[args.index("--app-dir") + 1] == str(prefect.__module_path__.parent)
    assert args[args.index("--port") + 1] == "4200" and args[args.index("--host") + 1] == "127.0.0.1"


# The server's process (flows/server_boot.py) up to the point where it would serve: what it seeded, the settings its
# app would be made with, and where its output went.
_BOOT = """
import sys
from flows import prefect_db, server_boot

def serve(port):  # the settings as the server's app reads them when it starts
    from prefect.settings import PREFECT_API_BLOCKS_REGISTER_ON_START, PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION
    print(port, PREFECT_API_BLOCKS_REGISTER_ON_START.value(), PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION.value())
    print("to stderr", file=sys.stderr)
    return 0

server_boot.serve = serve
raise SystemExit(server_boot.main(sys.argv[1:]))
"""


def _boot(home: Path, *args: str, **user: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(home), **user)
    return subprocess.run([sys.executable, "-c", _BOOT, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize(("home", "user", "expected"), [
    ("fresh", None, "4200 False False"),  # seeded from the template, which has this release's block types
    ("has a database", None, "4200 True True"),  # Prefect registers them, or finds its memo of them
    ("fresh", "true", "4200 True False"),  # the user's choice stands
])
def test_a_server_on_a_home_seeded_from_the_template_does_not_register_block_types_again(
        tmp_path: Path, home: str, user: str | None, expected: str) -> None:
    assert template_path().is_file()
    if home == "has a database":
        shutil.copyfile(template_path(), tmp_path / "prefect.db")
    proc = _boot(tmp_path, "--port", "4200", "--seed",
                 **({} if user is None else {"PREFECT_API_BLOCKS_REGISTER_ON_START": user}))
    assert proc.returncode == 0 and proc.stdout == proc.stderr == "", proc.stdout + proc.stderr
    log = tmp_path / server_boot.LOG_NAME
    assert log.read_text().splitlines() == [expected, "to stderr"]
    # seeded: the template's block types, with the ids they got when it was made
    types = "SELECT id, slug FROM block_type ORDER BY slug"
    assert _rows(tmp_path / "prefect.db", types) == _rows(template_path(), types)


def test_without_seed_the_server_leaves_a_fresh_home_to_prefect(tmp_path: Path) -> None:
    """How the template itself is made (`build_template`): the server creates its database as Prefect does."""
    proc = _boot(tmp_path, "--port", "4200")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / server_boot.LOG_NAME).read_text().splitlines() == ["4200 True True", "to stderr"]
    assert not (tmp_path / "prefect.db").exists()


def test_what_the_server_wrote_before_it_knew_its_log_goes_first_into_the_log(tmp_path: Path) -> None:
    early = tmp_path / "early.log"
    early.write_text("written before the settings were read\n")
    log = tmp_path / "named" / "server.log"
    proc = _boot(tmp_path / "home", "--port", "4201", "--log", str(log), "--early", str(early))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert log.read_text().splitlines() == ["written before the settings were read", "4201 True True", "to stderr"]
    assert not early.exists() and oct(log.stat().st_mode & 0o777) == "0o600"
    assert not (tmp_path / "home" / server_boot.LOG_NAME).exists()


def test_a_server_set_in_a_profile_is_the_users_and_no_temporary_one_serves(tmp_path: Path) -> None:
    """PREFECT_API_URL set where only Prefect looks (the active profile): the starter could not see it without
    importing Prefect, so the server's process finds it, says so in its log, and serves nothing."""
    profiles = tmp_path / "profiles.toml"
    profiles.write_text('active = "mine"\n[profiles.mine]\nPREFECT_API_URL = "http://127.0.0.1:9/api"\n')
    proc = _boot(tmp_path, "--port", "4202", "--seed", PREFECT_PROFILES_PATH=str(profiles))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / server_boot.LOG_NAME).read_text() == \
        "PREFECT_API_URL is set (http://127.0.0.1:9/api): no temporary server\n"
    assert not (tmp_path / "prefect.db").exists()  # nothing seeded either


@pytest.mark.parametrize(("user", "expected"), [(None, "false false false"), ("true", "True True false")])
def test_the_temporary_servers_telemetry_event_persister_and_triggers_are_off_unless_the_user_asked(
        tmp_path: Path, user: str | None, expected: str) -> None:
    """Prefect's telemetry is off, events are not written to its database, and no automation is triggered: a
    certification reads neither; the task-run recorder, which writes the task runs, stays on (the certification
    tests read its records). What the user set of these stays as set (one spawn for each case: each imports
    Prefect's settings)."""
    names = ["PREFECT_SERVER_ANALYTICS_ENABLED", "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED",
             "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED", "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED"]
    values = _spawned_env(tmp_path, names, {} if user is None else {names[0]: user, names[1]: user}).split()
    assert values[:3] == expected.split() and values[3] == "None"
