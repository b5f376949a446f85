"""The sweeper against the real bot: runs it moves on are tasks of their own, and paused runs
that nothing would ever resume are resumed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from datetime import timedelta
from typing import Any, ClassVar

import llm
from freezegun import freeze_time
from llm.parts import Message, TextPart

from bot.clock import utcnow
from bot.llm_setup import register_model
from handlers.flows import sweep_once
from storage.repository import PendingFilter, Repository
from tests.conftest import make_config
from tests.support import ops_tools
from tests.support.scripted_model import calls
from tests.support.slack_harness import CHANNEL, has_buttons, running_bot

# Only a guard against hanging: the behaviour asserted is that the sweep returns at all
# while the run it recovered is still waiting for its model.
NO_HANG = 30


class HeldModel(llm.AsyncModel):
    """Answers only once the test lets it: a run that takes as long as the test wants."""

    model_id = "held"
    supports_tools = True
    can_stream = True
    entered: ClassVar[asyncio.Event]
    release: ClassVar[asyncio.Event]

    async def execute(
        self, prompt: llm.Prompt, stream: bool, response: Any, conversation: Any = None
    ) -> AsyncGenerator[str, None]:
        HeldModel.entered.set()
        await HeldModel.release.wait()
        yield "finally done"


register_model(HeldModel())


def text_message(role: str, text: str) -> dict[str, Any]:
    return Message(role=role, parts=[TextPart(text=text)]).to_dict()


async def test_a_sweep_returns_while_the_run_it_took_over_is_still_running(
    repo: Repository,
) -> None:
    HeldModel.entered, HeldModel.release = asyncio.Event(), asyncio.Event()
    now = utcnow()
    # A run whose worker died mid-turn: its lease ran out a minute ago.
    await repo.insert_rows_for_benchmark(
        runs=[
            {
                "id": "run_dead_worker",
                "conversation_key": "T1:C0OPS:1700000000.000100",
                "team_id": "T1",
                "channel": CHANNEL,
                "thread_ts": "1700000000.000100",
                "requester": "U0REQUESTER",
                "status": "running",
                "model_id": "held",
                "history": [text_message("system", "be brief"), text_message("user", "hello")],
                "turn": 0,
                "lease_owner": "dead-worker",
                "lease_expires_at": now - timedelta(minutes=1),
                "created_at": now - timedelta(minutes=10),
                "updated_at": now - timedelta(minutes=10),
            }
        ]
    )
    async with running_bot(make_config(), repo) as slack:
        await asyncio.wait_for(sweep_once(slack.bot.services), NO_HANG)
        await asyncio.wait_for(HeldModel.entered.wait(), NO_HANG)
        run = await repo.get_run("run_dead_worker")
        assert run is not None and run.status == "running" and run.lease_owner != "dead-worker"

        HeldModel.release.set()
        await slack.settle()
    run = await repo.get_run("run_dead_worker")
    assert run is not None and run.status == "completed" and run.answer == "finally done"
    assert any(m.text == "finally done" for m in slack.server.messages)


async def test_the_sweeper_resumes_a_paused_run_with_nothing_pending(repo: Repository) -> None:
    async with running_bot(make_config(), repo) as slack:
        reply = await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        [card] = slack.cards()
        [approval], _ = await repo.list_pending(PendingFilter(), now=utcnow())
        # A decision that was recorded but whose resume nobody claimed: the run is stranded.
        await repo.execute_sql(
            "UPDATE approvals SET status = 'approved', decided_by = 'U0APPROVER1', "
            "decided_at = :now WHERE id = :id",
            {"now": utcnow(), "id": approval.id},
        )
        assert await repo.stranded_runs() == [approval.run_id]

        await sweep_once(slack.bot.services)
        await slack.settle()
        await sweep_once(slack.bot.services)  # nothing is left for a second sweep
        await slack.settle()

        assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]
        run = await repo.get_run(approval.run_id)
        assert run is not None and run.status == "completed"
        assert any("restart_service=restarted db" in m.text for m in slack.thread_of(reply)), (
            "the resumed run answers in its thread"
        )
        assert not has_buttons(slack.card_for(approval.id)), "its card is settled"
        assert card.ts == slack.card_for(approval.id).ts


async def test_an_outbox_that_fails_every_sweep_does_not_hold_up_the_others(
    repo: Repository,
) -> None:
    """A card the sweeper cannot draw (here: the table of escalations its edit reads is gone,
    a real database error) ended the whole sweep before the outboxes after it, every sweep:
    old Slack event ids were never forgotten, Workflow steps never completed, DM copies never
    sent. Each outbox now fails on its own."""
    with freeze_time("2026-12-03 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            server = slack.server
            await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
            [card] = slack.cards()
            await repo.claim_event("Ev0OLD", now=utcnow())
            server.rate_limit("chat.update", times=4, retry_after=0)
            await slack.server.click("U0APPROVER1", card, "approval_approve")
            await slack.settle()
            assert await repo.card_edits_due(before=utcnow() + timedelta(minutes=1))
            await repo.database.execute_sql(
                "ALTER TABLE approval_reach RENAME TO approval_reach_gone"
            )
            clock.tick(timedelta(days=3))
            await sweep_once(slack.bot.services)
            assert await repo.claim_event("Ev0OLD", now=utcnow()), "forgotten, so new"


async def test_a_sweep_whose_outbox_failed_counts_as_a_failed_sweep(repo: Repository) -> None:
    """``approval_bot_sweeps_total{result="failed"}`` is what an alert watches. Once each
    outbox failed on its own, a sweep whose card edits raised every time (a table they read
    gone) returned normally and counted ``ok``: the failure was in the log only."""
    from bot.ops.metrics import REGISTRY

    def failed() -> float:
        return REGISTRY.get_sample_value("approval_bot_sweeps_total", {"result": "failed"}) or 0

    with freeze_time("2026-12-03 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
            [card] = slack.cards()
            slack.server.rate_limit("chat.update", times=4, retry_after=0)
            await slack.server.click("U0APPROVER1", card, "approval_approve")
            await slack.settle()
            await repo.database.execute_sql(
                "ALTER TABLE approval_reach RENAME TO approval_reach_gone"
            )
            clock.tick(timedelta(minutes=1))
            before = failed()
            await sweep_once(slack.bot.services)
            assert failed() == before + 1
