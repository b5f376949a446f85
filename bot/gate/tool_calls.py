"""Calling a tool's implementation the way llm would: ``PreparedTool`` and ``call_tool``.

Owns no durable state. What the gate needs of a tool is worked out once when it is wrapped;
an approved call gets a thread of its own so that it starts when its start is recorded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llm

from bot.gate.turn import current_turn
from bot.policy.arguments import schema_text
from bot.tools import tool_definition
from storage.hashes import PayloadHasher


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
    # The input schema as its validator is cached under (bot.policy.arguments); None: the
    # tool has no schema, nothing to check.
    schema_text: str | None

    @classmethod
    def of(cls, tool: llm.Tool) -> PreparedTool:
        implementation = tool.implementation
        assert implementation is not None
        return cls(
            tool=tool,
            hasher=PayloadHasher(tool_definition(tool)),
            is_async=inspect.iscoroutinefunction(implementation),
            takes_tool_call=_takes_tool_call(implementation),
            schema_text=schema_text(tool.input_schema) if tool.input_schema else None,
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
    try:
        if prepared.is_async:
            return await implementation(**arguments)
        result = await asyncio.to_thread(implementation, **arguments)
        if inspect.isawaitable(result):
            result = await result
        return result
    finally:
        _ran()


def _ran() -> None:
    """A tool ended: the drive's next safe point reads the hold afresh (bot.gate.safe_points)."""
    turn = current_turn.get(None)
    if turn is not None:
        turn.hold_epoch += 1


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
        try:
            return await implementation(**arguments)
        finally:
            _ran()
    context = contextvars.copy_context()
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()  # started: a cancelled drive cannot unstart it

    def run() -> None:
        try:
            future.set_result(context.run(implementation, **arguments))
        except BaseException as exc:  # handed to the awaiting drive, as to_thread does
            future.set_exception(exc)

    threading.Thread(target=run, name=f"approval-bot-tool-{tool.name}").start()
    try:
        result = await asyncio.wrap_future(future)
        if inspect.isawaitable(result):
            result = await result
        return result
    finally:
        _ran()
