"""Reach the approvers (issue 8): DM copies of each card, one reminder, one escalation; and
App Home refreshes across replicas (issue 10). The real bolt app, handlers, runner and
storage against our Slack server, on SQLite and PostgreSQL; freezegun moves the clock."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from bot.clock import utcnow
from bot.config import ConfigError
from handlers.flows import sweep_once
from handlers.slack import home
from playground.slack_server import Message, SlackServer
from storage.repository import Mode, Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support import ops_tools
from tests.support.slack_harness import CHANNEL, SECRET, Harness, has_buttons, running_bot

REQUESTER, APPROVER, BOSS = "U0REQUESTER", "U0APPROVER1", "U0BOSS"
GROUP = "S0ONCALL"
START = "2026-11-30 10:00:00"


def calls(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


def policy(**keys: Any) -> dict[str, Any]:
    return {**BASE_CONFIG["policies"], "restart_service": {"approvers": [APPROVER], **keys}}


def texts_to(slack: Harness, user: str) -> list[str]:
    """Every message the bot posted in its DM with ``user`` (cards and reminders)."""
    channel = slack.server.dm_channel(user)
    return [m.text for m in slack.server.messages if channel and m.channel == channel]


def reminders_to(slack: Harness, user: str) -> list[str]:
    return [t for t in texts_to(slack, user) if "Reminder" in t]


async def audit_events(repo: Repository, event: str) -> list[Any]:
    def body(tx: Any) -> list[Any]:
        return tx.all("SELECT actor, detail FROM audit_events WHERE event = :e", {"e": event})

    return await repo.database.run(body, Mode.READ_ONE)


def shows_decision(message: Message, word: str) -> bool:
    return not has_buttons(message) and f"{word}* by" in json.dumps(message.blocks)


async def test_each_approver_and_group_member_gets_one_dm_copy_edited_on_decision(
    repo: Repository,
) -> None:
    members = [REQUESTER, "U0M1", "U0M2", "U0M3"]
    config = make_config(policies=policy(approvers=[APPROVER, GROUP]), approver_dm_limit=2)
    async with running_bot(config, repo, usergroups={GROUP: members}) as slack:
        await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
        # Named users directly; the group's members up to approver_dm_limit; never the
        # requester (a group member here).
        assert sorted(slack.server.dm_channels) == [APPROVER, "U0M1", "U0M2"]
        for user in (APPROVER, "U0M1", "U0M2"):
            [copy] = slack.dm_cards(user)
            assert has_buttons(copy) and "<#C0OPS>" in json.dumps(copy.blocks)
        assert slack.server.dm_channel(REQUESTER) is None
        assert any("approver_dm_limit" in m.text for m in slack.server.messages)
        [capped] = await audit_events(repo, "approval_dms_capped")
        assert GROUP in str(capped[1])

        # Sweeps (this replica's or another's) send nothing twice.
        with freeze_time(timedelta(minutes=5), tick=True, real_asyncio=True):
            await sweep_once(slack.bot.services)
            await slack.settle()
        assert len(slack.dm_cards()) == 3
        assert len(slack.server.calls_to("conversations.open")) == 3

        # The copy's buttons work: a group member approves from their DM.
        [copy] = slack.dm_cards("U0M1")
        await slack.server.click("U0M1", copy, "approval_approve")
        await slack.settle()
        assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]
        # Every copy, and the channel card, shows the decision and has no buttons.
        [card] = slack.cards()
        for message in [card, *slack.dm_cards()]:
            assert shows_decision(message, "Approved"), message.channel


async def test_a_click_on_a_copy_by_someone_not_allowed_is_refused(repo: Repository) -> None:
    config = make_config(policies=policy())
    async with running_bot(config, repo) as slack:
        await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
        [copy] = slack.dm_cards(APPROVER)
        # Someone else clicking a copy (it was forwarded, or crafted) is judged as on the card.
        await slack.server.click("U0STRANGER", copy, "approval_approve")
        await slack.settle()
        assert ops_tools.EXECUTED == []
        assert has_buttons(copy)


async def test_a_reminder_goes_once_to_approvers_and_never_after_a_decision(
    repo: Repository,
) -> None:
    config = make_config(policies=policy(approvers=[APPROVER, "U0APPROVER2"], remind_after="10m"))
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            decided = await slack.mention(REQUESTER, calls("restart_service", {"service": "web"}))
            assert decided.status == 200
            clock.tick(timedelta(minutes=9))
            await sweep_once(slack.bot.services)
            await slack.settle()
            assert reminders_to(slack, APPROVER) == []
            # One of the two is decided before its reminder is due.
            web_copy = next(c for c in slack.dm_cards(APPROVER) if "web" in json.dumps(c.blocks))
            await slack.server.click(APPROVER, web_copy, "approval_approve")
            await slack.settle()

            clock.tick(timedelta(minutes=2))
            for _ in range(3):
                await sweep_once(slack.bot.services)
                await slack.settle()
            for user in (APPROVER, "U0APPROVER2"):
                [reminder] = reminders_to(slack, user)
                assert "restart_service" in reminder and f"<@{REQUESTER}>" in reminder
            assert len(await audit_events(repo, "approval_reminded")) == 1
            clock.tick(timedelta(minutes=20))
            await sweep_once(slack.bot.services)
            await slack.settle()
            assert len(reminders_to(slack, APPROVER)) == 1


async def test_under_a_quorum_the_reminder_skips_who_approved_already(repo: Repository) -> None:
    config = make_config(
        policies=policy(
            approvers=[APPROVER, "U0APPROVER2"], min_approvals=2, remind_after="10m", ttl="1h"
        )
    )
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            await sweep_once(slack.bot.services)
            await slack.settle()
            [copy] = slack.dm_cards(APPROVER)
            await slack.server.click(APPROVER, copy, "approval_approve")  # 1 of 2
            await slack.settle()
            clock.tick(timedelta(minutes=11))
            await sweep_once(slack.bot.services)
            await slack.settle()
            assert reminders_to(slack, APPROVER) == []
            [reminder] = reminders_to(slack, "U0APPROVER2")
            assert "restart_service" in reminder
            [sent] = await audit_events(repo, "approval_reminder_sent")
            assert APPROVER not in str(sent[1]) and "U0APPROVER2" in str(sent[1])


async def test_an_escalation_adds_approvers_once_who_can_then_approve(repo: Repository) -> None:
    config = make_config(
        policies=policy(escalate_after="20m", escalate_to=[BOSS], ttl="1h"),
    )
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            [card] = slack.cards()
            # Before the escalation the boss may not decide.
            await slack.server.click(BOSS, card, "approval_approve")
            await slack.settle()
            assert ops_tools.EXECUTED == []

            clock.tick(timedelta(minutes=21))
            for _ in range(3):
                await sweep_once(slack.bot.services)
                await slack.settle()
            note = f"Escalated to <@{BOSS}> after 20 minutes"
            assert note in json.dumps(card.blocks) and has_buttons(card)
            [boss_copy] = slack.dm_cards(BOSS)
            assert len(slack.dm_cards(APPROVER)) == 1  # the first approver is not DMed again
            assert note in json.dumps(slack.dm_cards(APPROVER)[0].blocks)
            [escalated] = await audit_events(repo, "approval_escalated")
            assert BOSS in str(escalated[1])

            await slack.server.click(BOSS, boss_copy, "approval_approve")
            await slack.settle()
            assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]
            for message in [card, *slack.dm_cards()]:
                assert shows_decision(message, "Approved")


async def test_a_restart_between_sends_nothing_twice(repo: Repository) -> None:
    config = make_config(
        policies=policy(remind_after="10m", escalate_after="20m", escalate_to=[BOSS], ttl="1h")
    )
    with freeze_time(START, real_asyncio=True) as clock:
        # Made under the frozen clock: it signs requests with the time the bot checks.
        server = SlackServer(signing_secret=SECRET)
        await server.start()
        try:
            async with running_bot(config, repo, server=server) as first:
                await first.mention(REQUESTER, calls("restart_service", {"service": "db"}))
                clock.tick(timedelta(minutes=11))
                await sweep_once(first.bot.services)
                await first.settle()
                assert len(reminders_to(first, APPROVER)) == 1
            # A new process (new runner, new bolt app) on the same database and Slack.
            async with running_bot(config, repo, server=server) as second:
                for _ in range(2):
                    await sweep_once(second.bot.services)
                    await second.settle()
                clock.tick(timedelta(minutes=10))
                for _ in range(2):
                    await sweep_once(second.bot.services)
                    await second.settle()
                assert len(reminders_to(second, APPROVER)) == 1
                assert len(second.dm_cards(APPROVER)) == 1
                assert len(second.dm_cards(BOSS)) == 1
                assert len(await audit_events(repo, "approval_escalated")) == 1
            async with running_bot(config, repo, server=server) as third:
                clock.tick(timedelta(minutes=10))
                await sweep_once(third.bot.services)
                await third.settle()
                assert len(third.dm_cards()) == 2 and len(reminders_to(third, APPROVER)) == 1
                assert len(server.calls_to("conversations.open")) == 2
        finally:
            await server.stop()


async def test_a_home_opened_through_one_replica_is_refreshed_by_another(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(home, "DEBOUNCE", 0.01)
    monkeypatch.setattr(home, "PUBLISH_INTERVAL", 0.0)
    config = make_config()
    server = SlackServer(signing_secret=SECRET)
    await server.start()
    try:
        async with running_bot(config, repo, server=server) as first:
            await first.server.open_home(APPROVER)
            await first.settle()
            assert "Nothing is waiting" in json.dumps(server.home_of(APPROVER))
            # Slack now delivers everything to the second replica.
            async with running_bot(config, repo, server=server) as second:
                await second.mention(REQUESTER, calls("restart_service", {"service": "db"}))
                await second.settle()
                assert "approval_approve" in json.dumps(server.home_of(APPROVER))
                [card] = second.cards()
                await server.click(APPROVER, card, "approval_approve")
                await second.settle()
                after = json.dumps(server.home_of(APPROVER))
                assert "Nothing is waiting" in after and "Approved* by" in after
            await first.settle()
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"escalate_after": "20m"}, "escalate_after: needs escalate_to"),
        ({"escalate_to": [BOSS]}, "escalate_to: needs escalate_after"),
        ({"remind_after": "soon"}, "remind_after: 'soon' is not a duration"),
        ({"escalate_after": "20m", "escalate_to": "U0BOSS"}, "escalate_to: must be a list"),
        ({"escalate_after": "20m", "escalate_to": [""]}, "escalate_to: must be a list"),
    ],
)
def test_reach_keys_are_checked(keys: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_config(policies=policy(**keys))


@pytest.mark.parametrize("limit", [0, -1, "25", True])
def test_approver_dm_limit_is_a_positive_whole_number(limit: Any) -> None:
    with pytest.raises(ConfigError, match="approver_dm_limit"):
        make_config(approver_dm_limit=limit)


def test_reach_keys_are_read() -> None:
    config = make_config(
        policies=policy(remind_after="10m", escalate_after="20m", escalate_to=[BOSS, GROUP]),
        approver_dm_limit=5,
    )
    restart = config.policies["restart_service"]
    assert restart.remind_after == timedelta(minutes=10)
    assert restart.escalate_after == timedelta(minutes=20)
    assert restart.escalate_to == [BOSS, GROUP]
    assert config.approver_dm_limit == 5
    assert make_config().approver_dm_limit == 25


async def test_dm_copies_show_an_expiry_too(repo: Repository) -> None:
    config = make_config(policies=policy(ttl="15m"))
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            [copy] = slack.dm_cards(APPROVER)
            clock.tick(timedelta(minutes=16))
            await sweep_once(slack.bot.services)
            await slack.settle()
            assert not has_buttons(copy) and "Expired*" in json.dumps(copy.blocks)
            # An expired approval is reminded of and escalated never, and DMed no more.
            await sweep_once(slack.bot.services)
            await slack.settle()
            assert len(slack.dm_cards()) == 1 and reminders_to(slack, APPROVER) == []


async def test_two_replicas_sweeping_at_once_remind_and_escalate_once(repo: Repository) -> None:
    config = make_config(
        policies=policy(remind_after="10m", escalate_after="10m", escalate_to=[BOSS], ttl="1h")
    )
    with freeze_time(START, real_asyncio=True) as clock:
        server = SlackServer(signing_secret=SECRET)
        await server.start()
        try:
            async with (
                running_bot(config, repo, server=server) as one,
                running_bot(config, repo, server=server) as two,
            ):
                await two.mention(REQUESTER, calls("restart_service", {"service": "db"}))
                clock.tick(timedelta(minutes=11))
                for _ in range(3):
                    await asyncio.gather(sweep_once(one.bot.services), sweep_once(two.bot.services))
                    await asyncio.gather(one.settle(), two.settle())
                assert len(reminders_to(one, APPROVER)) == 1
                assert len(one.dm_cards(APPROVER)) == 1 and len(one.dm_cards(BOSS)) == 1
                assert len(await audit_events(repo, "approval_escalated")) == 1
                assert len(await audit_events(repo, "approval_reminded")) == 1
        finally:
            await server.stop()


async def test_a_slow_sender_whose_claim_lapsed_sends_no_copy_another_sent(
    repo: Repository,
) -> None:
    """A sender stuck on Slack (429s with Retry-After, a paused replica) past its claim: the
    sweeper's sender takes over; the first one, answered at last, must not post the copies
    the second posted (only the copy Slack took without answering may be doubled, as when a
    worker dies there)."""
    config = make_config(policies=policy(approvers=[APPROVER, "U0APPROVER2"]))
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            # The first copy (to APPROVER) is posted but its answer is held back.
            held = slack.server.hold(
                "chat.postMessage", lambda args: str(args.get("channel", "")).startswith("D")
            )
            await slack.server.mention(
                REQUESTER, CHANNEL, "<@U0BOT> " + calls("restart_service", {"service": "db"})
            )
            await asyncio.wait_for(held.arrived.wait(), 10)
            clock.tick(timedelta(minutes=2))
            await sweep_once(slack.bot.services)  # the claim lapsed: it sends both
            held.release.set()
            await slack.settle()
            assert len(slack.dm_cards("U0APPROVER2")) == 1


async def test_a_capped_group_is_announced_once_even_after_an_escalation(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    """A group of 1,000: 25 DMs, and one note in the thread, one audit event, one log line;
    an escalation sends the copies again (to the added people) without saying so again."""
    members = [f"U0M{i:04d}" for i in range(1000)]
    config = make_config(
        policies=policy(approvers=[GROUP], escalate_after="20m", escalate_to=[BOSS], ttl="1h"),
    )
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(config, repo, usergroups={GROUP: members}) as slack:
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            assert len(slack.dm_cards()) == 25
            clock.tick(timedelta(minutes=21))
            for _ in range(3):
                await sweep_once(slack.bot.services)
                await slack.settle()
            assert len(slack.dm_cards(BOSS)) == 1
            assert len(slack.dm_cards()) == 26
            notes = [m for m in slack.server.messages if "approver_dm_limit" in m.text]
            assert len(notes) == 1
            assert len(await audit_events(repo, "approval_dms_capped")) == 1
            logged = [r for r in caplog.records if "approver_dm_limit" in r.getMessage()]
            assert len(logged) == 1


async def test_an_escalation_whose_worker_died_before_the_card_edit_is_shown(
    repo: Repository,
) -> None:
    """A worker killed between claiming an escalation and editing the card: the sweep that
    sends the added approver's copy edits the card and the copies too."""
    config = make_config(policies=policy(escalate_after="20m", escalate_to=[BOSS], ttl="1h"))
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            [card] = slack.cards()
            clock.tick(timedelta(minutes=21))
            [approval_id] = await repo.escalations_due(utcnow())
            assert await repo.escalate(approval_id, now=utcnow()) is not None  # then kill -9
            clock.tick(timedelta(minutes=2))
            await sweep_once(slack.bot.services)
            await slack.settle()
            note = f"Escalated to <@{BOSS}> after 20 minutes"
            assert note in json.dumps(card.blocks) and has_buttons(card)
            assert note in json.dumps(slack.dm_cards(APPROVER)[0].blocks)
            assert len(slack.dm_cards(BOSS)) == 1


