"""The statements of sub-agents (issue 20 section 1): a child run's link to its parent, the
parent's ``delegation`` row settled by the child's end, and a run's children.

Owns no state; the rows are ``runs`` (``agent``, ``parent_run_id``, ``parent_approval_id``)
and ``approvals`` of kind ``delegation`` (:mod:`storage.stores.delegations`). Portable between
SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from storage.records import ACTIVE_RUN_STATUSES, FINISHED_RUN_STATUSES
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
# Children still working or waiting whose parent ended without them (cancelled by an expiry,
# an uninstall, a Stop of a step's run): the sweeper stops them. A Stop already asked for is
# left to take effect.
_FINISHED = ", ".join(f"'{s}'" for s in FINISHED_RUN_STATUSES)
ORPHANED_CHILDREN = (
    "SELECT c.id, c.parent_run_id FROM runs c JOIN runs p ON p.id = c.parent_run_id "
    f"WHERE c.status IN ({_UNFINISHED}) AND p.status IN ({_FINISHED}) "
    "AND NOT EXISTS (SELECT 1 FROM run_holds h WHERE h.run_id = c.id AND h.action = 'stop') "
    "ORDER BY c.created_at LIMIT :limit"
)
UNFINISHED_CHILDREN = (
    "SELECT id FROM runs WHERE parent_run_id = :id "
    f"AND status IN ({_UNFINISHED}) ORDER BY created_at, id"
)
