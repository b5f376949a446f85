"""Answering a call from its row: run the approved call once, or say what was decided.

The approved-call path records ``approved -> executing`` before the tool runs and
``executing -> executed`` after (through the repository), so a call runs at most once; a
call found ``executing`` is reported "outcome unknown", unless it stored a checkpoint
(``bot.gate.checkpoints``): then it runs again from there, its author having accepted that
work after the last checkpoint may run again. Denied, expired and cancelled calls
are answered with ``decision_text``; edited calls carry a note of what a person changed.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

import llm

from bot.gate.checkpoints import HeldAtCheckpoint, enable_checkpoints, resume_from_checkpoint
from bot.gate.edited_calls import EditedCallFailed, edited_call, proposed_here
from bot.gate.pause_rows import call_context
from bot.gate.pausing import disarm, pause_call, refused_pause
from bot.gate.recording import record_result
from bot.gate.recoveries import approval_for_edit, ask_about_unknown, ask_or_raise
from bot.gate.safe_points import HoldRequested
from bot.gate.texts import decision_text, edit_note, noted_result, unknown_text
from bot.gate.tool_calls import PreparedTool, call_approved_tool
from bot.gate.turn import ApprovalRequired, ToolRaised, TurnContext
from bot.ops import failpoint
from bot.pauses import Interrupted, Pause, current_call
from bot.policy import Policy
from storage.repository import LeaseLost, RunHeld, StoredCheckpoint, canonical_json

log = logging.getLogger(__name__)

STOPPED_AT_CHECKPOINT = (
    "Error: the run was stopped by an operator; the call stopped at its checkpoint, "
    "before it finished (the work after that checkpoint was not done)."
)


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
        return await _executing(turn, prepared, tool_call, approval)
    return decision_text(approval)


async def _executing(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, row: Any
) -> Any:
    """A call found ``executing`` (its worker stopped): resumed from its checkpoint if it
    stored one and is still the very call that was approved (or scheduled); else "outcome
    unknown", and with ``on_error = "ask"`` a recovery card too."""
    tool = prepared.tool
    same_call = proposed_here(tool.name, tool_call, row)
    to_run = edited_call(tool_call, row)
    if same_call and prepared.hasher(tool.name, dict(to_run.arguments)) == row.payload_hash:
        resumed = await resume_from_checkpoint(turn, row)
        if resumed is not None:
            return await _run_noted(turn, prepared, to_run, row, resumed)
    return await _unknown_or_ask(turn, prepared, tool_call, row)


async def _unknown_or_ask(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, row: Any
) -> str:
    """A call found ``executing`` that cannot resume (no checkpoint): "outcome unknown", and
    with ``on_error = "ask"`` a recovery row too (it ran / retry / skip / stop); the call is
    never run again without a person's choice."""
    text = await _outcome_unknown(turn, row)
    if text == unknown_text(row.tool_name):
        ask_about_unknown(turn, prepared, tool_call, row, text)
    return text


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
    if approval.kind in ("retry", "recovery") and approval.status == "due":
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
    try:
        # The call's safe point (bot.gate.safe_points): a hold stops it before it starts.
        started = await turn.repo.begin_execution(
            approval.id, now=now, owner=turn.owner, stop_if_held=True
        )
    except RunHeld as held:
        turn.approvals[tool_call.tool_call_id or ""] = approval  # answers it after Resume
        raise HoldRequested(turn.run_id, held.action) from None
    if not started:
        return await _not_started(turn, approval, now)
    return await _run_noted(turn, prepared, tool_call, approval)


async def _run_noted(
    turn: TurnContext,
    prepared: PreparedTool,
    tool_call: llm.ToolCall,
    row: Any,
    resumed: StoredCheckpoint | None = None,
) -> Any:
    """``_run_recorded``, and for an edited call the model reads first what a person
    changed, with the result or the failure (else it blames, or repeats, its own call)."""
    if edit_note(row) is None:
        return await _run_recorded(turn, prepared, tool_call, row, resumed)
    try:
        result = await _run_recorded(turn, prepared, tool_call, row, resumed)
    except ToolRaised as raised:
        raise ToolRaised(EditedCallFailed(f"{edit_note(row)} It failed: {raised}")) from None
    return noted_result(row, result)


