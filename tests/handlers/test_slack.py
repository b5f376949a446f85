"""The Slack surface end to end: signed requests in Slack's payload shapes, against the real
bolt app, handlers, runner and storage; Slack is our Slack-compatible server."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from storage.repository import Repository
from tests.conftest import make_config
from tests.support import ops_tools
from tests.support.ops_tools import executed
from tests.support.scripted_model import ScriptedModel, calls
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo, usergroups={"S0ONCALL": ["U0ONCALL"]}) as h:
        yield h


async def pending_ids(repo: Repository) -> list[str]:
    from storage.repository import PendingFilter

    approvals, _ = await repo.list_pending(PendingFilter(), now=_now(), limit=100)
    return [a.id for a in approvals]


def _now() -> Any:
    from bot.clock import utcnow

    return utcnow()


async def test_mention_card_approve_answer(slack: Harness) -> None:
    reply = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
    assert reply.status == 200
    [card] = slack.cards()
    assert has_buttons(card)
    assert card.thread_ts == reply.message.ts  # type: ignore[union-attr]
    actions = [e["action_id"] for _, e in card.buttons()]
    assert actions == ["approval_approve", "approval_deny"]
    assert all(e.get("confirm") for _, e in card.buttons())
    assert executed("restart_service") == []
    # The model got the request without the bot's mention.
    first_user = next(m for m in ScriptedModel.seen[0] if m["role"] == "user")
    assert first_user["parts"][0]["text"] == calls(("restart_service", {"service": "web"}))

    click = await slack.server.click("U0APPROVER1", card, "approval_approve")
    assert click.status == 200
    await slack.settle()

    card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
    assert card is not None and not has_buttons(card)
    assert "Approved* by <@U0APPROVER1>" in json.dumps(card.blocks)
    assert executed("restart_service") == [{"service": "web"}]
    texts = [m.text for m in slack.thread_of(reply)]
    assert "Results: restart_service=restarted web" in texts
    assert any("Approved `restart_service`" in t for t in slack.ephemeral_texts("U0APPROVER1"))


async def test_twenty_concurrent_approvals_run_the_tool_once(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    clicks = await asyncio.gather(
        *(slack.server.click("U0APPROVER1", card, "approval_approve") for _ in range(20))
    )
    assert all(c.status == 200 for c in clicks)
    await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]
    texts = slack.ephemeral_texts("U0APPROVER1")
    assert sum("Approved `restart_service`" in t for t in texts) == 1
    assert sum("Already approved by <@U0APPROVER1> <!date^" in t for t in texts) == 19


async def test_deny_with_reason_through_the_modal(slack: Harness) -> None:
    reply = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    click = await slack.server.click("U0APPROVER2", card, "approval_deny")
    assert click.status == 200
    [opened] = [v for v in slack.server.views.values() if v.user == "U0APPROVER2"]
    submitted = await slack.server.submit_view(
        "U0APPROVER2",
        opened.id,
        {"deny_reason": {"reason": {"type": "plain_text_input", "value": "freeze <!channel>"}}},
    )
    assert submitted.status == 200
    await slack.settle()
    assert executed("restart_service") == []
    card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
    assert card is not None and not has_buttons(card)
    outcome = json.dumps(card.blocks)
    assert "Denied* by <@U0APPROVER2>" in outcome and "freeze &lt;!channel&gt;" in outcome
    tool_results = [
        p["output"] for m in ScriptedModel.seen[-1] if m["role"] == "tool" for p in m["parts"]
    ]
    assert tool_results == ["Denied by @U0APPROVER2: freeze <!channel>. The call was not run."]
    answer = slack.thread_of(reply)[-1].text
    assert "freeze &lt;!channel&gt;" in answer, "the model's echo is escaped too"


async def test_a_form_slack_does_not_open_tells_the_clicker_and_decides_nothing(
    slack: Harness, repo: Repository
) -> None:
    """A trigger that expired before our views.open (a slow network): the clicker reads
    that Slack did not open the form, the approval is still pending, and a second click
    opens it."""
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    slack.server.fail("views.open", "expired_trigger_id")
    assert (await slack.server.click("U0APPROVER2", card, "approval_deny")).status == 200
    await slack.settle()
    assert slack.ephemeral_texts("U0APPROVER2") == [
        ":warning: Slack did not open the deny form in time; click again."
    ]
    assert len(await pending_ids(repo)) == 1 and not slack.server.views
    await slack.server.click("U0APPROVER2", card, "approval_deny")
    assert [v.user for v in slack.server.views.values()] == ["U0APPROVER2"]


async def test_a_form_submitted_after_the_card_was_decided_is_answered_in_its_thread(
    slack: Harness,
) -> None:
    """Deny's form is open when someone else approves: the submission changes nothing, and
    the denier is told so in the card's thread, where they clicked."""
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    await slack.server.click("U0APPROVER2", card, "approval_deny")
    [opened] = list(slack.server.views.values())
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    await slack.settle()
    typed = {"reason": {"type": "plain_text_input", "value": "too late"}}
    assert (
        await slack.server.submit_view("U0APPROVER2", opened.id, {"deny_reason": typed})
    ).status == 200
    await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]
    [told] = slack.server.ephemerals_for("U0APPROVER2")
    assert "Already approved by <@U0APPROVER1>" in told.text, told.text
    assert told.thread_ts == card.thread_ts and told.channel == CHANNEL and card.thread_ts


