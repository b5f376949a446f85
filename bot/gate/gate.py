"""The approval gate: the one place that turns a decision into a tool result.

Every configured tool is wrapped in ``gate`` before the model sees it. When a call of a tool
whose policy requires approval arrives, the gate records an approval draft and pauses the
chain; when the chain is resumed the same call re-executes through llm's normal machinery and
the gate runs the tool (approved), or answers with the decision (denied, expired, cancelled).
Because the gate wraps the tool itself, every path that executes it passes here.

The gate sits before any side effect and records ``approved -> executing`` before the tool
runs (only before the approval expires, and only while this drive holds the run's lease) and
``executing -> executed`` after, so a call is executed at most once: a call found
``executing`` (its worker died in between) is reported as "outcome unknown", never re-run.

Gating belongs to the approval, not to whichever config resumes the run: every tool goes
through ``gate``, and a call that has an approval is answered from it even if today's policy
no longer gates the tool (or the tool is gone: see ``answer_unconfigured``). An approval
answers only the call it was requested for (a trailing call of the resumed history), once; a
later call in the same drive that reuses its tool call id ("call_0") asks for a new one.

The run's context (run id, requester, where new drafts go) travels in a contextvar, which llm
copies into the tasks that run sibling calls concurrently.

This module decides what happens to a call; the rest lives beside it in the package:
``bot.gate.turn`` (the drive's context and what the gate raises), ``bot.gate.tool_calls``
(calling an implementation as llm would), ``bot.gate.answers`` (running an approved call
once, answering settled ones), ``bot.gate.pausing`` (calls that pause) and
``bot.gate.texts`` (what the model reads).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import llm

from bot.gate.answers import answer_approval, answer_pause, execute_approved
from bot.gate.granted import granted_approval
from bot.gate.pausing import run_pausable, wait_on_armed
from bot.gate.ruled_calls import ruled_call
from bot.gate.safe_points import HoldRequested, check_hold
from bot.gate.stream_events import TaskStatus, task_event
from bot.gate.tool_calls import PreparedTool, call_tool
from bot.gate.turn import (
    ApprovalRequired,
    GateFailure,
    HandedOver,
    ToolRaised,
    TurnContext,
    current_turn,
)
from bot.ids import new_approval_id
from bot.policy import MAX_ARGUMENT_DEPTH, Policy, too_deep
from bot.policy.arguments import schema_text_error
from storage.repository import ApprovalDraft, LeaseLost
from storage.values import storable


def wrap_tools(tools: list[llm.Tool], policy_for: Callable[[str], Policy | None]) -> list[llm.Tool]:
    """The tools the model gets, every one behind the gate and async.

    The policy only decides whether a call *without* an approval needs one; a call that has
    an approval is answered from it whatever the policy says now.
    """
    return [
        gated_tool(tool, policy_for(tool.name)) if tool.implementation is not None else tool
        for tool in tools
    ]


def gated_tool(tool: llm.Tool, policy: Policy | None) -> llm.Tool:
    """``tool`` behind the gate; ``policy`` None: calls without an approval just run."""
    prepared = PreparedTool.of(tool)

    async def gate(llm_tool_call: llm.ToolCall, **_arguments: Any) -> Any:
        turn = current_turn.get(None)
        if turn is None or turn.on_event is None:
            return await decide(llm_tool_call)
        # The thread shows the call as a task while it runs (bot.gate.stream_events).
        return await _as_task(turn, tool.name, llm_tool_call, decide(llm_tool_call))

    async def decide(llm_tool_call: llm.ToolCall) -> Any:
        turn = current_turn.get(None)
        if turn is None and policy is None:
            return await call_tool(prepared, llm_tool_call)
        if turn is None:
            raise RuntimeError(f"{tool.name} needs approval but no run is being driven")
        if turn.lease_lost:
            raise HandedOver(f"run {turn.run_id}: lease lost")
        if llm_tool_call.tool_call_id in turn.held_results:
            # It ran before an operator's pause: its result, not a second run.
            return turn.held_results.pop(llm_tool_call.tool_call_id)
        approval = turn.take_approval(llm_tool_call)
        # A safe point: an operator's pause takes effect before this call starts. A new call
        # of a gated tool only asks for approval: its safe point is the pause's transaction
        # (``save_pause(stop_if_held=True)``) unless it turns out to do more (checked below);
        # an approved call's is the transaction that starts it (``begin_execution`` with
        # ``stop_if_held``, which raises RunHeld).
        asks = approval is None and policy is not None
        approved = (
            approval is not None and approval.kind == "approval" and approval.status == "approved"
        )
        if not asks and not approved:
            await check_hold(turn)
        if approval is not None and approval.kind != "approval":
            work = answer_pause(turn, prepared, llm_tool_call, approval, policy)
            return await _translated(turn, work)
        if approval is None:
            armed = turn.take_armed_by_dead_drive(tool.name, llm_tool_call)
            granted = turn.take_granted_by_dead_drive(tool.name, llm_tool_call)
            if asks and (armed is not None or granted is not None):
                await check_hold(turn)
            if armed is not None:
                wait_on_armed(turn, prepared, llm_tool_call, armed)
            if granted is not None:
                return await _translated(
                    turn, answer_approval(turn, prepared, llm_tool_call, granted)
                )
            if policy is None:
                # Sync tools run in a worker thread, off the event loop (Slack acks).
                return await _translated(turn, run_pausable(turn, prepared, llm_tool_call))
            if too_deep(llm_tool_call.arguments, MAX_ARGUMENT_DEPTH):
                await check_hold(turn)
                # Hashing, storing and showing the arguments all walk them recursively.
                return (
                    f"Error: the arguments of this {tool.name} call are nested more than "
                    f"{MAX_ARGUMENT_DEPTH} levels deep; the call was not run and no approval "
                    "was asked for."
                )
            # The stored form is what a human approves and what runs (NaN becomes "NaN").
            arguments = storable(llm_tool_call.arguments)
            if prepared.schema_text is not None and (
                problem := schema_text_error(prepared.schema_text, arguments)
            ):
                await check_hold(turn)
                # A call that cannot run is refused before a human is asked about it.
                return (
                    f"Error: the arguments of this {tool.name} call do not fit the tool's "
                    f"schema: {problem}. The call was not run and no approval was asked for; "
                    "correct the arguments, or ask the user for what is missing."
                )
            # Rules on arguments (bot.policy.rules) choose this call's policy.
            effective = policy.resolve(arguments, requester=turn.requester, channel=turn.channel)
            if effective.approval != "required" or effective.grant_max is not None:
                await check_hold(turn)
            if effective.approval != "required":
                run = lambda: run_pausable(turn, prepared, llm_tool_call)  # noqa: E731
                return await _translated(turn, ruled_call(turn, tool.name, effective, run))
            if effective.grant_max is not None:
                work = _run_granted(turn, prepared, llm_tool_call, policy)  # resolves it
                ran = await _translated(turn, work)
                if ran is not _NOT_GRANTED:
                    return ran
            turn.drafts.append(
                _draft(prepared, llm_tool_call, effective, turn.clock(), why=turn.why)
            )
            turn.unchecked_drafts = True  # their safe point: the pause's transaction
            raise ApprovalRequired(f"{tool.name} needs approval")
        return await _translated(turn, answer_approval(turn, prepared, llm_tool_call, approval))

    # llm asks every call's implementation for its signature (does it take llm_tool_call?):
    # answered from here it costs nothing.
    gate.__signature__ = inspect.signature(gate)  # type: ignore[attr-defined]
    # Same name, description and schema: the model sees the original tool.
    return dataclasses.replace(tool, implementation=gate)


_NOT_GRANTED = object()


async def _run_granted(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, policy: Policy
) -> Any:
    """Run a call a standing grant of its thread covers (bot.policy.grants), as an approved call:
    its approval row is recorded first, then ``execute_approved`` runs it at most once."""
    name = prepared.tool.name
    approval = await granted_approval(turn, prepared.hasher, name, tool_call, policy)
    if approval is None:
        return _NOT_GRANTED
    return await execute_approved(turn, prepared, tool_call, approval)


async def _translated(turn: TurnContext, work: Awaitable[Any]) -> Any:
    """Await the gate's work on a call and turn what it raised into what llm must see.

    Pauses and hand-overs pass through; a lost lease stops this drive quietly; the tool's own
    exception stays the tool's (llm shows it to the model); anything else is the gate failing,
    which ends the run loudly.
    """
    try:
        return await work
    except (ApprovalRequired, HandedOver, HoldRequested):
        raise  # HoldRequested: a long tool's checkpoint() is a safe point too
    except LeaseLost:
        turn.lease_lost = True
        raise HandedOver(f"run {turn.run_id}: lease lost") from None
    except ToolRaised as raised:
        raise raised.original from None
    except Exception as exc:
        raise _fail(turn, exc) from exc


def _fail(turn: TurnContext, exc: BaseException) -> GateFailure:
    failure = GateFailure(exc)
    turn.failures.append(failure)
    return failure


def _draft(
    prepared: PreparedTool, tool_call: llm.ToolCall, policy: Policy, now: datetime, *, why: str
) -> ApprovalDraft:
    arguments = dict(tool_call.arguments)
    tool_name = prepared.tool.name
    return ApprovalDraft(
        id=new_approval_id(),
        tool_call_id=tool_call.tool_call_id or "",
        tool_name=tool_name,
        arguments=arguments,
        payload_hash=prepared.hasher(tool_name, arguments),
        approvers=list(policy.approvers),
        allow_self_approval=policy.allow_self_approval,
        on_expiry=policy.on_expiry,
        expires_at=now + policy.ttl,
        remind_at=now + policy.remind_after if policy.remind_after else None,
        escalate_at=now + policy.escalate_after if policy.escalate_after else None,
        escalate_to=tuple(policy.escalate_to),
        rule=policy.rule,
        rule_when=policy.rule_when,
        rule_error=policy.rule_error,
        min_approvals=policy.min_approvals,
        allow_edit=policy.allow_edit,
        why=shortened_why(why),
    )


# The card shows at most this much of the model's "why" (issue 21): enough for a reason,
# not the model's whole preamble.
WHY_LIMIT = 300


def shortened_why(text: str) -> str | None:
    """The model's text as an approval keeps it: one paragraph's worth, None when empty."""
    text = " ".join(text.split())
    if not text:
        return None
    return text if len(text) <= WHY_LIMIT else text[: WHY_LIMIT - 1].rstrip() + "…"


async def _as_task(turn: TurnContext, name: str, call: llm.ToolCall, work: Awaitable[Any]) -> Any:
    """``work`` (the gate's answer to ``call``), told to the thread as a task: in progress,
    then complete or error with the first line of its result; a call that waits for a person
    stays pending (its card follows)."""

    def tell(status: TaskStatus, summary: object = "") -> None:
        event = task_event(
            turn.run_id, call.tool_call_id or "", name, call.arguments, status, summary
        )
        turn.emit(event)

    tell("in_progress")
    try:
        result = await work
    except ApprovalRequired:
        tell("pending", "waiting for a person: see the card below")
        raise
    except GateFailure as failure:
        tell("error", failure.original)
        raise
    except llm.PauseChain:
        raise  # a hold or a hand-over: the run stops here, the task with it
    except Exception as exc:
        tell("error", f"{type(exc).__name__}: {exc}")
        raise
    failed = isinstance(result, str) and result.startswith("Error")
    tell("error" if failed else "complete", result)
    return result
