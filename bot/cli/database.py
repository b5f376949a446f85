"""``db upgrade``, and the check that commands about what is recorded make no database."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from bot.cli.exits import EXIT_OK
from bot.cli.output import safe_url

if TYPE_CHECKING:
    from bot.config import Config
    from storage.repository import Repository

# Commands about what is already recorded: on a database that does not exist they would
# create an empty one (and migrate it) only to say there is nothing, so they say so instead.
NEEDS_A_DATABASE = {
    ("approvals", "list"),
    ("approvals", "show"),
    ("approvals", "decide"),
    ("approvals", "expire"),
    ("runs", "show"),
    ("runs", "cancel"),
    ("runs", "recover"),
    ("waits", "list"),
    ("waits", "complete"),
    ("grants", "list"),
    ("grants", "revoke"),
    ("audit", "export"),
    ("mcp", ""),  # the database of a running serve: it posts the cards
}


def missing_database_file(database_url: str) -> str | None:
    """The path of a SQLite database file that does not exist or is empty, as said to the
    user, or None (it holds a database, it is in memory, or the database is a server:
    PostgreSQL databases are made by their admins)."""
    from storage.urls import plain_sqlite_path

    path = plain_sqlite_path(database_url)
    if path is None:  # any other URL: SQLAlchemy's parser says what it names
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(database_url)
        except ArgumentError:
            return None  # Repository.open says what is wrong with it
        if url.get_backend_name() != "sqlite" or url.query.get("mode") == "memory":
            return None
        path = url.database
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    if not os.path.isdir(os.path.dirname(path) or "."):
        return None  # a missing folder is Repository.open's error, which names the folder
    if _holds_nothing(path):
        return f"{path} (the file is empty)"
    if os.path.exists(path):
        return None
    return path


def _holds_nothing(path: str) -> bool:
    """An empty file (``touch bot.db``) with no write-ahead log beside it: SQLite would take it
    as a new database, and migrating it would write the whole schema only to list nothing."""
    try:
        if os.path.getsize(path) != 0:
            return False
    except OSError:
        return False  # missing (the caller says so) or unreadable (Repository.open says why)
    try:
        return os.path.getsize(f"{path}-wal") == 0
    except OSError:
        return True


async def db_upgrade(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    # Repository.open has already migrated; say so plainly.
    print(f"database is up to date ({safe_url(config.database_url)})")
    return EXIT_OK
