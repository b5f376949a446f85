"""Where each SQLite transaction runs: inline on the event loop when the lock is free, else on
threads (:class:`SQLiteDatabase`, the embedded default), and the WAL's checkpoints.

Owns the connections of one database file and the threads that use them, not its rows (the
stores own those).
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
- Values are stored exactly as SQLAlchemy's SQLite types store them (:mod:`.formats`), and
  driver errors are raised as the SQLAlchemy exceptions they were before (:mod:`.connections`,
  which also holds the settings named here and runs each transaction on its connection).

Inside :func:`storage.limits.time_limit` (acknowledgement paths) the threaded attempt waits for
the lock only until the deadline; past it, :class:`~storage.limits.DatabaseBusy`.

SQLite needs 3.35 or newer (``RETURNING``, 2021).
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError

from storage.drivers.protocol import Mode, T, Tx
from storage.drivers.sqlite import connections, engines
from storage.limits import DatabaseBusy, current_deadline, run_by_deadline

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

# The settings (checkpoint pacing, busy timeout, threads) and the transaction itself are
# looked up on storage.drivers.sqlite.connections at each use: bench/ assigns and wraps them.


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
                connections.SQLITE_READER_THREADS, thread_name_prefix="approval-bot-sqlite-read"
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
        self, busy_timeout_ms: int = connections.SQLITE_BUSY_TIMEOUT_MS, *, tracked: bool = True
    ) -> sqlite3.Connection:
        kwargs = {"check_same_thread": False, **self._connect_args, "isolation_level": None}
        connection = sqlite3.connect(self.path, **kwargs)
        connections.set_pragmas(connection, busy_timeout_ms)
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
        if mode is Mode.WRITE_ONE:  # one statement is no cheaper in-process than several
            mode = Mode.WRITE
        if inline and self._inline is not None:
            # Still a scheduling point, as any I/O would be (4.5 us): without it a burst of
            # work (100 resumes after 100 clicks) runs in long stretches and Slack's acks wait
            # behind it; measured, 100 concurrent clicks were acked in 300-450 ms instead of
            # 120-150 ms.
            await asyncio.sleep(0)
            # A durable commit fsyncs: inline only while nothing else needs the loop
            # (``durable_inline``), else on the writer thread (module docstring).
            off_loop = durable and connections.raises_synchronous() and not self.durable_inline()
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
            and next(self._writes) % connections.CHECKPOINT_EVERY == 0
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
                return connections._transact(connection, body, mode, durable)
            except DBAPIError as exc:
                if connections.is_busy(exc):
                    raise DatabaseBusy("the database is locked by another writer") from exc
                raise
            finally:
                connection.execute(f"PRAGMA busy_timeout = {connections.SQLITE_BUSY_TIMEOUT_MS}")

        return await run_by_deadline(executor, attempt, deadline)

    def _run_inline(self, body: Callable[[Tx], T], mode: Mode, durable: bool = False) -> T:
        assert self._inline is not None
        try:
            result = connections._transact(self._inline, body, mode, durable)
        except DBAPIError as exc:
            if connections.is_busy(exc):
                raise _Busy from exc
            raise
        return result

    def _run_threaded(self, body: Callable[[Tx], T], mode: Mode, durable: bool = False) -> T:
        return connections._transact(self._thread_connection(), body, mode, durable)

    def run_blocking(self, body: Callable[[Tx], T], mode: Mode) -> T:
        """Run ``body`` and wait for its commit without awaiting: for code on the event loop's
        thread that cannot await (a sync call inside an async tool). Rare by design: it
        blocks the loop for one transaction."""
        if mode is Mode.WRITE_ONE:
            mode = Mode.WRITE
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
                if copied < frames and frames > connections.WAL_RESTART_FRAMES:
                    # Wait for readers only briefly: writers queue behind a RESTART.
                    connection.execute(f"PRAGMA busy_timeout = {connections.RESTART_WAIT_MS}")
                    try:
                        connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                    finally:
                        normal_wait = connections.SQLITE_BUSY_TIMEOUT_MS
                        connection.execute(f"PRAGMA busy_timeout = {normal_wait}")
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
            return engines.with_sqlalchemy_connection(
                fn, lambda: shared, shared=True, engine_kwargs=self._engine_kwargs
            )
        return engines.with_sqlalchemy_connection(
            fn, self._connect_fresh, shared=False, engine_kwargs=self._engine_kwargs
        )

    def _connect_fresh(self) -> sqlite3.Connection:
        # Not tracked in self._connections: the migration engine closes it.
        kwargs = {"check_same_thread": False, **self._connect_args, "isolation_level": None}
        connection = sqlite3.connect(self.path, **kwargs)
        connections.set_pragmas(connection, connections.SQLITE_BUSY_TIMEOUT_MS)
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
            self._engine = engines.async_engine(self.url, **kwargs)
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
