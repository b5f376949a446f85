"""Counts for the metrics endpoint, read at scrape time so that every replica reports the
same numbers: the pending approvals and the live runs only, through their status indexes
(``ix_approvals_status_created``, ``ix_runs_status``), never the whole history.

Owns no state: it reads ``approvals`` and ``runs`` as they stand. A function of a
:class:`~storage.drivers.Database` rather than a store method, so that the metrics read
through whatever wraps the repository's database (bot.ops.metrics counts its failures).
"""

from __future__ import annotations

from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.records import LiveCounts
from storage.sql.holds import COUNT_HELD
from storage.sql.stats import LIVE_RUNS, PENDING_BY_TOOL


async def live_counts(database: Database, *, now: datetime) -> LiveCounts:
    def body(tx: Tx) -> LiveCounts:
        pending: dict[str, int] = {}
        overdue: datetime | None = None
        for tool, count, earliest in tx.all(PENDING_BY_TOOL):
            pending[str(tool)] = int(count)
            earliest = _as_datetime(earliest)
            if earliest is not None and earliest < now and (overdue is None or earliest < overdue):
                overdue = earliest
        runs = {str(status): int(count) for status, count in tx.all(LIVE_RUNS)}
        held = tx.one(COUNT_HELD, {})
        return LiveCounts(
            pending_by_tool=pending,
            runs_by_status=runs,
            oldest_overdue=overdue,
            held_runs=int(held[0]) if held else 0,
        )

    return await database.run(body, Mode.READ, inline=False)


def _as_datetime(value: object) -> datetime | None:
    """SQLite's aggregate loses the column's type: MIN(expires_at) comes back as text."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))
