"""Pause, Resume and Stop on the thread's progress message (issue 19 §2), end to end: signed
clicks against the real bolt app, runner and storage; Slack is our Slack-compatible server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import pytest

from playground.slack_server import BotReply, Message
from playground.slack_server.response_urls import RESPONSE_URL_METHOD
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support import hold_tools
from tests.support.ops_tools import executed
from tests.support.polling import until
from tests.support.scripted_model import calls
from tests.support.slack_harness import CHANNEL, Harness, running_bot

STEP_TOOLS = [*BASE_CONFIG["tools"], "tests.support.hold_tools:step"]


def steps(*numbers: int) -> str:
    return json.dumps(
        {"steps": [{"tool_calls": [{"name": "step", "arguments": {"n": n}}]} for n in numbers]}
    )


@pytest.fixture(autouse=True)
def _no_hook() -> Iterator[None]:
    hold_tools.ON_STEP = None
    yield
    hold_tools.ON_STEP = None


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(tools=STEP_TOOLS, admins=["S0OPS"])
    async with running_bot(config, repo, usergroups={"S0OPS": ["U0OPS"]}) as harness:
        yield harness


def with_button(harness: Harness, action_id: str) -> Message:
    found = [
        m
        for m in harness.server.messages
        if m.channel == CHANNEL and any(e.get("action_id") == action_id for _, e in m.buttons())
    ]
    assert found, f"no message in the thread has {action_id}"
    return found[-1]


async def working_on_step_one(slack: Harness) -> tuple[BotReply, asyncio.Event]:
    """A run of steps 1 and 2 whose first step works until the returned event is set."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_first_step(n: int) -> None:
        if n == 1:
            entered.set()
            await release.wait()

    hold_tools.ON_STEP = slow_first_step
    reply = await slack.server.mention("U0REQUESTER", CHANNEL, f"<@U0BOT> {steps(1, 2)}")
    await asyncio.wait_for(entered.wait(), 30)
    return reply, release


async def test_a_late_pausing_edit_does_not_hide_resume(slack: Harness) -> None:
    """The Pause click's "Pausing…" edit reaches Slack after the drive has shown Resume (a
    429, a slow network): the clicker's editor reads the run again after its edit and shows
    Resume, so the progress message never offers Pause on a paused run."""
    _, release = await working_on_step_one(slack)
    progress = with_button(slack, "run_pause")
    # The click's edit is refused once (Retry-After 1 s) and lands a second later.
    slack.server.rate_limit("chat.update", times=1, retry_after=1)
    await slack.server.click("U0REQUESTER", progress, "run_pause")
    await until(lambda: slack.server.calls_to("chat.update"), "the pausing edit")
    release.set()  # the drive reaches its safe point and shows Resume meanwhile
    await slack.settle()
    await asyncio.sleep(1.5)  # past the Retry-After: the late edit has landed
    await slack.settle()
    shown = slack.server.message(CHANNEL, progress.ts)
    assert shown is not None
    assert [e["action_id"] for _, e in shown.buttons()] == ["run_resume", "run_stop"], shown.text
    assert "Paused by" in shown.text


async def test_pause_while_working_then_resume_carries_on_once(slack: Harness) -> None:
    reply, release = await working_on_step_one(slack)
    assert reply.status == 200
    progress = with_button(slack, "run_pause")
    assert [e["action_id"] for _, e in progress.buttons()] == ["run_pause", "run_stop"]

    # Someone who is neither the requester, an approver nor an admin: refused, nothing changes.
    await slack.server.click("U0STRANGER", progress, "run_pause")
    await until(lambda: slack.ephemeral_texts("U0STRANGER"), "the refusal")
    assert "Only the person who asked" in slack.ephemeral_texts("U0STRANGER")[-1]
    runs = await slack.repo.list_runs()
    run_id = runs[0][0].id
    assert await slack.repo.hold_of(run_id) is None

    # An admin through a user group pauses it; the executing step finishes.
    await slack.server.click("U0OPS", progress, "run_pause")
    await until(lambda: slack.ephemeral_texts("U0OPS"), "the pause's answer")
    assert "next safe point" in slack.ephemeral_texts("U0OPS")[-1]
    release.set()
    await slack.settle()
    run = await slack.repo.get_run(run_id)
    assert run is not None and run.status == "paused"
    assert executed("step") == [{"n": 1}]
    held = with_button(slack, "run_resume")
    assert "Paused by <@U0OPS>" in held.text
    assert [e["action_id"] for _, e in held.buttons()] == ["run_resume", "run_stop"]

    hold_tools.ON_STEP = None
    await slack.server.click("U0REQUESTER", held, "run_resume")
    await slack.settle()
    assert executed("step") == [{"n": 1}, {"n": 2}]
    run = await slack.repo.get_run(run_id)
    assert run is not None and run.status == "completed"
    texts = [m.text for m in slack.server.thread(CHANNEL, reply.message.ts)]  # type: ignore[union-attr]
    assert any("step=step 1 done" in t and "step 2 done" in t for t in texts), texts


async def test_a_resume_whose_answer_cannot_reach_slack_still_carries_on(
    slack: Harness,
) -> None:
    """The clicker's "Resumed." goes to the click's response URL: a dropped connection there
    raised before the resume the click had claimed, and the run waited out its lease."""
    _, release = await working_on_step_one(slack)
    await slack.server.click("U0REQUESTER", with_button(slack, "run_pause"), "run_pause")
    await until(lambda: slack.ephemeral_texts("U0REQUESTER"), "the pause's answer")
    release.set()
    await slack.settle()
    hold_tools.ON_STEP = None
    slack.server.unreachable(RESPONSE_URL_METHOD, times=10)
    await slack.server.click("U0REQUESTER", with_button(slack, "run_resume"), "run_resume")
    await slack.settle()
    assert executed("step") == [{"n": 1}, {"n": 2}]
    [(run, _)] = await slack.repo.list_runs()
    assert run.status == "completed"


