"""The agent pane (issue 21 §2): the Messages tab's prompts, a message in the pane runs the
agent as a mention does and its card reaches the approvers, the thread's status and agent
session follow the run, the three prompts are answered, Slack's Stop stops the run, and
malformed or foreign events change nothing. Real bolt app, handlers, runner and storage
against our Slack server."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from handlers.blocks.assistant import (
    APPROVED_TODAY,
    MY_REQUESTS,
    WAITING_FOR_ME,
    working_status,
)
from handlers.flows import sweep_once
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support import ops_tools
from tests.support.slack_harness import Harness, has_buttons, running_bot

REQUESTER, APPROVER, OTHER_APPROVER = "U0REQUESTER", "U0APPROVER1", "U0APPROVER2"
STRANGER = "U0STRANGER"
CARDS = "C0CARDS"


def calls(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


def texts(messages: list[Any]) -> str:
    return "\n".join(m.text + json.dumps(m.blocks) for m in messages)


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(assistant_cards_channel=CARDS), repo) as harness:
        harness.server.users.update({APPROVER: "bo", OTHER_APPROVER: "al"})
        harness.server.real_names.update({APPROVER: "Bo Lee", OTHER_APPROVER: "Al Fu"})
        yield harness


async def test_opening_the_pane_sets_the_suggested_prompts(slack: Harness) -> None:
    # The Agent experience: the Messages tab; prompts for the DM, without a thread_ts.
    reply = await slack.server.open_messages_tab(REQUESTER)
    assert reply.status == 200
    await slack.settle()
    dm = slack.server.pane_channel(REQUESTER)
    shown = slack.server.suggested_prompts[(dm, None)]
    assert [p["message"] for p in shown["prompts"]] == [WAITING_FOR_ME, MY_REQUESTS, APPROVED_TODAY]
    [call] = slack.server.calls_to("assistant.threads.setSuggestedPrompts")
    assert "thread_ts" not in call.args  # Slack: with one, an agent app's call silently fails

    # The Assistant experience: a greeting in the new thread, and its prompts.
    root, started = await slack.server.start_assistant_thread(REQUESTER)
    assert started.status == 200
    await slack.settle()
    assert (dm, root.ts) in slack.server.suggested_prompts
    assert "Tell me what you need done" in texts(slack.server.thread(dm, root.ts))


async def test_a_pane_message_runs_the_agent_and_its_card_reaches_the_approvers(
    slack: Harness,
) -> None:
    reply = await slack.server.pane_message(REQUESTER, calls("restart_service", {"service": "pay"}))
    assert reply.status == 200
    await slack.settle()
    assert reply.message is not None
    dm, ts = reply.message.channel, reply.message.ts

    # The same run a mention makes: stored with the requester, its approval pending.
    run = await slack.repo.run_of_conversation(f"{slack.server.team_id}:{dm}:{ts}")
    assert run is not None and run.requester == REQUESTER and run.status == "paused"
    [approval] = await slack.repo.approvals_for_run(run.id)
    assert approval.status == "pending" and approval.approvers == [APPROVER, OTHER_APPROVER]

    # Where the approvers are: their DM copies, and the assistant_cards_channel copy.
    assert len(slack.dm_cards(APPROVER)) == 1 and len(slack.dm_cards(OTHER_APPROVER)) == 1
    [channel_copy] = [m for m in slack.server.messages if m.channel == CARDS]
    assert has_buttons(channel_copy)
    # The pane: "waiting for" the approvers, with a link to the card in the channel.
    pane = texts(slack.server.thread(dm, ts))
    assert f"waiting for <@{APPROVER}>" in pane and f"/archives/{CARDS}/" in pane

    # The thread's status while it worked, then while it waits (by name); the session too.
    statuses = [s for c, t, s in slack.server.status_log if (c, t) == (dm, ts)]
    assert statuses[0].startswith("is working on")
    assert statuses[-1] == "is waiting for approval from Bo Lee (@bo), Al Fu (@al)"
    assert slack.server.thread_titles[(dm, ts)].startswith('{"tool_calls"')
    session = slack.server.agent_sessions[(dm, ts)]
    assert session.history == ["processing", "suspended"] and session.initiator == REQUESTER

    # A click on the channel copy decides it; the call runs once; the pane gets the answer.
    await slack.server.click(APPROVER, channel_copy, "approval_approve")
    await slack.settle()
    assert ops_tools.EXECUTED == [("restart_service", {"service": "pay"})]
    decided = await slack.repo.get_approval(approval.id)
    assert decided is not None and decided.decided_by == APPROVER
    # A second click (the same copy, clicked as it was before the edit) runs nothing again.
    await slack.server.click_as_seen(APPROVER, channel_copy, "approval_approve")
    await slack.settle()
    assert ops_tools.EXECUTED == [("restart_service", {"service": "pay"})]
    assert not has_buttons(slack.dm_cards(OTHER_APPROVER)[0])
    assert "restarted pay" in texts(slack.server.thread(dm, ts))
    # Cleared when it answered; the session is active again (Stop is gone).
    assert (dm, ts) not in slack.server.thread_status
    statuses = [s for c, t, s in slack.server.status_log if (c, t) == (dm, ts)]
    assert statuses[-2:] == ['is running restart_service(service="pay")…', ""]
    assert session.history[-2:] == ["processing", "active"]
    # The channel copy shows the decision, as the card and the DM copies do.
    [channel_copy] = [m for m in slack.server.messages if m.channel == CARDS and not m.is_ephemeral]
    assert not has_buttons(channel_copy) and "Approved" in json.dumps(channel_copy.blocks)


async def test_the_cards_channel_copy_slack_refused_once_is_sent_again(
    slack: Harness,
) -> None:
    """The assistant_cards_channel copy is one of the card's copies: when Slack refuses it
    (a 500, an outage), the sweeper sends it again, once, as it does a DM copy."""
    slack.server.fail("chat.postMessage", when=lambda args: args.get("channel") == CARDS)
    reply = await slack.server.pane_message(REQUESTER, calls("restart_service", {"service": "pay"}))
    await slack.settle()
    assert reply.message is not None
    assert [m for m in slack.server.messages if m.channel == CARDS] == []
    with freeze_time(timedelta(minutes=10), tick=True, real_asyncio=True):
        await sweep_once(slack.bot.services)
        await slack.settle()
        await sweep_once(slack.bot.services)
        await slack.settle()
    [channel_copy] = [m for m in slack.server.messages if m.channel == CARDS]
    assert has_buttons(channel_copy)
    await slack.server.click(APPROVER, channel_copy, "approval_approve")
    await slack.settle()
    assert ops_tools.EXECUTED == [("restart_service", {"service": "pay"})]


async def test_the_status_is_set_while_it_works_and_cleared_when_it_answers(
    slack: Harness,
) -> None:
    reply = await slack.server.pane_message(REQUESTER, calls("get_status", {"service": "api"}))
    await slack.settle()
    assert reply.message is not None
    dm, ts = reply.message.channel, reply.message.ts
    request = calls("get_status", {"service": "api"})
    assert [s for c, t, s in slack.server.status_log if (c, t) == (dm, ts)] == [
        working_status(request),
        'is running get_status(service="api")…',  # as the call starts
        "",
    ]
    assert working_status(request).endswith("…”…")  # a long request is cut
    assert "api is healthy" in texts(slack.server.thread(dm, ts))
    assert slack.server.agent_sessions[(dm, ts)].history == ["processing", "active"]


async def test_the_three_prompts_answer_from_what_approvals_and_the_home_read(
    slack: Harness,
) -> None:
    await slack.mention(REQUESTER, calls("restart_service", {"service": "payments"}))
    await slack.mention(REQUESTER, calls("restart_service", {"service": "search"}))

    waiting = await slack.server.pane_message(APPROVER, WAITING_FOR_ME)
    mine = await slack.server.pane_message(REQUESTER, "my open requests")  # typed, any case
    await slack.settle()
    assert waiting.message is not None and mine.message is not None
    answer = texts(slack.server.thread(waiting.message.channel, waiting.message.ts)[1:])
    assert "payments" in answer and "search" in answer
    answer = texts(slack.server.thread(mine.message.channel, mine.message.ts)[1:])
    assert "payments" in answer and "search" in answer
    assert len(await slack.repo.list_runs(limit=10)) == 2

    nothing = await slack.server.pane_message(APPROVER, APPROVED_TODAY)
    await slack.settle()
    assert nothing.message is not None
    assert "You have approved nothing today" in texts(
        slack.server.thread(nothing.message.channel, nothing.message.ts)
    )
    card = next(c for c in slack.cards() if "payments" in json.dumps(c.blocks))
    await slack.server.click(APPROVER, card, "approval_approve")
    await slack.settle()
    today = await slack.server.pane_message(APPROVER, APPROVED_TODAY)
    await slack.settle()
    assert today.message is not None
    answer = texts(slack.server.thread(today.message.channel, today.message.ts))
    assert "You approved 1 call today" in answer and "payments" in answer
    assert "search" not in answer

    # The list the pane answered with works as /approvals' does: its buttons decide.
    [listed] = slack.server.thread(waiting.message.channel, waiting.message.ts)[1:]
    [search] = [c for c in slack.cards() if "search" in json.dumps(c.blocks)]
    values = [e["value"] for _, e in listed.buttons() if e.get("action_id") == "approval_approve"]
    [value] = [v for v in values if v in json.dumps(search.blocks)]
    await slack.server.click(APPROVER, listed, "approval_approve", value=value)
    await slack.settle()
    assert ("restart_service", {"service": "search"}) in ops_tools.EXECUTED


async def test_slacks_stop_stops_the_run_as_runs_cancel_does(slack: Harness) -> None:
    reply = await slack.server.pane_message(REQUESTER, calls("restart_service", {"service": "db"}))
    await slack.settle()
    assert reply.message is not None
    dm, ts = reply.message.channel, reply.message.ts
    run = await slack.repo.run_of_conversation(f"{slack.server.team_id}:{dm}:{ts}")
    assert run is not None

    stopped = await slack.server.stop_session(REQUESTER, ts)
    assert stopped.status == 200
    await slack.settle()
    after = await slack.repo.get_run(run.id)
    assert after is not None and after.status == "cancelled"
    [approval] = await slack.repo.approvals_for_run(run.id)
    assert approval.status == "cancelled"
    trail = json.dumps([e.detail for e in await slack.repo.audit_trail(run_id=run.id)])
    assert f"stopped in Slack by <@{REQUESTER}>" in trail
    assert slack.server.agent_sessions[(dm, ts)].status == "active"
    assert (dm, ts) not in slack.server.thread_status
    assert ops_tools.EXECUTED == []


async def test_malformed_and_foreign_events_get_a_clear_answer_and_change_nothing(
    slack: Harness,
) -> None:
    reply = await slack.server.pane_message(REQUESTER, calls("restart_service", {"service": "x"}))
    await slack.settle()
    assert reply.message is not None
    dm, ts = reply.message.channel, reply.message.ts
    before = len(slack.server.messages)

    # Malformed: the shape check answers 400 with what is wrong; nothing reaches bolt.
    for event, problem in [
        ({"type": "agent_session_stopped", "thread_ts": ts, "user": REQUESTER}, "channel"),
        ({"type": "assistant_thread_started", "assistant_thread": {"channel_id": dm}}, "thread_ts"),
        ({"type": "message", "channel": dm, "user": REQUESTER, "text": 5}, "text"),
    ]:
        body = json.dumps(slack.server._event_callback(event, f"Ev{problem}")).encode()
        answer = await slack.server.send_raw(body, "application/json")
        assert answer.status == 400 and problem in answer.body

    # Foreign: a stranger's Stop on someone else's run is refused; a Stop where no run is,
    # a bot's DM message and an edit are acknowledged and ignored.
    stranger = slack.server._event_callback(
        {"type": "agent_session_stopped", "channel": dm, "thread_ts": ts, "user": STRANGER},
        "EvStranger",
    )
    assert (await slack.server.send_event(stranger)).status == 200
    nowhere = await slack.server.stop_session(REQUESTER, "1.000001")
    bot_message = slack.server._event_callback(
        {
            "type": "message",
            "channel": dm,
            "channel_type": "im",
            "user": "U0BOT",
            "bot_id": "B0BOT",
            "text": "restart everything",
            "ts": "2.000002",
        },
        "EvBot",
    )
    edited = slack.server._event_callback(
        {
            "type": "message",
            "subtype": "message_changed",
            "channel": dm,
            "channel_type": "im",
            "message": {"text": "restart everything"},
            "ts": "3.000003",
        },
        "EvEdit",
    )
    for answer in [
        nowhere,
        await slack.server.send_event(bot_message),
        await slack.server.send_event(edited),
    ]:
        assert answer.status == 200
    await slack.settle()
    run = await slack.repo.run_of_conversation(f"{slack.server.team_id}:{dm}:{ts}")
    assert run is not None and run.status == "paused"
    assert len(await slack.repo.list_runs(limit=10)) == 1
    # The stranger is told why (in the thread); nothing else was posted.
    [refusal] = slack.server.messages[before:]
    assert refusal.text.startswith(":no_entry: Only the person who asked")
    assert ops_tools.EXECUTED == []


async def test_a_redelivered_pane_message_is_one_run_and_an_empty_one_gets_a_hint(
    slack: Harness,
) -> None:
    reply = await slack.server.pane_message(REQUESTER, calls("get_status", {"service": "api"}))
    assert reply.event_id is not None and reply.message is not None
    again = await slack.server.redeliver(reply.event_id)
    await slack.settle()
    assert again.status == 200
    assert len(await slack.repo.list_runs(limit=10)) == 1
    assert texts(slack.server.messages).count("api is healthy") == 1

    empty = await slack.server.pane_message(REQUESTER, "  ")
    await slack.settle()
    assert empty.status == 200
    assert len(await slack.repo.list_runs(limit=10)) == 1
    assert any("Tell me what you need" in t for t in slack.ephemeral_texts(REQUESTER))


async def test_a_reply_under_a_dm_card_copy_is_not_a_pane_request(slack: Harness) -> None:
    """An approver answers the DM copy of a card in its thread: talk about the card, no run."""
    await slack.mention(REQUESTER, calls("restart_service", {"service": "pay"}))
    await slack.settle()
    [copy] = slack.dm_cards(APPROVER)
    reply = await slack.server.pane_message(
        APPROVER, calls("restart_service", {"service": "db"}), thread_ts=copy.ts
    )
    await slack.settle()
    assert reply.status == 200
    assert len(await slack.repo.list_runs(limit=10)) == 1
    # A reply in the pane run's own thread still goes to that run's conversation.
    own = await slack.server.pane_message(APPROVER, calls("get_status", {"service": "a"}))
    await slack.settle()
    assert own.message is not None
    await slack.server.pane_message(
        APPROVER, calls("get_status", {"service": "b"}), thread_ts=own.message.ts
    )
    await slack.settle()
    assert ("get_status", {"service": "b"}) in ops_tools.EXECUTED


async def test_a_pane_approval_naming_nobody_is_copied_to_the_cards_channel(
    repo: Repository,
) -> None:
    """approvers = []: anyone but the requester, so the cards channel's copy decides."""
    policies = {**BASE_CONFIG["policies"], "restart_service": {"approvers": []}}
    async with running_bot(
        make_config(policies=policies, assistant_cards_channel=CARDS), repo
    ) as s:
        await s.server.pane_message(REQUESTER, calls("restart_service", {"service": "q"}))
        await s.settle()
        copies = [m for m in s.server.messages if m.channel == CARDS]
        assert copies and has_buttons(copies[0])
        await s.server.click(REQUESTER, copies[0], "approval_approve")
        await s.settle()
        assert ops_tools.EXECUTED == []
        await s.server.click(STRANGER, copies[0], "approval_approve")
        await s.settle()
        assert ops_tools.EXECUTED == [("restart_service", {"service": "q"})]


