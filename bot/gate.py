"""The approval gate: the one place that turns a decision into a tool result.

Every configured tool is wrapped before the model sees it. A tool whose policy requires
approval gets ``gate``: the first time a call arrives it records an approval draft and pauses
the chain; when the chain is resumed the same call re-executes through llm's normal machinery
and the gate runs the tool (approved), or answers with the decision (denied, expired,
cancelled). Because the gate wraps the tool itself, every path that executes it passes here.

The gate sits before any side effect and records ``approved -> executing`` before the tool
runs and ``executing -> executed`` after, so a call is executed at most once: a call found
``executing`` (its worker died in between) is reported as "outcome unknown", never re-run.

The run's context (run id, requester, where new drafts go) travels in a contextvar, which llm
copies into the tasks that run sibling calls concurrently.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import llm

from bot.failpoints import failpoint
from bot.ids import new_approval_id
from bot.policy import Policy
from bot.tools import tool_definition
from storage.repository import ApprovalDraft, Repository, canonical_json, payload_hash


class ApprovalRequired(llm.PauseChain):
    """Raised by the gate: this call waits for a human."""


class GateFailure(llm.PauseChain):
    """The gate itself failed (storage error, bug): the run must end loudly.

    A PauseChain subclass so that llm propagates it instead of turning it into an
    ``Error: …`` tool result that the model would shrug off.
    """

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"approval gate failed: {original!r}")
        self.original = original


@dataclass
class TurnContext:
    run_id: str
    requester: str
    repo: Repository
    clock: Callable[[], datetime]
    # The run's approvals by tool call id, read once when the drive starts: every approval
    # of a resumed turn is decided by then, and decided ones only move through the
    # conditional UPDATEs below.
    approvals: dict[str, Any] = field(default_factory=dict)
    drafts: list[ApprovalDraft] = field(default_factory=list)
    still_pending: list[str] = field(default_factory=list)
    failures: list[GateFailure] = field(default_factory=list)


current_turn: ContextVar[TurnContext] = ContextVar("approval_bot_turn")


def wrap_tools(tools: list[llm.Tool], policy_for: Callable[[str], Policy | None]) -> list[llm.Tool]:
    """The tools the model gets: gated where policy says so, all of them async."""
    wrapped = []
    for tool in tools:
        policy = policy_for(tool.name)
        wrapped.append(gated_tool(tool, policy) if policy is not None else threaded_tool(tool))
    return wrapped


def threaded_tool(tool: llm.Tool) -> llm.Tool:
    """Run a sync tool in a worker thread so it never blocks the event loop (Slack acks)."""
    implementation = tool.implementation
    if implementation is None or inspect.iscoroutinefunction(implementation):
        return tool

    async def run_in_thread(llm_tool_call: llm.ToolCall, **_arguments: Any) -> Any:
        return await call_tool(tool, llm_tool_call)

    return dataclasses.replace(tool, implementation=run_in_thread)


async def call_tool(tool: llm.Tool, tool_call: llm.ToolCall) -> Any:
    """Call the original implementation the way llm would, sync ones off the event loop."""
    implementation = tool.implementation
    assert implementation is not None
    arguments = dict(tool_call.arguments)
    if "llm_tool_call" in inspect.signature(implementation).parameters:
        arguments["llm_tool_call"] = tool_call
    if inspect.iscoroutinefunction(implementation):
        return await implementation(**arguments)
    result = await asyncio.to_thread(implementation, **arguments)
    if inspect.isawaitable(result):
        result = await result
    return result


def gated_tool(tool: llm.Tool, policy: Policy) -> llm.Tool:
    definition = tool_definition(tool)

    async def gate(llm_tool_call: llm.ToolCall, **_arguments: Any) -> Any:
        turn = current_turn.get()
        approval = turn.approvals.get(llm_tool_call.tool_call_id or "")
        if approval is None:
            turn.drafts.append(_draft(tool.name, llm_tool_call, definition, policy, turn.clock()))
            raise ApprovalRequired(f"{tool.name} needs approval")
        try:
            return await _answer(turn, tool, definition, llm_tool_call, approval)
        except ApprovalRequired:
            raise
        except ToolRaised as raised:
            raise raised.original from None
        except Exception as exc:
            raise _fail(turn, exc) from exc

    # Same name, description and schema: the model sees the original tool.
    return dataclasses.replace(tool, implementation=gate)


class ToolRaised(Exception):
    """Carries the tool's own exception past the gate's failure handling."""

    def __init__(self, original: Exception) -> None:
        super().__init__(str(original))
        self.original = original


def _fail(turn: TurnContext, exc: BaseException) -> GateFailure:
    failure = GateFailure(exc)
    turn.failures.append(failure)
    return failure


def _draft(
    tool_name: str,
    tool_call: llm.ToolCall,
    definition: dict[str, Any],
    policy: Policy,
    now: datetime,
) -> ApprovalDraft:
    arguments = dict(tool_call.arguments)
    return ApprovalDraft(
        id=new_approval_id(),
        tool_call_id=tool_call.tool_call_id or "",
        tool_name=tool_name,
        arguments=arguments,
        payload_hash=payload_hash(tool_name, arguments, definition),
        approvers=list(policy.approvers),
        allow_self_approval=policy.allow_self_approval,
        on_expiry=policy.on_expiry,
        expires_at=now + policy.ttl,
    )


async def _answer(
    turn: TurnContext,
    tool: llm.Tool,
    definition: dict[str, Any],
    tool_call: llm.ToolCall,
    approval: Any,
) -> Any:
    status = approval.status
    if status == "approved":
        return await _execute(turn, tool, definition, tool_call, approval)
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
    if status == "executed":
        # Already ran (the run was taken over after the result was recorded): same answer.
        return approval.result or ""
    if status == "denied":
        reason = f": {approval.reason}" if approval.reason else " (no reason given)"
        return f"Denied by @{approval.decided_by}{reason}. The call was not run."
    if status == "expired":
        when = approval.expires_at.strftime("%Y-%m-%d %H:%M UTC")
        return f"Expired at {when} with no decision. The call was not run."
    if status == "cancelled":
        return f"Cancelled: {approval.result or approval.reason}. The call was not run."
    if status == "executing":
        await turn.repo.mark_outcome_unknown(approval.id, now=turn.clock())
    return (
        f"Outcome unknown: the approved call to {tool.name} started but its result was never "
        "recorded (the worker stopped). It was not run again; check its effect by hand."
    )


async def _execute(
    turn: TurnContext,
    tool: llm.Tool,
    definition: dict[str, Any],
    tool_call: llm.ToolCall,
    approval: Any,
) -> Any:
    """Run exactly the call that was approved, once."""
    arguments = dict(tool_call.arguments)
    if (
        payload_hash(tool.name, arguments, definition) != approval.payload_hash
        or payload_hash(approval.tool_name, approval.arguments, definition) != approval.payload_hash
    ):
        reason = (
            f"what was approved no longer matches what would run (the {tool.name} tool's "
            "definition or the call's arguments changed since the approval was requested)"
        )
        await turn.repo.cancel_approved(approval.id, reason=reason, now=turn.clock())
        return f"Cancelled: {reason}. The call was not run."
    if not await turn.repo.begin_execution(approval.id, now=turn.clock()):
        return (
            f"Outcome unknown here: approval {approval.id} is being executed by another "
            "worker. Do not ask for the same call again."
        )
    failpoint("execution_started")
    try:
        result = await call_tool(tool, tool_call)
    except Exception as exc:
        await turn.repo.record_execution(
            approval.id, result=f"Error: {exc}", failed=True, now=turn.clock()
        )
        raise ToolRaised(exc) from exc
    output = result.output if isinstance(result, llm.ToolOutput) else result
    text = output if isinstance(output, str) else json.dumps(output, default=repr)
    await turn.repo.record_execution(approval.id, result=text, failed=False, now=turn.clock())
    failpoint("execution_recorded")
    return result