async def test_a_dm_copy_slack_failed_for_now_is_sent_by_a_later_sweep(repo: Repository) -> None:
    """429s (after the client's own retries): the copy is due again after a backoff, and
    the sweep that finds it due sends it, once."""
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(make_config(policies=policy()), repo) as slack:
            slack.server.rate_limit("conversations.open", times=4, retry_after=1)
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            await slack.settle()
            assert slack.dm_cards(APPROVER) == []
            clock.tick(timedelta(seconds=10))
            await sweep_once(slack.bot.services)  # not due yet: nothing is asked of Slack
            await slack.settle()
            assert len(slack.server.calls_to("conversations.open")) == 4
            clock.tick(timedelta(minutes=1))
            for _ in range(2):
                await sweep_once(slack.bot.services)
                await slack.settle()
            assert len(slack.dm_cards(APPROVER)) == 1


async def test_a_dm_copy_slack_refuses_for_good_is_not_retried(repo: Repository) -> None:
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(make_config(policies=policy()), repo) as slack:
            slack.server.fail("conversations.open", "user_not_found", times=1)
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            await slack.settle()
            for _ in range(3):
                clock.tick(timedelta(minutes=5))
                await sweep_once(slack.bot.services)
                await slack.settle()
            assert slack.dm_cards(APPROVER) == []
            assert len(slack.server.calls_to("conversations.open")) == 1
            [(_, detail)] = await audit_events(repo, "approval_dm_failed")
            assert "user_not_found" in str(detail)


