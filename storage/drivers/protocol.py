"""The contract between the stores and the databases: a transaction body over a :class:`Tx`.

The repository writes every transaction once, as a plain synchronous function over a
:class:`Tx` (a handful of portable SQL statements with ``:name`` parameters, from
:mod:`storage.sql`). A :class:`Database` runs that function in one transaction. Owns no state:
the drivers (:mod:`storage.drivers.sqlite`, :mod:`storage.drivers.postgres`) import this
module and :mod:`storage.drivers.opening` imports them, so it lives apart from all of them. It
imports no SQLAlchemy at run time (the fast read path imports it, through storage.migrate).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")


class Mode(enum.Enum):
    """What a transaction does, which decides how it is begun."""

    WRITE = "write"  # BEGIN IMMEDIATE on SQLite: the write lock up front
    READ = "read"  # several statements that must see one snapshot
    READ_ONE = "read_one"  # one statement: no BEGIN/COMMIT round trips
    # One statement that writes (with the rows it carries, Tx.defer): PostgreSQL's direct
    # path sends it alone, committed on its own (no BEGIN/COMMIT round trips), so the body
    # cannot roll it back by raising after it; elsewhere a WRITE. For the hot transactions
    # PostgreSQL can do in one statement (data-modifying CTEs), which SQLite cannot.
    WRITE_ONE = "write_one"


class Tx(Protocol):
    """The statements of one transaction. SQL uses ``:name`` parameters.

    Parameters are plain Python values: ``datetime`` (naive UTC), ``str``, ``int``, ``bool``,
    ``None``; JSON columns take ``json.dumps`` text (:func:`storage.values.json_text`).
    Strings are stored as :mod:`storage.values` says (NUL and lone surrogates replaced), on
    both databases.
    """

    dialect: str
    # Converters from stored values (never None) to Python values by column kind ("json",
    # "datetime", "bool"); empty where the driver already returns Python values (PostgreSQL).
    converters: Mapping[str, Callable[[Any], Any]]

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        """Run a statement; the number of rows it changed."""
        ...

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def defer(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """``executemany`` of a plain ``INSERT INTO t (...) VALUES (...)`` whose outcome the
        body never reads, into a table no later statement of the transaction reads (foreign
        keys aside: they are checked at the end of the statement that carries the rows). A
        driver may send the rows with the transaction's next statement, and does so before
        COMMIT at the latest; an error of theirs surfaces there. SQLite runs them at once;
        the direct PostgreSQL path sends them as data-modifying CTEs of the next statement
        (:mod:`storage.drivers.pg_direct`), which saves their round trips."""
        ...

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> Sequence[Any] | None:
        """The first row of a query (or of ``... RETURNING``), None when there is none."""
        ...

    def all(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Sequence[Any]]: ...


class Database(Protocol):
    """Runs transaction bodies; one per configured URL."""

    dialect: str

    async def run(
        self, body: Callable[[Tx], T], mode: Mode, *, inline: bool = True, durable: bool = False
    ) -> T:
        """Run ``body`` in one transaction; committed when it returns, rolled back if it raises.

        ``inline=False`` marks bodies that may scan many rows: they never run on the caller's
        thread. The body may be run twice (SQLite, lock busy): it must not change its inputs.
        ``durable=True``: the commit is on disk when this returns, whatever the database's
        setting for other commits (SQLite: ``PRAGMA synchronous = FULL`` for this commit;
        PostgreSQL: never an asynchronous commit). For the ``executing`` record, which must
        outlive a power cut before the tool runs.
        """
        ...

    def run_blocking(self, body: Callable[[Tx], T], mode: Mode) -> T:
        """Run ``body`` in one transaction from a thread that cannot await, waiting for it."""
        ...

    async def run_with_connection(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` with a SQLAlchemy connection in a transaction (Alembic)."""
        ...

    async def execute_sql(self, statement: str, params: Mapping[str, Any] | None = None) -> None:
        """Run one raw SQL statement in its own transaction (tests, maintenance)."""
        ...

    @property
    def engine(self) -> AsyncEngine: ...

    async def close(self) -> None: ...
