"""The statements of the approvers' reach: DM copies of cards (``approval_reach``,
``approval_messages``), the one reminder, the one escalation; and the reach rows of new
approvals.

Owns no state; the rows are :mod:`storage.stores.reach`'s. Every step that must happen once is
a conditional UPDATE whose row count says who won, so replicas and restarts share the work.
Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

INSERT_REACH = (
    "INSERT INTO approval_reach (approval_id, created_at, remind_at, escalate_at, escalate_to) "
    "VALUES (:approval_id, :created_at, :remind_at, :escalate_at, :escalate_to)"
)
_PENDING_APPROVAL = (
    "approval_id IN (SELECT id FROM approvals WHERE status = 'pending' AND expires_at > :now)"
)
_NO_LIVE_DM_CLAIM = (
    "(dms_claimed_until IS NULL OR dms_claimed_until < :now) "
    "AND (dms_retry_at IS NULL OR dms_retry_at <= :now)"
)
CLAIM_DMS = (
    "UPDATE approval_reach SET dms_claimed_until = :until WHERE approval_id = :id "
    f"AND dms_sent_at IS NULL AND {_NO_LIVE_DM_CLAIM} AND {_PENDING_APPROVAL} "
    "RETURNING escalated_at, escalate_to, dms_attempts, dms_given_up"
)
DMS_SENT = (
    "UPDATE approval_reach SET dms_sent_at = :now, dms_claimed_until = NULL, "
    "dms_retry_at = NULL, dms_given_up = :given_up "
    "WHERE approval_id = :id AND dms_claimed_until = :until"
)
# Some copies failed for now: released, and due again at :retry_at (the sweeper sends them).
DMS_RETRY = (
    "UPDATE approval_reach SET dms_claimed_until = NULL, dms_retry_at = :retry_at, "
    "dms_attempts = :attempts, dms_given_up = :given_up "
    "WHERE approval_id = :id AND dms_claimed_until = :until"
)
# A sender renews its claim before each copy: one whose claim lapsed and was taken (or
# finished) by another sender stops instead of posting the copies that one posts.
RENEW_DMS = (
    "UPDATE approval_reach SET dms_claimed_until = :until WHERE approval_id = :id "
    "AND dms_claimed_until = :held AND dms_sent_at IS NULL"
)
DMS_TO_SEND = (
    "SELECT approval_id FROM approval_reach WHERE dms_sent_at IS NULL "
    f"AND created_at <= :created_before AND {_NO_LIVE_DM_CLAIM} AND {_PENDING_APPROVAL} "
    "ORDER BY created_at LIMIT :limit"
)
CLAIM_REMINDERS = (
    "UPDATE approval_reach SET reminded_at = :now WHERE reminded_at IS NULL "
    f"AND remind_at IS NOT NULL AND remind_at <= :now AND {_PENDING_APPROVAL} "
    "RETURNING approval_id"
)
ESCALATIONS_DUE = (
    "SELECT approval_id FROM approval_reach WHERE escalated_at IS NULL "
    f"AND escalate_at IS NOT NULL AND escalate_at <= :now AND {_PENDING_APPROVAL} "
    "ORDER BY escalate_at LIMIT :limit"
)
CLAIM_ESCALATION = (
    "UPDATE approval_reach SET escalated_at = :now, dms_sent_at = NULL, "
    "dms_claimed_until = NULL, dms_retry_at = NULL, dms_attempts = 0 "
    "WHERE approval_id = :id AND escalated_at IS NULL "
    f"AND escalate_at IS NOT NULL AND escalate_at <= :now AND {_PENDING_APPROVAL} "
    "RETURNING escalate_to"
)
# A batch's escalation (its first row's reach) adds the approvers to every call still waiting,
# each to its own approvers (an edit may have given one row stricter ones than the others).
BATCH_PENDING_APPROVERS = (
    "SELECT id, approvers FROM approvals "
    "WHERE (id = :id OR batch_id = :id) AND status = 'pending' ORDER BY id"
)
ESCALATE_APPROVERS = (
    "UPDATE approvals SET approvers = :approvers WHERE id = :id AND status = 'pending'"
)
ADD_APPROVER = (
    "INSERT INTO approval_approvers (approver, approval_id) VALUES (:approver, :approval_id) "
    "ON CONFLICT DO NOTHING"
)
REACH_OF = (
    "SELECT escalate_at, escalated_at, escalate_to FROM approval_reach WHERE approval_id = :id"
)
# Someone is sending the approval's copies now (a live claim): its copies may still come.
DMS_CLAIM_HELD = (
    "SELECT 1 FROM approval_reach WHERE approval_id = :id AND dms_claimed_until >= :now"
)
ADD_MESSAGE = (
    "INSERT INTO approval_messages (approval_id, recipient, kind, channel, ts, posted_at) "
    "VALUES (:approval_id, :recipient, :kind, :channel, :ts, :now) ON CONFLICT DO NOTHING"
)
MESSAGES_OF = (
    "SELECT recipient, channel, ts FROM approval_messages WHERE approval_id = :id "
    "ORDER BY posted_at, recipient"
)
MESSAGE_IN = "SELECT 1 FROM approval_messages WHERE approval_id = :id AND channel = :channel"


@dataclass(frozen=True)
class ReachPlan:
    """What a policy asks of one approval's reach, snapshotted when it is requested."""

    remind_at: datetime | None = None
    escalate_at: datetime | None = None
    escalate_to: tuple[str, ...] = ()


def reach_rows(rows: Sequence[dict[str, Any]], plans: dict[str, ReachPlan]) -> list[dict[str, Any]]:
    """``approval_reach`` rows for new approval rows: those that name approvers (their DM
    copies), those requested in the agent pane (a DM with the app, channel ``D…``: their copy
    in ``assistant_cards_channel`` is sent under the same claim, and with no approvers named it
    is the only card anyone but the requester sees) or whose policy reminds or escalates."""
    out = []
    for row in rows:
        plan = plans.get(row["id"]) or ReachPlan()
        if row.get("kind", "approval") not in ("approval", "recovery"):  # people decide these
            continue
        if row.get("batch_id") not in (None, row["id"]):
            continue  # a batch has one card: its first row's copies, reminder and escalation
        in_pane = str(row.get("channel") or "").startswith("D")
        if not row["approvers"] and not in_pane and plan == ReachPlan():
            continue
        out.append(
            {
                "approval_id": row["id"],
                "created_at": row["created_at"],
                "remind_at": plan.remind_at,
                "escalate_at": plan.escalate_at,
                "escalate_to": json.dumps(list(plan.escalate_to)),
            }
        )
    return out
