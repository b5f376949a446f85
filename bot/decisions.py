"""Deciding an approval: who may, why a decision is refused, and how to say where it stands.

The runner records decisions (``Runner.decide``); this is what it and the Slack handlers tell
people about them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from bot.policy import refusal_reason
from storage.models import Approval
from storage.repository import ExpiryOutcome


class DecisionRefused(Exception):
    """A decision that was not recorded; ``code`` says why, the message says it for people."""

    code = "refused"

    def __init__(self, message: str, approval: Approval | None = None) -> None:
        super().__init__(message)
        self.approval = approval


class ApprovalNotFound(DecisionRefused):
    code = "not_found"


class NotAllowed(DecisionRefused):
    code = "not_allowed"

    def __init__(self, message: str, approval: Approval, reason: str) -> None:
        super().__init__(message, approval)
        self.reason = reason


class AlreadyDecided(DecisionRefused):
    code = "already_decided"


class ApprovalExpired(DecisionRefused):
    code = "expired"

    def __init__(self, message: str, approval: Approval, expiry: ExpiryOutcome | None) -> None:
        super().__init__(message, approval)
        self.expiry = expiry


@dataclass
class Decision:
    approval: Approval
    resume_claimed: bool


def ensure_may_decide(approval: Approval, actor: str, actor_groups: Collection[str] = ()) -> None:
    """Raise NotAllowed, with a sentence for the person, unless ``actor`` may decide."""
    refusal = refusal_reason(
        actor=actor,
        requester=approval.requester,
        approvers=approval.approvers,
        allow_self_approval=approval.allow_self_approval,
        actor_groups=actor_groups,
    )
    if refusal == "self_approval":
        raise NotAllowed(
            "You asked for this call, so someone else must decide it.", approval, refusal
        )
    if refusal is not None:
        raise NotAllowed("You are not one of the approvers of this call.", approval, refusal)


def describe_status(approval: Approval) -> str:
    """One sentence on where an approval stands, for people."""
    who = f"@{approval.decided_by}" if approval.decided_by else "nobody"
    when = approval.decided_at.strftime("%Y-%m-%d %H:%M UTC") if approval.decided_at else ""
    match approval.status:
        case "pending":
            return "This approval is still waiting for a decision."
        case "approved" | "executing" | "executed" | "unknown":
            return f"Already approved by {who} at {when}."
        case "denied":
            return f"Already denied by {who} at {when}."
        case "expired":
            deadline = approval.expires_at.strftime("%Y-%m-%d %H:%M UTC")
            return f"This approval expired at {deadline} with no decision."
        case "cancelled":
            return f"This approval was cancelled: {approval.reason or approval.result}."
    return f"This approval is {approval.status}."
