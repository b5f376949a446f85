"""SQLite (the embedded default), driven through the standard library's ``sqlite3``.

``sqlite:///path``; ``sqlite+aiosqlite:///path``, the documented default, is accepted and means
the same file. Not aiosqlite and not SQLAlchemy's execution layer: measured on the 2-core CI
machine, one ``await loop.run_in_executor(None, f)`` costs 0.14-0.18 ms; an aiosqlite
``select 1`` 0.26 ms, because every aiosqlite call hops to its thread and back; a SQLAlchemy
async ``select 1`` 0.86 ms (several such hops per statement); a SQLAlchemy Core point SELECT in
its own transaction 0.11-0.19 ms even on the calling thread; the same transaction through
``sqlite3`` 0.007-0.014 ms. A pause -> decide -> resume cycle makes ten transactions of ~10
hops each, so the old stack spent most of its 59 ms cycle (p50, ``bench/engine_cycle.py``)
waiting on threads. Hence:

- Every transaction runs first *on the calling thread* (the event loop), after yielding to the
  loop once as any I/O would, on a connection whose busy timeout is 0: it takes the write lock
  up front (``BEGIN IMMEDIATE``; reads a plain ``BEGIN`` or, for one-statement reads, none) or
  fails at once with SQLITE_BUSY. Our transactions are a few indexed point statements (20-60
  us of SQLite work in all), cheaper than a single thread hop, and with WAL and
  ``synchronous=NORMAL`` a commit writes to the OS page cache and never fsyncs. No connection
  of ours checkpoints the WAL at a commit (``wal_autocheckpoint=0``): checkpoints run on a
  thread of their own every ``CHECKPOINT_EVERY`` writes, so the loop never waits on the disk.
- The one commit that fsyncs, ``durable=True`` (the ``executing`` record, which a power cut
  must not lose: ``SQLITE_DURABLE_SYNCHRONOUS``), runs inline too unless ``durable_inline``
  says not now; then on the writer thread, while the loop carries on. Its fsync (0.2-1.6 ms
  here, several times that under I/O load) blocks the loop inline, but the hop to the writer
  and back costs two thread wake-ups, 0.2-1.5 ms on two shared cores, on top of the same
  fsync. ``serve`` sends it to the thread while Slack requests are being answered or were
  within 50 ms (``BackgroundTasks.quiet_now``); the CLI and the benchmarks answer nobody
  else.
- When the lock is taken (another replica or process, our own writer thread, a checkpoint) the
  transaction is rolled back and run again, unchanged, on a worker thread whose connection
  waits for the lock (``SQLITE_BUSY_TIMEOUT_MS``): one thread hop. Writes go to one writer
  thread (SQLite has one writer at a time; queueing in our process beats SQLite's
  sleep-and-retry), and reads that may scan (listing, audit trails) always run on a small reader
  pool, never inline. ``Repository.open(url, sqlite_inline=False)`` sends every transaction to
  the threads: one hop per transaction.

  Why inline rather than one thread hop per transaction (which is what ``sqlite_inline=False``
  does): the hop alone costs more than the transaction. Measured on the engine benchmark, p50
  per cycle: 59 ms before; 6-7 ms with one hop per transaction; 3.0-3.2 ms inline. Of those ~3
  ms, ~1.1-1.4 ms is llm's chain machinery, our runner and gate and the sync tool's own thread
  hop (the same benchmark with an in-memory repository), ~0.9 ms SQLite itself (then seven
  write commits, ~64 WAL frames; six and ~50 since), the rest our Python around it.
- Values are stored exactly as SQLAlchemy's SQLite types store them (``YYYY-MM-DD
  HH:MM:SS.ffffff`` text for datetimes, ``json.dumps`` text for JSON, 0/1 for booleans), so the
  Alembic schema, existing databases and ad-hoc tools all keep working. Driver errors are raised
  as the SQLAlchemy exceptions (``IntegrityError``, ``OperationalError``, …) they were before.

Inside :func:`storage.limits.time_limit` (acknowledgement paths) the threaded attempt waits for
the lock only until the deadline; past it, :class:`~storage.limits.DatabaseBusy`.

SQLite needs 3.35 or newer (``RETURNING``, 2021).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool, StaticPool

from storage.limits import DatabaseBusy, current_deadline, run_by_deadline
from storage.protocol import Mode, T, Tx
from storage.urls import normalize_url
from storage.values import storable_text

if TYPE_CHECKING:
    # Imported when an engine is first asked for: the repository never needs one on SQLite,
    # and a command that only reads should not wait for SQLAlchemy's async layer.
    from sqlalchemy.ext.asyncio import AsyncEngine

SQLITE_BUSY_TIMEOUT_MS = 30_000
# Inline mode: writes between two checkpoints of the WAL (PASSIVE, on a thread of their own),
# how many frames the WAL may hold before one also RESTARTs it (it then holds the write lock
# briefly), and how long that RESTART waits for readers (writers queue behind it meanwhile).
CHECKPOINT_EVERY = 200
WAL_RESTART_FRAMES = 10_000
# Every SQLite connection's PRAGMA synchronous. In WAL mode NORMAL makes a commit durable at
# the next checkpoint (a power cut or OS crash before it may lose it), FULL at the commit
# itself (an fsync of the WAL). bench/peers sets it to measure both.
SQLITE_SYNCHRONOUS = "NORMAL"
# The level of a ``durable`` transaction's commit (the ``executing`` record): FULL fsyncs the
# WAL at that commit, which in WAL mode also makes every earlier commit durable. One fsync per
# gated call, where FULL for every connection costs one per commit (six per cycle): measured
# side by side on bench/engine_cycle.py, the cheaper way to keep the at-most-once promise.
SQLITE_DURABLE_SYNCHRONOUS = "FULL"
_SYNCHRONOUS_LEVELS = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}
RESTART_WAIT_MS = 50
SQLITE_READER_THREADS = 2

# Execution option set by read-only transactions of the async engine, which need no write lock.
READ_ONLY = "approval_bot_read_only"


def drive_sqlite_transactions(engine: Any, connect: bool = True) -> None:
    """SQLAlchemy engines on SQLite: our PRAGMAs, and BEGIN IMMEDIATE for writes."""
    if connect:

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Autocommit at the driver level: the "begin" hook below emits BEGIN itself.
            dbapi_connection.isolation_level = None
            _set_pragmas(dbapi_connection, SQLITE_BUSY_TIMEOUT_MS)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def _set_pragmas(connection: Any, busy_timeout_ms: int) -> None:
    cursor = connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute(f"PRAGMA synchronous = {SQLITE_SYNCHRONOUS}")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def sqlite_datetime(value: datetime) -> str:
    """SQLAlchemy's SQLite DateTime storage format; text order is time order."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(" ", "microseconds")


