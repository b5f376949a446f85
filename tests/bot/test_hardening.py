"""Defects found by an attacker review and an SRE review after issue 7's fixes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from storage.repository import PendingFilter, Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot

PRIVATE = "C0PRIVATE"


async def pending(repo: Repository) -> dict[str, Any]:
    from bot.clock import utcnow

    approvals, _ = await repo.list_pending(PendingFilter(), now=utcnow(), limit=100)
    return {a.arguments["service"]: a for a in approvals}


# -- 1. approvals that name nobody stay in their channel ---------------------------------

ANYONE_POLICIES = {
    **BASE_CONFIG["policies"],
    "restart_service": {"approvers": [], "ttl": "15m"},  # anyone but the requester
}


@pytest.fixture
async def anyone_slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(policies=ANYONE_POLICIES), repo) as harness:
        yield harness


async def _ask_in(slack: Harness, channel: str, text: str) -> None:
    await slack.server.mention("U0REQUESTER", channel, f"<@U0BOT> {text}")
    await slack.settle()


async def test_approvals_naming_nobody_are_listed_only_in_their_own_channel(
    anyone_slack: Harness, repo: Repository
) -> None:
    slack = anyone_slack
    await _ask_in(slack, CHANNEL, calls(("restart_service", {"service": "public"})))
    await _ask_in(slack, PRIVATE, calls(("restart_service", {"service": "secret"})))
    await _ask_in(slack, PRIVATE, calls(("deploy", {"service": "named", "version": "2"})))

    here = await slack.server.slash_command("U0OUTSIDER", CHANNEL, text="")
    assert "public" in here.body
    assert "secret" not in here.body, "a private channel's approval leaked into another channel"

    there = await slack.server.slash_command("U0OUTSIDER", PRIVATE, text="")
    assert "secret" in there.body and "public" not in there.body

    # Approvals that name the user are theirs to decide from anywhere.
    named = await slack.server.slash_command("U0APPROVER1", CHANNEL, text="")
    assert "named" in named.body and "secret" not in named.body


async def test_a_list_click_decides_an_anyone_approval_only_from_its_channel(
    anyone_slack: Harness, repo: Repository
) -> None:
    slack = anyone_slack
    await _ask_in(slack, PRIVATE, calls(("restart_service", {"service": "secret"})))
    await _ask_in(slack, PRIVATE, calls(("deploy", {"service": "named", "version": "2"})))
    by_service = await pending(repo)
    secret, named = by_service["secret"].id, by_service["named"].id

    # A list opened in CHANNEL, its button value pointed at the private channel's approval.
    for action in ("approval_approve", "approval_deny", "approval_show_arguments"):
        await slack.server.click_raw("U0OUTSIDER", CHANNEL, action, secret, is_ephemeral=True)
        await slack.settle()
    assert slack.server.views == {}, "neither the deny form nor the arguments opened"
    texts = slack.ephemeral_texts("U0OUTSIDER")
    assert sum("does not belong" in t for t in texts) == 3
    assert set(await pending(repo)) == {"secret", "named"}
    assert executed("restart_service") == []

    # A named approver may decide from a list opened anywhere.
    await slack.server.click_raw(
        "U0APPROVER1", CHANNEL, "approval_approve", named, is_ephemeral=True
    )
    await slack.settle()
    assert executed("deploy") == [{"service": "named", "version": "2"}]

    # From a list opened in the approval's own channel, anyone (but the requester) may decide.
    await slack.server.slash_command("U0OUTSIDER", PRIVATE, text="")
    [listing] = [
        m
        for m in slack.server.ephemerals_for("U0OUTSIDER")
        if has_buttons(m) and m.channel == PRIVATE
    ]
    await slack.server.click("U0OUTSIDER", listing, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "secret"}]


async def test_a_deny_from_a_list_elsewhere_cannot_decide_an_anyone_approval(
    anyone_slack: Harness, repo: Repository
) -> None:
    """The deny form remembers the list's channel: submitting it is checked again."""
    slack = anyone_slack
    await _ask_in(slack, PRIVATE, calls(("restart_service", {"service": "secret"})))
    [approval] = (await pending(repo)).values()
    await slack.server.slash_command("U0OUTSIDER", PRIVATE, text="")
    [listing] = [m for m in slack.server.ephemerals_for("U0OUTSIDER") if has_buttons(m)]
    await slack.server.click("U0OUTSIDER", listing, "approval_deny")
    [opened] = slack.server.views.values()
    metadata = json.loads(opened.view["private_metadata"])
    assert metadata["list_channel"] == PRIVATE
    await slack.server.submit_view(
        "U0OUTSIDER",
        opened.id,
        {"deny_reason": {"reason": {"type": "plain_text_input", "value": "no"}}},
    )
    await slack.settle()
    assert (await repo.get_approval(approval.id)).status == "denied"  # type: ignore[union-attr]


