"""The playground's offline demo model never invents an argument: a request that names no
service gets a question (ask_user) and a thread's follow-up ("now restart it") uses the
service of the conversation. Driven through the whole playground: the real bot, our
Slack-compatible server, signed requests."""

from __future__ import annotations

import json
from pathlib import Path

from playground.app import CHANNEL, running_playground
from playground.demo import choose_tool
from playground.slack_server import Message

ANA, BO = "U0REQUESTER", "U0APPROVER1"


def _shown(message: Message) -> str:
    return "\n".join(str(b.get("text", {}).get("text", "")) for b in message.blocks)


def _cards(messages: list[Message], summary: str) -> list[Message]:
    """Cards in #ops (approvers may get a copy by DM)."""
    return [
        m
        for m in messages
        if m.channel == CHANNEL and any(b.get("block_id") == summary for b in m.blocks)
    ]


async def test_a_request_without_a_service_asks_which_and_a_follow_up_uses_the_thread(
    tmp_path: Path,
) -> None:
    async with running_playground(data_dir=tmp_path) as pg:
        server = pg.server
        asked = await server.mention(ANA, CHANNEL, "<@U0BOT> restart")
        await pg.settle()
        assert _cards(server.messages, "approval_summary") == [], "nothing was made up"
        [question] = _cards(server.messages, "question_summary")
        assert "Which service should I restart?" in json.dumps(question.blocks)
        labels = [e["text"]["text"] for _, e in question.buttons()]
        assert labels == ["payments", "checkout", "search", "web", "api"]

        await server.click(ANA, question, "question_choice:3")  # web
        await pg.settle()
        [card] = _cards(server.messages, "approval_summary")
        assert '"service": "web"' in _shown(card)
        assert card.thread_ts == asked.message.ts  # type: ignore[union-attr]

        # In the thread, "it" is the service the conversation is about.
        await server.click(BO, card, "approval_approve")
        await pg.settle()
        await server.mention(ANA, CHANNEL, "<@U0BOT> now restart it", thread_ts=card.thread_ts)
        await pg.settle()
        cards = _cards(server.messages, "approval_summary")
        assert len(cards) == 2 and '"service": "web"' in _shown(cards[-1])
        assert not any('"service": "it"' in _shown(m) for m in server.messages)


def test_the_demo_says_what_it_needs_when_it_cannot_ask() -> None:
    assert choose_tool("restart", can_ask=False) == (
        "Which service should I restart? Say it with the request, e.g. `restart payments`."
    )
    assert choose_tool("scale checkout") == (
        "How many replicas should checkout have? Say `scale checkout to 5`."
    )
    assert choose_tool("restart foo") == ("restart_service", {"service": "foo"})
    assert choose_tool("check it", ["deploy web"]) == ("get_status", {"service": "web"})


def test_the_demo_rotates_credentials_of_the_service_named() -> None:
    assert choose_tool("rotate credentials of payments") == (
        "rotate_credentials",
        {"service": "payments"},
    )
    assert choose_tool("rotate the search credentials") == (
        "rotate_credentials",
        {"service": "search"},
    )
    # "credentials" names no service: the demo asks which, never guesses.
    assert choose_tool("rotate credentials")[0] == "ask_user"  # type: ignore[index]
