"""The statements that look at the database as a whole: the metrics' live counts, the health
check's ping, the planner's statistics, and the benchmarks' status counts.

Owns no state. The live counts read the pending approvals and the live runs only, through
their status indexes, never the whole history. Portable between SQLite (3.35+) and
PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

PENDING_BY_TOOL = (
    "SELECT tool_name, COUNT(*), MIN(expires_at) FROM approvals "
    "WHERE status = 'pending' GROUP BY tool_name"
)
LIVE_RUNS = (
    "SELECT status, COUNT(*) FROM runs "
    "WHERE status IN ('running', 'paused', 'resuming') GROUP BY status"
)
PING = "SELECT 1"
# The readiness check's write: a row that no Slack event id can be, inserted and deleted in
# one committed transaction. It changes nothing, but it must be written (SQLite's WAL, a
# PostgreSQL that is read-only or cannot commit fails it); a rolled-back write would prove
# nothing on SQLite, which writes nothing for it.
WRITE_PROBE_INSERT = "INSERT INTO processed_events (event_id, received_at) VALUES (:event_id, :now)"
WRITE_PROBE_DELETE = "DELETE FROM processed_events WHERE event_id = :event_id"
# Refresh the query planner's statistics of the tables a bulk load fills, one per statement
# (SQLite's ANALYZE takes one name). Never a bare ANALYZE: on PostgreSQL it also analyzes the
# shared catalogs, and two databases of one server doing so at once can deadlock.
ANALYZE_TABLES = ("ANALYZE runs", "ANALYZE approvals")
# How many rows of ``{table}`` (runs, approvals) are in each status.
STATUS_COUNTS = "SELECT status, COUNT(*) FROM {table} GROUP BY status"