async def test_a_pane_approval_nobody_can_see_says_so(repo: Repository) -> None:
    policies = {**BASE_CONFIG["policies"], "restart_service": {"approvers": []}}
    async with running_bot(make_config(policies=policies), repo) as s:
        reply = await s.server.pane_message(REQUESTER, calls("restart_service", {"service": "q"}))
        await s.settle()
        assert reply.message is not None
        said = texts(s.server.thread(reply.message.channel, reply.message.ts))
        assert "Nobody else can see this card" in said


async def test_the_first_voter_of_a_quorum_sees_what_they_approved_today(
    repo: Repository,
) -> None:
    """min_approvals 2: the first approve vote does not decide, it is still an approval."""
    policies = {
        **BASE_CONFIG["policies"],
        "restart_service": {"approvers": [APPROVER, OTHER_APPROVER], "min_approvals": 2},
    }
    async with running_bot(make_config(policies=policies), repo) as s:
        await s.mention(REQUESTER, calls("restart_service", {"service": "db"}))
        await s.settle()
        [card] = s.cards()
        for who in (APPROVER, OTHER_APPROVER):
            await s.server.click(who, card, "approval_approve")
            await s.settle()
        assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]
        for who in (APPROVER, OTHER_APPROVER):
            reply = await s.server.pane_message(who, APPROVED_TODAY)
            await s.settle()
            assert reply.message is not None
            answer = texts(s.server.thread(reply.message.channel, reply.message.ts)[1:])
            assert "You approved 1 call today" in answer, (who, answer)


