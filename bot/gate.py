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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import inspect
import json
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import llm

from bot.arguments import argument_error
from bot.edits import (
    EditedCallFailed,
    carry_edit,
    edit_note,
    edited_call,
    noted_result,
    proposed_here,
    with_edit_note,
)
from bot.failpoints import failpoint
from bot.grants import granted_approval
from bot.ids import new_approval_id
from bot.pause_rows import call_context, draft_for, given_up, pause_text, refusal
from bot.pauses import CallContext, Pause, RetryAt, WaitForCallback, current_call
from bot.policy import Policy
from bot.ruled_calls import ruled_call
from bot.tools import tool_definition
from storage.records import PayloadHasher
from storage.repository import (
    ApprovalDraft,
    LeaseLost,
    Repository,
    canonical_json,
)
from storage.values import storable


class ApprovalRequired(llm.PauseChain):
    """Raised by the gate: this call waits (for a human's decision or answer, another
    system's callback, or a time); its row is in ``TurnContext.drafts``."""


class GateFailure(llm.PauseChain):
    """The gate itself failed (storage error, bug): the run must end loudly.

    A PauseChain subclass so that llm propagates it instead of turning it into an
    ``Error: …`` tool result that the model would shrug off.
    """

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"approval gate failed: {original!r}")
        self.original = original


class HandedOver(llm.PauseChain):
    """This drive lost its run's lease: another drive carries the run on, so stop quietly."""


@dataclass
class TurnContext:
    run_id: str
    requester: str
    repo: Repository
    clock: Callable[[], datetime]
    # The lease owner of this drive (fences the start of gated calls), and the deadline a
    # renewal of its lease sets now (renewed with each gated call's result).
    owner: str | None = None
    lease_until: Callable[[], datetime] | None = None
    # The approvals of the resumed history's trailing calls, by tool call id, read once when
    # the drive starts: every one is decided by then, and decided ones only move through the
    # conditional UPDATEs below. Each answers its call once (``take_approval``).
    approvals: dict[str, Any] = field(default_factory=dict)
    drafts: list[ApprovalDraft] = field(default_factory=list)
    still_pending: list[str] = field(default_factory=list)
    failures: list[GateFailure] = field(default_factory=list)
    lease_lost: bool = False
    # The run's turn while this drive runs: a pause stores its rows under the next one.
    turn_number: int = 0
    # For the other pauses (bot.pauses): the base of callback URLs, ask_user's policy, the
    # longest RetryAt wait, and each tool's ttl and on_expiry for its waits.
    base_url: str = ""
    question_policy: Policy = field(default_factory=Policy)
    max_retry_wait: timedelta = timedelta(days=1)
    max_retry_attempts: int = 5
    wait_policy: Callable[[str], Policy] = lambda _name: Policy()
    # Where the run's conversation is: rules on arguments see it as ``channel``.
    channel: str = ""

    # A replay's (``Runner.carry_on``): the callbacks that calls of a drive that died armed
    # for the pause it never stored, still waiting or already completed. That call ran and
    # handed its URL out; the same call in the replay waits on its row, it does not run again.
    armed_by_dead_drive: list[Any] = field(default_factory=list)
    # A replay's too: calls a dead drive recorded under a standing grant (bot.grants). The
    # same call in the replay is answered from its row (run, ran, or outcome unknown).
    granted_by_dead_drive: list[Any] = field(default_factory=list)

    def take_approval(self, tool_call: llm.ToolCall) -> Any | None:
        """The approval requested for this call, at most once per drive."""
        return self.approvals.pop(tool_call.tool_call_id or "", None)

    def take_armed_by_dead_drive(self, tool_name: str, tool_call: llm.ToolCall) -> Any | None:
        """The callback a dead drive armed for this very call (same tool and arguments), once."""
        return _take_same_call(self.armed_by_dead_drive, tool_name, tool_call)

    def take_granted_by_dead_drive(self, tool_name: str, tool_call: llm.ToolCall) -> Any | None:
        """The grant's approval a dead drive recorded for this very call, once."""
        return _take_same_call(self.granted_by_dead_drive, tool_name, tool_call)


def _take_same_call(rows: list[Any], tool_name: str, tool_call: llm.ToolCall) -> Any | None:
    arguments = json.loads(json.dumps(dict(tool_call.arguments), default=str))
    for row in rows:
        if row.tool_name == tool_name and row.arguments == arguments:
            rows.remove(row)
            return row
    return None


