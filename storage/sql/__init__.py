"""The SQL layer: every statement approval-bot runs, and the builders of the ones that vary.

Owns no state and imports no SQLAlchemy: plain text, portable between SQLite (3.35+) and
PostgreSQL, with ``:name`` parameters. The stores (:mod:`storage.stores`) run these
statements inside their transactions, and so does the read-only commands' path on SQLite
(:mod:`storage.reads`), which imports no SQLAlchemy at all: a filter both of them apply is
built here once (the pending list, the audit trail, the grants list), so the two can never
select different rows. Why plain text rather than SQLAlchemy Core: its execution layer costs
60-120 us per statement here against 5-10 us for ``sqlite3`` itself, more than a whole
transaction (see :mod:`storage.drivers.sqlite`).

The statements are in one module per aggregate (:mod:`.runs`, :mod:`.approvals`,
:mod:`.waits`, :mod:`.votes`, :mod:`.edits`, :mod:`.grants`, :mod:`.reach`, :mod:`.home`,
:mod:`.events`, :mod:`.installations`, :mod:`.stats`; PostgreSQL's one-statement pause in
:mod:`.pauses`, decision in :mod:`.decisions`, an approved call's start and recording in
:mod:`.executions`, a run's start and end in :mod:`.runs`); whole rows name their columns from
:mod:`.columns`, declared there as the models declare them (a test checks they agree). This
package exports the column lists and the builders.
"""

from __future__ import annotations

from storage.sql.approvals import ANYONE, approver_rows, pending_list_sql
from storage.sql.columns import (
    APPROVAL_COLUMNS,
    AUDIT_COLUMNS,
    GRANT_COLUMNS,
    RUN_COLUMNS,
    Columns,
)
from storage.sql.edits import edit_columns
from storage.sql.events import RULE_MATCHED, audit_row, audit_trail_query, rule_matched_row
from storage.sql.grants import expired_grants_sql, grant_list_sql
from storage.sql.reach import ReachPlan, reach_rows

__all__ = [
    "ANYONE",
    "APPROVAL_COLUMNS",
    "AUDIT_COLUMNS",
    "GRANT_COLUMNS",
    "RULE_MATCHED",
    "RUN_COLUMNS",
    "Columns",
    "ReachPlan",
    "approver_rows",
    "audit_row",
    "audit_trail_query",
    "edit_columns",
    "expired_grants_sql",
    "grant_list_sql",
    "pending_list_sql",
    "reach_rows",
    "rule_matched_row",
]