async def test_refusals_change_nothing(slack: Harness, repo: Repository) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    [approval_id] = await pending_ids(repo)

    await slack.server.click("U0REQUESTER", card, "approval_approve")
    await slack.server.click("U0OUTSIDER", card, "approval_approve")
    await slack.server.click("U0OUTSIDER", card, "approval_deny")
    await slack.settle()
    assert any("someone else must decide" in t for t in slack.ephemeral_texts("U0REQUESTER"))
    outsider = slack.ephemeral_texts("U0OUTSIDER")
    assert len(outsider) == 2 and all("not one of the approvers" in t for t in outsider)
    assert not slack.server.views, "no deny modal for someone who may not deny"
    assert await pending_ids(repo) == [approval_id]
    assert has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]
    assert executed("restart_service") == []


async def test_expired_approval_is_refused_and_its_card_edited(repo: Repository) -> None:
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            await slack.mention(
                "U0REQUESTER", calls(("deploy", {"service": "api", "version": "9"}))
            )
            [card] = slack.cards()
            clock.tick(timedelta(minutes=31))
            await slack.server.click("U0APPROVER1", card, "approval_approve")
            await slack.settle()
            # A time as Slack's date token (each reader's time zone), UTC only as its fallback.
            assert any(
                "expired <!date^1796034600^" in t and "|2026-11-30 10:30 UTC>" in t
                for t in slack.ephemeral_texts("U0APPROVER1")
            )
            card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
            assert card is not None and not has_buttons(card)
            assert "Expired*" in json.dumps(card.blocks)
            # deploy's policy says on_expiry = "cancel": the run stops and the thread says so.
            assert any("Stopped" in m.text for m in slack.server.thread(CHANNEL, card.thread_ts))
    assert executed("deploy") == []


async def test_forged_stale_and_replayed_requests(slack: Harness, repo: Repository) -> None:
    forged = await slack.server.mention("U0REQUESTER", CHANNEL, "<@U0BOT> hi", signature="v0=00")
    assert forged.status == 401
    stale = await slack.server.mention(
        "U0REQUESTER", CHANNEL, "<@U0BOT> hi", timestamp=int(time.time()) - 6 * 60
    )
    assert stale.status == 401
    await slack.settle()
    assert ScriptedModel.seen == []

    first = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    again = await slack.server.redeliver(first.event_id, retry_num=1)  # type: ignore[arg-type]
    assert again.status == 200
    await slack.settle()
    assert len(slack.cards()) == 1
    assert len(await pending_ids(repo)) == 1

    [card] = slack.cards()
    forged_click = await slack.server.click(
        "U0APPROVER1", card, "approval_approve", signature="v0=bad"
    )
    assert forged_click.status == 401
    await slack.settle()
    assert executed("restart_service") == []


async def test_a_click_from_another_channel_or_workspace_is_refused(
    slack: Harness, repo: Repository
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [approval_id] = await pending_ids(repo)
    await slack.server.click_raw("U0APPROVER1", "C0ELSEWHERE", "approval_approve", approval_id)
    await slack.settle()
    assert any("does not belong" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    assert await pending_ids(repo) == [approval_id]
    assert executed("restart_service") == []


async def test_untrusted_text_is_escaped_on_the_card(slack: Harness) -> None:
    evil = "<!channel> <@U123> <https://x|y> & more"
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": evil})))
    [card] = slack.cards()
    rendered = json.dumps(card.blocks)
    for raw in ("<!channel>", "<@U123>", "<https://x|y>"):
        assert raw not in rendered
    assert "&lt;!channel&gt; &lt;@U123&gt; &lt;https://x|y&gt; &amp; more" in rendered


async def test_long_arguments_are_truncated_with_a_way_to_see_them(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "x" * 5000})))
    [card] = slack.cards()
    assert len(json.dumps(card.blocks)) < 4000
    assert "approval_show_arguments" in [e["action_id"] for _, e in card.buttons()]
    await slack.server.click("U0OUTSIDER", card, "approval_show_arguments")
    [opened] = slack.server.views.values()
    shown = "".join(b["text"]["text"] for b in opened.view["blocks"] if b["type"] == "section")
    assert shown.count("x") == 5000