current_turn: ContextVar[TurnContext] = ContextVar("approval_bot_turn")


def wrap_tools(tools: list[llm.Tool], policy_for: Callable[[str], Policy | None]) -> list[llm.Tool]:
    """The tools the model gets, every one behind the gate and async.

    The policy only decides whether a call *without* an approval needs one; a call that has
    an approval is answered from it whatever the policy says now.
    """
    return [
        gated_tool(tool, policy_for(tool.name)) if tool.implementation is not None else tool
        for tool in tools
    ]


@dataclass(frozen=True)
class PreparedTool:
    """What the gate needs of a tool, worked out once when the tool is wrapped, not per call.

    ``inspect.signature`` (about 30 us), the definition the model was shown and the
    serialized definition inside every payload hash (most of a hash's cost) do not change
    while the tool is configured.
    """

    tool: llm.Tool
    hasher: PayloadHasher
    is_async: bool
    takes_tool_call: bool

    @classmethod
    def of(cls, tool: llm.Tool) -> PreparedTool:
        implementation = tool.implementation
        assert implementation is not None
        return cls(
            tool=tool,
            hasher=PayloadHasher(tool_definition(tool)),
            is_async=inspect.iscoroutinefunction(implementation),
            takes_tool_call=_takes_tool_call(implementation),
        )

    def arguments(self, tool_call: llm.ToolCall) -> dict[str, Any]:
        """The implementation's arguments, as llm would pass them."""
        arguments = dict(tool_call.arguments)
        if self.takes_tool_call:
            arguments["llm_tool_call"] = tool_call
        return arguments


def _takes_tool_call(implementation: Callable[..., Any]) -> bool:
    try:
        return "llm_tool_call" in inspect.signature(implementation).parameters
    except (TypeError, ValueError):  # as llm: no signature, no tool call
        return False


async def call_tool(prepared: PreparedTool, tool_call: llm.ToolCall) -> Any:
    """Call the original implementation the way llm would, sync ones off the event loop.

    An async implementation is awaited right here: no worker thread, no extra task.
    """
    implementation = prepared.tool.implementation
    assert implementation is not None
    arguments = prepared.arguments(tool_call)
    if prepared.is_async:
        return await implementation(**arguments)
    result = await asyncio.to_thread(implementation, **arguments)
    if inspect.isawaitable(result):
        result = await result
    return result


async def call_approved_tool(prepared: PreparedTool, tool_call: llm.ToolCall) -> Any:
    """Call an approved tool now: its ``executing`` record is committed, so it must start.

    An async tool is awaited on the event loop at once. A sync tool gets a thread of its own
    rather than the default pool's: a call waiting in that pool's queue (its threads busy
    with other tools) would be recorded as started while it is not, reported "outcome
    unknown" if the process died meanwhile, and could start after its approval expired. A
    new thread has no queue; ``start()`` returns once it runs. The database work stays on
    the event loop (a worker thread blocking on it could wait for the very pool it
    occupies). Gated calls are few (each waited for a human), so a thread each costs nothing
    that matters.
    """
    tool = prepared.tool
    implementation = tool.implementation
    assert implementation is not None
    arguments = prepared.arguments(tool_call)
    if prepared.is_async:
        return await implementation(**arguments)
    context = contextvars.copy_context()
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()  # started: a cancelled drive cannot unstart it

    def run() -> None:
        try:
            future.set_result(context.run(implementation, **arguments))
        except BaseException as exc:  # handed to the awaiting drive, as to_thread does
            future.set_exception(exc)

    threading.Thread(target=run, name=f"approval-bot-tool-{tool.name}").start()
    result = await asyncio.wrap_future(future)
    if inspect.isawaitable(result):
        result = await result
    return result


