"""Our ``sqlite3`` connections: the settings every one runs under, and one transaction on one.

Owns no durable state; it is how every transaction of the repository on SQLite is begun,
bound, committed and rolled back (:func:`_transact`), whichever thread runs it
(:mod:`.database` decides that). The settings below are module attributes read at each use,
here and in :mod:`.database`: assign them on this module (bench/ measures both synchronous
levels, and wraps :func:`_transact` to time or trace transactions). Driver errors are raised
as the SQLAlchemy exceptions (``IntegrityError``, ``OperationalError``, …) they were when
SQLAlchemy drove SQLite, so callers catch the same types on both databases.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.exc import DBAPIError

from storage.drivers.protocol import Mode, T, Tx
from storage.drivers.sqlite.formats import SQLITE_CONVERTERS, bound_params

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


def set_pragmas(connection: Any, busy_timeout_ms: int) -> None:
    """Our PRAGMAs, on a connection just opened (ours, or one SQLAlchemy opened)."""
    cursor = connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute(f"PRAGMA synchronous = {SQLITE_SYNCHRONOUS}")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def database_error(exc: sqlite3.Error, statement: str | None, params: Any) -> DBAPIError:
    """The SQLAlchemy exception (IntegrityError, OperationalError…) SQLAlchemy would raise."""
    error = DBAPIError.instance(statement, params, exc, sqlite3.Error)
    assert isinstance(error, DBAPIError)  # an sqlite3.Error always becomes one
    return error


def is_busy(exc: BaseException) -> bool:
    """Whether a failure is SQLite's "the database is locked" (another writer holds it)."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlite_errorcode", None)
    if not isinstance(orig, sqlite3.OperationalError) or code is None:
        return False
    return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class SQLiteTx:
    """The statements of one transaction on one connection (:class:`~storage.drivers.Tx`)."""

    dialect: str = "sqlite"
    converters: Mapping[str, Callable[[Any], Any]] = SQLITE_CONVERTERS
    __slots__ = ("_connection",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        try:
            return self._connection.execute(sql, bound_params(params)).rowcount
        except sqlite3.Error as exc:
            raise database_error(exc, sql, params) from exc

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        try:
            self._connection.executemany(sql, [bound_params(row) for row in rows])
        except sqlite3.Error as exc:
            raise database_error(exc, sql, rows) from exc

    def defer(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.executemany(sql, rows)  # in process: nothing to save by waiting

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Any] | None:
        # fetchall, not fetchone: a RETURNING statement must run to its end before COMMIT.
        try:
            rows = self._connection.execute(sql, bound_params(params)).fetchall()
        except sqlite3.Error as exc:
            raise database_error(exc, sql, params) from exc
        return rows[0] if rows else None

    def all(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Sequence[Any]]:
        try:
            return self._connection.execute(sql, bound_params(params)).fetchall()
        except sqlite3.Error as exc:
            raise database_error(exc, sql, params) from exc


def raises_synchronous() -> bool:
    """Whether a durable commit syncs more than the connections' own setting does."""
    return (
        _SYNCHRONOUS_LEVELS[SQLITE_DURABLE_SYNCHRONOUS.upper()]
        > _SYNCHRONOUS_LEVELS[SQLITE_SYNCHRONOUS.upper()]
    )


def _transact(
    connection: sqlite3.Connection, body: Callable[[Tx], T], mode: Mode, durable: bool = False
) -> T:
    """Run ``body`` in one transaction on ``connection``: ``BEGIN IMMEDIATE`` for writes (the
    write lock up front), ``BEGIN`` for reads, none for one-statement reads; committed when it
    returns, rolled back when it raises. Looked up on this module at each call (bench/)."""
    if durable and raises_synchronous():
        # PRAGMA synchronous is the connection's and applies to its next commits: raised
        # before BEGIN for this one transaction, put back after its COMMIT (or ROLLBACK).
        connection.execute(f"PRAGMA synchronous = {SQLITE_DURABLE_SYNCHRONOUS}")
        try:
            return _transact(connection, body, mode)
        finally:
            connection.execute(f"PRAGMA synchronous = {SQLITE_SYNCHRONOUS}")
    tx = SQLiteTx(connection)
    if mode is Mode.READ_ONE:
        return body(tx)
    begin = "BEGIN IMMEDIATE" if mode is Mode.WRITE else "BEGIN"
    try:
        connection.execute(begin)
    except sqlite3.Error as exc:
        raise database_error(exc, begin, None) from exc
    try:
        result = body(tx)
        connection.execute("COMMIT")
    except BaseException as exc:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise database_error(exc, "COMMIT", None) from exc
        raise
    return result
