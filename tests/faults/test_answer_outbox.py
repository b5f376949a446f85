"""A run's answer is posted until Slack takes it, once, and its progress message settled.

The answer is stored with the run's end (``run_answers``) and posted from there: by the run's
worker at once, and by any replica's sweeper when that worker was killed before Slack took it
(``answer_posting``: claimed, not posted; ``answer_posted``: posted, not yet recorded) or when
Slack failed the post once (``internal_error``). The answer replaces the thread's progress
message ("Carrying on…"), so the thread shows it exactly once and no hourglass is left.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from playground.slack_server import SlackServer
from tests.faults.harness import PATIENCE, Deployment, approve, eventually, quiet_sweeps, request
from tests.faults.test_callback_restart import post

DEPLOY_SHOP = request(("start_deploy", {"service": "shop"}))
RESTART_WEB = request(("restart_service", {"service": "web"}))
HOURGLASS = ":hourglass_flowing_sand:"


async def _callback_after_pause(deployment: Deployment, base_url: str) -> None:
    """The pipeline reports back once the run waits for it (its resume posts the answer)."""
    (url,) = await eventually(deployment.callback_urls, "the tool to hand out a callback URL")
    repo = await deployment.repo()
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while not any(w.status == "pending" for w in await repo.pending_waits()):
        assert asyncio.get_running_loop().time() < deadline, "the run never paused"
        await asyncio.sleep(0.1)
    token = url.rsplit("/", 1)[1]
    assert await post(f"{base_url}/callbacks/{token}", "deploy-of-shop-succeeded") == 202


async def _assert_answered_once(deployment: Deployment, thread_ts: str, needle: str) -> None:
    """The answer is in the thread once, in place of the progress message, and nothing of
    the outbox or the run's progress message is left on record."""
    await deployment.answer(thread_ts, needle)
    await quiet_sweeps(deployment, 3)
    answers = deployment.answers(thread_ts, needle)
    assert len(answers) == 1, [m.text for m in answers]
    assert answers[0].edited, "the answer did not replace the progress message"
    left = [m.text for m in deployment.bot_replies(thread_ts) if HOURGLASS in m.text]
    assert left == [], f"progress messages nobody settled: {left}"
    # A row a dead poster claimed (killed after Slack took the answer) waits out that claim
    # before a sweep settles it: on a loaded machine that can outlast three quiet sweeps.
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while await deployment.rows("SELECT run_id FROM run_answers"):
        assert asyncio.get_running_loop().time() < deadline, "an answer left in the outbox"
        await asyncio.sleep(0.2)
    (progress,) = await deployment.rows("SELECT progress_ts FROM runs")
    assert progress == (None,)
    answers = deployment.answers(thread_ts, needle)
    assert len(answers) == 1, [m.text for m in answers]


@pytest.mark.parametrize("window", ["answer_posting", "answer_posted"])
async def test_kill_9_while_posting_the_answer_after_a_callback(
    deployment: Deployment, window: str
) -> None:
    first = await deployment.start(failpoint=window)
    asked = await deployment.mention(DEPLOY_SHOP)
    await _callback_after_pause(deployment, first.url)
    await deployment.crashed_at(first, window)

    await deployment.start()
    await _assert_answered_once(deployment, asked.ts, "deploy-of-shop-succeeded")
    assert deployment.executions("start_deploy", "shop") == 1


@pytest.mark.parametrize("window", ["answer_posting", "answer_posted"])
async def test_kill_9_while_posting_the_answer_after_an_approve(
    deployment: Deployment, window: str
) -> None:
    first = await deployment.start(failpoint=window)
    asked = await deployment.mention(RESTART_WEB)
    await approve(deployment, asked.ts)
    await deployment.crashed_at(first, window)

    await deployment.start()
    await _assert_answered_once(deployment, asked.ts, "restarted web")
    assert deployment.executions("restart_service", "web") == 1


