"""SIGKILL in every crash window of a real ``approval-bot serve``, then a restart.

Each test arms one window (``bot/ops/failpoints.py``): the process kills itself there, exactly as
``kill -9`` or a power cut would, and a fresh process is started on the same database and
the same Slack. Then: nothing lost (the request is answered, the card is posted), nothing run
twice (the tools' own durable log counts real executions), and the thread and the card tell
the truth. "During the tool" is a kill -9 from the test while a slow tool runs.

Runs on SQLite and on PostgreSQL. Leases last 2 s and the sweeper runs every second, so a
take-over follows a kill within a few seconds.
"""

from __future__ import annotations

import aiohttp

from tests.faults.harness import (
    APPROVER,
    CHANNEL,
    REQUESTER,
    Deployment,
    approval_id_of,
    approve,
    assert_settled,
    card_outcome,
    eventually,
    has_buttons,
    quiet_sweeps,
    request,
)

RESTART_WEB = request(("restart_service", {"service": "web"}))
SLOW_RESTART_WEB = request(("slow_restart", {"service": "web"}))


async def test_kill_after_the_pause_is_stored_card_is_posted_after_restart(
    deployment: Deployment,
) -> None:
    bot = await deployment.start(failpoint="pause_stored")
    asked = await deployment.mention(RESTART_WEB)
    await deployment.crashed_at(bot, "pause_stored")
    assert deployment.cards(asked.ts) == [], "the card went out before the crash window"

    await deployment.start()
    approval_id = await approve(deployment, asked.ts)  # the card outbox posted it

    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="restarted web",
        card_says="ran",
    )
    assert deployment.executions("restart_service", "web") == 1


async def test_kill_after_a_click_is_acknowledged_card_does_not_look_decided(
    deployment: Deployment,
) -> None:
    """Slack got its 200 for the Approve, then the process died before the decision was
    stored: the card keeps its buttons and no outcome, nobody is told anything was decided,
    and the approver's next click (on a restarted bot) decides it, once."""
    bot = await deployment.start(failpoint="click_acknowledged")
    asked = await deployment.mention(RESTART_WEB)
    card = await deployment.card(asked.ts)
    approval_id = approval_id_of(card)
    reply = await deployment.slack.click(APPROVER, card, "approval_approve")
    assert reply.status == 200, (reply.status, reply.body)  # acknowledged
    await deployment.crashed_at(bot, "click_acknowledged")

    assert has_buttons(card) and card_outcome(card) == "", "the card looks decided"
    assert len(deployment.cards(asked.ts)) == 1
    assert deployment.slack.ephemerals_for(APPROVER) == [], "the approver was told something"
    assert (await deployment.approval(approval_id)).status == "pending"

    await deployment.start()
    await quiet_sweeps(deployment)
    assert has_buttons(card), "the restarted bot decided a click it never stored"
    assert await approve(deployment, asked.ts) == approval_id  # they click again

    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="restarted web",
        card_says="ran",
    )
    assert deployment.executions("restart_service", "web") == 1


async def test_kill_after_the_decision_is_stored_run_resumes_once(
    deployment: Deployment,
) -> None:
    bot = await deployment.start(failpoint="decision_stored")
    asked = await deployment.mention(RESTART_WEB)
    approval_id = await approve(deployment, asked.ts)
    await deployment.crashed_at(bot, "decision_stored")
    assert deployment.executions("restart_service", "web") == 0

    await deployment.start()  # its sweeper takes the run over once the dead lease runs out

    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="restarted web",
        card_says="ran",
    )
    assert deployment.executions("restart_service", "web") == 1


async def test_kill_after_execution_started_is_never_rerun(deployment: Deployment) -> None:
    bot = await deployment.start(failpoint="execution_started")
    asked = await deployment.mention(RESTART_WEB)
    approval_id = await approve(deployment, asked.ts)
    await deployment.crashed_at(bot, "execution_started")

    await deployment.start()

    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="unknown",
        answer="Outcome unknown",
        card_says="outcome unknown",
    )
    # ``executing`` was recorded before the side effect: the call is never run again.
    assert deployment.executions("restart_service", "web") == 0


async def test_kill_after_execution_recorded_answers_with_the_result(
    deployment: Deployment,
) -> None:
    bot = await deployment.start(failpoint="execution_recorded")
    asked = await deployment.mention(RESTART_WEB)
    approval_id = await approve(deployment, asked.ts)
    await deployment.crashed_at(bot, "execution_recorded")
    assert deployment.executions("restart_service", "web") == 1

    await deployment.start()

    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="restarted web",
        card_says="ran",
    )
    assert deployment.executions("restart_service", "web") == 1


async def test_kill_during_the_tool_reports_outcome_unknown(deployment: Deployment) -> None:
    bot = await deployment.start()
    asked = await deployment.mention(SLOW_RESTART_WEB)
    approval_id = await approve(deployment, asked.ts)
    await eventually(
        lambda: deployment.executions("slow_restart", "web", "started"), "the tool to start"
    )
    await deployment.kill(bot)

    await deployment.start()

    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="unknown",
        answer="Outcome unknown",
        card_says="outcome unknown",
    )
    assert deployment.executions("slow_restart", "web", "started") == 1
    assert deployment.executions("slow_restart", "web", "finished") == 0


async def test_kill_after_the_mention_is_stored_answers_it_once(deployment: Deployment) -> None:
    bot = await deployment.start(failpoint="mention_stored")
    event_id = "Ev0FAULTMENTION"
    try:
        reply = await deployment.slack.mention(
            REQUESTER,
            CHANNEL,
            "<@U0BOT> " + request(("get_status", {"service": "web"})),
            event_id=event_id,
        )
    except (aiohttp.ClientError, TimeoutError):
        reply = None  # the process died before answering: Slack will retry
    # The window is in the acknowledgement path: the process dies before Slack's 3 s are up.
    await deployment.crashed_at(bot, "mention_stored", timeout=5)
    assert reply is None, "Slack got an answer although the process died before answering"
    asked = next(m for m in reversed(deployment.slack.messages) if m.user == REQUESTER)

    await deployment.start()
    # Slack retries an event it got no answer for, with the same event id.
    retry = await deployment.slack.redeliver(event_id, retry_num=1)
    assert retry.status == 200, (retry.status, retry.body)

    await deployment.answer(asked.ts, "web is healthy")
    await quiet_sweeps(deployment)
    assert len(deployment.answers(asked.ts, "web is healthy")) == 1
    assert deployment.executions("get_status", "web") == 1
    runs = await deployment.rows("SELECT status FROM runs WHERE thread_ts = :ts", {"ts": asked.ts})
    assert runs == [("completed",)]


async def test_kill_while_the_card_is_posted_leaves_one_true_card(deployment: Deployment) -> None:
    # The card reaches the channel, but the process dies before it reads Slack's answer, so
    # it never learns (or records) where the card is.
    held = deployment.slack.hold(
        "chat.postMessage", when=lambda args: "approval_summary" in str(args)
    )
    bot = await deployment.start()
    asked = await deployment.mention(RESTART_WEB)
    await eventually(held.arrived.is_set, "the card to be posted")
    await deployment.kill(bot)
    held.release.set()
    assert len(deployment.cards(asked.ts)) == 1

    await deployment.start()
    await quiet_sweeps(
        deployment, 3
    )  # whatever the restarted bot does about a card it has no trace of
    approval_id = await approve(deployment, asked.ts)  # still exactly one card

    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="restarted web",
        card_says="ran",
    )
    assert deployment.executions("restart_service", "web") == 1