# Parameter types sqlite3 binds as they are (bool is an int): nothing to convert.
_BOUND_AS_IS = frozenset((int, float, bool, bytes, type(None)))


def _sqlite_params(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``params`` as bound: text through :func:`storable_text`, datetimes as SQLAlchemy stores
    them. Most values (ids, plain ASCII text, numbers) need nothing: they are checked inline
    rather than through a call each, on every statement of every transaction."""
    if not params:
        return {}
    converted = dict(params)
    for key, value in params.items():
        kind = value.__class__
        if kind is str:
            if value.isascii() and "\x00" not in value:
                continue
        elif kind in _BOUND_AS_IS:
            continue
        converted[key] = _sqlite_value(value)
    return converted


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, datetime):
        return sqlite_datetime(value)
    return value


# Stored value (never None) -> Python value, by column kind.
SQLITE_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "json": json.loads,
    "datetime": datetime.fromisoformat,
    "bool": bool,
}


def _wrap(exc: sqlite3.Error, statement: str | None, params: Any) -> DBAPIError:
    """The SQLAlchemy exception (IntegrityError, OperationalError…) SQLAlchemy would raise."""
    return DBAPIError.instance(statement, params, exc, sqlite3.Error)


def _is_busy(exc: BaseException) -> bool:
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlite_errorcode", None)
    if not isinstance(orig, sqlite3.OperationalError) or code is None:
        return False
    return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class _SQLiteTx:
    dialect = "sqlite"
    converters = SQLITE_CONVERTERS
    __slots__ = ("_connection",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        try:
            return self._connection.execute(sql, _sqlite_params(params)).rowcount
        except sqlite3.Error as exc:
            raise _wrap(exc, sql, params) from exc

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        try:
            self._connection.executemany(sql, [_sqlite_params(row) for row in rows])
        except sqlite3.Error as exc:
            raise _wrap(exc, sql, rows) from exc

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Any] | None:
        # fetchall, not fetchone: a RETURNING statement must run to its end before COMMIT.
        try:
            rows = self._connection.execute(sql, _sqlite_params(params)).fetchall()
        except sqlite3.Error as exc:
            raise _wrap(exc, sql, params) from exc
        return rows[0] if rows else None

    def all(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Sequence[Any]]:
        try:
            return self._connection.execute(sql, _sqlite_params(params)).fetchall()
        except sqlite3.Error as exc:
            raise _wrap(exc, sql, params) from exc


def raises_synchronous() -> bool:
    """Whether a durable commit syncs more than the connections' own setting does."""
    return (
        _SYNCHRONOUS_LEVELS[SQLITE_DURABLE_SYNCHRONOUS.upper()]
        > _SYNCHRONOUS_LEVELS[SQLITE_SYNCHRONOUS.upper()]
    )


def _transact(
    connection: sqlite3.Connection, body: Callable[[Tx], T], mode: Mode, durable: bool = False
) -> T:
    if durable and raises_synchronous():
        # PRAGMA synchronous is the connection's and applies to its next commits: raised
        # before BEGIN for this one transaction, put back after its COMMIT (or ROLLBACK).
        connection.execute(f"PRAGMA synchronous = {SQLITE_DURABLE_SYNCHRONOUS}")
        try:
            return _transact(connection, body, mode)
        finally:
            connection.execute(f"PRAGMA synchronous = {SQLITE_SYNCHRONOUS}")
    tx = _SQLiteTx(connection)
    if mode is Mode.READ_ONE:
        return body(tx)
    begin = "BEGIN IMMEDIATE" if mode is Mode.WRITE else "BEGIN"
    try:
        connection.execute(begin)
    except sqlite3.Error as exc:
        raise _wrap(exc, begin, None) from exc
    try:
        result = body(tx)
        connection.execute("COMMIT")
    except BaseException as exc:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise _wrap(exc, "COMMIT", None) from exc
        raise
    return result


def _always() -> bool:
    return True


class _Busy(Exception):
    """The inline attempt found the database locked: run the body on a thread instead."""


class SQLiteDatabase:
    """SQLite through ``sqlite3``: inline on the caller's thread when free, else on threads."""

    dialect = "sqlite"

    def __init__(
        self,
        url: str,
        *,
        inline: bool = True,
        engine: AsyncEngine | None = None,
        **engine_kwargs: Any,
    ) -> None:
        if sqlite3.sqlite_version_info < (3, 35):
            raise RuntimeError(f"SQLite {sqlite3.sqlite_version} is too old: 3.35+ is needed")
        parsed = make_url(url)
        self.url = url
        self.path = parsed.database or ":memory:"
        self.memory = self.path == ":memory:" or self.path.startswith("file::memory:")
        self._engine_kwargs = engine_kwargs
        self._connect_args = dict(engine_kwargs.get("connect_args", {}))
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._engine = engine
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="approval-bot-sqlite-write")
        if self.memory:
            # One private database per connection: everything shares one connection, on one
            # thread (the writer), and nothing runs inline.
            self._readers = self._writer
            self._shared: sqlite3.Connection | None = None
            inline = False
        else:
            self._readers = ThreadPoolExecutor(
                SQLITE_READER_THREADS, thread_name_prefix="approval-bot-sqlite-read"
            )
        self._inline: sqlite3.Connection | None = None
        self._inline_lock = threading.Lock()
        # Whether a durable commit may fsync on the event loop now (see the module docstring):
        # always, unless the application says when not (serve: while Slack is being answered).
        self.durable_inline: Callable[[], bool] = _always
        self._writes = itertools.count(1)
        self._checkpointing = False
        # Inline mode: checkpoints are ours, on a thread of their own (see _checkpoint_soon),
        # and no connection of ours checkpoints at a commit (SQLite's wal_autocheckpoint).
        self._own_checkpoints = inline
        self._checkpointer: ThreadPoolExecutor | None = None
        self._checkpoint_connection: sqlite3.Connection | None = None
        if inline:
            self._checkpointer = ThreadPoolExecutor(
                1, thread_name_prefix="approval-bot-sqlite-checkpoint"
            )
            self._inline = self._connect(busy_timeout_ms=0)

    # connections

    def _connect(
        self, busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS, *, tracked: bool = True
    ) -> sqlite3.Connection:
        kwargs = {"check_same_thread": False, **self._connect_args, "isolation_level": None}
        connection = sqlite3.connect(self.path, **kwargs)
        _set_pragmas(connection, busy_timeout_ms)
        if self._own_checkpoints:
            connection.execute("PRAGMA wal_autocheckpoint = 0")
        if tracked:
            with self._lock:
                self._connections.append(connection)
        return connection

    def _thread_connection(self) -> sqlite3.Connection:
        if self.memory:
            if self._shared is None:
                self._shared = self._connect()
            return self._shared
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
        return connection

    # transactions

    async def run(
        self, body: Callable[[Tx], T], mode: Mode, *, inline: bool = True, durable: bool = False
    ) -> T:
        if inline and self._inline is not None:
            # Still a scheduling point, as any I/O would be (4.5 us): without it a burst of
            # work (100 resumes after 100 clicks) runs in long stretches and Slack's acks wait
            # behind it; measured, 100 concurrent clicks were acked in 300-450 ms instead of
            # 120-150 ms.
            await asyncio.sleep(0)
            # A durable commit fsyncs: inline only while nothing else needs the loop
            # (``durable_inline``), else on the writer thread (module docstring).
            off_loop = durable and raises_synchronous() and not self.durable_inline()
            if not off_loop and self._inline_lock.acquire(blocking=False):
                try:
                    result = self._run_inline(body, mode, durable)
                except _Busy:
                    pass
                else:
                    self._wrote(mode)
                    return result
                finally:
                    self._inline_lock.release()
        executor = self._writer if mode is Mode.WRITE else self._readers
        deadline = current_deadline()
        if deadline is not None:
            result = await self._run_threaded_until(executor, body, mode, deadline, durable)
        else:
            result = await asyncio.get_running_loop().run_in_executor(
                executor, self._run_threaded, body, mode, durable
            )
        self._wrote(mode)
        return result

    def _wrote(self, mode: Mode) -> None:
        if (
            mode is Mode.WRITE
            and self._checkpointer is not None
            and next(self._writes) % CHECKPOINT_EVERY == 0
        ):
            self._checkpoint_soon()

    async def _run_threaded_until(
        self,
        executor: Executor,
        body: Callable[[Tx], T],
        mode: Mode,
        deadline: float,
        durable: bool = False,
    ) -> T:
        """On a thread, waiting for the write lock only until ``deadline`` (its connection's
        busy timeout for this one transaction); see :func:`storage.limits.run_by_deadline`."""

        def attempt(remaining_ms: int) -> T:
            connection = self._thread_connection()
            connection.execute(f"PRAGMA busy_timeout = {remaining_ms}")
            try:
                return _transact(connection, body, mode, durable)
            except DBAPIError as exc:
                if _is_busy(exc):
                    raise DatabaseBusy("the database is locked by another writer") from exc
                raise
            finally:
                connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")

        return await run_by_deadline(executor, attempt, deadline)

    def _run_inline(self, body: Callable[[Tx], T], mode: Mode, durable: bool = False) -> T:
        assert self._inline is not None
        try:
            result = _transact(self._inline, body, mode, durable)
        except DBAPIError as exc:
            if _is_busy(exc):
                raise _Busy from exc
            raise
        return result

    def _run_threaded(self, body: Callable[[Tx], T], mode: Mode, durable: bool = False) -> T:
        return _transact(self._thread_connection(), body, mode, durable)

    def run_blocking(self, body: Callable[[Tx], T], mode: Mode) -> T:
        """Run ``body`` and wait for its commit without awaiting: for code on the event loop's
        thread that cannot await (a sync call inside an async tool). Rare by design: it
        blocks the loop for one transaction."""
        executor = self._writer if mode is Mode.WRITE else self._readers
        return executor.submit(self._run_threaded, body, mode).result()

    def _checkpoint_soon(self) -> None:
        """Copy the WAL back into the database on the checkpoint thread (the loop never
        fsyncs for it, and neither the writer thread: a durable commit never waits behind it).

        PASSIVE: it does the copying (and the fsyncs) while writes carry on; it takes no
        lock a writer waits for. When it found every frame copied, the next write starts the
        WAL over. Under steady writes some always land meanwhile, so the WAL would never be
        found fully copied and would grow without end, every read's search of it slowing
        down (we measured 90 us point reads at 270 MB). So once it holds more than
        ``WAL_RESTART_FRAMES`` frames a RESTART follows: it holds the write lock while it
        copies the few frames written meanwhile (a few ms; writes queue on the writer thread),
        and the next write starts the WAL over: every ~1,100 writes (~40 MB of WAL) rather
        than after every checkpoint, so it can hold up under one cycle in a hundred. Measured
        on bench/engine_cycle.py, interleaved with the previous pacing (RESTART after every
        checkpoint, on the writer thread) on the shared 2-core machine: the same p50 and p99
        (7.5 / 28.8 ms under a load of 3-6); the tail there is the machine's and the
        ``executing`` commit's fsync, not the checkpoints.
        """
        if self._checkpointing or self._checkpointer is None:
            return
        self._checkpointing = True

        def checkpoint() -> None:
            if self._checkpoint_connection is None:
                # Not in self._connections: tracing them (bench/) must not race this thread.
                self._checkpoint_connection = self._connect(tracked=False)
            connection = self._checkpoint_connection
            try:
                _busy, frames, copied = connection.execute(
                    "PRAGMA wal_checkpoint(PASSIVE)"
                ).fetchone()
                if copied < frames and frames > WAL_RESTART_FRAMES:
                    # Wait for readers only briefly: writers queue behind a RESTART.
                    connection.execute(f"PRAGMA busy_timeout = {RESTART_WAIT_MS}")
                    try:
                        connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                    finally:
                        connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            except sqlite3.Error:
                pass  # the next one will try again
            finally:
                self._checkpointing = False

        self._checkpointer.submit(checkpoint)

    # migrations, raw SQL, the SQLAlchemy engine

    async def run_with_connection(self, fn: Callable[[Connection], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(
            self._writer, self._with_connection, fn
        )

    def _with_connection(self, fn: Callable[[Connection], T]) -> T:
        if self.memory:
            shared = self._thread_connection()
            # StaticPool over our one connection; never disposed (that would close it).
            engine = create_sync_engine(
                "sqlite://", creator=lambda: shared, poolclass=StaticPool, **self._engine_kwargs
            )
            drive_sqlite_transactions(engine, connect=False)
            with engine.begin() as conn:
                return fn(conn)
        engine = create_sync_engine(
            "sqlite://", creator=self._connect_fresh, poolclass=NullPool, **self._engine_kwargs
        )
        drive_sqlite_transactions(engine, connect=False)
        try:
            with engine.begin() as conn:
                return fn(conn)
        finally:
            engine.dispose()

    def _connect_fresh(self) -> sqlite3.Connection:
        # Not tracked in self._connections: the migration engine closes it.
        kwargs = {"check_same_thread": False, **self._connect_args, "isolation_level": None}
        connection = sqlite3.connect(self.path, **kwargs)
        _set_pragmas(connection, SQLITE_BUSY_TIMEOUT_MS)
        return connection

    async def execute_sql(self, statement: str, params: Mapping[str, Any] | None = None) -> None:
        def body(tx: Tx) -> None:
            tx.execute(statement, params)

        await asyncio.get_running_loop().run_in_executor(
            self._writer, self._run_threaded, body, Mode.WRITE
        )

    @property
    def engine(self) -> AsyncEngine:
        """A SQLAlchemy async engine (aiosqlite) on the same file, created on first use.

        The repository does not use it; it is there for ad-hoc SQL and older callers.
        """
        if self.memory:
            raise RuntimeError("an in-memory SQLite database has no second engine")
        if self._engine is None:
            kwargs = {k: v for k, v in self._engine_kwargs.items() if k != "connect_args"}
            from sqlalchemy.ext.asyncio import create_async_engine

            engine = create_async_engine(normalize_url(self.url), **kwargs)
            drive_sqlite_transactions(engine.sync_engine)
            self._engine = engine
        return self._engine

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._shutdown)
        if self._engine is not None:
            await self._engine.dispose()

    def _shutdown(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.shutdown(wait=True)
        if self._checkpoint_connection is not None:
            self._checkpoint_connection.close()
            self._checkpoint_connection = None
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        with self._inline_lock, self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
            self._inline = None
