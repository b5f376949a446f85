"""The read-only commands' reads on SQLite, through the stdlib ``sqlite3`` alone.

Why this exists: ``approvals list``, ``runs show``, ``waits list``, ``grants list`` and
``audit export`` are run by people and scripts, often in a loop, and importing SQLAlchemy (the
engine, the ORM and the models) was most of their start-up (~0.3 s of ~0.9 s). These reads
need none of it: a file, a few SELECTs and plain rows. :class:`SQLiteReads` answers the few
repository methods those commands call, with the Repository's own statements and filters
(:mod:`storage.sql`: the same text, built by the same functions, so the two paths can never
select different rows) and the same values (bound and converted as the SQLite driver does,
:mod:`storage.drivers.sqlite.formats`, for the columns :mod:`storage.sql.columns` declares),
so the commands' code prints the same bytes on either (tests/storage/test_cli_reads.py runs
both on one seeded database and compares). Owns no state and writes nothing: the one write
among those commands, ``grants list`` auditing a grant's expiry, is left to the Repository
(:class:`NeedsRepository`).

It only ever reads a database whose schema is at this release's head: :func:`open_reads`
returns None for anything else (an older schema, a newer one, no ``alembic_version``, a file
it cannot open), and the command then goes through :class:`storage.repository.Repository` as
before, which migrates, warns or reports exactly as it always has. PostgreSQL always goes
that way (asyncpg through SQLAlchemy).

Rows are :class:`Row` objects: every column of the row as an attribute, like a detached
model instance but without the ORM.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from storage import migrate
from storage.drivers.sqlite.formats import SQLITE_CONVERTERS, bound_params
from storage.records import PendingFilter
from storage.sql.approvals import APPROVALS_FOR_RUN, pending_list_sql
from storage.sql.columns import (
    APPROVAL_COLUMNS,
    AUDIT_COLUMNS,
    GRANT_COLUMNS,
    HOLD_COLUMNS,
    RUN_COLUMNS,
    Columns,
)
from storage.sql.delegations import CHILDREN_OF_RUN
from storage.sql.events import AUDIT_PAGE, audit_trail_query
from storage.sql.grants import ANY_EXPIRED_UNNOTICED, grant_list_sql
from storage.sql.holds import HOLD_OF_RUN, run_list_sql
from storage.sql.people import names_sql
from storage.sql.runs import RUN_BY_ID
from storage.sql.waits import PENDING_WAITS

# As storage.drivers.sqlite.connections.SQLITE_BUSY_TIMEOUT_MS (not imported: that module
# imports SQLAlchemy): wait this long for a writer.
BUSY_TIMEOUT_MS = 30_000

# The columns whose stored values are converted, per table (as the Repository converts them:
# tests/storage/test_cli_reads.py checks them against the models).
_KINDS: dict[str, dict[str, str]] = {
    columns.table: dict(columns.kinds)
    for columns in (RUN_COLUMNS, APPROVAL_COLUMNS, AUDIT_COLUMNS, GRANT_COLUMNS, HOLD_COLUMNS)
}


class NeedsRepository(Exception):
    """The command has something to write after all (a grant's expiry to audit): it is run
    on the Repository instead, before it has printed anything."""


class Row:
    """One row, its columns as attributes (converted as the models' types convert them)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.__dict__.update(values)

    def __repr__(self) -> str:
        return f"Row({self.__dict__!r})"


@dataclass(frozen=True)
class ExportedRow:
    """An audit event as exported, as storage.records.ExportedEvent: it and its run's place."""

    event: Row
    team_id: str
    channel: str


def open_reads(path: str) -> SQLiteReads | None:
    """Reads of the SQLite file at ``path`` when its schema is this release's head, else None
    (the caller opens the Repository, which migrates or says what is wrong, as ever)."""
    heads = migrate.head_revisions()
    try:
        uri = f"file:{urllib.parse.quote(path)}?mode=rw"  # never creates the file
        connection = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error:
        return None
    try:
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        current = {str(r[0]) for r in connection.execute(migrate.CURRENT_REVISIONS)}
    except sqlite3.Error:  # no alembic_version table, not a database, locked…
        connection.close()
        return None
    if not heads or current != heads:
        connection.close()
        return None
    return SQLiteReads(connection)


class SQLiteReads:
    """The repository methods the read-only commands call, over one ``sqlite3`` connection."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    async def close(self) -> None:
        self.connection.close()

    async def get_run(self, run_id: str) -> Row | None:
        rows = self._rows(RUN_COLUMNS, RUN_BY_ID, {"id": run_id})
        return rows[0] if rows else None

    async def children_of(self, run_id: str) -> list[Row]:
        return self._rows(RUN_COLUMNS, CHILDREN_OF_RUN, {"id": run_id})

    async def approvals_for_run(self, run_id: str) -> list[Row]:
        return self._rows(APPROVAL_COLUMNS, APPROVALS_FOR_RUN, {"run_id": run_id})

    async def audit_trail(
        self, *, run_id: str | None = None, approval_id: str | None = None
    ) -> list[Row]:
        sql, params = audit_trail_query(run_id=run_id, approval_id=approval_id)
        return self._rows(AUDIT_COLUMNS, sql, params)

    async def list_pending(
        self, where: PendingFilter, *, now: datetime, limit: int = 20, offset: int = 0
    ) -> tuple[list[Row], int]:
        """As ``Repository.list_pending`` for a filter on kinds alone (``approvals list``)."""
        if where != PendingFilter(kinds=where.kinds):
            raise ValueError("the read path filters pending approvals by kind only")
        count_sql, count_params, page_sql, params = pending_list_sql(
            where, now=now, limit=limit, offset=offset
        )
        self.connection.execute("BEGIN")  # the count and the page of one snapshot
        try:
            (total,) = self.connection.execute(count_sql, bound_params(count_params)).fetchone()
            rows = self._rows(APPROVAL_COLUMNS, page_sql, params)
        finally:
            self.connection.execute("COMMIT")
        return rows, int(total)

    async def pending_waits(self, limit: int = 100) -> list[Row]:
        return self._rows(APPROVAL_COLUMNS, PENDING_WAITS, {"limit": limit})

    async def audit_page(
        self, *, since: datetime, until: datetime, after: int = 0, limit: int = 1000
    ) -> list[ExportedRow]:
        params = {"since": since, "until": until, "after": after, "limit": limit}
        width = len(AUDIT_COLUMNS.names)
        cursor = self.connection.execute(AUDIT_PAGE, bound_params(params))
        return [
            ExportedRow(_row(AUDIT_COLUMNS, row[:width]), row[width] or "", row[width + 1] or "")
            for row in cursor.fetchall()
        ]

    async def notice_expired_grants(self, *, now: datetime) -> list[Row]:
        """Nothing to notice, so nothing to write; else NeedsRepository (``grants list``
        audits each grant's expiry once, which is the Repository's to write)."""
        found = self.connection.execute(ANY_EXPIRED_UNNOTICED, bound_params({"now": now}))
        if found.fetchone() is not None:
            raise NeedsRepository("an expired grant's expiry is not audited yet")
        return []

    async def list_grants(
        self, *, now: datetime, live_only: bool = True, limit: int = 100
    ) -> list[Row]:
        sql, params = grant_list_sql(now=now, live_only=live_only, limit=limit)
        return self._rows(GRANT_COLUMNS, sql, params)

    async def names_of(self, user_ids: Sequence[str] | set[str]) -> dict[str, str]:
        wanted = sorted({u for u in user_ids if u})[:500]
        if not wanted:
            return {}
        sql, params = names_sql(wanted)
        cursor = self.connection.execute(sql, bound_params(params))
        return {str(user): str(name) for user, name in cursor.fetchall()}

    async def hold_of(self, run_id: str) -> Row | None:
        rows = self._rows(HOLD_COLUMNS, HOLD_OF_RUN, {"run_id": run_id})
        return rows[0] if rows else None

    async def list_runs(
        self, *, status: str | None = None, limit: int = 100
    ) -> list[tuple[Row, Row | None]]:
        sql, params = run_list_sql(status, limit)
        width = len(RUN_COLUMNS.names)
        cursor = self.connection.execute(sql, bound_params(params))
        return [
            (
                _row(RUN_COLUMNS, row[:width]),
                _row(HOLD_COLUMNS, row[width:]) if row[width] else None,
            )
            for row in cursor.fetchall()
        ]

    def _rows(self, columns: Columns, sql: str, params: Mapping[str, Any]) -> list[Row]:
        cursor = self.connection.execute(sql, bound_params(params))
        return [_row(columns, values) for values in cursor.fetchall()]


def _row(columns: Columns, values: Sequence[Any]) -> Row:
    """A row of ``columns``' table, its stored values converted as the models' types say."""
    row = dict(zip(columns.names, values, strict=True))
    for name, kind in columns.kinds.items():
        if row[name] is not None:
            row[name] = SQLITE_CONVERTERS[kind](row[name])
    return Row(row)