async def test_approvals_command_lists_and_its_buttons_work(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "one"})))
    await slack.mention("U0APPROVER2", calls(("restart_service", {"service": "two"})))

    mine = await slack.server.slash_command("U0REQUESTER", CHANNEL, text="mine")
    assert mine.status == 200 and "one" in mine.body and "two" not in mine.body

    for_me = await slack.server.slash_command("U0APPROVER2", CHANNEL, text="")
    assert "one" in for_me.body and "two" not in for_me.body, "not their own request"

    everything = await slack.server.slash_command("U0OUTSIDER", CHANNEL, text="all")
    assert "one" in everything.body and "two" in everything.body

    nothing = await slack.server.slash_command("U0OUTSIDER", CHANNEL, text="")
    assert "Nothing is waiting for your decision" in nothing.body

    unknown = await slack.server.slash_command("U0OUTSIDER", CHANNEL, text="frobnicate")
    assert "I don't know `/approvals frobnicate`" in unknown.body
    assert "/approvals mine" in (await slack.server.slash_command("U0X", CHANNEL, text="help")).body

    # The list's own Approve button decides, exactly as the card's does.
    [listing] = [m for m in slack.server.ephemerals_for("U0APPROVER2") if has_buttons(m)]
    await slack.server.click("U0APPROVER2", listing, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "one"}]
    cards = {json.dumps(c.blocks).count("Approved*") for c in slack.cards()}
    assert cards == {0, 1}


async def test_a_card_that_cannot_be_posted_is_still_listed(
    slack: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # progress, "waiting" and the card itself all fail
    slack.server.fail("chat.postMessage", error="channel_not_found", times=3)
    with caplog.at_level(logging.ERROR):
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    assert slack.cards() == []
    assert any("could not post its card" in r.getMessage() for r in caplog.records)
    listed = await slack.server.slash_command("U0APPROVER1", CHANNEL, text="")
    assert "restart_service" in listed.body


async def test_rate_limited_posts_are_retried(slack: Harness) -> None:
    slack.server.rate_limit("chat.postMessage", times=1, retry_after=1)
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    assert len(slack.cards()) == 1
    assert [c.status for c in slack.server.calls_to("chat.postMessage")][:2] == [429, 200]


async def test_user_group_approvers(repo: Repository) -> None:
    config = make_config(policies={"restart_service": {"approvers": ["S0ONCALL"]}})
    async with running_bot(config, repo, usergroups={"S0ONCALL": ["U0ONCALL"]}) as slack:
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        [card] = slack.cards()
        assert "<!subteam^S0ONCALL>" in json.dumps(card.blocks)
        await slack.server.click("U0APPROVER1", card, "approval_approve")
        await slack.server.click("U0ONCALL", card, "approval_approve")
        await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]
    assert any("not one of the approvers" in t for t in slack.ephemeral_texts("U0APPROVER1"))


async def test_follow_up_mention_continues_the_thread(slack: Harness) -> None:
    first = await slack.mention("U0REQUESTER", "hello there")
    assert first.message is not None
    thread_ts = first.message.ts
    await slack.mention("U0REQUESTER", "and again", thread_ts=thread_ts)
    texts = [m.text for m in slack.server.thread(CHANNEL, thread_ts)]
    assert "You said: hello there" in texts and "You said: and again" in texts
    users = [m for m in ScriptedModel.seen[-1] if m["role"] == "user"]
    assert [u["parts"][0]["text"] for u in users] == ["hello there", "and again"]


async def test_socket_mode_handles_a_mention(repo: Repository) -> None:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    async with running_bot(make_config(), repo) as slack:
        handler = AsyncSocketModeHandler(slack.bot.app, slack.server.app_token)  # type: ignore[arg-type]
        handler.client.web_client.base_url = slack.server.api_url
        await handler.connect_async()
        try:
            await slack.server.wait_socket_connected()
            ack = await slack.server.socket_mention(
                "U0REQUESTER", CHANNEL, "<@U0BOT> " + calls(("get_status", {"service": "web"}))
            )
            assert ack.ack["envelope_id"] == ack.envelope_id
            await slack.settle()
        finally:
            await handler.close_async()
    assert executed("get_status") == [{"service": "web"}]
    assert any("get_status=web is healthy" in m.text for m in slack.server.messages)


