"""Deciding an approval or answering a question: who may, why it is refused, and how to say
where a pause stands.

``Runner.decide`` and ``Runner.answer`` raise the :class:`DecisionRefused` family; Slack
handlers and the CLI show its message to the person as is. ``describe_status`` and
``describe_wait`` say where an approval, a question, a callback or a retry stands.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.policy.policy import refusal_reason

if TYPE_CHECKING:
    # Annotations only: `runs show` and `waits list` describe waits without SQLAlchemy.
    from storage.models import Approval
    from storage.repository import ExpiryOutcome

SHOWN_ID_LIMIT = 80


def shown_id(value: str, limit: int = SHOWN_ID_LIMIT) -> str:
    """An id someone gave (a CLI argument, a button value), as a refusal echoes it: cut to
    ``limit`` characters and "…", so a 100,000-character id is not printed back whole."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


# What one answer to ask_user may hold (Slack's plain-text input allows 3000).
MAX_ANSWER_LENGTH = 3000


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


class StaleCopy(DecisionRefused):
    """An Approve from a copy of the card that showed other arguments (an edit came since)."""

    code = "stale_copy"


STALE_COPY = "The arguments changed since this copy was shown: see the current card."


class ApprovalExpired(DecisionRefused):
    code = "expired"

    def __init__(self, message: str, approval: Approval, expiry: ExpiryOutcome | None) -> None:
        super().__init__(message, approval)
        self.expiry = expiry


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


def ensure_may_answer(approval: Approval, actor: str, actor_groups: Collection[str] = ()) -> None:
    """Raise NotAllowed unless ``actor`` is one of the question's answerers (users or groups;
    the requester when the policy names nobody)."""
    answerers = approval.approvers or [approval.requester]
    if actor in answerers or set(actor_groups) & set(answerers):
        return
    names = ", ".join(f"@{a}" for a in answerers)
    raise NotAllowed(f"Only {names} can answer this question.", approval, "not_an_answerer")


NOT_A_VIEWER = (
    "You can see this approval only in its channel, or as its requester or one of its approvers."
)


def ensure_may_see(
    approval: Approval,
    actor: str,
    actor_groups: Collection[str] = (),
    *,
    channel: str | None,
) -> None:
    """Raise NotAllowed unless ``actor`` may see the approval's contents (its arguments, its
    place in a list) where they asked: the rule for listing it (``/approvals``, App Home).

    ``channel``: the channel it would be shown in (the card's, or the one an ephemeral list
    was opened in); None in a DM or the App Home. In its own channel anyone there may see it,
    as they see the card; anywhere else only its requester, its approvers (by id or through
    one of ``actor_groups``) and, for a question, its answerers. An approval that names no
    approvers may be decided by anyone but its requester, so anyone may see it.
    """
    if channel and channel == approval.channel:
        return
    people = set(approval.approvers) | {approval.requester}
    if actor in people or set(actor_groups) & set(approval.approvers):
        return
    if approval.kind in ("approval", "recovery") and not approval.approvers:
        # Named nobody: anyone but the requester may decide it, so may see what they decide.
        return
    raise NotAllowed(NOT_A_VIEWER, approval, "not_a_viewer")


def describe_status(approval: Approval) -> str:
    """One sentence on where an approval (or another pause) stands, for people."""
    who = f"@{approval.decided_by}" if approval.decided_by else "nobody"
    when = approval.decided_at.strftime("%Y-%m-%d %H:%M UTC") if approval.decided_at else ""
    if approval.kind == "question":
        match approval.status:
            case "pending":
                return "This question is still waiting for an answer."
            case "answered":
                return f"Already answered by {who} at {when}."
            case "expired":
                deadline = approval.expires_at.strftime("%Y-%m-%d %H:%M UTC")
                return f"This question expired at {deadline} unanswered."
    if approval.kind in ("callback", "retry") and approval.status != "cancelled":
        return describe_wait(approval)
    if approval.kind == "recovery":
        return describe_recovery(approval)
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
            noun = "approval" if approval.kind == "approval" else approval.kind
            return f"This {noun} was cancelled: {approval.reason or approval.result}."
    return f"This approval is {approval.status}."


def describe_wait(approval: Approval) -> str:
    """What a paused call waits for, and until when (``runs show``, ``waits list``)."""
    until = approval.expires_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    match approval.kind, approval.status:
        case "delegation", "pending":
            return f"Waiting for the sub-agent {approval.reason} to end."
        case "callback", "pending" | "armed":
            return f"Waiting for {approval.reason or approval.tool_name} until {until}."
        case "callback", "completed":
            return f"Completed by {approval.decided_by}."
        case "callback", "expired":
            return f"No callback came by {until}."
        case "retry", "pending":
            due = (approval.due_at or approval.expires_at).strftime("%Y-%m-%d %H:%M:%S UTC")
            reason = f": {approval.reason}" if approval.reason else ""
            return f"Retrying {approval.tool_name} at {due}{reason}."
        case "retry", "due" | "executing":
            return f"Retrying {approval.tool_name} now."
        case "retry", "executed":
            return f"Retried {approval.tool_name}."
        case "question", "pending":
            return f"Waiting for an answer until {until}."
    if approval.kind in ("callback", "retry") and approval.status != "cancelled":
        return f"This {approval.kind} is {approval.status}."
    return describe_status(approval)


def describe_recovery(approval: Approval) -> str:
    """Where a recovery row (on_error = "ask") stands, for people."""
    who = f"@{approval.decided_by}" if approval.decided_by else "nobody"
    until = approval.expires_at.strftime("%Y-%m-%d %H:%M UTC")
    match approval.status:
        case "pending":
            return f"{approval.tool_name} failed: waiting for a recovery choice until {until}."
        case "due" | "executing" | "executed" | "execution_failed" | "unknown":
            return f"Already retried by {who}."
        case "skipped":
            return f"Already skipped by {who}."
        case "resolved":
            return f"Already marked as run by {who}."
        case "cancelled":
            return f"The run was already stopped: {approval.reason or approval.result}."
        case "expired":
            return f"Nobody chose a recovery by {until}: the model was given the error."
    return f"This recovery is {approval.status}."


@dataclass
class Decision:
    approval: Approval
    resume_claimed: bool
