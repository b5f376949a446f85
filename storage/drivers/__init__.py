"""The databases: how a transaction body runs on SQLite or PostgreSQL, and which one a URL opens.

The stores write every transaction once, as a plain synchronous function over a :class:`Tx`;
a :class:`Database` runs it in one transaction (the contract: :mod:`.protocol`). Owns no rows;
it owns the connections, threads and engines, and each database's durability and locking:

- :mod:`.protocol`: :class:`Tx`, :class:`Database`, :class:`Mode` (no SQLAlchemy at run time);
- :mod:`.sqlite`: the embedded default, through the standard library's ``sqlite3``: inline on
  the event loop when the lock is free, else on threads;
- :mod:`.postgres`: asyncpg, directly for the transactions (:mod:`.pg_direct`), through
  SQLAlchemy's async engine for migrations;
- :mod:`.opening`: :func:`open_database`, which picks the driver for a URL.

Inside :func:`storage.limits.time_limit` (acknowledgement paths) both honour a deadline: the
threaded SQLite attempt waits for the lock only until then, PostgreSQL sets
``lock_timeout``/``statement_timeout``; past it, :class:`~storage.limits.DatabaseBusy`.

The protocol's names are imported at once; the drivers' on first use, so that what needs only
the protocol (storage.migrate, on the read-only commands' path) imports no SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from storage.drivers.protocol import Database, Mode, Tx

if TYPE_CHECKING:
    from storage.drivers.opening import create_engine, is_sqlite, open_database
    from storage.drivers.postgres import PostgresDatabase
    from storage.drivers.sqlite import SQLiteDatabase

_HOMES = {
    "create_engine": "storage.drivers.opening",
    "is_sqlite": "storage.drivers.opening",
    "open_database": "storage.drivers.opening",
    "PostgresDatabase": "storage.drivers.postgres",
    "SQLiteDatabase": "storage.drivers.sqlite.database",
}

__all__ = [
    "Database",
    "Mode",
    "PostgresDatabase",
    "SQLiteDatabase",
    "Tx",
    "create_engine",
    "is_sqlite",
    "open_database",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
