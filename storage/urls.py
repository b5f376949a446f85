"""Database URLs: which ones approval-bot accepts, and what a failure to open one means.

A URL is checked twice, for different things: its scheme and shape when the configuration is
loaded (:func:`check_database_url`, before anything connects), and whether the database is
there when it is opened (:func:`reporting_unavailable`). Either way a person gets one sentence
that names the URL (password hidden), never a driver's traceback.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

EXAMPLES = "sqlite:///path/to/approval-bot.db or postgresql://user@host/database"
# What a PostgreSQL URL may say after "?": libpq's sslmode (asyncpg calls it ssl), whose
# values both drivers share, and libpq's host, which may name the directory of the server's
# Unix socket (``?host=/var/run/postgresql``: no TCP when the database is on the same machine).
# Anything else reached asyncpg as an unknown argument (a TypeError traceback at the first
# connection).
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
SSL_OPTIONS = ("sslmode", "ssl")
POSTGRES_OPTIONS = (*SSL_OPTIONS, "host")
# user:password@ in a URL too broken to parse: the password is still hidden.
_PASSWORD = re.compile(r"(://[^/?#@:]*:)[^@/?#]*@")
# A SQLite URL that names a file and nothing else (the common case): read without SQLAlchemy,
# whose import is most of a read-only command's start-up. No query, escapes, user or port:
# anything else goes through SQLAlchemy's parser (tests/storage/test_cli_reads.py compares the two).
_PLAIN_SQLITE = re.compile(r"sqlite(?:\+[A-Za-z0-9_]+)?:///([^?#%@:]+)")


class DatabaseUnavailable(Exception):
    """A well-formed database URL whose database could not be opened.

    Unreachable or unknown host, a PostgreSQL database that does not exist or refuses us, a
    SQLite file that cannot be created: the message says which, in one line.
    """


def parse_database_url(url: str) -> URL:
    """The URL, when its scheme and shape are ones we support; ValueError (one sentence) if not.

    Accepted: ``sqlite://`` URLs (any driver name; the file path is not checked here) and
    ``postgresql://`` or ``postgres://`` URLs (any driver name; asyncpg is used).
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ValueError(f"{safe_url(url)} is not a database URL; write {EXAMPLES}") from None
    backend = parsed.get_backend_name()
    shown = safe_url(parsed)
    if backend == "sqlite":
        if parsed.host or parsed.port or parsed.username or parsed.password:
            raise ValueError(
                f"{shown}: a SQLite URL names a file, not a server; write "
                "sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
    elif backend in ("postgresql", "postgres"):
        if parsed.port is not None and not 0 < parsed.port < 65536:
            raise ValueError(f"{shown}: port {parsed.port} is not a TCP port (1-65535)")
        for option, value in parsed.query.items():
            if option not in POSTGRES_OPTIONS:
                raise ValueError(
                    f"{shown}: unknown option {option!r}; a PostgreSQL URL may only give "
                    f"sslmode ({', '.join(SSL_MODES)}) and host (a server, or the directory "
                    "of its Unix socket: ?host=/var/run/postgresql)"
                )
            _check_postgres_option(shown, option, value)
    else:
        raise ValueError(
            f"{shown}: {backend!r} databases are not supported; use SQLite or PostgreSQL "
            f"({EXAMPLES})"
        )
    return parsed


def _check_postgres_option(shown: str, option: str, value: str | tuple[str, ...]) -> None:
    if isinstance(value, tuple):  # the option given twice
        raise ValueError(f"{shown}: {option} is given more than once; give it once")
    if option in SSL_OPTIONS and value not in SSL_MODES:
        raise ValueError(f"{shown}: {option} must be one of {', '.join(SSL_MODES)}")
    if option == "host" and (not value or "," in value or value.strip() != value):
        raise ValueError(
            f"{shown}: host must name one server, or the directory of its Unix socket "
            "(?host=/var/run/postgresql)"
        )


def check_database_url(url: str) -> None:
    """Raise ValueError, with one sentence for people, unless the URL is one we can use."""
    if plain_sqlite_path(url) is None:
        parse_database_url(url)


def plain_sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL that names a file and nothing else (``sqlite:///x.db``, any
    driver), as SQLAlchemy reads it; None for any other URL (``:memory:``, a query…)."""
    match = _PLAIN_SQLITE.fullmatch(url)
    return match[1] if match and match[1] != ":memory:" else None


def normalize_url(url: str) -> str:
    """Accept the URLs people paste (``postgresql://``, ``sqlite:///``) and pick async drivers.

    This is the URL of :attr:`storage.drivers.Database.engine` (a SQLAlchemy async engine); the
    repository itself drives SQLite through ``sqlite3`` whatever the driver named here.
    """
    parsed = parse_database_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.drivername != "sqlite+aiosqlite":
            parsed = parsed.set(drivername="sqlite+aiosqlite")
    else:
        if parsed.drivername != "postgresql+asyncpg":
            parsed = parsed.set(drivername="postgresql+asyncpg")
        if "sslmode" in parsed.query:
            query = dict(parsed.query)
            query["ssl"] = query.pop("sslmode")
            parsed = parsed.set(query=query)
    return parsed.render_as_string(hide_password=False)


def safe_url(url: str | URL) -> str:
    """The URL to show people: the password hidden."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except (ArgumentError, ValueError):
        return repr(_PASSWORD.sub(r"\1***@", str(url)))
    return parsed.render_as_string(hide_password=True)


@contextlib.contextmanager
def reporting_unavailable(url: str) -> Iterator[None]:
    """Turn a driver's failure to connect (or to create the schema) into DatabaseUnavailable."""
    from sqlalchemy.exc import DBAPIError

    try:
        yield
    except (OSError, sqlite3.Error, DBAPIError) as exc:
        raise DatabaseUnavailable(
            f"cannot open the database {safe_url(url)}: {describe_open_failure(url, exc)}"
        ) from exc


def describe_open_failure(url: str, exc: BaseException) -> str:
    """The driver's reason, in one line, with the likely fix where we know it."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DBAPIError

    original = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = str(original).strip().splitlines()
    reason = lines[0] if lines else "timed out" if isinstance(original, TimeoutError) else ""
    reason = reason or type(original).__name__
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return reason
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        folder = Path(parsed.database).expanduser().parent
        if not folder.is_dir():
            return f"{reason} (the folder {folder} does not exist)"
    return reason