async def test_dm_copies_that_keep_failing_are_given_up_after_a_bound(repo: Repository) -> None:
    config = make_config(policies=policy(ttl="1d"))
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(config, repo) as slack:
            slack.server.fail("conversations.open", "ratelimited", times=1000)
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            await slack.settle()
            for _ in range(12):
                clock.tick(timedelta(minutes=11))
                await sweep_once(slack.bot.services)
                await slack.settle()
            tried = len(slack.server.calls_to("conversations.open"))
            assert 1 < tried < 12
            [(_, detail)] = await audit_events(repo, "approval_dm_failed")
            assert APPROVER in str(detail)
            clock.tick(timedelta(hours=1))
            await sweep_once(slack.bot.services)
            await slack.settle()
            assert len(slack.server.calls_to("conversations.open")) == tried


async def test_a_group_slack_could_not_list_gets_its_copies_from_a_later_sweep(
    repo: Repository,
) -> None:
    config = make_config(policies=policy(approvers=[GROUP]))
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(config, repo, usergroups={GROUP: ["U0ONCALL"]}) as slack:
            slack.server.fail("usergroups.users.list", "ratelimited", times=1)
            await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
            await slack.settle()
            assert slack.dm_cards("U0ONCALL") == []
            clock.tick(timedelta(minutes=1))
            await sweep_once(slack.bot.services)
            await slack.settle()
            assert len(slack.dm_cards("U0ONCALL")) == 1


