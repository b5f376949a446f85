"""The Workflow Builder step "Request approval" against the real bot and our Slack: a
``function_executed`` event posts the approval card (and its DM copies), a decision completes
the step once through ``functions.completeSuccess`` with the outputs manifest.yml declares,
an expiry completes it ``expired``, a cancel fails it (``completeError``), and payloads or
inputs the step cannot use get a clear answer and store nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.clock import utcnow
from bot.policy import HoldRefused
from handlers.flows import announce_cancelled, sweep_once
from playground.slack_server import FunctionExecution
from storage.repository import PendingFilter, Repository
from tests.conftest import make_config
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot

ROOT = Path(__file__).resolve().parents[2]
APPROVER = "U0APPROVER1"
OTHER = "U0APPROVER2"
INPUTS = {
    "title": "Deploy shop to production",
    "details": "Release 4.2: the new checkout <!channel>",
    "approvers": [APPROVER, OTHER],
    "channel": CHANNEL,
    "timeout": "1h",
    "requester": "U0REQUESTER",
}


def manifest_functions() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "manifest.yml").read_text())["functions"]


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as harness:
        harness.server.define_functions(manifest_functions())
        yield harness


async def run_step(slack: Harness, **inputs: Any) -> FunctionExecution:
    reply = await slack.server.run_function("request_approval", {**INPUTS, **inputs})
    assert reply.status == 200, reply.body
    await slack.settle()
    assert reply.execution_id is not None
    return slack.server.function_executions[reply.execution_id]


async def steps(repo: Repository) -> list[tuple[Any, ...]]:
    async with repo.engine.connect() as connection:
        result = await connection.exec_driver_sql(
            "SELECT function_execution_id, completion, token FROM workflow_steps"
        )
        return [tuple(row) for row in result.fetchall()]


async def test_a_step_posts_the_card_and_a_click_completes_it_once(
    slack: Harness, repo: Repository
) -> None:
    execution = await run_step(slack)
    [card] = slack.cards()
    assert card.channel == CHANNEL and has_buttons(card)
    shown = json.dumps(card.blocks)
    assert "Deploy shop to production" in shown
    assert "&lt;!channel&gt;" in shown, "the details are escaped like any argument"
    assert "<@U0REQUESTER>" in shown
    assert "the workflow carries on with *expired*" in shown
    assert "The workflow carries on with your approval." in shown  # the Approve confirm
    assert {m.channel for m in slack.dm_cards()} == {
        slack.server.dm_channels[APPROVER],
        slack.server.dm_channels[OTHER],
    }, "DM copies go to the named approvers"
    assert execution.state == "running"

    click = await slack.server.click(APPROVER, card, "approval_approve")
    assert click.status == 200
    await slack.settle()
    assert execution.state == "completed"
    assert execution.outputs == {"decision": "approved", "decided_by": APPROVER, "reason": ""}
    [call] = slack.server.calls_to("functions.completeSuccess")
    assert call.token == execution.token, "completed with the execution's own token"
    assert not has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]

    # More sweeps complete nothing again.
    await sweep_once(slack.bot.services)
    await slack.settle()
    assert len(slack.server.calls_to("functions.completeSuccess")) == 1
    [(_, completion, token)] = await steps(repo)
    assert completion == "success" and token is None, "the execution's token is forgotten"


async def test_a_denial_with_a_reason_completes_the_step_denied(slack: Harness) -> None:
    execution = await run_step(slack)
    [card] = slack.cards()
    await slack.server.click(OTHER, card, "approval_deny")
    [opened] = [v for v in slack.server.views.values() if v.user == OTHER]
    await slack.server.submit_view(
        OTHER,
        opened.id,
        {"deny_reason": {"reason": {"type": "plain_text_input", "value": "not on a Friday"}}},
    )
    await slack.settle()
    assert execution.outputs == {
        "decision": "denied",
        "decided_by": OTHER,
        "reason": "not on a Friday",
    }


async def test_the_requester_may_not_approve_their_own_step(slack: Harness) -> None:
    execution = await run_step(slack, approvers=["U0REQUESTER", APPROVER])
    [card] = slack.cards()
    await slack.server.click("U0REQUESTER", card, "approval_approve")
    await slack.settle()
    assert execution.state == "running"
    assert slack.server.calls_to("functions.completeSuccess") == []


async def test_an_expired_step_completes_expired(slack: Harness) -> None:
    execution = await run_step(slack, timeout="1s")
    await asyncio.sleep(1.2)
    await sweep_once(slack.bot.services)
    await slack.settle()
    assert execution.outputs == {"decision": "expired", "reason": ""}
    [card] = slack.cards()
    assert "Expired" in card.text


async def test_a_cancelled_step_fails_with_complete_error(slack: Harness, repo: Repository) -> None:
    execution = await run_step(slack)
    [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
    assert await repo.cancel_run(
        approval.run_id, reason="change freeze (by U0OPS)", actor="U0OPS", now=approval.created_at
    )
    await announce_cancelled(slack.bot.services, approval.run_id)
    await slack.settle()
    assert execution.state == "failed"
    assert execution.error is not None and "change freeze" in execution.error
    assert slack.server.calls_to("functions.completeSuccess") == []


async def test_a_redelivered_execution_posts_one_card(slack: Harness, repo: Repository) -> None:
    reply = await slack.server.run_function("request_approval", INPUTS)
    await slack.settle()
    assert reply.event_id is not None
    again = await slack.server.redeliver(reply.event_id)
    assert again.status == 200
    await slack.settle()
    assert len(slack.cards()) == 1
    assert len(await steps(repo)) == 1


async def test_a_completion_slack_fails_is_tried_again_and_sent_once(slack: Harness) -> None:
    execution = await run_step(slack)
    slack.server.fail("functions.completeSuccess", "internal_error")
    [card] = slack.cards()
    await slack.server.click(APPROVER, card, "approval_approve")
    await slack.settle()
    assert execution.state == "running", "Slack failed the first completion"
    deadline = asyncio.get_running_loop().time() + 30
    while execution.state == "running":
        assert asyncio.get_running_loop().time() < deadline, "never completed"
        await asyncio.sleep(0.5)
        await sweep_once(slack.bot.services)
        await slack.settle()
    assert execution.outputs is not None and execution.outputs["decision"] == "approved"
    calls = slack.server.calls_to("functions.completeSuccess")
    assert [c.response.get("ok") for c in calls] == [False, True]


@pytest.mark.parametrize(
    ("inputs", "says"),
    [
        ({"approvers": []}, "approvers must name at least one person"),
        ({"approvers": ["not-a-user"]}, "is not a Slack user id"),
        ({"channel": "#ops"}, "channel must be a Slack channel id"),
        ({"timeout": "soon"}, "timeout: 'soon' is not a duration"),
        # Past the longest duration: was an OverflowError, an HTTP 500 (review21 D2).
        ({"timeout": "99999999d"}, "timeout: '99999999d' is too long; the longest is 365 days"),
        ({"timeout": "9999999999d"}, "timeout: '9999999999d' is too long"),
        ({"remind_after": "366d"}, "remind_after: '366d' is too long"),
        ({"title": "  "}, "title must be a non-empty string"),
        # Nobody could ever approve it: it would only wait to expire (review21 D6).
        ({"approvers": ["U0REQUESTER"]}, "approvers must name someone other than the requester"),
        ({"approvers": ["U0BOT"], "requester": None}, "approvers must name someone other than"),
        ({"approvers": ["U0BOT", "U0REQUESTER"]}, "approvers must name someone other than"),
    ],
)
async def test_inputs_that_cannot_make_an_approval_fail_the_step_and_store_nothing(
    slack: Harness, repo: Repository, inputs: dict[str, Any], says: str
) -> None:
    execution = await run_step(slack, **inputs)
    assert execution.state == "failed"
    assert execution.error is not None and says in execution.error, execution.error
    assert slack.cards() == []
    assert await steps(repo) == []
    assert (await repo.list_pending(PendingFilter(), now=utcnow()))[0] == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda e: e.pop("function_execution_id"), "event.function_execution_id is missing"),
        (lambda e: e.update(inputs="title=x"), "event.inputs must be a JSON object"),
        (lambda e: e.update(function=None), "event.function is missing"),
        (lambda e: e["function"].pop("callback_id"), "event.function.callback_id is missing"),
    ],
)
async def test_a_malformed_function_executed_is_refused_with_why_and_changes_nothing(
    slack: Harness, repo: Repository, change: Any, says: str
) -> None:
    _, payload = slack.server.function_executed_payload("request_approval", INPUTS)
    change(payload["event"])
    reply = await slack.server.send_event(payload)
    await slack.settle()
    assert reply.status == 400 and says in reply.body, (reply.status, reply.body)
    assert slack.cards() == [] and await steps(repo) == []
    assert slack.server.calls_to("functions.completeError") == []


async def test_a_step_cannot_be_paused_but_is_cancelled_with_runs_cancel(
    slack: Harness, repo: Repository
) -> None:
    await run_step(slack)
    [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
    runner = slack.bot.services.runner
    for hold in (runner.pause_run, runner.stop_run):
        with pytest.raises(HoldRefused) as refused:
            await hold(approval.run_id, actor="U0REQUESTER")
        assert refused.value.code == "workflow_step"
        assert "runs cancel" in str(refused.value)
    assert (await repo.get_approval(approval.id)).status == "pending"  # type: ignore[union-attr]


async def test_a_step_whose_token_expired_completes_with_the_workspace_token(
    slack: Harness,
) -> None:
    execution = await run_step(slack)
    slack.server.expire_execution_token(execution.id)
    [card] = slack.cards()
    await slack.server.click(APPROVER, card, "approval_approve")
    await slack.settle()
    assert execution.state == "completed" and execution.outputs is not None
    calls = slack.server.calls_to("functions.completeSuccess")
    assert [(c.token, c.response.get("error")) for c in calls] == [
        (execution.token, "token_expired"),
        (slack.server.bot_token, None),
    ]


async def test_runs_list_shows_a_waiting_step_and_its_end(slack: Harness, repo: Repository) -> None:
    from storage.sql.holds import RUN_LIST_STATUSES

    assert "step" in RUN_LIST_STATUSES
    execution = await run_step(slack)
    [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
    run = await repo.get_run(approval.run_id)
    assert run is not None and run.status == "step"
    await slack.server.click(APPROVER, slack.cards()[0], "approval_approve")
    await slack.settle()
    assert execution.state == "completed"
    run = await repo.get_run(approval.run_id)
    assert run is not None and run.status == "completed"


async def test_a_hostile_title_is_shown_like_an_argument_everywhere(
    slack: Harness, repo: Repository
) -> None:
    """The title takes a (trusted) tool name's place: on the card, its notification text,
    its DM copies and lists it is escaped, its hidden characters shown as \\uXXXX, and the
    metadata names the step, not the title (issue 21 review: D1, Doc1)."""
    title = "<!channel> deploy \u202e `now` <@U0OTHER>"
    await run_step(slack, title=title)
    [card] = slack.cards()
    messages = [card, *slack.dm_cards()]
    assert len(messages) == 3
    for message in messages:
        for shown in (message.text, json.dumps(message.blocks, ensure_ascii=False)):
            assert "<!channel>" not in shown and "<@U0OTHER>" not in shown, shown
            assert "\u202e" not in shown and "`now`" not in shown, shown
        assert message.text.startswith("Approval needed: &lt;!channel&gt; deploy \\u202e")
        assert message.metadata is not None
        assert message.metadata["event_payload"]["tool"] == "request_approval"
    listed = await slack.server.slash_command(APPROVER, CHANNEL, text="")
    assert listed.status == 200 and "deploy" in listed.body, listed.body
    assert "<!channel>" not in listed.body and "\u202e" not in listed.body


@pytest.mark.parametrize("error", ["not_in_channel", "channel_not_found"])
async def test_a_step_whose_channel_slack_refuses_fails_saying_so(
    slack: Harness, repo: Repository, error: str
) -> None:
    """The bot was not invited to the step's channel: the step fails at once with a sentence
    the workflow's author can act on, instead of waiting unseen until its timeout with only
    DM copies out (review21, the first hour)."""
    slack.server.fail(
        "chat.postMessage", error, times=1_000, when=lambda a: a.get("channel") == CHANNEL
    )
    execution = await run_step(slack)
    assert execution.state == "failed", "the step waits, unseen, until its timeout"
    assert execution.error is not None and f"<#{CHANNEL}>" in execution.error, execution.error
    if error == "not_in_channel":
        assert f"invite the bot to <#{CHANNEL}>" in execution.error
    assert slack.dm_cards() == [], "no DM copies of a request that already failed"
    assert (await repo.list_pending(PendingFilter(), now=utcnow()))[0] == []
    await sweep_once(slack.bot.services)
    await slack.settle()
    assert len(slack.server.calls_to("functions.completeError")) == 1
