"""How each database is driven: one transaction body, run in about one step per database.

The repository writes every transaction once, as a plain synchronous function over a
:class:`Tx` (a handful of portable SQL statements with ``:name`` parameters; the contract is
in :mod:`storage.protocol`). A :class:`Database` runs that function in one transaction:
:class:`~storage.sqlite.SQLiteDatabase` (:mod:`storage.sqlite`, the embedded default: on the
event loop when the lock is free, else on threads; see there for the measurements behind it)
or :class:`~storage.postgres.PostgresDatabase` (:mod:`storage.postgres`, asyncpg through
SQLAlchemy's async engine). This module is the one the rest of the code imports: it picks the
database for a URL and re-exports the names of both drivers.

Inside :func:`storage.limits.time_limit` (acknowledgement paths) both honour a deadline:
the threaded SQLite attempt waits for the lock only until then, PostgreSQL sets
``lock_timeout``/``statement_timeout``; past it, :class:`~storage.limits.DatabaseBusy`.

The SQLite settings (``SQLITE_SYNCHRONOUS``, ``SQLITE_BUSY_TIMEOUT_MS``, ...) are read where
they are used: assign them on :mod:`storage.sqlite`, not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from storage.postgres import PG_TIMEOUTS, PostgresDatabase, dollar_params
from storage.protocol import Database, Mode, Tx
from storage.sqlite import (
    CHECKPOINT_EVERY,
    READ_ONLY,
    RESTART_WAIT_MS,
    SQLITE_BUSY_TIMEOUT_MS,
    SQLITE_CONVERTERS,
    SQLITE_READER_THREADS,
    SQLiteDatabase,
    drive_sqlite_transactions,
    sqlite_datetime,
)
from storage.urls import normalize_url
from storage.values import json_text  # JSON column text, for the repository

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "CHECKPOINT_EVERY",
    "DEFAULT_DATABASE_URL",
    "PG_TIMEOUTS",
    "READ_ONLY",
    "RESTART_WAIT_MS",
    "SQLITE_BUSY_TIMEOUT_MS",
    "SQLITE_CONVERTERS",
    "SQLITE_READER_THREADS",
    "Database",
    "Mode",
    "PostgresDatabase",
    "SQLiteDatabase",
    "Tx",
    "create_engine",
    "dollar_params",
    "is_sqlite",
    "json_text",
    "open_database",
    "sqlite_datetime",
]

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///approval-bot.db"


# -- URLs (checked and normalized in storage.urls) -----------------------------------------


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"


def open_database(url: str, *, sqlite_inline: bool = True, **engine_kwargs: Any) -> Database:
    """The :class:`Database` for a URL. ``engine_kwargs`` go to SQLAlchemy's engines.

    On SQLite those are the engines used for migrations and :attr:`Database.engine`;
    ``connect_args`` also reach ``sqlite3.connect`` for the repository's own connections.
    """
    parsed = make_url(normalize_url(url))
    if parsed.get_backend_name() == "sqlite":
        return SQLiteDatabase(url, inline=sqlite_inline, **engine_kwargs)
    return PostgresDatabase(
        create_engine(url, **engine_kwargs), reconnect=lambda: create_engine(url, **engine_kwargs)
    )


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """A SQLAlchemy async engine (aiosqlite or asyncpg) set up like the repository's own."""
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(normalize_url(url), **kwargs)
    if is_sqlite(engine):
        drive_sqlite_transactions(engine.sync_engine)
    return engine