def gated_tool(tool: llm.Tool, policy: Policy | None) -> llm.Tool:
    """``tool`` behind the gate; ``policy`` None: calls without an approval just run."""
    prepared = PreparedTool.of(tool)

    async def gate(llm_tool_call: llm.ToolCall, **_arguments: Any) -> Any:
        turn = current_turn.get(None)
        if turn is None and policy is None:
            return await call_tool(prepared, llm_tool_call)
        if turn is None:
            raise RuntimeError(f"{tool.name} needs approval but no run is being driven")
        if turn.lease_lost:
            raise HandedOver(f"run {turn.run_id}: lease lost")
        approval = turn.take_approval(llm_tool_call)
        if approval is not None and approval.kind != "approval":
            return await _translated(turn, _answer_pause(turn, prepared, llm_tool_call, approval))
        if approval is None:
            armed = turn.take_armed_by_dead_drive(tool.name, llm_tool_call)
            if armed is not None:
                _wait_on_armed(turn, prepared, llm_tool_call, armed)
            granted = turn.take_granted_by_dead_drive(tool.name, llm_tool_call)
            if granted is not None:
                return await _translated(turn, _answer(turn, prepared, llm_tool_call, granted))
            if policy is None:
                # Sync tools run in a worker thread, off the event loop (Slack acks).
                return await _translated(turn, _pausable(turn, prepared, llm_tool_call))
            if too_deep(llm_tool_call.arguments, MAX_ARGUMENT_DEPTH):
                # Hashing, storing and showing the arguments all walk them recursively.
                return (
                    f"Error: the arguments of this {tool.name} call are nested more than "
                    f"{MAX_ARGUMENT_DEPTH} levels deep; the call was not run and no approval "
                    "was asked for."
                )
            # The stored form is what a human approves and what runs (NaN becomes "NaN").
            if problem := argument_error(tool.input_schema, storable(llm_tool_call.arguments)):
                # A call that cannot run is refused before a human is asked about it.
                return (
                    f"Error: the arguments of this {tool.name} call do not fit the tool's "
                    f"schema: {problem}. The call was not run and no approval was asked for; "
                    "correct the arguments, or ask the user for what is missing."
                )
            # Rules on arguments (bot.rules) choose this call's policy.
            effective = policy.resolve(
                storable(llm_tool_call.arguments), requester=turn.requester, channel=turn.channel
            )
            if effective.approval != "required":
                run = lambda: _pausable(turn, prepared, llm_tool_call)  # noqa: E731
                return await _translated(turn, ruled_call(turn, tool.name, effective, run))
            if effective.grant_max is not None:
                work = _run_granted(turn, prepared, llm_tool_call, policy)  # resolves it
                ran = await _translated(turn, work)
                if ran is not _NOT_GRANTED:
                    return ran
            turn.drafts.append(_draft(prepared, llm_tool_call, effective, turn.clock()))
            raise ApprovalRequired(f"{tool.name} needs approval")
        return await _translated(turn, _answer(turn, prepared, llm_tool_call, approval))

    # llm asks every call's implementation for its signature (does it take llm_tool_call?):
    # answered from here it costs nothing.
    gate.__signature__ = inspect.signature(gate)  # type: ignore[attr-defined]
    # Same name, description and schema: the model sees the original tool.
    return dataclasses.replace(tool, implementation=gate)


_NOT_GRANTED = object()


async def _run_granted(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, policy: Policy
) -> Any:
    """Run a call a standing grant of its thread covers (bot.grants), as an approved call:
    its approval row is recorded first, then ``_execute`` runs it at most once."""
    name = prepared.tool.name
    approval = await granted_approval(turn, prepared.hasher, name, tool_call, policy)
    if approval is None:
        return _NOT_GRANTED
    return await _execute(turn, prepared, tool_call, approval)


# Deeper arguments are refused before an approval is drafted (no real tool needs them):
# hashing, storing and rendering them recurse, and ~900 levels exhaust Python's stack.
MAX_ARGUMENT_DEPTH = 100