async def _run_recorded(
    turn: TurnContext,
    prepared: PreparedTool,
    tool_call: llm.ToolCall,
    row: Any,
    resumed: StoredCheckpoint | None = None,
) -> Any:
    """Run a call whose start is recorded (``executing``), and record how it ended.

    A pause the tool raises ends this execution (recorded, so it never runs again as this
    execution) and becomes the call's next row: an approved call that raises ``RetryAt``
    runs again at that time on the same approval, once per retry; it is never run again
    once it has returned. A call its ``checkpoint()`` stopped (``Interrupted``) is left
    ``executing``, for the drive that holds the run next to resume it from there; stopped
    there for an operator's pause, too (the drive holds the run: Resume resumes the call),
    while a Stop records it ``executed`` with "stopped at its checkpoint" (the run ends).
    """
    failpoint("execution_started")
    call = call_context(turn, prepared.tool, tool_call)
    enable_checkpoints(turn, call, row, resumed)
    token = current_call.set(call)
    try:
        result = await call_approved_tool(prepared, tool_call)
    except HeldAtCheckpoint as held:
        current_call.reset(token)
        await disarm(turn, call, "the tool stopped at a checkpoint")
        log.warning("run %s: %s stopped at a checkpoint: %s", turn.run_id, row.id, held.reason)
        if held.action == "stop":
            await _record(turn, row, STOPPED_AT_CHECKPOINT, failed=True)
        raise HoldRequested(turn.run_id, held.action) from None  # the drive holds the run
    except Interrupted as stop:
        current_call.reset(token)
        await disarm(turn, call, "the tool stopped at a checkpoint")
        log.warning("run %s: %s stopped at a checkpoint: %s", turn.run_id, row.id, stop.reason)
        raise LeaseLost(turn.run_id) from None  # this drive stops; the call resumes later
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
        ask_or_raise(turn, prepared, tool_call, exc, failed_row=row)  # or ToolRaised
    else:
        current_call.reset(token)
    await disarm(turn, call, "the tool returned without waiting for its callback")
    output = result.output if isinstance(result, llm.ToolOutput) else result
    text = output if isinstance(output, str) else json.dumps(output, default=repr)
    await _record(turn, row, text, failed=False)
    return result


# -- the other pauses (bot.pauses) ---------------------------------------------------------


async def answer_pause(
    turn: TurnContext,
    prepared: PreparedTool,
    tool_call: llm.ToolCall,
    row: Any,
    policy: Policy | None = None,
) -> Any:
    """The result of a call that paused for a question, a callback or a retry."""
    tool = prepared.tool
    if row.tool_name != tool.name:
        raise RuntimeError(f"{row.kind} {row.id} is for {row.tool_name}, not for this call")
    if row.status == "pending":
        turn.still_pending.append(row.id)
        raise ApprovalRequired(f"{tool.name} still waits")
    if row.kind in ("retry", "recovery") and row.status == "due":
        return await _retry(turn, prepared, tool_call, row, policy)
    if row.status == "executing":
        return await _executing(turn, prepared, tool_call, row)
    return decision_text(row)


async def _retry(
    turn: TurnContext,
    prepared: PreparedTool,
    tool_call: llm.ToolCall,
    row: Any,
    policy: Policy | None = None,
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
    if (needs := approval_for_edit(turn, row, policy)) is not None:
        # Edit, then retry, of a call a rule now gates: it asks for approval instead.
        reason = "the edited call needs approval; it was asked for"
        if await turn.repo.cancel_retry(row.id, reason=reason, now=turn.clock()):
            turn.drafts.append(needs)
            raise ApprovalRequired(f"{tool.name}: the edited call needs approval")
    if not await turn.repo.begin_retry(row.id, owner=turn.owner or "", now=turn.clock()):
        current = await turn.repo.get_approval(row.id)
        if current is not None and current.status == "due":
            raise LeaseLost(turn.run_id)  # another drive holds the run: it answers
        if current is not None and current.status == "executing":
            return await _executing(turn, prepared, tool_call, current)
        return decision_text(current or row)
    return await _run_noted(turn, prepared, tool_call, row)


async def _record(turn: TurnContext, approval: Any, text: str, *, failed: bool) -> None:
    """Record a gated call's result and, in the same transaction, renew this drive's lease.

    If another drive took the run over meanwhile, the result is recorded all the same and
    this drive stops (LeaseLost): the drive that holds the run answers in the thread. A
    database outage is waited out, past the lease too (``bot.gate.recording``).
    """
    still_ours = await record_result(turn, approval.id, text, failed=failed)
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