async def test_one_slack_failure_of_the_answer_post_is_tried_again(
    deployment: Deployment,
) -> None:
    bot = await deployment.start()
    asked = await deployment.mention(DEPLOY_SHOP)
    # The answer replaces "Carrying on…": fail exactly that call, once.
    deployment.slack.fail(
        "chat.update", when=lambda args: "deploy-of-shop-succeeded" in str(args.get("text"))
    )
    await _callback_after_pause(deployment, bot.url)
    await _assert_answered_once(deployment, asked.ts, "deploy-of-shop-succeeded")
    failed = [
        c
        for c in deployment.slack.calls
        if c.method == "chat.update" and "deploy-of-shop-succeeded" in str(c.args.get("text"))
    ]
    assert len(failed) >= 2 and failed[0].response.get("error") == "internal_error"


async def test_one_slack_failure_of_an_answer_with_no_progress_message(
    deployment: Deployment,
) -> None:
    """Slack refused "Carrying on…" too, so the answer is a message of its own: the one
    chat.postMessage that carries it fails once, and it still appears once."""
    bot = await deployment.start()
    asked = await deployment.mention(DEPLOY_SHOP)
    deployment.slack.fail("chat.postMessage", when=lambda a: "Carrying on" in str(a.get("text")))
    deployment.slack.fail(
        "chat.postMessage", when=lambda a: "deploy-of-shop-succeeded" in str(a.get("text"))
    )
    await _callback_after_pause(deployment, bot.url)
    await deployment.answer(asked.ts, "deploy-of-shop-succeeded")
    await quiet_sweeps(deployment, 3)
    assert len(deployment.answers(asked.ts, "deploy-of-shop-succeeded")) == 1
    assert not any(HOURGLASS in m.text for m in deployment.bot_replies(asked.ts))
    assert await deployment.rows("SELECT run_id FROM run_answers") == []
    posts = [
        c
        for c in deployment.slack.calls
        if c.method == "chat.postMessage" and "deploy-of-shop-succeeded" in str(c.args.get("text"))
    ]
    assert [c.response.get("ok") for c in posts] == [False, True], posts


async def test_a_slow_answer_post_is_not_posted_again_by_another_replica(
    slack: SlackServer, database_url: str, tmp_path: Path
) -> None:
    """No progress message on record ("Carrying on…" failed), and Slack takes the answer's
    chat.postMessage but replies only after 14 s, longer than the 10 s claim: the poster
    keeps its claim while the call is in flight, so the other replica does not post it."""
    deployment = Deployment(slack, database_url, tmp_path, run_lease="60s")
    try:
        await deployment.start()
        bot2 = await deployment.start()
        asked = await deployment.mention(DEPLOY_SHOP)
        deployment.slack.fail(
            "chat.postMessage", when=lambda a: "Carrying on" in str(a.get("text"))
        )
        held = deployment.slack.hold(
            "chat.postMessage", when=lambda a: "deploy-of-shop-succeeded" in str(a.get("text"))
        )
        await _callback_after_pause(deployment, bot2.url)
        await asyncio.wait_for(held.arrived.wait(), PATIENCE)
        await asyncio.sleep(14)  # Slack took it, and answers late (> the 10 s claim)
        held.release.set()
        await quiet_sweeps(deployment, 3)
        answers = deployment.answers(asked.ts, "deploy-of-shop-succeeded")
        assert len(answers) == 1, [m.text[:80] for m in answers]
    finally:
        await deployment.close()


async def test_the_progress_message_says_what_resumed_the_run(deployment: Deployment) -> None:
    """A callback resumed the run, not a decision: its progress message says so."""
    bot = await deployment.start()
    asked = await deployment.mention(DEPLOY_SHOP)
    await _callback_after_pause(deployment, bot.url)
    await _assert_answered_once(deployment, asked.ts, "deploy-of-shop-succeeded")
    progress = [
        str(c.args.get("text"))
        for c in deployment.slack.calls
        if c.method == "chat.postMessage" and "Carrying on" in str(c.args.get("text"))
    ]
    assert progress and all("after the callback" in text for text in progress), progress
