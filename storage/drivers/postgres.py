"""PostgreSQL (``postgresql://`` or ``postgresql+asyncpg://``): asyncpg through SQLAlchemy.

Owns the engine (its pool of connections) of one database; the rows are the stores'.

It keeps asyncpg through SQLAlchemy's async engine: the same body runs inside
``AsyncConnection.run_sync`` (greenlets, no threads), with the ``:name`` parameters rewritten
to ``$n`` once per statement. Round trips there are network round trips, so the repository
uses ``RETURNING`` instead of re-reading rows and runs one-statement reads in autocommit (no
BEGIN/COMMIT).

Inside :func:`storage.limits.time_limit` (acknowledgement paths) a transaction sets
``lock_timeout``/``statement_timeout`` to the deadline; past it,
:class:`~storage.limits.DatabaseBusy`.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from storage.drivers.protocol import Mode, T, Tx
from storage.limits import PG_UNRESPONSIVE_GRACE, DatabaseBusy, current_deadline
from storage.values import storable_text

if TYPE_CHECKING:
    # The async engine is imported by whoever creates one (storage.drivers.opening).
    from sqlalchemy.ext.asyncio import AsyncEngine

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_dollar_cache: dict[str, tuple[str, tuple[str, ...]]] = {}


def dollar_params(sql: str) -> tuple[str, tuple[str, ...]]:
    """``:name`` parameters as asyncpg's ``$n``, and the names in ``$n`` order (cached)."""
    cached = _dollar_cache.get(sql)
    if cached is not None:
        return cached
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    cached = _dollar_cache[sql] = (_NAMED.sub(number, sql), tuple(names))
    return cached


def _positional(names: tuple[str, ...], params: Mapping[str, Any] | None) -> tuple[Any, ...]:
    if not names:
        return ()
    assert params is not None
    return tuple(
        storable_text(value) if isinstance(value, str) else value
        for value in (params[name] for name in names)
    )


class _PostgresTx:
    dialect = "postgresql"
    converters: Mapping[str, Callable[[Any], Any]] = {}
    __slots__ = ("_connection",)

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        query, names = dollar_params(sql)
        return self._connection.exec_driver_sql(query, _positional(names, params)).rowcount

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        query, names = dollar_params(sql)
        self._connection.exec_driver_sql(query, [_positional(names, row) for row in rows])

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Any] | None:
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def all(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Sequence[Any]]:
        query, names = dollar_params(sql)
        result = self._connection.exec_driver_sql(query, _positional(names, params))
        return list(result.fetchall())


# lock_not_available (lock_timeout), query_canceled (statement_timeout)
PG_TIMEOUTS = frozenset({"55P03", "57014"})


class PostgresDatabase:
    """PostgreSQL through asyncpg: the body runs in ``run_sync`` on the event loop."""

    dialect = "postgresql"

    def __init__(
        self, engine: AsyncEngine, *, reconnect: Callable[[], AsyncEngine] | None = None
    ) -> None:
        self._engine = engine
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        # A new engine on the same database and settings, for :meth:`run_blocking`.
        self._reconnect = reconnect

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def run(
        self, body: Callable[[Tx], T], mode: Mode, *, inline: bool = True, durable: bool = False
    ) -> T:
        if durable:
            body = _durably(body)
        deadline = current_deadline()
        if deadline is not None:
            return await self._run_until(body, deadline)
        if mode is Mode.READ_ONE and not durable:
            async with self._autocommit.connect() as conn:
                return await conn.run_sync(_run_postgres, body)
        async with self._engine.begin() as conn:
            return await conn.run_sync(_run_postgres, body)

    async def _run_until(self, body: Callable[[Tx], T], deadline: float) -> T:
        """In a transaction whose lock waits and statements the server ends at the deadline.

        The client's own timeout (for a server that does not answer at all) bounds taking a
        connection, BEGIN and the body, never COMMIT: a COMMIT the client stops waiting for
        may still commit on the server (a busy event loop is enough), and the caller would
        answer "not recorded, try again" for a stored decision. Once sent, COMMIT is waited
        for; the server's ``statement_timeout`` still bounds it, and a COMMIT the server
        cancels has committed nothing, so DatabaseBusy stays true.
        """
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DatabaseBusy("the time limit passed before the transaction could start")
        limit_ms = str(max(int(remaining * 1000), 1))
        try:
            async with asyncio.timeout(remaining + PG_UNRESPONSIVE_GRACE) as client_timeout:
                async with self._engine.begin() as conn:
                    try:
                        await conn.exec_driver_sql(
                            "SELECT set_config('lock_timeout', $1, true), "
                            "set_config('statement_timeout', $1, true)",
                            (limit_ms,),
                        )
                        result = await conn.run_sync(_run_postgres, body)
                    except asyncio.CancelledError:
                        # Cut off mid-transaction: the connection's state is unknown, so it
                        # never goes back to the pool.
                        await conn.invalidate()
                        raise
                    client_timeout.reschedule(None)  # COMMIT, on leaving the block, is awaited
                    return result
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) in PG_TIMEOUTS:
                raise DatabaseBusy(f"the database did not answer in time: {exc.orig}") from exc
            raise
        except TimeoutError as exc:
            raise DatabaseBusy("the database did not answer in time") from exc

    def run_blocking(self, body: Callable[[Tx], T], mode: Mode) -> T:
        """Run ``body`` and wait for its commit without awaiting: for code on the event loop's
        thread that cannot await (a sync call inside an async tool). The pool belongs to the
        blocked loop, so a helper thread commits through a connection of its own. Rare by
        design: it blocks the loop for a connection and one transaction."""
        if self._reconnect is None:
            raise RuntimeError("this database was opened without a way to reconnect")
        reconnect = self._reconnect
        outcome: list[Any] = []

        async def transact() -> T:
            engine = reconnect()
            try:
                async with engine.begin() as conn:
                    return await conn.run_sync(_run_postgres, body)
            finally:
                await engine.dispose()

        def in_thread() -> None:
            try:
                outcome.append((True, asyncio.run(transact())))
            except BaseException as exc:  # handed to the blocked caller
                outcome.append((False, exc))

        thread = threading.Thread(target=in_thread, name="approval-bot-pg-blocking")
        thread.start()
        thread.join()
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    async def run_with_connection(self, fn: Callable[[Connection], T]) -> T:
        async with self._engine.begin() as conn:
            return await conn.run_sync(fn)

    async def execute_sql(self, statement: str, params: Mapping[str, Any] | None = None) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(text(statement), dict(params or {}))

    async def close(self) -> None:
        await self._engine.dispose()


def _run_postgres(connection: Connection, body: Callable[[Tx], T]) -> T:
    return body(_PostgresTx(connection))


# A server, database or role may set ``synchronous_commit = off``: COMMIT then returns before
# the WAL is flushed, and a crash can lose it. A durable transaction turns it back on for
# itself only (SET LOCAL), and only from ``off``: ``local``, ``remote_write``, ``on`` and
# ``remote_apply`` all flush locally before COMMIT returns, and the stronger ones (a
# synchronous standby) are kept.
DURABLE_COMMIT = (
    "SELECT set_config('synchronous_commit', 'on', true) "
    "WHERE current_setting('synchronous_commit') = 'off'"
)


def _durably(body: Callable[[Tx], T]) -> Callable[[Tx], T]:
    def durable_body(tx: Tx) -> T:
        tx.execute(DURABLE_COMMIT)
        return body(tx)

    return durable_body