async def test_a_resume_whose_run_then_fails_on_the_database_is_not_called_undone(
    slack: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The Resume is stored before the run carries on: a database failure in the resumed run
    (here the runs table is gone while step 2 works) told the clicker "That did not go
    through … try again", as if the Resume had not been recorded. The failure is one line
    in the log (the run's lease runs out and a sweeper takes it over), not a traceback."""
    _, release = await working_on_step_one(slack)
    await slack.server.click("U0REQUESTER", with_button(slack, "run_pause"), "run_pause")
    await until(lambda: slack.ephemeral_texts("U0REQUESTER"), "the pause's answer")
    release.set()
    await slack.settle()
    database = slack.repo.database

    async def runs_gone(n: int) -> None:
        await database.execute_sql("ALTER TABLE runs RENAME TO runs_gone")

    hold_tools.ON_STEP = runs_gone
    try:
        await slack.server.click("U0REQUESTER", with_button(slack, "run_resume"), "run_resume")
        await slack.settle()
    finally:
        await database.execute_sql("ALTER TABLE runs_gone RENAME TO runs")
    assert executed("step") == [{"n": 1}, {"n": 2}]
    told = slack.ephemeral_texts("U0REQUESTER")
    assert any("Resumed" in t for t in told), told
    assert not any("did not go through" in t for t in told), told
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


async def test_stop_on_the_held_message_cancels_the_run(slack: Harness) -> None:
    reply = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
    run_id = (await slack.repo.list_runs())[0][0].id
    # The waiting message carries Pause too: a run waiting on people can be paused.
    waiting = with_button(slack, "run_pause")
    assert "Waiting for a human" in waiting.text
    await slack.server.click("U0REQUESTER", waiting, "run_pause")
    await slack.settle()
    assert "Decisions made meanwhile still count" in slack.ephemeral_texts("U0REQUESTER")[-1]
    held = with_button(slack, "run_resume")
    assert held.ts == waiting.ts, "the same message, edited in place"
    assert "Paused by <@U0REQUESTER>" in held.text and "waiting" in held.text.lower()
    await slack.server.click("U0APPROVER1", held, "run_stop")
    await slack.settle()
    run = await slack.repo.get_run(run_id)
    assert run is not None and run.status == "cancelled"
    texts = [m.text for m in slack.server.thread(CHANNEL, reply.message.ts)]  # type: ignore[union-attr]
    assert any("Stopped" in t and "U0APPROVER1" in t for t in texts), texts
    assert executed("restart_service") == []


async def test_held_runs_are_listed_in_approvals_and_the_app_home(slack: Harness) -> None:
    await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
    run_id = (await slack.repo.list_runs())[0][0].id
    await slack.bot.services.runner.pause_run(
        run_id, actor="U0OPS", actor_groups=["S0OPS"], reason="a <!channel> freeze"
    )

    listing = await slack.server.slash_command("U0REQUESTER", CHANNEL, text="mine")
    assert "Paused runs" in listing.body and run_id in listing.body
    assert "&lt;!channel&gt;" in listing.body and "<!channel>" not in listing.body
    elsewhere = await slack.server.slash_command("U0OUTSIDER", "C0ELSEWHERE", text="all")
    assert run_id not in elsewhere.body, "another channel's run is not listed"

    await slack.server.open_home("U0REQUESTER")
    await slack.settle()
    home = json.dumps(slack.server.home_of("U0REQUESTER"))
    assert "Paused runs" in home and run_id in home and "run_resume" in home

    # Resume from the App Home: the run carries on with its approval still to decide.
    await slack.server.click_home("U0REQUESTER", "run_resume")
    await slack.settle()
    assert await slack.repo.hold_of(run_id) is None
    run = await slack.repo.get_run(run_id)
    assert run is not None and run.status == "paused"


async def test_pause_ttl_the_sweeper_cancels_and_the_thread_says_so(repo: Repository) -> None:
    from datetime import timedelta

    from bot.clock import utcnow
    from handlers.flows import sweep_once

    config = make_config(tools=STEP_TOOLS, pause_ttl="1h")
    async with running_bot(config, repo) as slack:
        reply = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
        run_id = (await slack.repo.list_runs())[0][0].id
        runner = slack.bot.services.runner
        await runner.pause_run(run_id, actor="U0REQUESTER", reason="lunch")
        await sweep_once(slack.bot.services)
        await slack.settle()
        run = await slack.repo.get_run(run_id)
        assert run is not None and run.status == "paused", "not yet"

        later = utcnow() + timedelta(hours=2)
        runner.clock = lambda: later
        await sweep_once(slack.bot.services)
        await slack.settle()
        run = await slack.repo.get_run(run_id)
        assert run is not None and run.status == "cancelled"
        texts = [m.text for m in slack.server.thread(CHANNEL, reply.message.ts)]  # type: ignore[union-attr]
        assert any("paused longer than pause_ttl" in t for t in texts), texts
        [card] = slack.cards()
        assert not any(e.get("action_id") == "approval_approve" for _, e in card.buttons()), (
            "its card lost its buttons"
        )