async def test_one_threads_session_refusal_leaves_sessions_on_for_the_workspace(
    slack: Harness,
) -> None:
    """thread_not_found is one thread's refusal: later runs still get their agent session."""
    slack.server.fail("agents.sessions.setStatus", error="thread_not_found", times=1)
    await slack.server.pane_message(REQUESTER, calls("get_status", {"service": "a"}))
    await slack.settle()
    second = await slack.server.pane_message(REQUESTER, calls("get_status", {"service": "b"}))
    await slack.settle()
    assert second.message is not None
    assert (second.message.channel, second.message.ts) in slack.server.agent_sessions
    # The method unknown (an app that is no agent): the workspace is not asked again.
    slack.server.fail("agents.sessions.setStatus", error="unknown_method", times=1)
    await slack.server.pane_message(REQUESTER, calls("get_status", {"service": "c"}))
    await slack.settle()
    before = len(slack.server.calls_to("agents.sessions.setStatus"))
    await slack.server.pane_message(REQUESTER, calls("get_status", {"service": "d"}))
    await slack.settle()
    assert len(slack.server.calls_to("agents.sessions.setStatus")) == before


async def test_a_cards_channel_refusing_its_copy_does_not_stall_the_pane(slack: Harness) -> None:
    """The bot not in assistant_cards_channel: the copy is given up, nobody waits for it."""
    slack.server.fail(
        "chat.postMessage",
        when=lambda args: args.get("channel") == CARDS,
        error="not_in_channel",
        times=100,
    )
    many = json.dumps(
        {
            "tool_calls": [
                {"name": "restart_service", "arguments": {"service": f"s{i}"}} for i in range(6)
            ]
        }
    )
    started = time.monotonic()
    reply = await slack.server.pane_message(REQUESTER, many)
    await slack.settle()
    took = time.monotonic() - started
    assert reply.message is not None
    said = [m.text for m in slack.server.thread(reply.message.channel, reply.message.ts)]
    assert took < 5, took
    # The six calls are one batch, one card: one "waiting for" line.
    assert sum("waiting for" in t for t in said) == 1, said


async def test_a_redelivered_slack_stop_is_told_once(slack: Harness) -> None:
    reply = await slack.server.pane_message(REQUESTER, calls("restart_service", {"service": "db"}))
    await slack.settle()
    assert reply.message is not None
    dm, ts = reply.message.channel, reply.message.ts
    before = len(slack.server.messages)
    stopped = await slack.server.stop_session(REQUESTER, ts)
    assert stopped.event_id is not None
    again = await slack.server.redeliver(stopped.event_id)
    await slack.settle()
    assert again.status == 200
    said = [m.text for m in slack.server.messages[before:] if m.channel == dm]
    assert said == [":octagonal_sign: Stopped."], said  # not also "has already ended"


async def test_waiting_for_me_links_use_the_workspace_domain(slack: Harness) -> None:
    await slack.mention(REQUESTER, calls("restart_service", {"service": "p"}))
    reply = await slack.server.pane_message(APPROVER, WAITING_FOR_ME)
    await slack.settle()
    assert reply.message is not None
    answer = texts(slack.server.thread(reply.message.channel, reply.message.ts)[1:])
    links = re.findall(r"https://[a-z0-9.-]+/archives/", answer)
    assert links and all(f"{slack.server.team_domain}.slack.com" in u for u in links), links
