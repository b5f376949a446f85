"""The statements of sub-agents (issue 20 section 1): a child run's link to its parent, the
parent's ``delegation`` row settled by the child's end, and a run's children.

Owns no state; the rows are ``runs`` (``agent``, ``parent_run_id``, ``parent_approval_id``)
and ``approvals`` of kind ``delegation`` (:mod:`storage.stores.delegations`). Portable between
SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from storage.records import ACTIVE_RUN_STATUSES
from storage.sql.columns import RUN_COLUMNS

_UNFINISHED = ", ".join(f"'{s}'" for s in (*ACTIVE_RUN_STATUSES, "paused"))

PARENT_OF_RUN = "SELECT parent_run_id, parent_approval_id FROM runs WHERE id = :id"
# The child's end is the call's result: whatever ended it, once (the row count says who won;
# a parent cancelled meanwhile has the row cancelled already, and nothing changes).
SETTLE_DELEGATION = (
    "UPDATE approvals SET status = 'completed', result = :result, reason = :outcome, "
    "decided_at = :now WHERE id = :id AND kind = 'delegation' AND status = 'pending' "
    "RETURNING run_id"
)
CHILDREN_OF_RUN = (
    f"SELECT {RUN_COLUMNS.sql} FROM runs WHERE parent_run_id = :id ORDER BY created_at, id"
)
UNFINISHED_CHILDREN = (
    "SELECT id FROM runs WHERE parent_run_id = :id "
    f"AND status IN ({_UNFINISHED}) ORDER BY created_at, id"
)