# -- 2. a cap on gated calls per response ------------------------------------------------


def engine_request(text: str) -> Any:
    from bot.engine import Request

    return Request(
        text=text, requester="U0REQUESTER", team_id="T1", channel="C0OPS", thread_ts="1.000100"
    )


async def test_a_turn_over_max_approvals_per_turn_stops_before_storing_any(
    repo: Repository,
) -> None:
    from bot.engine import Runner
    from tests.support.scripted_model import ScriptedModel

    runner = Runner(repo, make_config(max_approvals_per_turn=3), worker_id="worker-a")
    services = [{"service": f"s{i}"} for i in range(4)]
    outcome = await runner.start(engine_request(calls(*(("restart_service", s) for s in services))))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "4 calls that need approval" in outcome.error
    assert "max_approvals_per_turn" in outcome.error and "3" in outcome.error
    assert await repo.approvals_for_run(outcome.run_id) == []
    assert len(ScriptedModel.seen) == 1, "the model is not asked again"
    assert executed("restart_service") == []

    # At the cap, every call gets its approval as before.
    at_cap = await runner.start(
        engine_request(calls(*(("restart_service", s) for s in services[:3])))
    )
    assert at_cap.status == "paused" and len(at_cap.new_approvals) == 3


async def test_a_mention_asking_for_too_many_cards_posts_none(repo: Repository) -> None:
    async with running_bot(make_config(), repo) as slack:  # the default cap, 10
        reply = await slack.mention(
            "U0REQUESTER",
            calls(*(("restart_service", {"service": f"s{i}"}) for i in range(11))),
        )
        assert slack.cards() == []
        thread = " ".join(m.text for m in slack.thread_of(reply))
        assert "max_approvals_per_turn" in thread
        assert await pending(repo) == {}


def test_max_approvals_per_turn_is_checked_with_the_config() -> None:
    from bot.config import ConfigError, config_from_dict

    assert config_from_dict({}).max_approvals_per_turn == 10
    for bad in (0, -1, "10", True, 2.5):
        with pytest.raises(ConfigError, match="max_approvals_per_turn"):
            config_from_dict({"max_approvals_per_turn": bad})


# -- 3. a policy with hundreds of approvers ----------------------------------------------


async def test_our_slack_refuses_section_fields_over_slacks_limits() -> None:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    from playground.slack_server import SlackServer

    server = SlackServer(signing_secret="s")
    await server.start()
    try:
        client = AsyncWebClient(token=server.bot_token, base_url=server.api_url)
        field = {"type": "mrkdwn", "text": "x" * 2001}
        for fields in ([field], [{"type": "mrkdwn", "text": "x"}] * 11):
            with pytest.raises(SlackApiError) as refused:
                await client.chat_postMessage(
                    channel="C0OPS", text="x", blocks=[{"type": "section", "fields": fields}]
                )
            assert refused.value.response["error"] == "invalid_blocks"
        long_context = [{"type": "context", "elements": [{"type": "mrkdwn", "text": "x" * 3001}]}]
        with pytest.raises(SlackApiError):
            await client.chat_postMessage(channel="C0OPS", text="x", blocks=long_context)
        fine = {"type": "mrkdwn", "text": "x" * 2000}
        await client.chat_postMessage(
            channel="C0OPS", text="x", blocks=[{"type": "section", "fields": [fine] * 10}]
        )
    finally:
        await server.stop()


