"""Time limits for transactions that must answer someone now (Slack waits 3 seconds).

``time_limit(seconds)`` bounds every transaction the current task starts inside it: the
transaction either commits within the limit or raises :class:`DatabaseBusy` having committed
nothing. :mod:`storage.drivers` applies the deadline per database: on SQLite a transaction waits
for the write lock only until then (a busy timeout for that one transaction) and never starts
once abandoned; on PostgreSQL ``lock_timeout`` and ``statement_timeout`` end it, and the client
gives up on a server that does not answer, but never while COMMIT is in flight: it waits for
the COMMIT's outcome, which may come slightly after the limit, so the answer stays true. A
one-statement read, with nothing to commit, is bounded by the driver's own timeout instead,
which cancels it on the server (:mod:`storage.drivers.pg_direct`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextvars import ContextVar
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError

T = TypeVar("T")


class DatabaseBusy(Exception):
    """A transaction could not finish within its time limit: nothing of it was committed.

    (A lock held by another process or connection, a database that does not answer.)
    """


# What a caller that must answer someone now reports as "the database failed; try again",
# rather than as a bug.
DATABASE_FAILURES: tuple[type[BaseException], ...] = (
    DatabaseBusy,
    SQLAlchemyError,
    sqlite3.Error,
    OSError,
)

# PostgreSQL: how much longer than the limit the client waits before giving up on a server
# that does not answer at all (the server-side timeouts normally end the transaction first);
# never applied to COMMIT.
PG_UNRESPONSIVE_GRACE = 1.0

# (task, monotonic deadline) of the innermost time_limit; only that task is bound by it, so
# background work spawned inside never inherits a deadline meant for an acknowledgement.
_limit: ContextVar[tuple[asyncio.Task[Any] | None, float] | None] = ContextVar(
    "approval_bot_time_limit", default=None
)


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Transactions this task starts inside must finish within ``seconds`` from now."""
    deadline = time.monotonic() + seconds
    outer = current_deadline()
    if outer is not None:
        deadline = min(deadline, outer)
    token = _limit.set((asyncio.current_task(), deadline))
    try:
        yield
    finally:
        _limit.reset(token)


def current_deadline() -> float | None:
    """The monotonic deadline binding the current task's transactions, if any."""
    limit = _limit.get()
    if limit is None or limit[0] is not asyncio.current_task():
        return None
    return limit[1]


async def run_by_deadline(executor: Executor, attempt: Callable[[int], T], deadline: float) -> T:
    """Run ``attempt(remaining_ms)`` on ``executor``: it either finishes by the deadline or
    never runs, and the answer always says truly whether it ran.

    A job still queued at the deadline is abandoned (it will not start); one that started must
    bound its own waiting by ``remaining_ms``, so its answer comes about then.
    """
    state_lock = threading.Lock()
    state = {"started": False, "abandoned": False}

    def run() -> T:
        with state_lock:
            if state["abandoned"]:
                raise DatabaseBusy("abandoned before it started")
            state["started"] = True
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            raise DatabaseBusy("the time limit passed before the transaction could start")
        return attempt(remaining_ms)

    future = asyncio.get_running_loop().run_in_executor(executor, run)
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    try:
        return await asyncio.wait_for(asyncio.shield(future), max(deadline - time.monotonic(), 0))
    except TimeoutError:
        with state_lock:
            if not state["started"]:
                state["abandoned"] = True
                raise DatabaseBusy("the database did not answer in time") from None
        return await future  # it started: its own waiting ends about now
