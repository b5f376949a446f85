"""The stored llm history: which calls wait for a result, and closing the ones that never will.

OpenAI-style providers reject a history in which a tool call has no tool result. A paused run
has such calls at its end on purpose (resuming re-executes them); a run that failed or was
cancelled keeps them for good, so a follow-up in its thread would be refused. Before the
follow-up's message is added, each of them gets a result that says what happened to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import llm
from llm.parts import Message, Part, TextPart, ToolCallPart, ToolResultPart

from bot.gate import decision_text, unknown_text
from storage.models import Approval

if TYPE_CHECKING:
    from llm.serialization import MessageDict


def stored(message: Message) -> dict[str, Any]:
    """A message as ``runs.history`` keeps it: llm's own dict form (``Message.to_dict``)."""
    return cast(dict[str, Any], message.to_dict())


def loaded(data: dict[str, Any]) -> Message:
    """A message of ``runs.history`` back as llm's ``Message``."""
    return Message.from_dict(cast("MessageDict", data))


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


def unfold_results(
    history: list[Message], configured: set[str]
) -> tuple[list[Message], dict[str, Any]]:
    """A history held before a model call (every call of its last assistant message has its
    result, and nothing follows): the results taken back out, by tool call id.

    The resumed drive hands each back through the gate when llm re-executes the call (it
    does not run again), so the model's next prompt carries them as ``tool_results`` as well
    as in its messages, as after any other pause (some models read only the former).
    Unchanged (and no results) for any other history.
    """
    if not history or history[-1].role != "tool":
        return history, {}
    last = max(
        (i for i, m in enumerate(history) if m.role == "assistant" and _calls(m)), default=-1
    )
    if last < 0 or any(m.role != "tool" for m in history[last + 1 :]):
        return history, {}
    calls = _calls(history[last])
    results = {
        p.tool_call_id: p.output
        for m in history[last + 1 :]
        for p in m.parts
        if isinstance(p, ToolResultPart) and p.tool_call_id
    }
    if any(
        not c.tool_call_id or c.tool_call_id not in results or c.name not in configured
        for c in calls
    ) or len(results) != len(calls):
        return history, {}
    return history[: last + 1], results


def settle_history(
    history: list[dict[str, Any]], status: str, error: str | None, approvals: list[Approval]
) -> list[dict[str, Any]]:
    """``history`` of a failed or cancelled run, with a result for every call it left open.

    A call with an approval gets what became of it (its real result if it ran, its decision
    if it was decided); any other says it was not run and why the run stopped.
    """
    messages = [loaded(m) for m in history]
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
        results: list[Part] = [
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
    return [stored(m) for m in settled]


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


def history_before(response: Any, last: Any, history: list[Message]) -> list[Message]:
    """The history up to a model call not made yet: what a held run resumes from."""
    if last is None and history and history[-1].role == "user":
        return list(history)  # a new turn: the user's message is still its last
    # After tool results (and on a resume that ran trailing calls) llm builds the next
    # prompt's messages as the whole history, those results included.
    return list(response.prompt.messages)


def chain_input(history: list[Message]) -> dict[str, Any]:
    """How to hand the stored history to llm.

    A new user turn (history ending in the user's message) goes in as prompt text with the
    rest as messages, the way every llm plugin reads a prompt (some only read the text). A
    resumed turn (history ending in tool calls without results) goes in as messages and no
    prompt, so llm re-executes exactly those calls.
    """
    if history and history[-1].role == "user":
        text = "".join(p.text for p in history[-1].parts if isinstance(p, TextPart))
        return {"prompt": text, "messages": history[:-1]}
    return {"messages": history}


async def history_at(last: Any, history: list[Message]) -> list[Message]:
    """The full history after the last response, or what we started with if none ran."""
    if last is None:
        return list(history)
    return list(last.prompt.messages) + list(await last.messages())


def tool_results_message(results: list[llm.ToolResult]) -> Message:
    """Sibling calls that finished before the pause, so resuming does not run them again."""
    return Message(
        role="tool",
        parts=[
            ToolResultPart(name=r.name, output=r.output, tool_call_id=r.tool_call_id)
            for r in results
        ],
    )
