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

from storage.drivers.pg_commits import transaction_begins
from storage.drivers.postgres import (
    NO_STATEMENT_CACHE,
    PostgresDatabase,
    direct_pool,
    relax_commits,
)
from storage.drivers.protocol import Database
from storage.drivers.sqlite.database import SQLiteDatabase
from storage.drivers.sqlite.engines import drive_sqlite_transactions
from storage.urls import normalize_url

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///approval-bot.db"


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"


def open_database(
    url: str, *, sqlite_inline: bool = True, statement_cache: bool = True, **engine_kwargs: Any
) -> Database:
    """The :class:`Database` for a URL. ``engine_kwargs`` go to SQLAlchemy's engines.

    On SQLite those are the engines used for migrations and :attr:`Database.engine`;
    ``connect_args`` also reach ``sqlite3.connect`` for the repository's own connections.
    ``statement_cache=False`` (PostgreSQL behind a transaction-mode pooler such as PgBouncer,
    the ``database_statement_cache`` key): asyncpg's connections keep no prepared statements
    and no session setting; each transaction sets its commit level with its BEGIN. SQLite
    ignores it.
    """
    parsed = make_url(normalize_url(url))
    if parsed.get_backend_name() == "sqlite":
        return SQLiteDatabase(url, inline=sqlite_inline, **engine_kwargs)
    if not statement_cache:
        connect_args = {**engine_kwargs.get("connect_args", {}), **NO_STATEMENT_CACHE}
        engine_kwargs = {**engine_kwargs, "connect_args": connect_args}
    engine = create_engine(url, session_levels=statement_cache, **engine_kwargs)
    return PostgresDatabase(
        engine,
        reconnect=lambda: create_engine(url, session_levels=statement_cache, **engine_kwargs),
        direct=direct_pool(engine, engine_kwargs, session_levels=statement_cache),
        begins=None if statement_cache else transaction_begins(),
    )


def create_engine(url: str, *, session_levels: bool = True, **kwargs: Any) -> AsyncEngine:
    """A SQLAlchemy async engine (aiosqlite or asyncpg) set up like the repository's own.
    ``session_levels=False``: PostgreSQL's sessions are a pooler's, never set (relax_commits)."""
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(normalize_url(url), **kwargs)
    if is_sqlite(engine):
        drive_sqlite_transactions(engine.sync_engine)
    else:
        relax_commits(engine, session_levels=session_levels)
    return engine
