"""Opening a database by URL: which driver runs a URL's transactions, and engines like ours.

Owns no state. ``sqlite:`` URLs open a :class:`~storage.drivers.sqlite.SQLiteDatabase` (the
embedded default: on the event loop when the lock is free, else on threads; see
:mod:`storage.drivers.sqlite` for the measurements behind it), ``postgresql:`` URLs a
:class:`~storage.drivers.postgres.PostgresDatabase` (asyncpg through SQLAlchemy's async
engine). URLs are checked and normalized in :mod:`storage.urls`.

The SQLite settings (``SQLITE_SYNCHRONOUS``, ``SQLITE_BUSY_TIMEOUT_MS``, ...) are read where
they are used: assign them on :mod:`storage.drivers.sqlite.connections`, not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from storage.drivers.postgres import PostgresDatabase, direct_pool, relax_commits
from storage.drivers.protocol import Database
from storage.drivers.sqlite.database import SQLiteDatabase
from storage.drivers.sqlite.engines import drive_sqlite_transactions
from storage.urls import normalize_url

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///approval-bot.db"


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
    engine = create_engine(url, **engine_kwargs)
    return PostgresDatabase(
        engine,
        reconnect=lambda: create_engine(url, **engine_kwargs),
        direct=direct_pool(engine, engine_kwargs),
    )


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """A SQLAlchemy async engine (aiosqlite or asyncpg) set up like the repository's own."""
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(normalize_url(url), **kwargs)
    if is_sqlite(engine):
        drive_sqlite_transactions(engine.sync_engine)
    else:
        relax_commits(engine)
    return engine
