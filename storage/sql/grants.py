"""The statements of standing grants (``grants``), and the filters of their lists.

Owns no state; the rows are :mod:`storage.stores.grants`'s. Using a grant is a conditional
UPDATE that checks it is still live, revoking one another. The list's filter and the check for
expired grants not yet noticed are built here once, for the Repository and the read-only
commands' path (:mod:`storage.reads`) alike, so the two never select different rows.
Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from storage.sql.columns import GRANT_COLUMNS

INSERT_GRANT = GRANT_COLUMNS.insert_sql()
GRANT_BY_ID = f"SELECT {GRANT_COLUMNS.sql} FROM grants WHERE id = :id"
# Grants of the run's thread for one tool, not revoked, expired or not (the caller checks
# times: an expired one is noticed and audited once).
GRANTS_FOR_RUN_TOOL = (
    f"SELECT {GRANT_COLUMNS.qualified('grants')} FROM grants JOIN runs "
    "ON runs.team_id = grants.team_id AND runs.channel = grants.channel "
    "AND runs.thread_ts = grants.thread_ts "
    "WHERE runs.id = :run_id AND grants.tool_name = :tool_name AND grants.revoked_at IS NULL "
    "ORDER BY grants.expires_at DESC, grants.id"
)
# Only the drive that holds the run's lease records a call under a grant.
RUN_FOR_GRANT = (
    "SELECT requester, team_id, channel, thread_ts FROM runs "
    "WHERE id = :run_id AND lease_owner = :owner AND status IN ('running', 'resuming')"
)
USE_GRANT = (
    "UPDATE grants SET last_used_at = :now WHERE id = :id AND revoked_at IS NULL "
    "AND expires_at > :now AND team_id = :team_id AND channel = :channel "
    "AND thread_ts = :thread_ts AND tool_name = :tool_name "
    "AND (payload_scope IS NULL OR payload_scope = :scope) "
    f"RETURNING {GRANT_COLUMNS.sql}"
)
REVOKE_GRANT = (
    "UPDATE grants SET revoked_at = :now, revoked_by = :actor "
    "WHERE id = :id AND revoked_at IS NULL AND expires_at > :now "
    f"RETURNING {GRANT_COLUMNS.sql}"
)
# Expired, not revoked, and not yet audited as expired (``grant_expired``, once per grant).
_EXPIRED_UNNOTICED = "expiry_noticed_at IS NULL AND revoked_at IS NULL AND expires_at <= :now"
NOTICE_EXPIRED = (
    "UPDATE grants SET expiry_noticed_at = :now WHERE {where} "
    f"AND {_EXPIRED_UNNOTICED} RETURNING {GRANT_COLUMNS.sql}"
)
# Whether any grant is expired and not yet noticed (the read-only path then leaves the
# command to the Repository, which audits it).
ANY_EXPIRED_UNNOTICED = f"SELECT 1 FROM grants WHERE {_EXPIRED_UNNOTICED} LIMIT 1"


def grant_list_sql(
    *,
    now: datetime,
    team_id: str | None = None,
    channel: str | None = None,
    thread_ts: str | None = None,
    live_only: bool = True,
    limit: int = 100,
) -> tuple[str, dict[str, Any]]:
    """Grants, newest first (``live_only``: not revoked and not expired at ``now``): the
    statement and its parameters."""
    conditions, params = _where(team_id=team_id, channel=channel, thread_ts=thread_ts)
    if live_only:
        conditions.append("revoked_at IS NULL AND expires_at > :now")
    params.update(now=now, limit=limit)
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    sql = (
        f"SELECT {GRANT_COLUMNS.sql} FROM grants{where} "
        "ORDER BY created_at DESC, id DESC LIMIT :limit"
    )
    return sql, params


def expired_grants_sql(
    *,
    now: datetime,
    grant_ids: Sequence[str] | None = None,
    team_id: str | None = None,
    channel: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The UPDATE that marks the expired grants not noticed yet (by id, or in a channel, or
    everywhere) as noticed, returning them: the statement and its parameters."""
    conditions, params = _where(team_id=team_id, channel=channel)
    if grant_ids is not None:
        names = [f":grant_{i}" for i in range(len(grant_ids))]
        conditions.append(f"id IN ({', '.join(names)})")
        params.update({f"grant_{i}": g for i, g in enumerate(grant_ids)})
    params["now"] = now
    return NOTICE_EXPIRED.format(where=" AND ".join(conditions) or "1 = 1"), params


def _where(**fields: str | None) -> tuple[list[str], dict[str, Any]]:
    conditions, params = [], {}
    for name, value in fields.items():
        if value is not None:
            conditions.append(f"{name} = :{name}")
            params[name] = value
    return conditions, params


# The name the grantor had when their decision granted it (None: unknown).
GRANTOR_NAME = "SELECT decided_by_name FROM approvals WHERE id = :approval_id"
