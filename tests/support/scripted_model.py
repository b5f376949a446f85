"""A deterministic in-process model for tests, registered with llm as ``scripted``.

A user message that is JSON ``{"tool_calls": [{"name": …, "arguments": {…}}]}`` makes it call
those tools. After tool results it answers ``Results: name=output; …`` listing every tool
result in the history since the last user message, so tests can see what the model read.
``{"steps": [{"tool_calls": […]}, …]}`` scripts several responses of one turn instead: the
N-th response after the user message makes the calls of step N (then it answers as above);
a step's ``"say"`` is its text, or ``"chunks"`` the pieces it streams that text in.
Every prompt's messages are kept in ``ScriptedModel.seen`` for assertions. A slow model:
set ``ScriptedModel.hold`` to an ``asyncio.Event`` and every answer after tool results waits
until the test sets it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any, ClassVar

import llm
from llm.parts import TextPart, ToolResultPart


class ScriptedModel(llm.AsyncModel):
    model_id = "scripted"
    supports_tools = True
    can_stream = True
    seen: ClassVar[list[list[dict[str, Any]]]] = []
    hold: ClassVar[asyncio.Event | None] = None

    async def execute(
        self, prompt: llm.Prompt, stream: bool, response: Any, conversation: Any = None
    ) -> AsyncGenerator[str, None]:
        messages = list(prompt.messages)
        ScriptedModel.seen.append([m.to_dict() for m in messages])
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        after = messages[last_user + 1 :]
        text = "".join(p.text for p in messages[last_user].parts if isinstance(p, TextPart))
        script = _script(text)
        steps = script.get("steps") or [script]
        step = sum(1 for m in after if m.role == "assistant")
        results = [
            p for m in after if m.role == "tool" for p in m.parts if isinstance(p, ToolResultPart)
        ]
        if results and step >= len(steps):
            if ScriptedModel.hold is not None:
                await ScriptedModel.hold.wait()
            yield "Results: " + "; ".join(f"{r.name}={r.output}" for r in results)
            return
        script = steps[min(step, len(steps) - 1)]
        for call in script.get("tool_calls", []):
            response.add_tool_call(
                llm.ToolCall(
                    name=call["name"],
                    arguments=call.get("arguments") or {},
                    # Some providers number calls per response ("call_0"): tests can too.
                    tool_call_id=call.get("id"),
                )
            )
        # "chunks": the response's text in these pieces, as a model streams it. With calls,
        # the model says only what the script gives it to (the card's "Why").
        said = script.get("say", "" if script.get("tool_calls") else f"You said: {text}")
        for piece in script.get("chunks") or [said]:
            yield piece


def _script(text: str) -> dict[str, Any]:
    try:
        start = text.index("{")
        value = json.loads(text[start:])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def calls(*pairs: tuple[str, dict[str, Any]]) -> str:
    """A scripted response that calls these tools, each with its arguments."""
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in pairs]})