def test_a_huge_retry_after_still_gives_a_next_attempt_time() -> None:
    """A Retry-After past what a datetime can add (a proxy's garbage, a hostile endpoint)
    must not make every attempt fail uncounted, so that the copy is never given up."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_slack_response import AsyncSlackResponse

    from handlers.slack.reach import DM_RETRY_AFTER_LONGEST, dm_retry_delay, retry_after_of

    def limited(retry_after: str) -> SlackApiError:
        response = AsyncSlackResponse(
            client=None,
            http_verb="POST",
            api_url="https://slack.com/api/conversations.open",
            req_args={},
            data={"ok": False, "error": "ratelimited"},
            headers={"Retry-After": retry_after},
            status_code=429,
        )
        return SlackApiError("ratelimited", response)

    for value in ("99999999999999999999", str(10**14), "86400"):
        delay = dm_retry_delay(1, retry_after_of(limited(value)))
        assert delay == DM_RETRY_AFTER_LONGEST
        assert utcnow() + delay > utcnow()
    assert retry_after_of(limited("45")) == timedelta(seconds=45)
    assert retry_after_of(limited("soon")) == timedelta(0)


async def test_a_sender_waiting_out_slacks_retry_after_past_its_claim_posts_nothing(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slack_sdk sleeps out each 429's Retry-After itself (three times), which can outlast
    the copies' claim: the sweeper's sender then posts the copy, and the first one, done
    sleeping, posted it again. A sender stops waiting before its claim runs out; the copy is
    due again, and Slack gets it once."""
    from handlers.slack import reach

    monkeypatch.setattr(reach, "DM_CLAIM", timedelta(seconds=2))
    with freeze_time(START, real_asyncio=True) as clock:
        async with running_bot(make_config(policies=policy()), repo) as slack:
            slack.server.rate_limit("conversations.open", times=1, retry_after=4)
            await slack.server.mention(
                REQUESTER, CHANNEL, "<@U0BOT> " + calls("restart_service", {"service": "db"})
            )
            for _ in range(200):  # until the first sender got its 429 and sleeps it out
                if slack.server.calls_to("conversations.open"):
                    break
                await asyncio.sleep(0.05)
            clock.tick(timedelta(minutes=2))
            await sweep_once(slack.bot.services)  # the claim lapsed: this sender posts it
            await slack.settle()
            await asyncio.sleep(4.5)  # past the first sender's Retry-After
            await slack.settle()
            assert len(slack.dm_cards(APPROVER)) == 1


