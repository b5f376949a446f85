"""PostgreSQL's hot path: transaction bodies on asyncpg connections of our own, no SQLAlchemy.

Why: a cycle's transactions are short, and on PostgreSQL each statement is a network round
trip. Through SQLAlchemy's async engine every statement also paid its adapter (a cursor, a
result, the exception wrapper) and every transaction its connection and transaction objects:
about 50-65 µs of CPU per statement against 20 µs for asyncpg alone, measured here
(docs/benchmarks.md, "PostgreSQL"). This is the same move as the SQLite path's, which drives
``sqlite3`` directly.

The body stays the synchronous function over a :class:`~storage.drivers.protocol.Tx` that
both databases run: it runs in a greenlet (as SQLAlchemy's ``greenlet_spawn`` and ``run_sync``
run one, but reused from body to body: :mod:`storage.drivers.pg_greenlets`), and each
statement awaits asyncpg's prepared statement (cached per connection, so a statement is
parsed once per connection, not per call). ``BEGIN`` goes out as one simple
query with what the transaction sets for itself (a durable commit), so that costs no extra
round trip.

Rows a body writes without reading them back (``Tx.defer``: the audit trail, a pause's
approvals) are not sent on their own: they go out as data-modifying CTEs in front of the
body's next statement (``WITH _d0 AS (INSERT ...) UPDATE ...``), or in one statement before
COMMIT. One group per table, its rows in one multi-row INSERT, so serial ids keep the order
the rows were made in; a statement that cannot carry them (``SHOW``, ``FOR UPDATE``) or
writes one of their tables itself is sent after them instead.

A transaction of one statement (``Mode.WRITE_ONE``, ``Mode.READ_ONE``) is sent alone, in
autocommit: no BEGIN and no COMMIT, one round trip in all. The hot transactions PostgreSQL can
do in one statement (data-modifying CTEs) are written so (:mod:`storage.stores`).

Under a time limit (:func:`storage.limits.time_limit`) a transaction's BEGIN sets the server's
``lock_timeout`` and ``statement_timeout`` (:mod:`storage.drivers.postgres`), but a
one-statement read (a click's read of its approval) is still its statement alone, one round
trip rather than three, bounded by asyncpg's own ``timeout=`` (:func:`run_direct`'s
``deadline``). On that timeout asyncpg sends the server a CancelRequest, so the statement stops
there too. The connection is pooled again only once the server has acknowledged the
cancellation (:func:`_cancel_acknowledged`, at most ``CANCEL_ACKNOWLEDGED_WITHIN``), never
before: asyncpg makes the connection's next operation wait for that acknowledgement, and
closes the connection if the operation's own timeout runs out first, which kills the
CancelRequest still on its way (a read with a few milliseconds left would: the cut-off
statement then stays behind the lock, on a backend no pool counts, until the lock goes);
and an operation with no timeout (the sweeper's, a resume's) would wait for as long as a
server that stopped answering stays silent. Closed at once, the connection would cancel
the CancelRequest in flight as well.

Connections come from a small pool of our own (:mod:`storage.drivers.pg_pool`), whose
connections carry the commit's durability as their session setting, so no transaction spends
a statement on it and a one-statement one needs no SET LOCAL. Errors reach callers as
SQLAlchemy's ``DBAPIError`` (with ``orig``, the asyncpg exception, and its ``sqlstate``), as
they did through the engine, so :data:`storage.limits.DATABASE_FAILURES` and the outage
handling see the same types.

The engine stays for what is not hot: migrations, the blocking path and ad-hoc SQL.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.exc import DBAPIError
from sqlalchemy.util import await_only

from storage.drivers.pg_greenlets import run_body
from storage.drivers.pg_pool import DRIVER_ERRORS, DirectPool, database_error
from storage.drivers.protocol import T, Tx
from storage.limits import PG_UNRESPONSIVE_GRACE

# How long a connection whose statement asyncpg cut off (its timeout) waits for the server to
# acknowledge the cancellation before it is closed instead of pooled again.
CANCEL_ACKNOWLEDGED_WITHIN = PG_UNRESPONSIVE_GRACE

# Diagnostics and tests: each is called with a statement's text just before it is sent
# (BEGIN, COMMIT and ROLLBACK included), on the event loop's thread. Empty in production.
STATEMENT_HOOKS: list[Callable[[str], None]] = []

# Deferred writes (Tx.defer): a plain one-row INSERT, and a statement they cannot ride on.
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_PLAIN_INSERT = re.compile(r"\s*(INSERT INTO \w+ \([^()]*\)) VALUES (\(.*\))\s*", re.S | re.I)
_LOCKING = re.compile(r"\bFOR\s+(?:NO\s+KEY\s+UPDATE|UPDATE|KEY\s+SHARE|SHARE)\b", re.I)
_CARRIER = re.compile(r"\s*(?:SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.I)
_WITH = re.compile(r"\s*WITH\s+(?!RECURSIVE\b)", re.I)


# What the checks below find depends on the statement's text alone, and a transaction sends
# the same few statements every time: each is worked out once per text (cached), not by
# regular expressions on every statement (about 100 µs of a pause -> decide -> resume cycle).
@functools.lru_cache(maxsize=512)
def _insert_shape(sql: str) -> tuple[str, str, str]:
    """A deferred INSERT's head (``INSERT INTO t (...)``), its ``VALUES`` tuple, its table."""
    match = _PLAIN_INSERT.fullmatch(sql)
    if match is None:
        raise ValueError(f"Tx.defer takes a plain INSERT ... VALUES (...), not {sql!r}")
    head, values = match.groups()
    return head, values, head.split()[2].lower()