async def test_the_sweeper_expires_cards_and_moves_runs_on(repo: Repository) -> None:
    from handlers.flows import sweep_once

    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            denied_reply = await slack.mention(
                "U0REQUESTER", calls(("restart_service", {"service": "db"}))
            )
            cancelled_reply = await slack.mention(
                "U0REQUESTER", calls(("deploy", {"service": "api", "version": "2"}))
            )
            clock.tick(timedelta(minutes=31))
            await sweep_once(slack.bot.services)
            await slack.settle()
            for card in slack.cards():
                assert not has_buttons(card) and "Expired*" in json.dumps(card.blocks)
            # restart_service: on_expiry = "deny", so the model hears it and answers.
            assert any(
                "Expired at 2026-11-30 10:15 UTC" in m.text for m in slack.thread_of(denied_reply)
            )
            # deploy: on_expiry = "cancel", so the run stops and says why.
            assert any("Stopped" in m.text for m in slack.thread_of(cancelled_reply))
    assert ops_tools.EXECUTED == []


async def test_approvals_pages(slack: Harness) -> None:
    for i in range(12):
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": f"s{i:02d}"})))
    first = await slack.server.slash_command("U0APPROVER1", CHANNEL, text="all")
    shown = json.dumps(first.json()["blocks"], ensure_ascii=False)
    assert "(1–10 of 12)" in shown
    assert "s11" in shown and "s01" not in shown, "newest first"
    [listing] = [m for m in slack.server.ephemerals_for("U0APPROVER1") if "Older" in str(m.blocks)]
    await slack.server.click("U0APPROVER1", listing, "approvals_page")
    await slack.settle()
    [page_two] = [m for m in slack.server.ephemerals_for("U0APPROVER1") if "11–12" in str(m.blocks)]
    assert "s01" in json.dumps(page_two.blocks) and "s00" in json.dumps(page_two.blocks)
    assert "Newer" in json.dumps(page_two.blocks) and "Older" not in json.dumps(page_two.blocks)


def test_long_answers_are_split_at_line_breaks() -> None:
    from handlers.blocks import MESSAGE_TEXT_LIMIT, split_for_slack

    text = "\n".join(f"line {i} " + "x" * 90 for i in range(200))
    chunks = split_for_slack(text)
    assert len(chunks) > 1 and all(len(c) <= MESSAGE_TEXT_LIMIT for c in chunks)
    assert "\n".join(chunks) == text


def test_escaping_never_pushes_a_message_past_slacks_limit() -> None:
    from handlers.blocks import MESSAGE_TEXT_LIMIT, escape, split_for_slack

    text = "a<b&" * 3000
    chunks = split_for_slack(escape(text))
    assert all(len(c) <= MESSAGE_TEXT_LIMIT for c in chunks)
    assert "".join(chunks) == escape(text), "no escaped character is cut in two"


