"""Sentences about an approval's state as Slack shows them: people as ``<@U…>`` mentions
(Slack renders each reader's view of the name) and times as ``<!date^…>`` tokens (each
reader's time zone), never a user id or a raw UTC time.

The engine words the same facts for the model and the command line (``bot.policy.decisions``
``describe_status``); every Slack surface that answers a refused click (card buttons, the deny
form, /approvals lists, App Home) words them through :func:`refusal_text`.
"""

from __future__ import annotations

from bot.policy import AlreadyDecided, ApprovalExpired, DecisionRefused, NotAllowed
from bot.policy.what_ran import grant_text, no_approval_text
from handlers.blocks.kit import (
    escape,
    escaped_arguments,
    escaped_within,
    mention,
    shown_name,
    slack_date,
)
from storage.models import Approval


def status_text(approval: Approval) -> str | None:
    """Where a settled approval or question stands, or None for what needs no time or person
    (the engine's sentence is then as Slack would show it)."""
    who = mention(approval.decided_by) if approval.decided_by else "nobody"
    when = f" {slack_date(approval.decided_at)}" if approval.decided_at else ""
    deadline = slack_date(approval.expires_at)
    if approval.kind == "question":
        match approval.status:
            case "answered":
                return f"Already answered by {who}{when}."
            case "expired":
                return f"This question expired {deadline} unanswered."
        return None
    if approval.kind != "approval":
        return None
    match approval.status:
        case "approved" | "executing" | "executed" | "unknown":
            return f"Already approved by {who}{when}."
        case "denied":
            return f"Already denied by {who}{when}."
        case "expired":
            return f"This approval expired {deadline} with no decision."
    return None


def refusal_text(refused: DecisionRefused) -> str:
    """Why a click changed nothing, for the clicker in Slack."""
    approval = refused.approval
    if isinstance(refused, NotAllowed) and refused.reason == "not_an_answerer" and approval:
        answerers = approval.approvers or [approval.requester]
        return f"Only {', '.join(mention(a) for a in answerers)} can answer this question."
    if not isinstance(refused, AlreadyDecided | ApprovalExpired) or approval is None:
        return str(refused)
    if text := status_text(approval):
        return text
    if isinstance(refused, ApprovalExpired):
        if approval.kind == "question":
            return f"This question expired {slack_date(approval.expires_at)} unanswered."
        return f"This approval expired {slack_date(approval.expires_at)} with no decision."
    return str(refused)


def granted_call_note(approval: Approval) -> str:
    """The thread's line on a call a standing grant let run, since no card asked anyone:
    "`scale_service` `replicas=4` ran under @bo's standing grant (until 10:00 PM)"."""
    until = slack_date(approval.grant_until) if approval.grant_until else "its end"
    shown, _ = escaped_arguments(approval.arguments)
    allowed = grant_text(mention(approval.decided_by or ""), until)
    return f":unlock: `{shown_name(approval.tool_name)}` `{shown}` {allowed}."


def ruled_call_note(tool: str, rule: str, when: str | None) -> str:
    """The thread's line on a call a rule let run unasked: "`scale_service` ran with no
    approval needed: rule 1 of scale_service (args.env == "staging")"."""
    why = escaped_within(no_approval_text(rule, when), 500)
    return f":white_check_mark: `{escape(tool)}` ran, {why}."
