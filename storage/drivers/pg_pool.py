"""PostgreSQL's direct path's connections: a small pool of asyncpg connections of our own,
and the errors the path turns into SQLAlchemy's.

Owns no rows. Why a pool of our own rather than asyncpg's: asyncpg's resets every connection
it takes back (one more round trip per transaction) and would undo the session's
``synchronous_commit``, which is how a commit's durability is set here: relaxed connections
(asynchronous commits, what at-most-once allows ordinary ones) and durable ones (the
``executing`` record), each set once for its session
(:func:`storage.drivers.pg_commits.commit_levels`). A connection that failed mid-transaction,
or whose transaction was cancelled, is closed rather than reused.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

# What asyncpg raises for the database or the connection: callers get them as DBAPIError.
# InternalClientError: a connection the server has just shut down (its FATAL read, its end
# not yet) is found mid-operation ("another operation is in progress").
DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)
_LOST = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.AdminShutdownError,
    OSError,
)

# How long a transaction waits for a connection when every one is in use (SQLAlchemy's
# pool_timeout default), then fails as the engine's pool did.
POOL_TIMEOUT = 30.0


def database_error(exc: BaseException, statement: str | None, params: Any) -> DBAPIError:
    """The SQLAlchemy exception callers have always received for a driver's error."""
    connection_lost = isinstance(exc, _LOST)
    return DBAPIError(statement, params, exc, connection_invalidated=connection_lost)


async def _json_codecs(connection: asyncpg.Connection) -> None:
    """JSON columns come back decoded and JSON parameters go as text, as through the engine."""
    for name in ("json", "jsonb"):
        await connection.set_type_codec(
            name, encoder=str, decoder=json.loads, schema="pg_catalog", format="text"
        )


class _Slots:
    """At most ``size`` holders at once; those that wait are served first come, first served.

    asyncio's ``BoundedSemaphore`` does the same, but its free case (every transaction's) costs
    a coroutine and two ``locked()`` checks, each a generator over its waiters: about 1 µs a
    transaction here, against a counter's decrement. Invariant: a slot is free only while
    nobody waits (:meth:`give` hands a slot to a waiter before it frees one).
    """

    __slots__ = ("_free", "_waiters")

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    def take_now(self) -> bool:
        """Take a free slot without waiting; False when none is free."""
        if self._free > 0:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Wait for a slot (:meth:`take_now` found none)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            # Cancelled (a timeout too) just as a slot was handed to it: pass the slot on.
            # A waiter cancelled before that stays queued, done; give() skips it.
            if waiter.done() and not waiter.cancelled():
                self.give()
            raise

    def give(self) -> None:
        """A slot back: to the first live waiter, else free."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class DirectPool:
    """At most ``size`` asyncpg connections, opened on demand and kept while they are sound.

    ``levels``: for relaxed (False) and durable (True) connections, the simple query that
    sets a session's commit durability (``synchronous_commit``); a connection is set when it
    is opened, and again only when it is taken for the other kind with none of that kind idle
    and no room for another connection.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        size: int,
        levels: Mapping[bool, str] | None = None,
    ) -> None:
        self._connect = connect
        self._levels = dict(levels or {})
        self._idle: dict[bool, list[asyncpg.Connection]] = {False: [], True: []}
        self._slots = _Slots(size)
        self._size = size
        self._kind: dict[asyncpg.Connection, bool] = {}  # every open connection's kind
        self.discarded = 0  # connections closed instead of pooled again (state unknown)

    async def acquire(self, durable: bool = False) -> asyncpg.Connection:
        # A slot free is taken without waiting, so no timer is armed and cancelled (5 us a
        # transaction, measured here).
        if not self._slots.take_now():
            try:
                async with asyncio.timeout(POOL_TIMEOUT):
                    await self._slots.take()
            except TimeoutError as exc:
                raise PoolTimeout(
                    f"no database connection free within {POOL_TIMEOUT:.0f} s"
                ) from exc
        kind = durable and bool(self._levels)
        try:
            connection = self._idle_one(kind)
            if connection is not None:
                return connection
            # Another kind's idle connection is switched (a round trip) only when no more can
            # be opened: switching back and forth would cost two a cycle (relaxed, durable).
            full = len(self._kind) >= self._size
            connection = self._idle_one(not kind) if self._levels and full else None
            if connection is None:
                connection = await self._connect()
                self._kind[connection] = not kind  # not set yet: set below
                try:
                    await _json_codecs(connection)
                except BaseException:
                    self._forget(connection)
                    raise
            try:
                if kind in self._levels:
                    await connection.execute(self._levels[kind])
            except BaseException:
                self._forget(connection)
                raise
            self._kind[connection] = kind
            return connection
        except BaseException as exc:
            self._slots.give()
            if isinstance(exc, DRIVER_ERRORS):
                raise database_error(exc, None, None) from exc
            raise

    def _idle_one(self, kind: bool) -> asyncpg.Connection | None:
        idle = self._idle[kind]
        while idle:
            connection = idle.pop()
            if not connection.is_closed():
                return connection
            self._kind.pop(connection, None)
        return None

    def _forget(self, connection: asyncpg.Connection) -> None:
        self._kind.pop(connection, None)
        self.discarded += 1
        if not connection.is_closed():
            connection.terminate()

    def release(self, connection: asyncpg.Connection, *, sound: bool) -> None:
        """Back to the pool when ``sound`` (no transaction left open), else closed."""
        kind = self._kind.get(connection)
        if (
            sound
            and kind is not None
            and not connection.is_closed()
            and not connection.is_in_transaction()
        ):
            self._idle[kind].append(connection)
        else:
            self._forget(connection)
        self._slots.give()

    async def close(self) -> None:
        for connection in list(self._kind):
            if not connection.is_closed():
                try:
                    await asyncio.wait_for(connection.close(), 5)
                except (TimeoutError, *DRIVER_ERRORS):
                    connection.terminate()
        self._kind.clear()
        self._idle = {False: [], True: []}
