"""The stored llm history: which calls wait for a result, and closing the ones that never will.

OpenAI-style providers reject a history in which a tool call has no tool result. A paused run
has such calls at its end on purpose (resuming re-executes them); a run that failed or was
cancelled keeps them for good, so a follow-up in its thread would be refused. Before the
follow-up's message is added, each of them gets a result that says what happened to it.
"""

from __future__ import annotations

from typing import Any

import llm
from llm.parts import Message, ToolCallPart, ToolResultPart

from bot.gate import decision_text, unknown_text
from storage.models import Approval


def trailing_calls(history: list[Message]) -> list[llm.ToolCall]:
    """The calls of the last assistant message that have no result yet (what a resume runs).

    Empty when the history has moved on past them (a user message follows).
    """
    last = None
    for index, message in enumerate(history):
        if message.role == "assistant" and _calls(message):
            last = index
    if last is None:
        return []
    answered: set[str | None] = set()
    for message in history[last + 1 :]:
        if message.role != "tool":
            return []
        answered |= {p.tool_call_id for p in message.parts if isinstance(p, ToolResultPart)}
    return [
        llm.ToolCall(name=p.name, arguments=p.arguments or {}, tool_call_id=p.tool_call_id)
        for p in _calls(history[last])
        if p.tool_call_id not in answered
    ]


def settle_history(
    history: list[dict[str, Any]], status: str, error: str | None, approvals: list[Approval]
) -> list[dict[str, Any]]:
    """``history`` of a failed or cancelled run, with a result for every call it left open.

    A call with an approval gets what became of it (its real result if it ran, its decision
    if it was decided); any other says it was not run and why the run stopped.
    """
    messages = [Message.from_dict(m) for m in history]
    by_call = {a.tool_call_id: a for a in approvals}
    why = "was cancelled" if status == "cancelled" else "stopped"
    why += " before this call ran"
    if error:
        first_line = error.strip().splitlines()[0] if error.strip() else ""
        why += f" ({first_line[:300]})"
    settled: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        settled.append(message)
        index += 1
        calls = _calls(message) if message.role == "assistant" else []
        if not calls:
            continue
        answered: set[str | None] = set()
        while index < len(messages) and messages[index].role == "tool":
            parts = messages[index].parts
            answered |= {p.tool_call_id for p in parts if isinstance(p, ToolResultPart)}
            settled.append(messages[index])
            index += 1
        # Only the last calls have their approvals here: ids repeat from turn to turn.
        last = index == len(messages)
        results = [
            ToolResultPart(
                name=call.name,
                output=_result(call, by_call.get(call.tool_call_id or "") if last else None, why),
                tool_call_id=call.tool_call_id,
            )
            for call in calls
            if call.tool_call_id not in answered
        ]
        if results:
            settled.append(Message(role="tool", parts=results))
    return [m.to_dict() for m in settled]


def _calls(message: Message) -> list[ToolCallPart]:
    return [
        p
        for p in message.parts
        if isinstance(p, ToolCallPart) and not getattr(p, "server_executed", False)
    ]


def _result(call: ToolCallPart, approval: Approval | None, why: str) -> str:
    if approval is None or approval.status in ("pending", "approved"):
        return f"Not run: the run {why}."
    if approval.status == "executing":
        return unknown_text(call.name)
    return decision_text(approval)
