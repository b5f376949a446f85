"""The statements of the audit trail (``audit_events``) and of Slack event ids already handled
(``processed_events``), and the audit rows every transaction appends.

Owns no state; the rows are :mod:`storage.stores.events`'s (appended by every store's
transactions through its ``audit``). The trail's filter is built here once
(:func:`audit_trail_query`) for the Repository and the read-only commands' path
(:mod:`storage.reads`) alike, so the two never select different rows; so is the export's page
(``AUDIT_PAGE``). Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from storage.sql.columns import AUDIT_COLUMNS
from storage.values import json_text

INSERT_AUDIT = (
    "INSERT INTO audit_events (at, run_id, approval_id, event, actor, detail) "
    "VALUES (:at, :run_id, :approval_id, :event, :actor, :detail)"
)
CLAIM_EVENT = (
    "INSERT INTO processed_events (event_id, received_at) VALUES (:event_id, :now) "
    "ON CONFLICT (event_id) DO NOTHING"
)
FORGET_EVENTS = "DELETE FROM processed_events WHERE received_at < :cutoff"


def audit_row(
    now: datetime,
    event: str,
    *,
    run_id: str | None = None,
    approval_id: str | None = None,
    actor: str | None = None,
    **detail: Any,
) -> dict[str, Any]:
    return {
        "at": now,
        "run_id": run_id,
        "approval_id": approval_id,
        "event": event,
        "actor": actor,
        "detail": json_text(detail),
    }


def audited_postgres(statement: str, run_column: str = "run_id", *, before: str = "") -> str:
    """PostgreSQL only (data-modifying CTEs): ``statement``, a write whose ``RETURNING`` has
    the run's id (``run_column``), and for each row it returns one audit event, in one
    statement (one round trip instead of two). It returns what ``statement`` returns, and
    only its one write takes locks, so the order of locks is the statement's. Parameters:
    those of :func:`audit_row` prefixed ``audit_`` (its run id is the returned one); see
    :func:`audited_params`. SQLite runs the two statements.

    ``before``: CTEs (``name AS (...), ...``) that ``statement`` may refer to, such as the
    run's row it locks first; their locks then come first only if ``statement`` reads them
    before it writes (an uncorrelated subquery in its WHERE: evaluated before any row of
    its own is locked)."""
    head = f"WITH {before}, " if before else "WITH "
    return (
        f"{head}changed AS ({statement}), audited AS ("
        "INSERT INTO audit_events (at, run_id, approval_id, event, actor, detail) "
        f"SELECT CAST(:audit_at AS TIMESTAMP), changed.{run_column}, :audit_approval_id, "
        ":audit_event, :audit_actor, CAST(:audit_detail AS JSON) FROM changed) "
        "SELECT * FROM changed"
    )


def audited_params(params: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """``params`` of the audited statement with ``row`` (:func:`audit_row`) as ``audit_*``."""
    audited = dict(params)
    for name in ("at", "approval_id", "event", "actor", "detail"):
        audited[f"audit_{name}"] = row[name]
    return audited


RULE_MATCHED = "rule_matched"


def rule_matched_row(now: datetime, run_id: str, requester: str, draft: Any) -> dict[str, Any]:
    """The audit of the rule on arguments that chose an approval's policy."""
    return audit_row(
        now,
        RULE_MATCHED,
        run_id=run_id,
        approval_id=draft.id,
        actor=requester,
        tool=draft.tool_name,
        rule=draft.rule,
        when=draft.rule_when,
        approval="required",
        error=draft.rule_error,
    )


# One page of the export: events after a known id, in id order (the primary key's index), with
# the workspace and channel of their run. Paging by id, not OFFSET, keeps every page as cheap
# as the first, however long the trail.
AUDIT_PAGE = (
    f"SELECT {AUDIT_COLUMNS.qualified('a')}, r.team_id, r.channel FROM audit_events a "
    "LEFT JOIN runs r ON r.id = a.run_id "
    "WHERE a.id > :after AND a.at >= :since AND a.at < :until ORDER BY a.id LIMIT :limit"
)


def audit_trail_query(*, run_id: str | None, approval_id: str | None) -> tuple[str, dict[str, Any]]:
    """The audit trail of a run, an approval, both or everything, oldest first: the statement
    of both read paths, so that they select the same rows."""
    conditions = []
    params: dict[str, Any] = {}
    if run_id is not None:
        conditions.append("run_id = :run_id")
        params["run_id"] = run_id
    if approval_id is not None:
        conditions.append("approval_id = :approval_id")
        params["approval_id"] = approval_id
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"SELECT {AUDIT_COLUMNS.sql} FROM audit_events{where} ORDER BY id", params
