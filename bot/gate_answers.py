"""Answering a call from its row: run the approved call once, or say what was decided.

The approved-call path records ``approved -> executing`` before the tool runs and
``executing -> executed`` after (through the repository), so a call runs at most once; a
call found ``executing`` is reported "outcome unknown". Denied, expired and cancelled calls
are answered with ``decision_text``; edited calls carry a note of what a person changed.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import llm

from bot.edits import (
    EditedCallFailed,
    edit_note,
    edited_call,
    noted_result,
    proposed_here,
    with_edit_note,
)
from bot.failpoints import failpoint
from bot.gate_pauses import disarm, pause_call, refused_pause
from bot.pause_rows import call_context, pause_text
from bot.pauses import Pause, current_call
from bot.tool_calls import PreparedTool, call_approved_tool
from bot.turn import ApprovalRequired, ToolRaised, TurnContext
from storage.repository import LeaseLost, canonical_json


async def answer_approval(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, approval: Any
) -> Any:
    status = approval.status
    tool = prepared.tool
    if status == "approved":
        return await execute_approved(turn, prepared, tool_call, approval)
    if approval.tool_name != tool.name or canonical_json(approval.arguments) != canonical_json(
        dict(tool_call.arguments)
    ):
        # A decision about another call must never answer this one.
        raise RuntimeError(
            f"approval {approval.id} is for {approval.tool_name}({approval.arguments}), "
            f"not for this {tool.name} call"
        )
    if status == "pending":
        turn.still_pending.append(approval.id)
        raise ApprovalRequired(f"{tool.name} still needs approval")
    if status == "executing":
        return await _outcome_unknown(turn, approval)
    return decision_text(approval)


def decision_text(approval: Any) -> str:
    """The tool result for a call whose approval (or other pause) is settled (never runs it)."""
    kind = getattr(approval, "kind", "approval")
    if kind != "approval" and approval.status not in ("executed", "unknown"):
        return pause_text(approval)
    match approval.status:
        case "executed":
            # Already ran (the run was taken over after the result was recorded): same answer.
            return with_edit_note(approval, approval.result or "")
        case "denied":
            reason = f": {approval.reason}" if approval.reason else " (no reason given)"
            return f"Denied by {decider(approval)}{reason}. The call was not run."
        case "expired":
            when = approval.expires_at.strftime("%Y-%m-%d %H:%M UTC")
            return f"Expired at {when} with no decision. The call was not run."
        case "cancelled":
            return f"Cancelled: {approval.result or approval.reason}. The call was not run."
    return unknown_text(approval.tool_name)


def decider(approval: Any) -> str:
    """Who decided, as the model reads it: the display name stored with the decision
    ("Bo Lee (@bo)"), else the user id as @U…."""
    return getattr(approval, "decided_by_name", None) or f"@{approval.decided_by}"


def unknown_text(tool_name: str) -> str:
    return (
        f"Outcome unknown: the approved call to {tool_name} started but its result was never "
        "recorded (the worker stopped). It was not run again; check its effect by hand."
    )


async def _outcome_unknown(turn: TurnContext, approval: Any) -> str:
    """A call found ``executing``: its worker stopped, or is still at it after losing the run."""
    if not await turn.repo.mark_outcome_unknown(approval.id, now=turn.clock()):
        current = await turn.repo.get_approval(approval.id)
        if current is not None and current.status == "executed":
            return decision_text(current)  # its worker recorded the result meanwhile
    return unknown_text(approval.tool_name)


async def answer_unconfigured(turn: TurnContext, tool_call: llm.ToolCall, approval: Any) -> str:
    """The result for a call to a tool this process does not have (no longer configured).

    A call that may still run (pending, approved) is cancelled, audited, and the model is
    told why; a settled one is answered with its decision, as the gate would.
    """
    name = tool_call.name
    if approval is None:
        return f"Error: the tool {name} is not configured; the call was not run."
    if approval.kind == "retry" and approval.status == "due":
        reason = f"the tool {name} is no longer configured"
        if await turn.repo.cancel_retry(approval.id, reason=reason, now=turn.clock()):
            return f"Cancelled: {reason}; the call was not run again."
        approval = await turn.repo.get_approval(approval.id) or approval
    if approval.status in ("pending", "approved"):
        reason = f"the tool {name} is no longer configured"
        if await turn.repo.cancel_unrunnable(approval.id, reason=reason, now=turn.clock()):
            return f"Cancelled: {reason}; the call was not run."
        approval = await turn.repo.get_approval(approval.id) or approval
    if approval.status == "executing":
        return await _outcome_unknown(turn, approval)
    return decision_text(approval)


async def execute_approved(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, approval: Any
) -> Any:
    """Run exactly the call that was approved, once, and only if it can start in time.

    An edited approval runs its edited arguments (``payload_hash`` binds those), and only
    for the very call that proposed the arguments it replaced.
    """
    tool = prepared.tool
    same_call = proposed_here(tool.name, tool_call, approval)
    tool_call = edited_call(tool_call, approval)
    arguments = dict(tool_call.arguments)
    edited = getattr(approval, "edited_arguments", None)
    approved = approval.arguments if edited is None else edited
    if (
        not same_call
        or prepared.hasher(tool.name, arguments) != approval.payload_hash
        or prepared.hasher(approval.tool_name, approved) != approval.payload_hash
    ):
        reason = (
            f"what was approved no longer matches what would run (the {tool.name} tool's "
            "definition or the call's arguments changed since the approval was requested)"
        )
        await turn.repo.cancel_approved(approval.id, reason=reason, now=turn.clock())
        return f"Cancelled: {reason}. The call was not run."
    now = turn.clock()
    if not await turn.repo.begin_execution(approval.id, now=now, owner=turn.owner):
        return await _not_started(turn, approval, now)
    return await _run_noted(turn, prepared, tool_call, approval)


async def _run_noted(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, row: Any
) -> Any:
    """``_run_recorded``, and for an edited call the model reads first what a person
    changed, with the result or the failure (else it blames, or repeats, its own call)."""
    if edit_note(row) is None:
        return await _run_recorded(turn, prepared, tool_call, row)
    try:
        result = await _run_recorded(turn, prepared, tool_call, row)
    except ToolRaised as raised:
        raise ToolRaised(EditedCallFailed(f"{edit_note(row)} It failed: {raised}")) from None
    return noted_result(row, result)


async def _run_recorded(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, row: Any
) -> Any:
    """Run a call whose start is recorded (``executing``), and record how it ended.

    A pause the tool raises ends this execution (recorded, so it never runs again as this
    execution) and becomes the call's next row: an approved call that raises ``RetryAt``
    runs again at that time on the same approval, once per retry; it is never run again
    once it has returned.
    """
    failpoint("execution_started")
    call = call_context(turn, prepared.tool, tool_call)
    token = current_call.set(call)
    try:
        result = await call_approved_tool(prepared, tool_call)
    except Pause as pause:
        current_call.reset(token)
        refused = await refused_pause(turn, call, pause)
        text = refused or f"Paused: {pause}"
        await _record(turn, row, text, failed=False)
        if refused is not None:
            return refused
        pause_call(turn, prepared, tool_call, call, pause, edited_from=row)
    except Exception as exc:
        current_call.reset(token)
        await disarm(turn, call, f"the tool raised {type(exc).__name__}")
        await _record(turn, row, f"Error: {exc}", failed=True)
        raise ToolRaised(exc) from exc
    else:
        current_call.reset(token)
    await disarm(turn, call, "the tool returned without waiting for its callback")
    output = result.output if isinstance(result, llm.ToolOutput) else result
    text = output if isinstance(output, str) else json.dumps(output, default=repr)
    await _record(turn, row, text, failed=False)
    return result


# -- the other pauses (bot.pauses) ---------------------------------------------------------


async def answer_pause(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, row: Any
) -> Any:
    """The result of a call that paused for a question, a callback or a retry."""
    tool = prepared.tool
    if row.tool_name != tool.name:
        raise RuntimeError(f"{row.kind} {row.id} is for {row.tool_name}, not for this call")
    if row.status == "pending":
        turn.still_pending.append(row.id)
        raise ApprovalRequired(f"{tool.name} still waits")
    if row.kind == "retry" and row.status == "due":
        return await _retry(turn, prepared, tool_call, row)
    if row.status == "executing":
        return await _outcome_unknown(turn, row)
    return decision_text(row)


async def _retry(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, row: Any
) -> Any:
    """Run a call again at its retry time: the same call (checked by hash), at most once.

    A retry of an edited call runs the edited arguments again (its hash binds them)."""
    tool = prepared.tool
    same_call = proposed_here(tool.name, tool_call, row)
    tool_call = edited_call(tool_call, row)
    if not same_call or prepared.hasher(tool.name, dict(tool_call.arguments)) != row.payload_hash:
        reason = (
            f"the {tool.name} tool's definition or the call's arguments changed since the "
            "retry was scheduled"
        )
        await turn.repo.cancel_retry(row.id, reason=reason, now=turn.clock())
        return f"Cancelled: {reason}. The call was not run again."
    if not await turn.repo.begin_retry(row.id, owner=turn.owner or "", now=turn.clock()):
        current = await turn.repo.get_approval(row.id)
        if current is not None and current.status == "due":
            raise LeaseLost(turn.run_id)  # another drive holds the run: it answers
        if current is not None and current.status == "executing":
            return await _outcome_unknown(turn, current)
        return decision_text(current or row)
    return await _run_noted(turn, prepared, tool_call, row)


async def _record(turn: TurnContext, approval: Any, text: str, *, failed: bool) -> None:
    """Record a gated call's result and, in the same transaction, renew this drive's lease.

    If another drive took the run over meanwhile, the result is recorded all the same and
    this drive stops (LeaseLost): the drive that holds the run answers in the thread.
    """
    lease_until = turn.lease_until() if turn.lease_until is not None else None
    still_ours = await turn.repo.record_execution(
        approval.id,
        result=text,
        failed=failed,
        now=turn.clock(),
        owner=turn.owner,
        lease_until=lease_until,
    )
    if not failed:
        failpoint("execution_recorded")
    if not still_ours:
        raise LeaseLost(turn.run_id)  # the gate turns it into HandedOver


async def _not_started(turn: TurnContext, approval: Any, now: datetime) -> str:
    """``begin_execution`` refused: the approval expired, or the run is not ours, or it ran."""
    current = await turn.repo.get_approval(approval.id)
    if current is not None and current.status == "approved":
        if current.expires_at > now:
            raise LeaseLost(turn.run_id)  # another drive holds the run: it answers
        when = current.expires_at.strftime("%Y-%m-%d %H:%M UTC")
        reason = f"approved, but the call could not start before the approval expired at {when}"
        if await turn.repo.cancel_approved(approval.id, reason=reason, now=now):
            return f"Cancelled: {reason}. The call was not run."
        current = await turn.repo.get_approval(approval.id)
    if current is not None and current.status not in ("approved", "executing", "unknown"):
        return decision_text(current)
    return (
        f"Outcome unknown here: approval {approval.id} is being executed by another "
        "worker. Do not ask for the same call again."
    )