def too_deep(value: Any, limit: int) -> bool:
    """Whether lists and objects in ``value`` nest more than ``limit`` deep (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class ToolRaised(Exception):
    """Carries the tool's own exception past the gate's failure handling."""

    def __init__(self, original: Exception) -> None:
        super().__init__(str(original))
        self.original = original


async def _translated(turn: TurnContext, work: Awaitable[Any]) -> Any:
    """Await the gate's work on a call and turn what it raised into what llm must see.

    Pauses and hand-overs pass through; a lost lease stops this drive quietly; the tool's own
    exception stays the tool's (llm shows it to the model); anything else is the gate failing,
    which ends the run loudly.
    """
    try:
        return await work
    except (ApprovalRequired, HandedOver):
        raise
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
    prepared: PreparedTool, tool_call: llm.ToolCall, policy: Policy, now: datetime
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
    )


async def _answer(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, approval: Any
) -> Any:
    status = approval.status
    tool = prepared.tool
    if status == "approved":
        return await _execute(turn, prepared, tool_call, approval)
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


async def _execute(
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
        refused = await _refused(turn, call, pause)
        text = refused or f"Paused: {pause}"
        await _record(turn, row, text, failed=False)
        if refused is not None:
            return refused
        _pause_call(turn, prepared, tool_call, call, pause, edited_from=row)
    except Exception as exc:
        current_call.reset(token)
        await _disarm(turn, call, f"the tool raised {type(exc).__name__}")
        await _record(turn, row, f"Error: {exc}", failed=True)
        raise ToolRaised(exc) from exc
    else:
        current_call.reset(token)
    await _disarm(turn, call, "the tool returned without waiting for its callback")
    output = result.output if isinstance(result, llm.ToolOutput) else result
    text = output if isinstance(output, str) else json.dumps(output, default=repr)
    await _record(turn, row, text, failed=False)
    return result


# -- the other pauses (bot.pauses) ---------------------------------------------------------


async def _pausable(turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall) -> Any:
    """Run an ungated call; a pause it raises becomes the call's row (drafted for the
    pause that follows). The tool's own errors go back to llm as they always did."""
    call = call_context(turn, prepared.tool, tool_call)
    token = current_call.set(call)
    try:
        result = await call_tool(prepared, tool_call)
    except Pause as pause:
        current_call.reset(token)
        refused = await _refused(turn, call, pause)
        if refused is not None:
            return refused
        _pause_call(turn, prepared, tool_call, call, pause)
    except Exception as exc:
        current_call.reset(token)
        await _disarm(turn, call, f"the tool raised {type(exc).__name__}")
        raise ToolRaised(exc) from exc
    else:
        current_call.reset(token)
    await _disarm(turn, call, "the tool returned without waiting for its callback")
    return result


def _wait_on_armed(
    turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall, armed: Any
) -> None:
    """Pause this call on the callback a dead drive's run of it armed, without running it
    again: its side effect happened, the other system has the URL and may have called back
    already (a 202 it was given stands: the pause stored, the run carries on with the body)."""
    remaining = armed.expires_at - turn.clock()
    pause = WaitForCallback(
        armed.reason or prepared.tool.name,
        timeout=remaining if remaining > timedelta(0) else timedelta(seconds=1),
    )
    name = prepared.tool.name
    turn.drafts.append(draft_for(turn, name, prepared.hasher, tool_call, armed.id, pause))
    raise ApprovalRequired(str(pause))


async def _disarm(turn: TurnContext, call: CallContext, reason: str) -> None:
    if call.armed_id is not None:
        await turn.repo.disarm_callback(call.armed_id, reason=reason, now=turn.clock())


async def _refused(turn: TurnContext, call: CallContext, pause: Pause) -> str | None:
    """The error result for a pause that cannot be taken as asked (the run does not pause),
    or None. A callback armed for a call that does not wait for it is void."""
    refused = refusal(pause, now=turn.clock(), max_retry_wait=turn.max_retry_wait)
    if refused is None and isinstance(pause, RetryAt):
        refused = await given_up(turn, call, pause)
    if refused is not None:
        await _disarm(turn, call, "the pause the tool asked for was refused")
    elif not isinstance(pause, WaitForCallback):
        await _disarm(turn, call, f"the tool raised {type(pause).__name__}, not WaitForCallback")
    return refused


def _pause_call(
    turn: TurnContext,
    prepared: PreparedTool,
    tool_call: llm.ToolCall,
    call: CallContext,
    pause: Pause,
    *,
    edited_from: Any = None,
) -> None:
    """Draft this call's row for the pause and raise it (``refusal`` found nothing wrong).

    ``edited_from``: the approved row this call ran on; if a person edited it, the new row
    keeps the proposed arguments and the edited ones (which it hashes), as its approval did.
    """
    name = prepared.tool.name
    draft = draft_for(turn, name, prepared.hasher, tool_call, call.armed_id, pause)
    turn.drafts.append(carry_edit(draft, edited_from))
    raise ApprovalRequired(str(pause))


async def _answer_pause(
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