async def test_a_card_naming_hundreds_of_approvers_is_posted_with_and_n_more(
    repo: Repository,
) -> None:
    approvers = [f"U0APPROVER{i:03d}" for i in range(300)]
    policies = {**BASE_CONFIG["policies"], "restart_service": {"approvers": approvers}}
    async with running_bot(make_config(policies=policies), repo) as slack:
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        [card] = slack.cards()
        [people] = [b for b in card.blocks if b.get("block_id") == "approval_people"]
        [who] = [f["text"] for f in people["fields"] if f["text"].startswith("*Who may approve*")]
        assert len(who) <= 2000
        shown = who.count("<@U0APPROVER")
        assert 100 < shown < 300
        assert who.endswith(f"and {300 - shown} more")
        # The last one on the list can still decide.
        await slack.server.click("U0APPROVER299", card, "approval_approve")
        await slack.settle()
        assert executed("restart_service") == [{"service": "db"}]


# -- 4. arguments nested too deeply --------------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = "db"
    for _ in range(depth):
        value = [value]
    return value


async def test_a_gated_call_with_arguments_nested_too_deep_gets_a_clear_answer(
    repo: Repository,
) -> None:
    from bot.engine import Runner
    from tests.support.scripted_model import ScriptedModel

    # apply_settings takes any JSON value, so only the depth can refuse it.
    tools = ["tests.support.ops_tools:restart_service", "tests.support.ops_tools:apply_settings"]
    policies = {"apply_settings": {"approvers": ["U0APPROVER1"]}}
    runner = Runner(repo, make_config(tools=tools, policies=policies), worker_id="worker-a")
    outcome = await runner.start(
        engine_request(calls(("apply_settings", {"settings": nested(900)})))
    )
    assert outcome.status == "completed"
    answer = outcome.answer or ""
    assert "recursion" not in answer
    assert "nested more than 100 levels deep" in answer and "not run" in answer
    assert await repo.approvals_for_run(outcome.run_id) == []
    assert executed("apply_settings") == []
    assert len(ScriptedModel.seen) == 2  # the model read the refusal and answered

    # Deep, but within reason: asks for approval as usual, and its card can be rendered.
    within = await runner.start(engine_request(calls(("apply_settings", {"settings": nested(90)}))))
    assert within.status == "paused" and len(within.new_approvals) == 1


# -- 5. user-group lookups when Slack cannot answer ----------------------------------------

GROUP_POLICIES = {"restart_service": {"approvers": ["S0ONCALL"]}}
LOOKUP = "usergroups.users.list"


@pytest.fixture
async def group_slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(policies=GROUP_POLICIES)
    async with running_bot(config, repo, usergroups={"S0ONCALL": ["U0ONCALL"]}) as harness:
        await harness.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        yield harness


async def test_unreachable_slack_refuses_group_clicks_with_try_again(
    group_slack: Harness, repo: Repository
) -> None:
    slack = group_slack
    [card] = slack.cards()
    # The card's DM copies looked the group up; drop that as its cache time running out would.
    slack.bot.services.groups.forget("S0ONCALL")
    slack.server.unreachable(LOOKUP, times=1000)  # every try, the client's retries included
    await slack.server.click("U0ONCALL", card, "approval_approve")
    await slack.server.click("U0ONCALL", card, "approval_deny")
    await slack.settle()
    listed = await slack.server.slash_command("U0ONCALL", CHANNEL, text="")
    assert listed.status == 200 and "try again" in listed.body
    tries = [t for t in slack.ephemeral_texts("U0ONCALL") if "nothing was decided" in t]
    assert len(tries) == 2 and all("try again" in t for t in tries)
    assert slack.server.views == {}
    assert set(await pending(repo)) == {"db"}

    # Slack is back: nothing about the outage was cached, the member decides.
    slack.server.unreachable(LOOKUP, times=0)
    await slack.server.click("U0ONCALL", card, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]


