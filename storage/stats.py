"""Counts for the metrics endpoint, read at scrape time so that every replica reports the
same numbers: the pending approvals and the live runs only, through their status indexes
(``ix_approvals_status_created``, ``ix_runs_status``), never the whole history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from storage.db import Database, Mode, Tx

PENDING_BY_TOOL = (
    "SELECT tool_name, COUNT(*), MIN(expires_at) FROM approvals "
    "WHERE status = 'pending' GROUP BY tool_name"
)
LIVE_RUNS = (
    "SELECT status, COUNT(*) FROM runs "
    "WHERE status IN ('running', 'paused', 'resuming') GROUP BY status"
)


@dataclass
class LiveCounts:
    pending_by_tool: dict[str, int]
    runs_by_status: dict[str, int]
    # The earliest expires_at of a pending approval already past it (the sweeper's lag).
    oldest_overdue: datetime | None


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
        return LiveCounts(pending_by_tool=pending, runs_by_status=runs, oldest_overdue=overdue)

    return await database.run(body, Mode.READ, inline=False)


def _as_datetime(value: object) -> datetime | None:
    """SQLite's aggregate loses the column's type: MIN(expires_at) comes back as text."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))
