"""PostgreSQL's direct path (storage.drivers.pg_direct): a connection the server ends is an
ordinary database failure, and the next transaction gets a sound connection.

When PostgreSQL restarts or an administrator ends a backend, the connections idle in the
bot's pool are gone. A transaction that meets one must fail as every database failure does
(SQLAlchemy's ``DBAPIError``, which ``storage.limits.DATABASE_FAILURES`` names, so callers
answer "try again"), never with a driver error nobody expects, and the pool must not hand the
dead connection out again.
"""

from __future__ import annotations

import contextlib

import asyncpg
import pytest

from storage.drivers import pg_direct
from storage.drivers.pg_pool import DirectPool
from storage.limits import DATABASE_FAILURES
from storage.repository import Mode, Tx
from tests.conftest import POSTGRES_URL, Database
from tests.storage.test_durability import commit_level


def backend_pid(tx: Tx) -> int:
    row = tx.one("SELECT pg_backend_pid()")
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("mode", [Mode.READ_ONE, Mode.WRITE], ids=["autocommit", "transaction"])
async def test_a_connection_the_server_ended_is_a_database_failure(
    database: Database, mode: Mode
) -> None:
    repo = await database.open()
    admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        for _ in range(5):
            pid = await repo.database.run(backend_pid, mode)
            await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
            with contextlib.suppress(DATABASE_FAILURES):  # the caller says "try again"
                await repo.database.run(backend_pid, mode)
            # The next one runs on a sound connection.
            assert await repo.database.run(backend_pid, mode) != pid
    finally:
        await admin.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_one_statement_write_is_sent_alone_without_begin_or_commit(
    database: Database,
) -> None:
    repo = await database.open()
    await repo.database.execute_sql("CREATE TABLE one_statement (n integer)")
    sent: list[str] = []
    pg_direct.STATEMENT_HOOKS.append(sent.append)
    try:

        def write(tx: Tx) -> int:
            return tx.execute("INSERT INTO one_statement (n) VALUES (:n)", {"n": 1})

        assert await repo.database.run(write, Mode.WRITE_ONE) == 1
        assert sent == ["INSERT INTO one_statement (n) VALUES ($1)"]

        # A second statement would commit apart from the first: refused, and the first
        # (already committed, as autocommit does) is all that was written.
        def two(tx: Tx) -> None:
            tx.execute("INSERT INTO one_statement (n) VALUES (:n)", {"n": 2})
            tx.execute("INSERT INTO one_statement (n) VALUES (:n)", {"n": 3})

        with pytest.raises(pg_direct.OneStatementOnly):
            await repo.database.run(two, Mode.WRITE_ONE)

        def numbers(tx: Tx) -> list[int]:
            return [row[0] for row in tx.all("SELECT n FROM one_statement ORDER BY n")]

        assert await repo.database.run(numbers, Mode.READ_ONE) == [1, 2]
    finally:
        pg_direct.STATEMENT_HOOKS.remove(sent.append)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_durability_is_the_connections_and_follows_it_when_it_changes_kind(
    database: Database,
) -> None:
    """Relaxed and durable connections, whichever one the pool had idle: a transaction never
    commits at the other kind's level, in autocommit or in a transaction."""
    repo = await database.open()
    for _ in range(3):
        for mode in (Mode.WRITE_ONE, Mode.WRITE, Mode.READ_ONE):
            assert await repo.database.run(commit_level, mode) == "off"
            assert await repo.database.run(commit_level, mode, durable=True) == "on"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_full_pool_switches_a_connections_kind_and_a_roomy_one_opens_another(
    database: Database,
) -> None:
    """Switching an idle connection's durability costs a round trip each way, so it is done
    only when no connection can be opened; the level is right either way."""
    from storage.drivers.pg_commits import commit_levels

    url = POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://")
    settings = database.engine_kwargs.get("connect_args", {}).get("server_settings", {})
    for size, opened in ((1, 1), (2, 2)):
        pool = DirectPool(
            lambda: asyncpg.connect(url, server_settings=settings), size, commit_levels()
        )
        try:
            seen = []
            for durable in (False, True, False, True):
                connection = await pool.acquire(durable)
                seen.append(await connection.fetchval("SHOW synchronous_commit"))
                pool.release(connection, sound=True)
            assert seen == ["off", "on", "off", "on"]
            assert len(pool._kind) == opened
        finally:
            await pool.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_refused_one_statement_write_keeps_its_connection(database: Database) -> None:
    """A statement the server refuses in autocommit (here a value too long) changes nothing
    and leaves its connection clean: it goes back to the pool rather than being closed."""
    repo = await database.open()
    await repo.database.execute_sql("CREATE TABLE short_values (v varchar(3))")
    pool = repo.database._direct  # type: ignore[attr-defined]
    assert pool is not None

    def write(tx: Tx) -> int:
        return tx.execute("INSERT INTO short_values (v) VALUES (:v)", {"v": "too long"})

    pids = set()
    for _ in range(5):
        with pytest.raises(DATABASE_FAILURES):
            await repo.database.run(write, Mode.WRITE_ONE)
        pids.add(await repo.database.run(backend_pid, Mode.READ_ONE))
    assert pool.discarded == 0 and len(pids) == 1

    def count(tx: Tx) -> int:
        row = tx.one("SELECT count(*) FROM short_values")
        assert row is not None
        return int(row[0])

    assert await repo.database.run(count, Mode.READ_ONE) == 0