async def test_a_dm_copy_whose_edit_slack_failed_for_now_is_edited_by_a_later_sweep(
    repo: Repository,
) -> None:
    """The decision's card edit goes through but Slack refuses its DM copy's for now (the
    copies are edited at once, a burst that 429s past the client's retries, or a 5xx): the
    copy kept its Approve button on a decided approval for good, since only the card's own
    refusal marked it for the sweeper."""
    with freeze_time(START, real_asyncio=True) as clock:
        server = SlackServer(signing_secret=SECRET)
        await server.start()
        try:
            async with running_bot(make_config(policies=policy()), repo, server=server) as slack:
                await slack.mention(REQUESTER, calls("restart_service", {"service": "db"}))
                [card] = slack.cards()
                [copy] = slack.dm_cards(APPROVER)
                refused = {copy.ts}
                server.fail("chat.update", times=10_000, when=lambda a: a.get("ts") in refused)
                await slack.server.click(APPROVER, card, "approval_approve")
                await slack.settle()
                assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]
                [card] = slack.cards()
                assert not has_buttons(card)
                [copy] = slack.dm_cards(APPROVER)
                assert has_buttons(copy), "the copy's edit failed"
                refused.clear()  # Slack takes edits again
                for _ in range(2):
                    clock.tick(timedelta(minutes=1))
                    await sweep_once(slack.bot.services)
                    await slack.settle()
                [copy] = slack.dm_cards(APPROVER)
                assert not has_buttons(copy)
        finally:
            await server.stop()
