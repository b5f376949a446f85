"""``database_statement_cache = false``: PostgreSQL behind a transaction-mode pooler.

Behind PgBouncer's ``pool_mode = transaction`` consecutive transactions of one client
connection may run on different server connections, shared with other clients: a statement
prepared on one is unknown on the next, and a session setting (the direct path's relaxed and
durable connections) would leak to whoever gets that server connection next. With the key off
the bot keeps no prepared statements and sets nothing on a session: every write sets its
commit level with its own BEGIN, so a one-statement write (``Mode.WRITE_ONE``) is BEGIN, its
statement and COMMIT. No test needs PgBouncer: these check what goes to the server.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from bot.config import ConfigError, config_from_dict, load_config
from storage.drivers import pg_direct
from storage.drivers.pg_commits import transaction_begins
from storage.limits import time_limit
from storage.repository import Mode, Repository, Tx
from tests.conftest import Database
from tests.storage.test_durability import commit_level


async def open_repo(database: Database, *, statement_cache: bool) -> Repository:
    repo = await Repository.open(
        database.url, statement_cache=statement_cache, **database.engine_kwargs
    )
    database._repos.append(repo)  # closed with the database
    return repo


def prepared_after_a_parametrized_statement(tx: Tx) -> int:
    """Named prepared statements the connection holds once it has run one with a parameter."""
    assert tx.one("SELECT CAST(:n AS integer) + 1", {"n": 1}) == (2,)
    row = tx.one("SELECT count(*) FROM pg_prepared_statements")
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_without_the_cache_no_statement_is_kept_prepared(database: Database) -> None:
    cached = await open_repo(database, statement_cache=True)
    assert await cached.database.run(prepared_after_a_parametrized_statement, Mode.READ) > 0

    repo = await open_repo(database, statement_cache=False)
    for mode in (Mode.READ, Mode.WRITE):
        for _ in range(3):  # the same statements again: still nothing kept
            assert await repo.database.run(prepared_after_a_parametrized_statement, mode) == 0
    # The direct path's connections (asyncpg's own cache) and the engine's (SQLAlchemy's
    # adapter's cache, over asyncpg's) keep none.
    direct = repo.database._direct  # type: ignore[attr-defined]
    assert direct._kind and all(c._stmt_cache.get_max_size() == 0 for c in direct._kind)
    async with repo.database.engine.connect() as conn:
        await conn.execute(text("SELECT CAST(:n AS integer)"), {"n": 1})
        adapted = (await conn.get_raw_connection()).dbapi_connection
        assert adapted._prepared_statement_cache is None  # type: ignore[union-attr]
        assert adapted.driver_connection._stmt_cache.get_max_size() == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_without_the_cache_each_write_sets_its_commit_level_with_its_begin(
    database: Database,
) -> None:
    repo = await open_repo(database, statement_cache=False)
    await repo.database.execute_sql("CREATE TABLE pooled (n integer)")
    sent: list[str] = []
    pg_direct.STATEMENT_HOOKS.append(sent.append)
    try:

        def write(tx: Tx) -> int:
            return tx.execute("INSERT INTO pooled (n) VALUES (:n)", {"n": 1})

        # WRITE_ONE: no autocommit (its level would have to be the session's).
        assert await repo.database.run(write, Mode.WRITE_ONE) == 1
        relaxed, durable = transaction_begins()[False], transaction_begins()[True]
        assert sent == [relaxed, "INSERT INTO pooled (n) VALUES ($1)", "COMMIT"]
        assert "set_config('synchronous_commit', 'off', true)" in relaxed
        assert "set_config('synchronous_commit', 'on', true)" in durable

        sent.clear()
        assert await repo.database.run(write, Mode.WRITE_ONE, durable=True) == 1
        assert sent == [durable, "INSERT INTO pooled (n) VALUES ($1)", "COMMIT"]

        def read(tx: Tx) -> int:
            row = tx.one("SELECT count(*) FROM pooled")
            assert row is not None
            return int(row[0])

        # A one-statement read under a time limit keeps the server's timeouts with its BEGIN:
        # the pooler drops a CancelRequest for a client still queued for a server connection.
        sent.clear()
        with time_limit(5):
            assert await repo.database.run(read, Mode.READ_ONE) == 2
        assert sent[0].startswith(relaxed) and "set_config('lock_timeout'" in sent[0], sent
        assert sent[1:] == ["SELECT count(*) FROM pooled", "COMMIT"]
    finally:
        pg_direct.STATEMENT_HOOKS.remove(sent.append)

    for _ in range(3):  # whichever connection the pool hands out
        for mode in (Mode.WRITE_ONE, Mode.WRITE, Mode.READ):
            assert await repo.database.run(commit_level, mode) == "off"
            assert await repo.database.run(commit_level, mode, durable=True) == "on"
        # Under a time limit too (its timeouts go out with the same BEGIN).
        with time_limit(5):
            assert await repo.database.run(commit_level, Mode.WRITE) == "off"
            assert await repo.database.run(commit_level, Mode.WRITE, durable=True) == "on"
            # A one-statement read too: behind a pooler it keeps the server's timeouts (a
            # CancelRequest for a client the pooler has queued is dropped).
            assert await repo.database.run(commit_level, Mode.READ_ONE) == "off"
        # Outside a transaction the session has the server's own level: nothing was set on it.
        assert await repo.database.run(commit_level, Mode.READ_ONE) == "on"


def test_the_key_is_a_boolean_and_on_by_default(tmp_path: Path) -> None:
    assert config_from_dict({}).database_statement_cache is True
    assert config_from_dict({"database_statement_cache": False}).database_statement_cache is False
    for value in ("false", 0, "off"):
        with pytest.raises(ConfigError) as refused:
            config_from_dict({"database_statement_cache": value})
        assert str(refused.value) == "database_statement_cache: must be true or false"
    path = tmp_path / "approval-bot.toml"
    path.write_text('database_statement_cache = "no"\n')
    with pytest.raises(ConfigError, match="database_statement_cache: must be true or false"):
        load_config(path)
