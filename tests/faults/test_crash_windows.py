"""SIGKILL in every crash window of a real ``approval-bot serve``, then a restart.

Each test arms one window (``bot/failpoints.py``): the process kills itself there, exactly as
``kill -9`` or a power cut would, and a fresh process is started on the same database and
the same Slack. Then: nothing lost (the request is answered, the card is posted), nothing run
twice (the tools' own durable log counts real executions), and the thread and the card tell
the truth. "During the tool" is a kill -9 from the test while a slow tool runs.

Runs on SQLite and on PostgreSQL. Leases last 2 s and the sweeper runs every second, so a
take-over follows a kill within a few seconds.
"""

from __future__ import annotations

import asyncio

import aiohttp

from tests.faults.harness import (
    APPROVER,
    CHANNEL,
    REQUESTER,
    Deployment,
    approval_id_of,
    card_outcome,
    eventually,
    has_buttons,
    request,
)

RESTART_WEB = request(("restart_service", {"service": "web"}))
SLOW_RESTART_WEB = request(("slow_restart", {"service": "web"}))


async def approve(deployment: Deployment, thread_ts: str) -> str:
    """An approver clicks Approve on the thread's card; the approval's id."""
    card = await deployment.card(thread_ts)
    reply = await deployment.slack.click(APPROVER, card, "approval_approve")
    assert reply.status == 200, (reply.status, reply.body)
    return approval_id_of(card)


async def quiet_sweeps(count: int = 2) -> None:
    """Let the sweeper run ``count`` more times: whatever it would redo, it has redone."""
    await asyncio.sleep(count * 1.0 + 0.5)


async def assert_settled(
    deployment: Deployment,
    thread_ts: str,
    approval_id: str,
    *,
    status: str,
    answer: str,
    card_says: str,
) -> None:
    """The end state after recovery: database, card and thread agree, and say it once."""
    await deployment.answer(thread_ts, answer)
    card = await deployment.card(thread_ts)
    await eventually(
        lambda: card_says in card_outcome(card),
        f"the card to say {card_says!r}; it says {card_outcome(card)!r}",
    )
    await quiet_sweeps()
    approval = await deployment.approval(approval_id)
    assert approval.status == status
    run = await (await deployment.repo()).get_run(approval.run_id)
    assert run is not None and run.status == "completed", run
    assert run.lease_owner is None
    assert len(deployment.cards(thread_ts)) == 1, "the card was posted more than once"
    assert not has_buttons(card) and card_says in card_outcome(card)
    assert len(deployment.answers(thread_ts, answer)) == 1, "the thread was answered twice"
    failures = [m.text for m in deployment.bot_replies(thread_ts) if m.text.startswith(":x:")]
    assert failures == [], failures
    started = await deployment.audit_events(approval_id)
    assert started.count("execution_started") <= 1, started


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
    await quiet_sweeps()
    assert len(deployment.answers(asked.ts, "web is healthy")) == 1
    assert deployment.executions("get_status", "web") == 1
    runs = await deployment.rows("SELECT status FROM runs WHERE thread_ts = :ts", {"ts": asked.ts})
    assert runs == [("completed",)]
