"""The read-only commands' reads on SQLite, through the stdlib ``sqlite3`` alone.

Why this exists: ``approvals list``, ``runs show``, ``waits list``, ``grants list`` and
``audit export`` are run by people and scripts, often in a loop, and importing SQLAlchemy (the
engine, the ORM and the models) was most of their start-up (~0.3 s of ~0.9 s). These reads
need none of it: a file, a few SELECTs and plain rows. :class:`SQLiteReads` answers the few
repository methods those commands call, with the same SQL and the same values (JSON, times
and booleans converted as :mod:`storage.rows` converts them), so the commands' code prints
the same bytes on either (tests/test_cli_reads.py runs both on one seeded database and
compares). The one write among them, ``grants list`` auditing a grant's expiry, is left to
the Repository (:class:`NeedsRepository`).

It only ever reads a database whose schema is at this release's head: :func:`open_reads`
returns None for anything else (an older schema, a newer one, no ``alembic_version``, a file
it cannot open), and the command then goes through :class:`storage.repository.Repository` as
before, which migrates, warns or reports exactly as it always has. PostgreSQL always goes
that way (asyncpg through SQLAlchemy).

Rows are :class:`Row` objects: every column of the row as an attribute, like a detached
model instance but without the ORM. A column added by a migration appears by itself
(``SELECT *``); one that needs converting must be named in ``_KINDS`` (a test checks them
against the models).
"""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from storage import migrate
from storage.records import PendingFilter
from storage.values import storable_text

# As storage.sqlite (not imported: it imports SQLAlchemy): wait this long for a writer.
BUSY_TIMEOUT_MS = 30_000

# The columns whose stored values are converted, per table (storage.rows derives the same
# from the models; tests/test_cli_reads.py checks that they agree).
_KINDS: dict[str, dict[str, str]] = {
    "runs": {
        "history": "json",
        "lease_expires_at": "datetime",
        "created_at": "datetime",
        "updated_at": "datetime",
    },
    "approvals": {
        "arguments": "json",
        "approvers": "json",
        "approved_by": "json",
        "edited_arguments": "json",
        "allow_self_approval": "bool",
        "allow_edit": "bool",
        "created_at": "datetime",
        "expires_at": "datetime",
        "decided_at": "datetime",
        "executed_at": "datetime",
        "card_claimed_until": "datetime",
        "due_at": "datetime",
        "edited_at": "datetime",
    },
    "audit_events": {"at": "datetime", "detail": "json"},
    "grants": {
        "grantor_groups": "json",
        "created_at": "datetime",
        "expires_at": "datetime",
        "revoked_at": "datetime",
        "last_used_at": "datetime",
        "expiry_noticed_at": "datetime",
    },
}
_CONVERT = {"json": json.loads, "datetime": datetime.fromisoformat, "bool": bool}