async def test_deny_from_the_approvals_list_answers_there(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    await slack.server.slash_command("U0APPROVER1", CHANNEL, text="")
    [listing] = [m for m in slack.server.ephemerals_for("U0APPROVER1") if has_buttons(m)]
    await slack.server.click("U0APPROVER1", listing, "approval_deny")
    [opened] = slack.server.views.values()
    await slack.server.submit_view(
        "U0APPROVER1",
        opened.id,
        {"deny_reason": {"reason": {"type": "plain_text_input", "value": "not today"}}},
    )
    await slack.settle()
    assert executed("restart_service") == []
    assert any("Denied `restart_service`" in t for t in slack.ephemeral_texts("U0APPROVER1"))


async def test_malformed_values_get_a_clear_page_not_an_error(
    slack: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    before = len(slack.server.responses)
    with caplog.at_level(logging.WARNING):
        for value in ("not json", "[1, 2]", '{"view": "all", "page": "two"}'):
            reply = await slack.server.click_raw(
                "U0APPROVER1", CHANNEL, "approvals_page", value, is_ephemeral=True
            )
            assert reply.status == 200
        await slack.settle()
    # Each got the first page of what U0APPROVER1 may approve, through its response_url.
    answers = slack.server.responses[before:]
    assert len(answers) == 3
    assert all("restart_service" in json.dumps(a.body) for a in answers)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_decision_from_the_cli_edits_the_card_and_answers_the_thread(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.cli.app import main

    # The CLI reaches the database by URL, as a user's shell would: a SQLite file here.
    database_url = f"sqlite:///{tmp_path / 'shared.db'}"
    repo = await Repository.open(database_url)
    config_file = tmp_path / "bot.toml"
    config_file.write_text(
        'model = "scripted"\n'
        'tools = ["tests.support.ops_tools:get_status", '
        '"tests.support.ops_tools:restart_service"]\n'
        '[policies.restart_service]\napprovers = ["U0APPROVER1"]\n'
    )
    async with running_bot(make_config(), repo) as slack:
        reply = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        [card] = slack.cards()
        [approval_id] = await pending_ids(repo)
        monkeypatch.setenv("DATABASE_URL", database_url)
        monkeypatch.setenv("SLACK_BOT_TOKEN", slack.server.bot_token)
        monkeypatch.setenv("SLACK_API_URL", slack.server.api_url)
        argv = [
            "--config",
            str(config_file),
            "approvals",
            "decide",
            approval_id,
            "--approve",
            "--as",
            "U0APPROVER1",
        ]
        code = await asyncio.to_thread(main, argv)
        assert code == 0
        card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
        assert card is not None and not has_buttons(card)
        assert "Approved* by <@U0APPROVER1>" in json.dumps(card.blocks)
        assert "Results: restart_service=restarted db" in [m.text for m in slack.thread_of(reply)]
    await repo.close()
    assert executed("restart_service") == [{"service": "db"}]


async def test_a_run_cancelled_with_an_approved_call_cancels_it_and_its_card_says_so(
    repo: Repository,
) -> None:
    """The approved call of a run that stops (here: its sibling expired with on_expiry =
    cancel) will never run: its approval is cancelled and its card no longer says Approved."""
    from handlers.flows import sweep_once

    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            await slack.mention(
                "U0REQUESTER",
                calls(
                    ("restart_service", {"service": "db"}),
                    ("deploy", {"service": "api", "version": "2"}),
                ),
            )
            restart = next(c for c in slack.cards() if "restart_service" in c.text)
            click = await slack.server.click("U0APPROVER1", restart, "approval_approve")
            assert click.status == 200
            await slack.settle()
            clock.tick(timedelta(minutes=31))
            await sweep_once(slack.bot.services)  # deploy expires: the run is cancelled
            await slack.settle()

            card = slack.server.message(CHANNEL, restart.ts)
            assert card is not None and not has_buttons(card)
            shown = json.dumps(card.blocks)
            assert "Approved*" not in shown and "the run was cancelled" in shown, shown
            approval_id = re.search(r"Approval `([0-9A-Za-z_]+)`", shown)
            assert approval_id is not None
            approval = await repo.get_approval(approval_id.group(1))
            assert approval is not None
            approvals = await repo.approvals_for_run(approval.run_id)
            assert {a.tool_name: a.status for a in approvals} == {
                "restart_service": "cancelled",
                "deploy": "expired",
            }
    assert ops_tools.EXECUTED == []


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_a_card_whose_location_was_never_stored_is_adopted_by_its_click(
    slack: Harness, repo: Repository, decision: str
) -> None:
    # A worker died after Slack took the card and before it stored where the card is.
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
    [card] = slack.cards()
    [approval_id] = await pending_ids(repo)
    await repo.execute_sql(
        "UPDATE approvals SET card_channel = NULL, card_ts = NULL WHERE id = :id",
        {"id": approval_id},
    )

    if decision == "approve":
        await slack.server.click("U0APPROVER1", card, "approval_approve")
    else:
        await slack.server.click("U0APPROVER1", card, "approval_deny")
        [opened] = [v for v in slack.server.views.values() if v.user == "U0APPROVER1"]
        await slack.server.submit_view(
            "U0APPROVER1",
            opened.id,
            {"deny_reason": {"reason": {"type": "plain_text_input", "value": "not now"}}},
        )
    await slack.settle()

    adopted = await repo.get_approval(approval_id)
    assert adopted is not None and (adopted.card_channel, adopted.card_ts) == (CHANNEL, card.ts)
    settled = slack.server.message(CHANNEL, card.ts)
    assert settled is not None and not has_buttons(settled)
    word = "Approved" if decision == "approve" else "Denied"
    assert f"{word}* by <@U0APPROVER1>" in json.dumps(settled.blocks)
    assert len(slack.cards()) == 1