def _table(sql: str) -> str:
    return _insert_shape(sql)[2]


@functools.lru_cache(maxsize=1024)
def _writes(sql: str, table: str) -> bool:
    """Whether ``sql`` writes into ``table`` (its CTEs included)."""
    pattern = rf"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+{re.escape(table)}\b"
    return re.search(pattern, sql, re.I) is not None


@functools.lru_cache(maxsize=512)
def _can_carry(sql: str) -> bool:
    """Whether ``sql`` may carry deferred rows as CTEs (SELECT, INSERT, UPDATE, DELETE and
    WITH can; a locking clause cannot)."""
    return _CARRIER.match(sql) is not None and _LOCKING.search(sql) is None


@functools.lru_cache(maxsize=4096)
def _renamed(values: str, prefix: str) -> str:
    """A VALUES tuple with its ``:name`` parameters renamed ``:<prefix><name>``."""
    return _NAMED.sub(lambda m: f":{prefix}{m.group(1)}", values)


def _rows_insert(
    sql: str, rows: Sequence[Mapping[str, Any]], tag: str, params: dict[str, Any]
) -> str:
    """One multi-row INSERT for ``rows`` of ``sql`` (rows in order, so serial ids are too),
    its parameters renamed ``_<tag>_<row>_<name>`` into ``params``."""
    head, values, _ = _insert_shape(sql)
    tuples = []
    for index, row in enumerate(rows):
        prefix = f"_{tag}_{index}_"
        tuples.append(_renamed(values, prefix))
        for name, value in row.items():
            params[prefix + name] = value
    return f"{head} VALUES {', '.join(tuples)}"


