"""The statements of operators' holds on runs (``run_holds``): ask for one, take it at a safe
point, release it, and the sweeper's ``pause_ttl``.

Owns no state; the rows are :mod:`storage.stores.holds`'s. A held run is ``paused`` with its
hold row present: the resume claim (``CLAIM_RESUME``) and the stranded-run sweep skip it, so
only a release (``DELETE_HOLD``, whose row count says who released it) lets it move on.
Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from storage.records import ACTIVE_RUN_STATUSES
from storage.sql.columns import HOLD_COLUMNS as _HOLD
from storage.sql.columns import RUN_COLUMNS

_ACTIVE = ", ".join(f"'{s}'" for s in ACTIVE_RUN_STATUSES)

HOLD_COLUMNS = _HOLD.sql

HOLD_OF_RUN = f"SELECT {HOLD_COLUMNS} FROM run_holds WHERE run_id = :run_id"
# The drive's safe point reads only this (one primary key lookup).
HOLD_ACTION = "SELECT action FROM run_holds WHERE run_id = :run_id"
INSERT_HOLD = (
    f"INSERT INTO run_holds ({HOLD_COLUMNS}) "
    "VALUES (:run_id, :action, :requested_by, :reason, :requested_at) "
    "ON CONFLICT (run_id) DO NOTHING"
)
# A Stop asked for while a pause is already asked for: the stronger request wins.
UPGRADE_HOLD_TO_STOP = (
    "UPDATE run_holds SET action = 'stop', requested_by = :requested_by, reason = :reason "
    "WHERE run_id = :run_id AND action <> 'stop'"
)
DELETE_HOLD = f"DELETE FROM run_holds WHERE run_id = :run_id RETURNING {HOLD_COLUMNS}"
# A run's end drops a hold asked for while it worked: it ended before a safe point took it,
# and a hold left behind would pause or stop the conversation's next request.
DROP_HOLD = "DELETE FROM run_holds WHERE run_id = :run_id"
# The drive's safe point: the run stops here, its history stored, its lease released. The
# turn is not counted: the approvals of this turn (approved, not yet run) still answer its
# calls when the run resumes.
HOLD_RUN = (
    "UPDATE runs SET status = 'paused', history = :history, lease_owner = NULL, "
    "lease_expires_at = NULL, updated_at = :now "
    f"WHERE id = :id AND lease_owner = :worker AND status IN ({_ACTIVE})"
)
# Held runs (paused with a hold): ``pause_ttl`` and the gauge.
HELD_BEFORE = (
    "SELECT run_holds.run_id FROM run_holds JOIN runs ON runs.id = run_holds.run_id "
    "WHERE runs.status = 'paused' AND run_holds.requested_at < :before "
    "ORDER BY run_holds.requested_at LIMIT :limit"
)
COUNT_HELD = (
    "SELECT COUNT(*) FROM run_holds JOIN runs ON runs.id = run_holds.run_id "
    "WHERE runs.status = 'paused'"
)

# ``runs list``: every run, or those of one status ("held": paused with a hold), newest
# change first, each with its hold's columns (NULL when it has none).
RUN_LIST_STATUSES = (
    "running",
    "resuming",
    "paused",
    "held",
    "step",
    "completed",
    "failed",
    "cancelled",
)


def run_list_sql(status: str | None, limit: int) -> tuple[str, dict[str, object]]:
    where, params = "", dict[str, object](limit=limit)
    if status == "held":
        where = "WHERE runs.status = 'paused' AND run_holds.run_id IS NOT NULL "
    elif status is not None:
        where = "WHERE runs.status = :status "
        params["status"] = status
    sql = (
        f"SELECT {RUN_COLUMNS.qualified('runs')}, {_HOLD.qualified('run_holds')} FROM runs "
        f"LEFT JOIN run_holds ON run_holds.run_id = runs.id {where}"
        "ORDER BY runs.updated_at DESC, runs.id LIMIT :limit"
    )
    return sql, params