PENDING_WAITS = (
    "SELECT * FROM approvals WHERE status = 'pending' AND kind != 'approval' "
    "ORDER BY created_at DESC, id DESC LIMIT :limit"
)
AUDIT_PAGE = (
    "SELECT a.*, r.team_id AS run_team_id, r.channel AS run_channel FROM audit_events a "
    "LEFT JOIN runs r ON r.id = a.run_id "
    "WHERE a.id > :after AND a.at >= :since AND a.at < :until ORDER BY a.id LIMIT :limit"
)


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
    """An audit event as exported, as storage.events.ExportedEvent: it and its run's place."""

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
        current = {str(r[0]) for r in connection.execute("SELECT version_num FROM alembic_version")}
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
        rows = self._rows("runs", "SELECT * FROM runs WHERE id = :id", {"id": run_id})
        return rows[0] if rows else None

    async def approvals_for_run(self, run_id: str) -> list[Row]:
        sql = "SELECT * FROM approvals WHERE run_id = :run_id ORDER BY id"
        return self._rows("approvals", sql, {"run_id": run_id})

    async def audit_trail(
        self, *, run_id: str | None = None, approval_id: str | None = None
    ) -> list[Row]:
        sql, params = audit_trail_query("*", run_id=run_id, approval_id=approval_id)
        return self._rows("audit_events", sql, params)

    async def list_pending(
        self, where: PendingFilter, *, now: datetime, limit: int = 20, offset: int = 0
    ) -> tuple[list[Row], int]:
        """As ``Repository.list_pending`` for a filter on kinds alone (``approvals list``)."""
        if where != PendingFilter(kinds=where.kinds):
            raise ValueError("the read path filters pending approvals by kind only")
        conditions = ["status = 'pending'", "expires_at > :now"]
        params: dict[str, Any] = {"now": now, "limit": limit, "offset": offset}
        if where.kinds is not None:
            names = [f":kind_{i}" for i in range(len(where.kinds))]
            conditions.append(f"kind IN ({', '.join(names)})")
            params.update({f"kind_{i}": kind for i, kind in enumerate(where.kinds)})
        condition = " AND ".join(conditions)
        matching = f"SELECT approvals.id FROM approvals WHERE {condition}"
        count_sql = f"SELECT count(*) FROM ({matching}) AS matching"
        page_sql = (
            f"SELECT * FROM approvals WHERE {condition} "
            "ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset"
        )
        self.connection.execute("BEGIN")  # the count and the page of one snapshot
        try:
            (total,) = self.connection.execute(count_sql, _bound(params)).fetchone()
            rows = self._rows("approvals", page_sql, params)
        finally:
            self.connection.execute("COMMIT")
        return rows, int(total)

    async def pending_waits(self, limit: int = 100) -> list[Row]:
        return self._rows("approvals", PENDING_WAITS, {"limit": limit})

    async def audit_page(
        self, *, since: datetime, until: datetime, after: int = 0, limit: int = 1000
    ) -> list[ExportedRow]:
        params = {"since": since, "until": until, "after": after, "limit": limit}
        page = []
        for row in self._rows("audit_events", AUDIT_PAGE, params):
            team_id, channel = row.__dict__.pop("run_team_id"), row.__dict__.pop("run_channel")
            page.append(ExportedRow(row, team_id or "", channel or ""))
        return page

    async def notice_expired_grants(self, *, now: datetime) -> list[Row]:
        """Nothing to notice, so nothing to write; else NeedsRepository (``grants list``
        audits each grant's expiry once, which is the Repository's to write)."""
        sql = (
            "SELECT 1 FROM grants WHERE expiry_noticed_at IS NULL AND revoked_at IS NULL "
            "AND expires_at <= :now LIMIT 1"
        )
        if self.connection.execute(sql, _bound({"now": now})).fetchone() is not None:
            raise NeedsRepository("an expired grant's expiry is not audited yet")
        return []

    async def list_grants(
        self, *, now: datetime, live_only: bool = True, limit: int = 100
    ) -> list[Row]:
        where = " WHERE revoked_at IS NULL AND expires_at > :now" if live_only else ""
        sql = f"SELECT * FROM grants{where} ORDER BY created_at DESC, id DESC LIMIT :limit"
        return self._rows("grants", sql, {"now": now, "limit": limit})

    def _rows(self, table: str, sql: str, params: Mapping[str, Any]) -> list[Row]:
        cursor = self.connection.execute(sql, _bound(params))
        names = [column[0] for column in cursor.description]
        converters = [(n, _CONVERT[kind]) for n, kind in _KINDS[table].items() if n in names]
        return [_row(names, values, converters) for values in cursor.fetchall()]


def _row(names: Sequence[str], values: Iterable[Any], converters: Iterable[Any]) -> Row:
    columns = dict(zip(names, values, strict=True))
    for name, convert in converters:
        if columns[name] is not None:
            columns[name] = convert(columns[name])
    return Row(columns)


def _bound(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as storage.sqlite binds them: text as stored (storage.values), times in
    SQLAlchemy's SQLite format (whose text order is time order)."""
    bound = dict(params)
    for key, value in params.items():
        if isinstance(value, str):
            bound[key] = storable_text(value)
        elif isinstance(value, datetime):
            if value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            bound[key] = value.isoformat(" ", "microseconds")
    return bound


def audit_trail_query(
    columns: str, *, run_id: str | None, approval_id: str | None
) -> tuple[str, dict[str, Any]]:
    """The audit trail of a run, an approval, both or everything, oldest first: shared with
    ``storage.events`` so that both read paths select the same rows."""
    conditions = []
    params: dict[str, Any] = {}
    if run_id is not None:
        conditions.append("run_id = :run_id")
        params["run_id"] = run_id
    if approval_id is not None:
        conditions.append("approval_id = :approval_id")
        params["approval_id"] = approval_id
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"SELECT {columns} FROM audit_events{where} ORDER BY id", params
