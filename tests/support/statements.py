"""What PostgreSQL's direct path sends, and an operator's hold taken as ``request_hold`` takes
it, for the tests of the one-statement transactions (tests/storage/test_fast_*.py,
test_one_statement_*.py, test_hold_lock_order.py, test_pg_direct.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime

import asyncpg

from storage.drivers import pg_direct
from storage.sql.runs import LOCK_RUN


@contextlib.contextmanager
def statements() -> Iterator[list[str]]:
    """The statements the direct path sends meanwhile (BEGIN and COMMIT included)."""
    sent: list[str] = []
    pg_direct.STATEMENT_HOOKS.append(sent.append)
    try:
        yield sent
    finally:
        pg_direct.STATEMENT_HOOKS.remove(sent.append)


async def begin_hold(
    connection: asyncpg.Connection, run_id: str, action: str, now: datetime
) -> asyncpg.transaction.Transaction:
    """On ``connection``, what ``request_hold`` writes (the run's lock, then the hold), left
    uncommitted: the caller commits it once the statement under test waits for the run."""
    transaction = connection.transaction()
    await transaction.start()
    await connection.execute(LOCK_RUN.replace(":run_id", "$1"), run_id)
    await connection.execute(
        "INSERT INTO run_holds (run_id, action, requested_by, requested_at) "
        "VALUES ($1, $2, 'U0OP', $3)",
        run_id,
        action,
        now,
    )
    return transaction
