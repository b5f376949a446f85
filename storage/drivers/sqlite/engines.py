"""SQLAlchemy engines on a SQLite file: for Alembic's migrations and for ad-hoc SQL.

Owns no state. The repository never goes through SQLAlchemy on SQLite (see :mod:`.database`
for why); migrations do, and :attr:`~storage.drivers.Database.engine` offers an async engine
for ad-hoc SQL. Both are set up here to behave like our own connections: the same PRAGMAs
(:func:`~.connections.set_pragmas`), and ``BEGIN IMMEDIATE`` for every write, so a migration
takes the write lock up front as every transaction of ours does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool, StaticPool

from storage.drivers.protocol import T
from storage.drivers.sqlite import connections
from storage.urls import normalize_url

if TYPE_CHECKING:
    # Imported when an engine is first asked for: the repository never needs one on SQLite,
    # and a command that only reads should not wait for SQLAlchemy's async layer.
    from sqlalchemy.ext.asyncio import AsyncEngine

# Execution option set by read-only transactions of the async engine, which need no write lock.
READ_ONLY = "approval_bot_read_only"


def drive_sqlite_transactions(engine: Any, connect: bool = True) -> None:
    """SQLAlchemy engines on SQLite: our PRAGMAs, and BEGIN IMMEDIATE for writes."""
    if connect:

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Autocommit at the driver level: the "begin" hook below emits BEGIN itself.
            dbapi_connection.isolation_level = None
            connections.set_pragmas(dbapi_connection, connections.SQLITE_BUSY_TIMEOUT_MS)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def with_sqlalchemy_connection(
    fn: Callable[[Connection], T],
    creator: Callable[[], Any],
    *,
    shared: bool,
    engine_kwargs: dict[str, Any],
) -> T:
    """Run ``fn`` with a SQLAlchemy connection, in one transaction, over a ``sqlite3``
    connection from ``creator`` (already set up: no connect hook).

    ``shared``: ``creator`` always returns the same connection (an in-memory database, whose
    one connection is the database): a StaticPool over it, never disposed (that would close
    it). Otherwise the connection is the engine's, closed with it.
    """
    if shared:
        engine = create_sync_engine(
            "sqlite://", creator=creator, poolclass=StaticPool, **engine_kwargs
        )
        drive_sqlite_transactions(engine, connect=False)
        with engine.begin() as conn:
            return fn(conn)
    engine = create_sync_engine("sqlite://", creator=creator, poolclass=NullPool, **engine_kwargs)
    drive_sqlite_transactions(engine, connect=False)
    try:
        with engine.begin() as conn:
            return fn(conn)
    finally:
        engine.dispose()


def async_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """A SQLAlchemy async engine (aiosqlite) on the file of ``url``, set up as ours are."""
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(normalize_url(url), **kwargs)
    drive_sqlite_transactions(engine.sync_engine)
    return engine
