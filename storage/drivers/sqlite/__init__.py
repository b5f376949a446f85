"""SQLite, the embedded default, driven through the standard library's ``sqlite3``.

``sqlite:///path``; ``sqlite+aiosqlite:///path``, the documented default, is accepted and means
the same file. Not aiosqlite and not SQLAlchemy's execution layer: a thread hop per statement
cost more than our transactions themselves (the figures are in :mod:`.database`). The driver
in four rooms:

- :mod:`.database`: :class:`SQLiteDatabase`, which runs each transaction inline on the event
  loop when the lock is free, else on a writer thread or a reader pool, and checkpoints the WAL
  on a thread of its own;
- :mod:`.connections`: the settings every connection runs under (``SQLITE_SYNCHRONOUS``,
  ``SQLITE_DURABLE_SYNCHRONOUS``, ``CHECKPOINT_EVERY``, …: assign them there) and one
  transaction on one connection;
- :mod:`.formats`: values bound and read back as SQLAlchemy's SQLite types store them (no
  SQLAlchemy import: the fast read path, :mod:`storage.reads`, uses it too);
- :mod:`.engines`: SQLAlchemy engines on the same file, for migrations and ad-hoc SQL.

Names are imported from their modules on first use: importing :mod:`.formats` must not
import SQLAlchemy (which :mod:`.database` does).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from storage.drivers.sqlite.database import SQLiteDatabase
    from storage.drivers.sqlite.engines import READ_ONLY, drive_sqlite_transactions
    from storage.drivers.sqlite.formats import SQLITE_CONVERTERS, bound_params, sqlite_datetime

_HOMES = {
    "SQLiteDatabase": "storage.drivers.sqlite.database",
    "READ_ONLY": "storage.drivers.sqlite.engines",
    "drive_sqlite_transactions": "storage.drivers.sqlite.engines",
    "SQLITE_CONVERTERS": "storage.drivers.sqlite.formats",
    "bound_params": "storage.drivers.sqlite.formats",
    "sqlite_datetime": "storage.drivers.sqlite.formats",
}

__all__ = [
    "READ_ONLY",
    "SQLITE_CONVERTERS",
    "SQLiteDatabase",
    "bound_params",
    "drive_sqlite_transactions",
    "sqlite_datetime",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
