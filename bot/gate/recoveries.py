"""A call that raised, with ``on_error = "ask"``: its recovery row, and what the model reads.

Owns no durable state of its own: the failure drafts a ``recovery`` row into
``TurnContext.drafts`` (the runner stores it with the paused history, the card outbox posts
its card) and the run pauses; a pause a tool raises is not an error and never gets here. A
person's Retry makes the row due, and the resumed drive runs the call again through the
retry path (``bot.gate.answers``: ``due -> executing -> executed`` once, on any replica, the
row's payload hash binding what runs: the approved or edited call, never another one).
``max_recoveries`` rows per call, then the error goes to the model as without asking.
"""

from __future__ import annotations

from typing import Any, NoReturn

import llm

from bot.gate.edited_calls import carry_edit
from bot.gate.tool_calls import PreparedTool
from bot.gate.turn import ApprovalRequired, ToolRaised, TurnContext
from bot.ids import new_approval_id
from bot.policy import Policy, refusal_reason
from storage.repository import ApprovalDraft
from storage.values import storable

# The error as the row keeps it (the card shows 500 characters, the rest behind a button).
MAX_ERROR_LENGTH = 4000


def error_text(exc: BaseException) -> str:
    """The error as the model would have read it from llm ("Error: <this>")."""
    return (str(exc) or type(exc).__name__)[:MAX_ERROR_LENGTH]


def attempt_of(failed_row: Any) -> int:
    """Which failure of the call this is: one more than the recovery row it was retried on."""
    if failed_row is not None and getattr(failed_row, "kind", None) == "recovery":
        return int(getattr(failed_row, "attempt", None) or 0) + 1
    return 1


def ask_or_raise(
    turn: TurnContext,
    prepared: PreparedTool,
    tool_call: llm.ToolCall,
    exc: Exception,
    *,
    failed_row: Any = None,
    cause: str = "error",
) -> NoReturn:
    """Pause on a recovery row for this failure, or (``on_error = "fail"``, or no recoveries
    left) hand the tool's own exception to llm as before (the model reads the error).

    ``failed_row``: the row the call ran on (an approval, a retry, an earlier recovery), whose
    edit and payload hash the recovery keeps; None for an ungated call.
    """
    draft = recovery_draft(turn, prepared, tool_call, error_text(exc), failed_row, cause)
    if draft is None:
        raise ToolRaised(exc) from exc
    turn.drafts.append(draft)
    raise ApprovalRequired(f"{prepared.tool.name} failed: a person chooses the recovery")


def ask_about_unknown(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, row: Any, text: str
) -> None:
    """A call found ``executing`` and marked "outcome unknown" (``text``): with ``on_error =
    "ask"`` (and recoveries left) pause on a recovery row; else return (the model reads
    ``text``, as without asking)."""
    draft = recovery_draft(turn, prepared, tool_call, text, row, "unknown")
    if draft is not None:
        turn.drafts.append(draft)
        raise ApprovalRequired(f"{prepared.tool.name}: outcome unknown, a person chooses")


def recovery_draft(
    turn: TurnContext,
    prepared: PreparedTool,
    tool_call: llm.ToolCall,
    error: str,
    failed_row: Any,
    cause: str,
) -> ApprovalDraft | None:
    """The recovery row for this failure, or None when the policy does not ask (any more)."""
    name = prepared.tool.name
    policy = turn.recovery_policy(name)
    attempt = attempt_of(failed_row)
    if not policy.may_ask_again(attempt - 1):
        return None
    approvers, allow_self = policy.deciders(turn.requester)
    if not policy.recovery_by and getattr(failed_row, "kind", None) in ("approval", "recovery"):
        # Those who could decide the call it failed on (a rule's approvers, an escalation's),
        # as snapshotted on that row.
        approvers = list(failed_row.approvers or [])
        allow_self = bool(failed_row.allow_self_approval)
    arguments = dict(tool_call.arguments)
    hashed = prepared.hasher(name, arguments)
    now = turn.clock()
    draft = ApprovalDraft(
        id=new_approval_id(),
        tool_call_id=tool_call.tool_call_id or "",
        tool_name=name,
        arguments=arguments,
        # An approved call keeps its binding: the retry runs exactly what was approved.
        payload_hash=getattr(failed_row, "payload_hash", None) or hashed,
        approvers=approvers,
        allow_self_approval=allow_self,
        on_expiry="deny",
        expires_at=now + policy.ttl,
        remind_at=now + policy.remind_after if policy.remind_after else None,
        kind="recovery",
        reason=error,
        allow_edit=policy.allow_edit,
        attempt=attempt,
        recovery_of=getattr(failed_row, "id", None),
        recovery_cause=cause,
    )
    return carry_edit(draft, failed_row)


def approval_for_edit(turn: TurnContext, row: Any, policy: Policy | None) -> ApprovalDraft | None:
    """A recovery a person edited, then retried: the approval its edited call now needs,
    or None when it may run on the retry. Rules are checked again on the new arguments; a
    call they gate asks for approval unless the person who retried may approve it alone."""
    if policy is None or row.edited_arguments is None or not row.edited_by:
        return None
    edited = storable(row.edited_arguments)
    effective = policy.resolve(edited, requester=turn.requester, channel=turn.channel)
    if effective.approval != "required":
        return None
    alone = effective.min_approvals <= 1 and not refusal_reason(
        actor=row.decided_by or "",
        requester=turn.requester,
        approvers=effective.approvers,
        allow_self_approval=effective.allow_self_approval,
    )
    if alone:
        return None
    now = turn.clock()
    return ApprovalDraft(
        id=new_approval_id(),
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        arguments=dict(row.arguments),
        payload_hash=row.payload_hash,  # binds the edited arguments
        approvers=list(effective.approvers),
        allow_self_approval=effective.allow_self_approval,
        on_expiry=effective.on_expiry,
        expires_at=now + effective.ttl,
        rule=effective.rule,
        rule_when=effective.rule_when,
        rule_error=effective.rule_error,
        min_approvals=effective.min_approvals,
        allow_edit=effective.allow_edit,
        edited_arguments=dict(row.edited_arguments),
    )
