"""PostgreSQL (``postgresql://`` or ``postgresql+asyncpg://``): asyncpg, directly for the
transactions, through SQLAlchemy's engine for the rest.

Owns the engine (migrations, ad-hoc SQL, the blocking path) and the direct path's pool
(:mod:`storage.drivers.pg_direct`) of one database; the rows are the stores'. Every body runs
in a greenlet with the ``:name`` parameters rewritten to ``$n`` once per statement. Round
trips there are network round trips, so the repository uses ``RETURNING`` instead of
re-reading rows, runs one-statement transactions (``Mode.READ_ONE``, ``Mode.WRITE_ONE``) in
autocommit (no BEGIN/COMMIT) and sends what a transaction sets for itself with its BEGIN.

Commits: ordinary ones asynchronous, the ``executing`` one durable
(:mod:`storage.drivers.pg_commits`). Inside :func:`storage.limits.time_limit`
(acknowledgement paths) a transaction sets ``lock_timeout``/``statement_timeout`` to the
deadline with its BEGIN; past it, :class:`~storage.limits.DatabaseBusy`. On the direct path a
one-statement read (``Mode.READ_ONE``, not durable) skips them: one round trip instead of
three (BEGIN with the timeouts, the read, COMMIT), bounded by asyncpg's own timeout, whose
CancelRequest stops the read on the server as well (:meth:`PostgresDatabase._read_one_until`);
not behind a transaction-mode pooler, which drops a CancelRequest for a client it has not
given a server connection yet.
A write keeps the server's timeouts: cut off by the client alone, it could have committed.
``POSTGRES_DIRECT = False`` runs every transaction through the engine, as before issue 22
(kept to measure the two side by side). Behind a transaction-mode pooler
(``database_statement_cache = false``): no prepared statements kept (``NO_STATEMENT_CACHE``)
and no session settings; each write sends its commit level with its BEGIN
(``transaction_begins``), WRITE_ONE included.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from storage.drivers import pg_commits
from storage.drivers.pg_direct import run_direct
from storage.drivers.pg_pool import DirectPool
from storage.drivers.protocol import Mode, T, Tx
from storage.limits import PG_UNRESPONSIVE_GRACE, DatabaseBusy, current_deadline
from storage.values import storable_text

if TYPE_CHECKING:
    # The async engine is imported by whoever creates one (storage.drivers.opening).
    from sqlalchemy.ext.asyncio import AsyncEngine

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
# A statement's parameters in ``$n`` order: its values taken from a parameter dict.
Arguments = Callable[[Mapping[str, Any]], tuple[Any, ...]]
_dollar_cache: dict[str, tuple[str, tuple[str, ...], Arguments]] = {}


def _dollar(sql: str) -> tuple[str, tuple[str, ...], Arguments]:
    """``sql`` with ``$n`` parameters, their names in ``$n`` order, and how to take their
    values from a parameter dict (cached: a few dozen statements in all)."""
    cached = _dollar_cache.get(sql)
    if cached is not None:
        return cached
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    query = _NAMED.sub(number, sql)
    cached = _dollar_cache[sql] = (query, tuple(names), _arguments(tuple(names)))
    return cached


def _arguments(names: tuple[str, ...]) -> Arguments:
    """The values of ``names`` in order, as a tuple: ``itemgetter``, one C call for them all
    rather than a Python loop (a pause's statement has 75 parameters)."""
    if len(names) > 1:
        return itemgetter(*names)
    if names:
        (name,) = names
        return lambda params: (params[name],)
    return lambda params: ()


def prepared(sql: str, params: Mapping[str, Any] | None) -> tuple[str, tuple[Any, ...]]:
    """A statement as asyncpg runs it: ``$n`` text and its positional arguments."""
    query, names, arguments = _dollar(sql)
    if not names:
        return query, ()
    assert params is not None
    return query, _storable(arguments(params))


# isinstance(value, str), as a function C code calls (filter) without a Python frame.
_is_text = str.__instancecheck__


def _storable(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` with their text as :func:`storable_text` makes it. Plain ASCII without NUL
    (nearly every parameter: ids, JSON text) is stored as it is, so all the text of a
    statement is checked at once, in C; only text that fails goes through storable_text."""
    joined = "".join(filter(_is_text, values))
    if joined.isascii() and "\x00" not in joined:
        return values
    return tuple(storable_text(value) if _is_text(value) else value for value in values)


class _PostgresTx:
    dialect = "postgresql"
    converters: Mapping[str, Callable[[Any], Any]] = {}
    __slots__ = ("_connection",)

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        return self._connection.exec_driver_sql(*prepared(sql, params)).rowcount

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        statements = [prepared(sql, row) for row in rows]
        self._connection.exec_driver_sql(statements[0][0], [args for _, args in statements])

    def defer(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.executemany(sql, rows)  # the engine's path (POSTGRES_DIRECT off): as before

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Any] | None:
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def all(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Sequence[Any]]:
        result = self._connection.exec_driver_sql(*prepared(sql, params))
        return list(result.fetchall())


# lock_not_available (lock_timeout), query_canceled (statement_timeout)
PG_TIMEOUTS = frozenset({"55P03", "57014"})


@contextlib.contextmanager
def _busy_past_deadline() -> Iterator[None]:
    """A transaction under a time limit that the server (its lock or statement timeout) or
    the client's own timeout ended: DatabaseBusy, which callers answer "try again"."""
    try:
        yield
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) in PG_TIMEOUTS:
            raise DatabaseBusy(f"the database did not answer in time: {exc.orig}") from exc
        raise
    except TimeoutError as exc:
        raise DatabaseBusy("the database did not answer in time") from exc


class PostgresDatabase:
    """PostgreSQL through asyncpg: the body runs in ``run_sync`` on the event loop."""

    dialect = "postgresql"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        reconnect: Callable[[], AsyncEngine] | None = None,
        direct: DirectPool | None = None,
        begins: Mapping[bool, str] | None = None,
    ) -> None:
        self._engine = engine
        # The hot path (storage.drivers.pg_direct); None: every transaction through the engine.
        self._direct = direct
        # Behind a transaction-mode pooler (``database_statement_cache = false``): what BEGIN
        # sends for a relaxed (False) and a durable (True) transaction, its commit level set
        # for the transaction alone (transaction_begins); None: the level is the pooled
        # connection's session setting (commit_levels), as by default.
        self._begins = dict(begins) if begins is not None else None
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        # A new engine on the same database and settings, for :meth:`run_blocking`.
        self._reconnect = reconnect

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def run(
        self, body: Callable[[Tx], T], mode: Mode, *, inline: bool = True, durable: bool = False
    ) -> T:
        deadline = current_deadline()
        if self._direct is not None and deadline is not None:
            return await self._run_direct_until(body, mode, deadline, durable)
        if self._direct is not None and deadline is None:
            if self._begins is not None:
                # No session of our own: every write sets its commit level with its BEGIN,
                # so WRITE_ONE is BEGIN + its statement + COMMIT; a read commits nothing.
                one = mode is Mode.READ_ONE and not durable
                begin = None if one else self._begins[durable]
                return await run_direct(self._direct, body, prepared, begin=begin)
            # The commit's durability is the connection's (pg_pool.DirectPool's levels).
            one = mode is Mode.WRITE_ONE or (mode is Mode.READ_ONE and not durable)
            return await run_direct(
                self._direct, body, prepared, begin=None if one else "BEGIN", durable=durable
            )
        if durable:
            body = pg_commits.durably(body)
        if deadline is not None:
            return await self._run_until(body, deadline)
        if mode is Mode.READ_ONE and not durable:
            async with self._autocommit.connect() as conn:
                return await conn.run_sync(_run_postgres, body)
        async with self._engine.begin() as conn:
            return await conn.run_sync(_run_postgres, body)

    async def _run_direct_until(
        self, body: Callable[[Tx], T], mode: Mode, deadline: float, durable: bool
    ) -> T:
        """:meth:`_run_until` on the direct path: the time limits (whole milliseconds, so
        literals are safe) and the commit level go out with BEGIN, in one round trip. A
        one-statement read is its statement alone (:meth:`_read_one_until`)."""
        assert self._direct is not None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DatabaseBusy("the time limit passed before the transaction could start")
        if mode is Mode.READ_ONE and not durable and self._begins is None:
            # Not behind a transaction-mode pooler: there a CancelRequest for a client still
            # queued for a server connection is dropped (PgBouncer 1.18: "cancel request for
            # idle client"), and the read then waits behind the lock on a backend nobody
            # counts; so it keeps the server's timeouts with its BEGIN.
            return await self._read_one_until(body, deadline, remaining)
        limit_ms = max(int(remaining * 1000), 1)
        opening = "BEGIN" if self._begins is None else self._begins[durable]
        begin = (
            f"{opening}; SELECT set_config('lock_timeout', '{limit_ms}', true), "
            f"set_config('statement_timeout', '{limit_ms}', true)"
        )
        with _busy_past_deadline():
            async with asyncio.timeout(remaining + PG_UNRESPONSIVE_GRACE) as client_timeout:
                return await run_direct(
                    self._direct,
                    body,
                    prepared,
                    begin=begin,
                    durable=durable,
                    # COMMIT, once sent, is waited for (see _run_until)
                    before_commit=lambda: client_timeout.reschedule(None),
                )

    async def _read_one_until(
        self, body: Callable[[Tx], T], deadline: float, remaining: float
    ) -> T:
        """A one-statement read by the deadline in one round trip: sent alone, in autocommit,
        bounded by asyncpg's own timeout rather than the server's (no BEGIN to set them, no
        COMMIT). Past the deadline asyncpg sends the server a CancelRequest, so the statement
        stops there too (a read waiting behind a lock does not stay, one per click, through
        an outage). Nothing to commit, so a client-side cut-off is true: DatabaseBusy. The
        client's outer timeout still bounds taking (or opening) a connection."""
        assert self._direct is not None
        with _busy_past_deadline():
            async with asyncio.timeout(remaining + PG_UNRESPONSIVE_GRACE):
                return await run_direct(self._direct, body, prepared, begin=None, deadline=deadline)

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
        settings = (
            "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $1, true)"
        )
        with _busy_past_deadline():
            async with asyncio.timeout(remaining + PG_UNRESPONSIVE_GRACE) as client_timeout:
                async with self._engine.begin() as conn:
                    try:
                        await conn.exec_driver_sql(settings, (limit_ms,))
                        result = await conn.run_sync(_run_postgres, body)
                    except asyncio.CancelledError:
                        # Cut off mid-transaction: the connection's state is unknown, so it
                        # never goes back to the pool.
                        await conn.invalidate()
                        raise
                    client_timeout.reschedule(None)  # COMMIT, on leaving the block, is awaited
                    return result

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
        if self._direct is not None:
            await self._direct.close()
        await self._engine.dispose()


def _run_postgres(connection: Connection, body: Callable[[Tx], T]) -> T:
    return body(_PostgresTx(connection))


# Transactions on asyncpg directly (storage.drivers.pg_direct); False: every transaction
# through SQLAlchemy's engine, as before (bench/peers measures the two side by side).
POSTGRES_DIRECT = True


def direct_pool(
    engine: AsyncEngine, engine_kwargs: Mapping[str, Any], *, session_levels: bool = True
) -> DirectPool | None:
    """The hot path's pool for ``engine``'s database: its URL and ``connect_args``, as many
    connections as its pool may open (``pool_size`` + ``max_overflow``: 5 + 10 by default).
    None when ``POSTGRES_DIRECT`` is off. ``session_levels=False`` (behind a transaction-mode
    pooler, where a session is not ours): no connection's session is set; the transactions
    set their commit level themselves (:func:`transaction_begins`)."""
    if not POSTGRES_DIRECT:
        return None
    import asyncpg  # type: ignore[import-untyped]

    _args, params = engine.dialect.create_connect_args(engine.url)
    params = {**params, **engine_kwargs.get("connect_args", {})}
    for sqlalchemy_only in (
        "prepared_statement_cache_size",
        "prepared_statement_name_func",
        "async_creator_fn",
    ):
        params.pop(sqlalchemy_only, None)
    size = int(engine_kwargs.get("pool_size", 5)) + int(engine_kwargs.get("max_overflow", 10))

    async def connect() -> Any:
        return await asyncpg.connect(**params)

    levels = pg_commits.commit_levels() if session_levels else {}
    return DirectPool(connect, max(size, 1), levels)


# Asyncpg's options for a transaction-mode pooler (``database_statement_cache = false``): no
# statement cache, so the direct path's statements are unnamed (prepared and run on whichever
# server connection the pooler gives the transaction); SQLAlchemy's own cache off too, and
# the statements it still prepares by name (the engine's) named uniquely, so that two clients
# sharing a server connection never collide on asyncpg's per-connection numbering.
NO_STATEMENT_CACHE: dict[str, Any] = {
    "statement_cache_size": 0,
    "prepared_statement_cache_size": 0,
    "prepared_statement_name_func": lambda: f"__asyncpg_{uuid.uuid4().hex}__",
}


def relax_commits(engine: AsyncEngine, *, session_levels: bool = True) -> None:
    """With ``POSTGRES_DIRECT`` off (the engine for every transaction, kept to measure the
    direct path against), every new connection of ``engine`` commits at
    ``POSTGRES_SYNCHRONOUS_COMMIT``, for the session, as the direct path's relaxed ones do.
    Not behind a transaction-mode pooler (``session_levels=False``): the session is not
    ours, so those commits keep the server's level."""
    from sqlalchemy import event

    level = pg_commits.POSTGRES_SYNCHRONOUS_COMMIT
    if level is None or POSTGRES_DIRECT or not session_levels:
        return
    statement = pg_commits.for_session(pg_commits.relaxed_commit(level))

    @event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(statement)
        finally:
            cursor.close()
        dbapi_connection.commit()  # a session setting made in a rolled-back transaction is undone
