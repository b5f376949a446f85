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

from storage.limits import DATABASE_FAILURES
from storage.repository import Mode, Tx
from tests.conftest import POSTGRES_URL, Database


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