def _rowcount(status: str) -> int:
    """Rows a statement changed, from its command tag ("UPDATE 3", "INSERT 0 1")."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else -1


class DirectTx:
    """The statements of one transaction on one asyncpg connection (inside a greenlet)."""

    dialect = "postgresql"
    converters: Mapping[str, Callable[[Any], Any]] = {}
    __slots__ = ("_connection", "_deadline", "_one", "_pending", "_prepare", "_sent", "cut_off")

    def __init__(
        self,
        connection: asyncpg.Connection,
        prepare: Callable[[str, Mapping[str, Any] | None], tuple[str, tuple[Any, ...]]],
        *,
        one: bool = False,
        deadline: float | None = None,
    ) -> None:
        self._connection = connection
        self._prepare = prepare
        # The monotonic time each statement must answer by (asyncpg's own timeout, which
        # cancels the statement on the server); None: no client-side timeout.
        self._deadline = deadline
        # Tx.defer's writes not sent yet: (statement, rows), in the order they were made.
        self._pending: list[tuple[str, Sequence[Mapping[str, Any]]]] = []
        # In autocommit (``one``) each statement commits alone: a second one would not be
        # atomic with the first, so it is refused (a body's bug, found by its tests).
        self._one = one
        self._sent = 0
        # A statement sent was cut off by the deadline: asyncpg asked the server to cancel it.
        self.cut_off = False

    def _sending(self, query: str) -> None:
        self._sent += 1
        if self._one and self._sent > 1:
            raise OneStatementOnly(query)
        if STATEMENT_HOOKS:
            _announce(query)

    def defer(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        # One group per table, its rows in order: the CTEs of one statement run in no set
        # order, so two of them into one table could number its rows (serial ids, which the
        # audit trail is read by) out of order. Rows of different tables have no order.
        table = _table(sql)  # ValueError unless a plain INSERT ... VALUES (...)
        for index, (pending, earlier) in enumerate(self._pending):
            if pending == sql:
                self._pending[index] = (sql, [*earlier, *rows])
                return
            if _table(pending) == table:
                self.flush()
                break
        self._pending.append((sql, rows))

    def flush(self) -> None:
        """The deferred writes, in one statement of their own (before COMMIT)."""
        if not self._pending:
            return
        *carried, (sql, rows) = self._pending
        self._pending = carried
        params: dict[str, Any] = {}
        last = _rows_insert(sql, rows, "dl", params)
        self.execute(last, params)

    def _carrying(self, sql: str, params: Mapping[str, Any] | None) -> tuple[str, tuple[Any, ...]]:
        """``sql`` as sent: with the deferred writes as data-modifying CTEs in front of it (one
        round trip for all), or after a statement of their own when ``sql`` cannot carry them
        (only SELECT, INSERT, UPDATE, DELETE and WITH can; ``FOR UPDATE`` cannot) or writes
        into one of their tables itself (their rows first, as they were made)."""
        if self._pending and (
            not _can_carry(sql)
            or any(_writes(sql, _table(pending)) for pending, _ in self._pending)
        ):
            self.flush()
        if not self._pending:
            return self._prepare(sql, params)
        merged: dict[str, Any] = dict(params or {})
        ctes = [
            f"_d{i} AS ({_rows_insert(text, rows, f'd{i}', merged)})"
            for i, (text, rows) in enumerate(self._pending)
        ]
        self._pending = []
        with_clause = _WITH.match(sql)
        if with_clause is not None:
            combined = f"WITH {', '.join(ctes)}, {sql[with_clause.end() :]}"
        else:
            combined = f"WITH {', '.join(ctes)} {sql}"
        return self._prepare(combined, merged)

    def _timeout(self) -> float | None:
        """asyncpg's ``timeout=`` for the next statement: the time left to the deadline. At or
        past it, TimeoutError, with nothing sent (so nothing to cancel)."""
        if self._deadline is None:
            return None
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        query, args = self._carrying(sql, params)
        timeout = self._timeout()
        self._sending(query)
        sent = self._connection.execute(query, *args, timeout=timeout)
        return _rowcount(self._await(sent, query, args))

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        self.flush()
        prepared = [self._prepare(sql, row) for row in rows]
        query = prepared[0][0]
        batch = [args for _, args in prepared]
        timeout = self._timeout()
        self._sending(query)
        sent = self._connection.executemany(query, batch, timeout=timeout)
        self._await(sent, query, batch)

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Any] | None:
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def all(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Sequence[Any]]:
        query, args = self._carrying(sql, params)
        timeout = self._timeout()
        self._sending(query)
        sent = self._connection.fetch(query, *args, timeout=timeout)
        records = self._await(sent, query, args)
        return [tuple(record) for record in records]

    def _await(self, awaitable: Awaitable[Any], query: str, args: Any) -> Any:
        try:
            return await_only(awaitable)
        except DRIVER_ERRORS as exc:
            if isinstance(exc, TimeoutError) and self._deadline is not None:
                # The statement's own timeout (TimeoutError is an OSError, one of the driver's
                # errors): as it is, for the caller's DatabaseBusy; asyncpg has asked the
                # server to cancel the statement (run_direct waits for that).
                self.cut_off = True
                raise
            raise database_error(exc, query, args) from exc


class OneStatementOnly(RuntimeError):
    """A one-statement transaction (autocommit) sent a second statement."""

    def __init__(self, statement: str) -> None:
        super().__init__(
            "a Mode.WRITE_ONE / READ_ONE body sent a second statement, which would commit "
            f"apart from the first: {statement[:200]!r}"
        )


def _announce(statement: str) -> None:
    for hook in STATEMENT_HOOKS:
        hook(statement)


async def run_direct(
    pool: DirectPool,
    body: Callable[[Tx], T],
    prepare: Callable[[str, Mapping[str, Any] | None], tuple[str, tuple[Any, ...]]],
    *,
    begin: str | None,
    durable: bool = False,
    before_commit: Callable[[], None] | None = None,
    deadline: float | None = None,
) -> T:
    """``body`` in one transaction opened with ``begin`` (a simple query: ``BEGIN`` and what
    the transaction sets for itself), or in autocommit when ``begin`` is None (one statement:
    no BEGIN/COMMIT round trips; a second is refused), on a ``durable`` connection or a
    relaxed one. ``before_commit`` is called just before COMMIT is sent. ``deadline`` (a
    monotonic time; in autocommit): a statement not answered by then raises TimeoutError,
    asyncpg having asked the server to cancel it."""
    connection = await pool.acquire(durable)
    sound = False
    try:
        tx = DirectTx(connection, prepare, one=begin is None, deadline=deadline)
        if begin is None:
            try:
                result = await run_body(_whole, body, tx)
            except TimeoutError:
                # Past the deadline. A statement cut off: asyncpg has sent a CancelRequest,
                # and the connection is pooled again once the server has acknowledged it
                # (closing it now would cancel that request and leave the statement running
                # on the server); none sent: nothing to wait for.
                if tx.cut_off:
                    sound = await _cancel_acknowledged(connection)
                else:
                    sound = not connection.is_closed()
                raise
            except DBAPIError as exc:
                # A statement the server refused (a value too long, a constraint) leaves an
                # autocommit connection as it was: pooled again, not closed (a flood of bad
                # input would otherwise cost a new connection each).
                sound = isinstance(exc.orig, asyncpg.PostgresError) and not (
                    exc.connection_invalidated
                )
                raise
            sound = True
            return result
        await _simple(connection, begin)
        try:
            result = await run_body(_whole, body, tx)
        except Exception:
            try:
                await _simple(connection, "ROLLBACK")
                sound = True  # rolled back: the connection is clean again
            except DBAPIError:
                pass  # the body's own error says more; the connection is closed
            raise
        if before_commit is not None:
            before_commit()
        await _simple(connection, "COMMIT")
        sound = True
        return result
    finally:
        # Cancelled or failed mid-way: the connection's state is unknown, so it is closed.
        pool.release(connection, sound=sound)


def _whole(body: Callable[[Tx], T], tx: DirectTx) -> T:
    """``body``, then what it deferred (Tx.defer), still inside its transaction."""
    result = body(tx)
    tx.flush()
    return result


async def _cancel_acknowledged(connection: asyncpg.Connection) -> bool:
    """Whether a connection whose statement asyncpg cut off (a CancelRequest sent) is sound
    again: the server has acknowledged the cancellation, so nothing of that statement still
    runs there and no cancellation is left to reach a later one. A statement of its own
    finds out: asyncpg sends it only after the acknowledgement (one round trip more, on a
    timeout only). False once ``CANCEL_ACKNOWLEDGED_WITHIN`` has passed (a server that stopped
    answering) or on any error: the connection is closed rather than pooled again."""
    if connection.is_closed():
        return False
    try:
        async with asyncio.timeout(CANCEL_ACKNOWLEDGED_WITHIN):
            await _simple(connection, "SELECT 1")
    except (TimeoutError, DBAPIError):
        return False
    return True


async def _simple(connection: asyncpg.Connection, query: str) -> None:
    if STATEMENT_HOOKS:
        _announce(query)
    try:
        await connection.execute(query)
    except DRIVER_ERRORS as exc:
        raise database_error(exc, query, None) from exc
