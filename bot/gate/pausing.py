"""Running a call that may pause (bot.pauses): its pause becomes the call's next row.

Owns no durable state of its own: a pause drafts a row into ``TurnContext.drafts`` (the
runner stores it), and a callback armed for a call that does not wait for it is disarmed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import llm

from bot.gate.checkpoints import enable_progress
from bot.gate.edited_calls import carry_edit
from bot.gate.pause_rows import (
    call_context,
    delegation_refusal,
    draft_for,
    given_up,
    refusal,
)
from bot.gate.recoveries import ask_or_raise
from bot.gate.tool_calls import PreparedTool, call_tool
from bot.gate.turn import ApprovalRequired, TurnContext
from bot.pauses import (
    CallContext,
    Delegate,
    Interrupted,
    Pause,
    RetryAt,
    WaitForCallback,
    current_call,
)
from storage.repository import LeaseLost


async def run_pausable(turn: TurnContext, prepared: PreparedTool, tool_call: llm.ToolCall) -> Any:
    """Run an ungated call; a pause it raises becomes the call's row (drafted for the
    pause that follows). The tool's own errors go back to llm as they always did."""
    call = call_context(turn, prepared.tool, tool_call)
    enable_progress(turn, call)
    token = current_call.set(call)
    try:
        result = await call_tool(prepared, tool_call)
    except Interrupted:
        # Stopped at a checkpoint (the run is another drive's now): this drive stops.
        current_call.reset(token)
        await disarm(turn, call, "the tool stopped at a checkpoint")
        raise LeaseLost(turn.run_id) from None
    except Pause as pause:
        current_call.reset(token)
        refused = await refused_pause(turn, call, pause)
        if refused is not None:
            return refused
        pause_call(turn, prepared, tool_call, call, pause)
    except Exception as exc:
        current_call.reset(token)
        await disarm(turn, call, f"the tool raised {type(exc).__name__}")
        ask_or_raise(turn, prepared, tool_call, exc)  # on_error = "ask": a recovery row
    else:
        current_call.reset(token)
    await disarm(turn, call, "the tool returned without waiting for its callback")
    return result


def wait_on_armed(
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


async def disarm(turn: TurnContext, call: CallContext, reason: str) -> None:
    if call.armed_id is not None:
        await turn.repo.disarm_callback(call.armed_id, reason=reason, now=turn.clock())


async def refused_pause(turn: TurnContext, call: CallContext, pause: Pause) -> str | None:
    """The error result for a pause that cannot be taken as asked (the run does not pause),
    or None. A callback armed for a call that does not wait for it is void."""
    refused = refusal(pause, now=turn.clock(), max_retry_wait=turn.max_retry_wait)
    if refused is None and isinstance(pause, Delegate):
        refused = delegation_refusal(turn, pause)
    if refused is None and isinstance(pause, RetryAt):
        refused = await given_up(turn, call, pause)
    if refused is not None:
        await disarm(turn, call, "the pause the tool asked for was refused")
    elif not isinstance(pause, WaitForCallback):
        await disarm(turn, call, f"the tool raised {type(pause).__name__}, not WaitForCallback")
    return refused


def pause_call(
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