async def test_a_slack_error_about_a_group_is_cached_only_briefly(
    group_slack: Harness, repo: Repository
) -> None:
    slack = group_slack
    now = [1000.0]
    slack.bot.services.groups.clock = lambda: now[0]
    [card] = slack.cards()
    slack.server.fail(LOOKUP, error="no_such_subteam")
    await slack.server.click("U0ONCALL", card, "approval_approve")
    await slack.settle()
    assert any("not one of the approvers" in t for t in slack.ephemeral_texts("U0ONCALL"))
    lookups = len([c for c in slack.server.calls if c.method == LOOKUP])
    assert not await _lists_restart(slack, "U0ONCALL"), "cached for a moment: no new lookup"
    assert len([c for c in slack.server.calls if c.method == LOOKUP]) == lookups

    now[0] += 60  # a minute later: far less than the 5 minutes a real answer is kept
    assert await _lists_restart(slack, "U0ONCALL")
    await slack.server.click("U0ONCALL", card, "approval_approve")
    await slack.settle()
    assert executed("restart_service") == [{"service": "db"}]


async def _lists_restart(slack: Harness, user: str) -> bool:
    listed = await slack.server.slash_command(user, CHANNEL, text="")
    return "restart_service" in listed.body


# -- 6. the command line -------------------------------------------------------------------


def cli(tmp_path: Any, *argv: str, database_url: str | None = None) -> Any:
    import os
    import subprocess
    import sys

    from tests.support.serve_process import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env["DATABASE_URL"] = database_url or f"sqlite:///{tmp_path / 'fresh.db'}"
    env.pop("APPROVAL_BOT_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--bogus"], "--bogus"),
        (["--bogus=1", "-v"], "--bogus=1"),
        (["approvals", "--bogus"], "--bogus"),
        (["runs", "-x"], "-x"),
    ],
)
def test_an_unknown_flag_is_named_not_a_missing_command(
    tmp_path: Any, argv: list[str], named: str
) -> None:
    result = cli(tmp_path, *argv)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"unrecognized arguments: {named}" in result.stderr
    assert "required" not in result.stderr


def test_a_missing_command_is_still_said(tmp_path: Any) -> None:
    result = cli(tmp_path)
    assert result.returncode == 2 and "required: COMMAND" in result.stderr


async def test_commands_on_a_fresh_database_say_nothing_on_stderr(
    tmp_path: Any, database_url: str
) -> None:
    import asyncio

    def run(*argv: str) -> Any:
        return cli(tmp_path, *argv, database_url=database_url)

    # Reading commands make no database (they say there is none), so db upgrade makes it.
    upgraded = await asyncio.to_thread(run, "db", "upgrade")
    assert upgraded.returncode == 0 and upgraded.stderr == "", upgraded.stderr
    listed = await asyncio.to_thread(run, "approvals", "list")
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert "Nothing waits for a decision or an answer" in listed.stdout

    # -v shows the migrations a command applies, and no Alembic preamble when there are none.
    verbose = await asyncio.to_thread(run, "-v", "runs", "recover")
    assert verbose.returncode == 0 and "alembic" not in verbose.stderr, verbose.stderr
    fresh_url = f"sqlite:///{tmp_path / 'fresh.db'}"
    migrating = await asyncio.to_thread(
        cli, tmp_path, "-v", "db", "upgrade", database_url=fresh_url
    )
    assert migrating.returncode == 0
    assert "Running upgrade" in migrating.stderr and "Context impl" not in migrating.stderr
