"""Engine construction: the one place that knows how each database must be driven.

SQLite is the embedded default. Its Python driver opens transactions lazily and in DEFERRED
mode, so two writers can both read a row and then fail to upgrade their locks; we take over
BEGIN ourselves and take the write lock up front (``BEGIN IMMEDIATE``) for every write
transaction, with a busy timeout so concurrent writers queue instead of failing. WAL lets
readers carry on meanwhile. PostgreSQL needs none of this: its row locks and the conditional
UPDATEs in the repository decide races.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///approval-bot.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000

# Execution option set by read-only transactions, which need no write lock.
READ_ONLY = "approval_bot_read_only"


def normalize_url(url: str) -> str:
    """Accept the URLs people paste (``postgresql://``, ``sqlite:///``) and pick async drivers."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite" and parsed.drivername != "sqlite+aiosqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    elif backend in ("postgresql", "postgres") and parsed.drivername != "postgresql+asyncpg":
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif backend not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported database {backend!r}: use sqlite or postgresql")
    return parsed.render_as_string(hide_password=False)


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    engine = create_async_engine(normalize_url(url), **kwargs)
    if is_sqlite(engine):
        _drive_sqlite_transactions(engine)
    return engine


def _drive_sqlite_transactions(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Autocommit at the driver level: SQLAlchemy's "begin" hook below emits BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
