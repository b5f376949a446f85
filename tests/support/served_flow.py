"""One approval from mention to answer, through a served bot (``tests.support.serve_process``)."""

from __future__ import annotations

import asyncio
import json

from playground.slack_server.records import BotReply, Message
from tests.support.serve_process import ServedBot

REQUESTER, APPROVER, CHANNEL = "U0REQUESTER", "U0APPROVER1", "C0OPS"


def echo_prompt(service: str) -> str:
    """A mention that makes llm-echo call the gated ``restart_service``."""
    prompt = {
        "prompt": "go",
        "tool_calls": [{"name": "restart_service", "arguments": {"service": service}}],
    }
    return f"<@U0BOT> {json.dumps(prompt)}"


async def wait_for_card(served: ServedBot, service: str) -> Message:
    for _ in range(200):
        for message in served.slack.messages:
            text = json.dumps(message.blocks)
            if (
                message.user != REQUESTER
                and "approval_summary" in text
                and service in text
                and any(message.buttons())
            ):
                return message
        await asyncio.sleep(0.05)
    raise AssertionError(f"no approval card for {service}")


async def wait_for_text(served: ServedBot, needle: str) -> Message:
    for _ in range(200):
        for message in served.slack.messages:
            if needle in (message.text or ""):
                return message
        await asyncio.sleep(0.05)
    raise AssertionError(f"no message with {needle!r}")


async def approve_one(served: ServedBot, service: str = "svc-approved") -> BotReply:
    """Mention, card, Approve, answer in the thread; the click's reply."""
    reply = await served.slack.mention(REQUESTER, CHANNEL, echo_prompt(service))
    assert reply.status == 200, reply.text
    card = await wait_for_card(served, service)
    click = await served.slack.click(APPROVER, card, "approval_approve")
    assert click.status == 200, click.text
    await wait_for_text(served, f"restarted {service}")
    return click


async def leave_pending(served: ServedBot, service: str) -> Message:
    """Mention and wait for the card (returned); nobody decides."""
    reply = await served.slack.mention(REQUESTER, CHANNEL, echo_prompt(service))
    assert reply.status == 200, reply.text
    return await wait_for_card(served, service)
