"""The agent's questions (ask_user) in Slack, end to end: signed requests in Slack's payload
shapes, against the real bolt app, handlers, runner and storage, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from handlers.flows import sweep_once
from playground.slack_server import Message, SlackServer
from storage.repository import PendingFilter, Repository
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support.scripted_model import ScriptedModel
from tests.support.slack_harness import CHANNEL, SECRET, Harness, running_bot

REQUESTER, OUTSIDER = "U0REQUESTER", "U0OUTSIDER"
REGIONS = ["eu", "us"]


def ask(question: str, choices: list[str] | None = None) -> str:
    arguments: dict[str, Any] = {"question": question}
    if choices is not None:
        arguments["choices"] = choices
    return json.dumps({"tool_calls": [{"name": "ask_user", "arguments": arguments}]})


def ask_user_policy(**policy: Any) -> Any:
    return make_config(policies={**BASE_CONFIG["policies"], "ask_user": policy})


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as harness:
        yield harness


def question_cards(slack: Harness) -> list[Message]:
    return [
        m
        for m in slack.server.messages
        if not m.is_ephemeral and any(b.get("block_id") == "question_summary" for b in m.blocks)
    ]


def current(slack: Harness, message: Message) -> Message:
    found = slack.server.message(message.channel, message.ts)
    assert found is not None
    return found


def answer_elements(message: Message) -> list[dict[str, Any]]:
    return [e for _, e in message.buttons() if str(e.get("action_id", "")).startswith("question_")]


async def pending(repo: Repository) -> list[Any]:
    from bot.clock import utcnow

    rows, _ = await repo.list_pending(PendingFilter(), now=utcnow(), limit=100)
    return rows


def model_read(tool: str) -> list[str]:
    """Every result of ``tool`` the model has been given, in order."""
    return [
        part["output"]
        for messages in ScriptedModel.seen[-1:]
        for m in messages
        if m["role"] == "tool"
        for part in m["parts"]
        if part.get("name") == tool
    ]


async def test_choices_outsider_refused_requester_answers_second_answer_refused(
    slack: Harness, repo: Repository
) -> None:
    reply = await slack.mention(REQUESTER, ask("Restart which region?", REGIONS))
    [card] = question_cards(slack)
    assert card.thread_ts == reply.message.ts  # type: ignore[union-attr]
    offered = answer_elements(card)
    assert [e["text"]["text"] for e in offered] == REGIONS
    models_before = len(ScriptedModel.seen)

    # Someone who may not answer: told so, privately; nothing changes.
    await slack.server.click(OUTSIDER, card, "question_choice:1")
    await slack.settle()
    assert any("Only <@U0REQUESTER> can answer" in t for t in slack.ephemeral_texts(OUTSIDER))
    assert [r.status for r in await pending(repo)] == ["pending"]
    assert answer_elements(current(slack, card)) == offered
    assert len(ScriptedModel.seen) == models_before

    # The requester's click: the choice reaches the model, the card shows who answered what.
    await slack.server.click(REQUESTER, card, "question_choice:1")
    await slack.settle()
    assert model_read("ask_user") == ["us"]
    assert "Results: ask_user=us" in [m.text for m in slack.thread_of(reply)]
    edited = current(slack, card)
    assert answer_elements(edited) == []
    assert "<@U0REQUESTER> answered: us" in json.dumps(edited.blocks)
    assert any("You answered: us" in t for t in slack.ephemeral_texts(REQUESTER))

    # A second answer (a stale card on another screen): refused, nothing changes.
    models_after = len(ScriptedModel.seen)
    value = offered[0]["value"]
    await slack.server.click_raw(REQUESTER, CHANNEL, "question_choice:0", value, message_ts=card.ts)
    await slack.settle()
    assert any("Already answered by <@U0REQUESTER>" in t for t in slack.ephemeral_texts(REQUESTER))
    assert "<@U0REQUESTER> answered: us" in json.dumps(current(slack, card).blocks)
    assert len(ScriptedModel.seen) == models_after


async def test_concurrent_answers_reach_the_model_once(slack: Harness) -> None:
    await slack.mention(REQUESTER, ask("Restart which region?", REGIONS))
    [card] = question_cards(slack)
    clicks = await asyncio.gather(
        *(slack.server.click(REQUESTER, card, "question_choice:0") for _ in range(10))
    )
    assert all(c.status == 200 for c in clicks)
    await slack.settle()
    texts = slack.ephemeral_texts(REQUESTER)
    assert sum("You answered: eu" in t for t in texts) == 1
    assert sum("Already answered by <@U0REQUESTER>" in t for t in texts) == 9
    answered_turns = [s for s in ScriptedModel.seen if any(m["role"] == "tool" for m in s)]
    assert len(answered_turns) == 1


async def test_more_than_five_choices_are_a_menu(slack: Harness) -> None:
    regions = [f"region-{i}" for i in range(7)]
    reply = await slack.mention(REQUESTER, ask("Which one?", regions))
    [card] = question_cards(slack)
    [menu] = answer_elements(card)
    assert menu["type"] == "static_select"
    await slack.server.select(REQUESTER, card, "question_select", "region-6")
    await slack.settle()
    assert model_read("ask_user") == ["region-6"]
    assert "Results: ask_user=region-6" in [m.text for m in slack.thread_of(reply)]
    assert answer_elements(current(slack, card)) == []


async def test_without_choices_the_modal_answer_reaches_the_model(slack: Harness) -> None:
    reply = await slack.mention(REQUESTER, ask("What should the maintenance notice say?"))
    [card] = question_cards(slack)
    [button] = answer_elements(card)
    assert button["action_id"] == "question_answer"

    await slack.server.click(OUTSIDER, card, "question_answer")
    await slack.settle()
    assert not slack.server.views, "no answer form for someone who may not answer"
    assert any("Only <@U0REQUESTER> can answer" in t for t in slack.ephemeral_texts(OUTSIDER))

    await slack.server.click(REQUESTER, card, "question_answer")
    [opened] = slack.server.views.values()
    blank = await slack.server.submit_view(
        REQUESTER,
        opened.id,
        {"question_answer": {"answer": {"type": "plain_text_input", "value": " "}}},
    )
    assert blank.status == 200 and not opened.closed, "a blank answer keeps the form open"
    await slack.settle()
    typed = "Back at 14:00 <!channel>"
    submitted = await slack.server.submit_view(
        REQUESTER,
        opened.id,
        {"question_answer": {"answer": {"type": "plain_text_input", "value": typed}}},
    )
    assert submitted.status == 200
    await slack.settle()
    assert model_read("ask_user") == [typed]
    edited = current(slack, card)
    assert answer_elements(edited) == []
    assert "answered: Back at 14:00 &lt;!channel&gt;" in json.dumps(edited.blocks)
    assert "&lt;!channel&gt;" in slack.thread_of(reply)[-1].text, "the echo is escaped too"


async def test_named_answerers_answer_and_nobody_else(repo: Repository) -> None:
    config = ask_user_policy(answerers=["U0APPROVER1"])
    async with running_bot(config, repo) as slack:
        await slack.mention(REQUESTER, ask("Restart which region?", REGIONS))
        [card] = question_cards(slack)
        await slack.server.click(OUTSIDER, card, "question_choice:0")
        await slack.settle()
        assert [r.status for r in await pending(repo)] == ["pending"]
        await slack.server.click("U0APPROVER1", card, "question_choice:0")
        await slack.settle()
        assert model_read("ask_user") == ["eu"]
        assert "<@U0APPROVER1> answered: eu" in json.dumps(current(slack, card).blocks)


async def test_approvals_lists_questions_and_answers_from_the_list(slack: Harness) -> None:
    reply = await slack.mention(REQUESTER, ask("Restart which region?", REGIONS))
    listed = await slack.server.slash_command(REQUESTER, CHANNEL, text="mine")
    shown = json.dumps(listed.json(), ensure_ascii=False)
    assert "*Question*" in shown and "Restart which region?" in shown
    assert "Choices: eu · us" in shown
    mine = await slack.server.slash_command(REQUESTER, CHANNEL, text="")
    assert "Restart which region?" in mine.body, "the requester is the one to answer"
    [listing] = [m for m in slack.server.ephemerals_for(REQUESTER) if answer_elements(m)][-1:]
    await slack.server.click(REQUESTER, listing, "question_choice:0")
    await slack.settle()
    assert "Results: ask_user=eu" in [m.text for m in slack.thread_of(reply)]
    [card] = question_cards(slack)
    assert "answered: eu" in json.dumps(card.blocks), "the card is edited too"


@pytest.mark.parametrize("on_expiry", ["deny", "cancel"])
async def test_an_expired_question_follows_on_expiry(repo: Repository, on_expiry: str) -> None:
    config = ask_user_policy(ttl="10m", on_expiry=on_expiry)
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            reply = await slack.mention(REQUESTER, ask("Restart which region?", REGIONS))
            [card] = question_cards(slack)
            models_before = len(ScriptedModel.seen)
            clock.tick(timedelta(minutes=11))
            await slack.server.click(REQUESTER, card, "question_choice:0")
            await slack.settle()
            assert any(":hourglass:" in t for t in slack.ephemeral_texts(REQUESTER))
            edited = current(slack, card)
            assert answer_elements(edited) == []
            assert "Expired*" in json.dumps(edited.blocks)
            texts = [m.text for m in slack.thread_of(reply)]
            if on_expiry == "cancel":
                assert len(ScriptedModel.seen) == models_before, "the run stops"
                assert any("Stopped" in t for t in texts)
            else:
                [told] = model_read("ask_user")
                assert "eu" not in told, "the model is told no answer came, not a choice"
                assert texts[-1].startswith("Results: ask_user=")
    assert await pending(repo) == []


async def test_a_restart_between_question_and_answer_loses_nothing(database: Database) -> None:
    first_repo = await database.open()
    async with SlackServer(signing_secret=SECRET) as server:
        async with running_bot(make_config(), first_repo, server=server) as slack:
            reply = await slack.mention(REQUESTER, ask("Restart which region?", REGIONS))
            [card] = question_cards(slack)
        # A new process: new engine, new services, nothing kept in memory.
        second_repo = await database.open()
        async with running_bot(make_config(), second_repo, server=server) as slack:
            await slack.server.click(REQUESTER, card, "question_choice:0")
            await slack.settle()
            assert model_read("ask_user") == ["eu"]
            assert "Results: ask_user=eu" in [m.text for m in slack.thread_of(reply)]
            assert "answered: eu" in json.dumps(current(slack, card).blocks)


async def test_the_thread_says_the_agent_carries_on_with_the_answer(slack: Harness) -> None:
    reply = await slack.mention(REQUESTER, ask("Restart which region?", REGIONS))
    [card] = question_cards(slack)
    ScriptedModel.hold = hold = asyncio.Event()  # the model is slow to answer
    try:
        await slack.server.click(REQUESTER, card, "question_choice:0")
        async with asyncio.timeout(10):
            while not any("Carrying on with the answer" in m.text for m in slack.thread_of(reply)):
                await asyncio.sleep(0.05)
    finally:
        hold.set()
    await slack.settle()
    texts = [m.text for m in slack.thread_of(reply)]
    assert "Results: ask_user=eu" in texts
    assert not any("Carrying on" in t for t in texts), "the answer replaced it"


async def test_a_free_text_question_is_answered_from_approvals_through_its_form(
    slack: Harness,
) -> None:
    reply = await slack.mention(REQUESTER, ask("What should the notice say?"))
    await slack.server.slash_command(REQUESTER, CHANNEL, text="mine")
    [listing] = [m for m in slack.server.ephemerals_for(REQUESTER) if answer_elements(m)]
    await slack.server.click(REQUESTER, listing, "question_answer")
    [opened] = slack.server.views.values()
    typed = {"type": "plain_text_input", "value": "Back at two"}
    await slack.server.submit_view(REQUESTER, opened.id, {"question_answer": {"answer": typed}})
    await slack.settle()
    assert model_read("ask_user") == ["Back at two"]
    assert "Results: ask_user=Back at two" in [m.text for m in slack.thread_of(reply)]
    [card] = question_cards(slack)
    assert "answered: Back at two" in json.dumps(card.blocks), "the card is edited too"
    # The list has no channel of its own: the answerer hears back through its response URL.
    assert any("You answered: Back at two" in t for t in slack.ephemeral_texts(REQUESTER))


async def test_a_question_nobody_answers_is_expired_by_the_sweeper_and_its_card_edited(
    repo: Repository,
) -> None:
    config = ask_user_policy(ttl="10m")
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            reply = await slack.mention(REQUESTER, ask("Restart which region?", REGIONS))
            [card] = question_cards(slack)
            clock.tick(timedelta(minutes=11))
            await sweep_once(slack.bot.services)
            await slack.settle()
            edited = current(slack, card)
            assert answer_elements(edited) == []
            assert "the agent was told no answer came" in json.dumps(edited.blocks)
            assert slack.thread_of(reply)[-1].text.startswith("Results: ask_user=")
