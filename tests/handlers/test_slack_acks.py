"""Slack gets its answer first, whatever the model or the database is doing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
from freezegun import freeze_time
from slack_bolt.async_app import AsyncApp

from bot.clock import utcnow
from handlers.app import CLICK_NOT_HANDLED
from storage.repository import PendingFilter, Repository
from tests.conftest import POSTGRES_URL, Database, make_config
from tests.support import ops_tools
from tests.support.scripted_model import ScriptedModel
from tests.support.slack_harness import CHANNEL, has_buttons, running_bot


def calls(*pairs: tuple[str, dict]) -> str:
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in pairs]})


async def test_deny_on_an_expired_card_is_answered_before_the_run_carries_on(
    repo: Repository,
) -> None:
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            reply = await slack.mention(
                "U0REQUESTER", calls(("restart_service", {"service": "db"}))
            )
            [card] = slack.cards()
            clock.tick(timedelta(minutes=16))  # restart_service: ttl 15m, on_expiry "deny"
            ScriptedModel.hold = asyncio.Event()  # the resumed model call takes its time
            try:
                click = await slack.server.click("U0APPROVER1", card, "approval_deny")
                assert click.status == 200
                assert not slack.server.views, "no deny form for an expired approval"
            finally:
                ScriptedModel.hold.set()
            await slack.settle()
            assert any(
                "This approval expired <!date^" in t for t in slack.ephemeral_texts("U0APPROVER1")
            )
            card = slack.server.message(CHANNEL, card.ts)  # type: ignore[assignment]
            assert card is not None and not has_buttons(card)
            assert any("Expired at" in m.text for m in slack.thread_of(reply))
    assert ops_tools.EXECUTED == []


# -- a write lock held elsewhere ---------------------------------------------------------------


@contextlib.asynccontextmanager
async def writes_held(database: Database, backend: str, table: str) -> AsyncIterator[None]:
    """Another connection holds what our next write to ``table`` needs: SQLite's write lock
    (``BEGIN IMMEDIATE``), on PostgreSQL a lock on the table that blocks writes, not reads."""
    if backend == "sqlite":
        path = database.url.split("///", 1)[1]
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    schema = database.engine_kwargs["connect_args"]["server_settings"]["search_path"]
    connection = await asyncpg.connect(POSTGRES_URL.replace("+asyncpg", ""))
    try:
        await connection.execute(f'SET search_path TO "{schema}"')
        transaction = connection.transaction()
        await transaction.start()
        await connection.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            await transaction.rollback()
    finally:
        await connection.close()


async def test_a_mention_under_a_held_write_lock_gets_503_and_comes_back(
    database: Database, repo: Repository, backend: str
) -> None:
    async with running_bot(make_config(), repo) as slack:
        slack.server.ack_timeout = 20.0  # generous: we want its answer, however late
        async with writes_held(database, backend, "processed_events"):
            first = await slack.mention("U0REQUESTER", "hello while locked")
            assert first.status == 503, "not stored: Slack must deliver it again"
            assert first.elapsed < 10, "answered long before the 30 s busy timeout"
        assert ScriptedModel.seen == []
        again = await slack.server.redeliver(first.event_id, retry_num=1)  # type: ignore[arg-type]
        assert again.status == 200
        await slack.settle()
        assert "You said: hello while locked" in [m.text for m in slack.thread_of(first)]


async def test_a_click_under_a_held_lock_tells_the_clicker_to_try_again(
    database: Database, repo: Repository, backend: str
) -> None:
    async with running_bot(make_config(), repo) as slack:
        slack.bot.services.decision_time_limit = 1.0
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        [card] = slack.cards()
        async with writes_held(database, backend, "approvals"):
            click = await slack.server.click("U0APPROVER1", card, "approval_approve")
            assert click.status == 200
            await slack.settle()
            told = slack.ephemeral_texts("U0APPROVER1")
            assert len(told) == 1 and "try again" in told[0], told
            listed = await slack.server.slash_command("U0APPROVER1", CHANNEL, text="")
            assert listed.status == 200 and "restart_service" in listed.body
        assert ops_tools.EXECUTED == []
        assert has_buttons(slack.server.message(CHANNEL, card.ts))  # type: ignore[arg-type]
        await slack.server.click("U0APPROVER1", card, "approval_approve")
        await slack.settle()
        assert any("Approved `restart_service`" in t for t in slack.ephemeral_texts("U0APPROVER1"))
    assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]


# -- acknowledgements before background work ----------------------------------------------------


async def test_a_decision_waits_while_another_click_is_being_answered(repo: Repository) -> None:
    """Background work (here an Approve click's decision) starts only once no request is
    being answered: a Deny click whose form is still opening holds its answer, so the
    decision waits for it, and then happens."""
    async with running_bot(make_config(), repo) as slack:
        slack.bot.services.background.ack_wait_limit = 60.0  # only the answer releases it
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "web"})))
        db_card, web_card = slack.cards()
        approvals, _ = await repo.list_pending(PendingFilter(), now=utcnow(), limit=10)
        web_id = next(a.id for a in approvals if a.arguments == {"service": "web"})

        opening = slack.server.hold("views.open")  # the Deny click's answer waits for it
        deny = asyncio.create_task(slack.server.click("U0APPROVER1", db_card, "approval_deny"))
        await opening.arrived.wait()
        approve = await slack.server.click("U0APPROVER1", web_card, "approval_approve")
        assert approve.status == 200  # answered at once; the decision comes after
        await asyncio.sleep(0.5)  # ample for a decision to be recorded, were it not waiting
        waiting = await repo.get_approval(web_id)
        assert waiting is not None and waiting.status == "pending"
        assert ops_tools.EXECUTED == []

        opening.release.set()
        assert (await deny).status == 200
        await slack.settle()
        decided = await repo.get_approval(web_id)
        assert decided is not None and decided.status == "executed"
    assert ops_tools.EXECUTED == [("restart_service", {"service": "web"})]


async def test_an_approve_click_is_answered_before_bolt_dispatches_it(repo: Repository) -> None:
    """In a burst every click waited behind bolt's dispatch of those before it. An Approve
    click is answered once verified and decoded; bolt's dispatch (held here by a middleware
    of the test's) follows as tracked background work, so ``idle`` (and shutdown) wait for
    it, and the decision is made once it runs. A Deny click still opens its form before its
    answer (the other tests here)."""
    async with running_bot(make_config(), repo) as slack:
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        [card] = slack.cards()
        dispatching = asyncio.Event()
        release = asyncio.Event()

        async def hold_clicks(body: dict, next: Any) -> Any:
            if body.get("type") == "block_actions":
                dispatching.set()
                await release.wait()
            return await next()

        app = slack.bot.app
        assert isinstance(app, AsyncApp)
        app.middleware(hold_clicks)
        click = await asyncio.wait_for(
            slack.server.click("U0APPROVER1", card, "approval_approve"), 10
        )
        assert click.status == 200 and click.body == ""
        await asyncio.wait_for(dispatching.wait(), 10)  # after the answer, in the background
        assert len(slack.bot.services.background) >= 1, "tracked: shutdown waits for it"
        assert ops_tools.EXECUTED == []
        settled = asyncio.create_task(slack.settle())
        await asyncio.sleep(0.2)
        assert not settled.done(), "idle waits for the held dispatch"
        release.set()
        await settled
    assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]


async def test_an_approve_click_whose_dispatch_fails_after_its_answer_is_told_so(
    repo: Repository,
) -> None:
    """Answered 200 before its dispatch, a click whose dispatch then fails (a listener or a
    middleware raising) got no error from Slack, which was told all was well: the clicker saw
    nothing happen and nothing said why. They are told, and the card keeps its buttons."""
    async with running_bot(make_config(), repo) as slack:
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        [card] = slack.cards()

        slack.break_click_dispatch()
        click = await slack.server.click("U0APPROVER1", card, "approval_approve")
        assert click.status == 200 and click.body == ""
        await slack.settle()
        assert slack.ephemeral_texts("U0APPROVER1") == [CLICK_NOT_HANDLED]
        shown = slack.server.message(CHANNEL, card.ts)
        assert shown is not None and has_buttons(shown)
        pending, _ = await repo.list_pending(PendingFilter(), now=utcnow(), limit=10)
        assert [a.status for a in pending] == ["pending"]
    assert ops_tools.EXECUTED == []


async def test_an_early_answered_clicks_decision_does_not_wait_for_the_answers_again(
    repo: Repository,
) -> None:
    """The click's dispatch waits for the acknowledgements in flight (it is background work);
    the decision it starts then started only once they were written too: under a steady
    stream of requests, twice ``ack_wait_limit``. Here another request is being answered
    from the moment the click's dispatch runs until the test ends it, and the click is
    decided meanwhile."""
    async with running_bot(make_config(), repo) as slack:
        await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
        [card] = slack.cards()
        [pending], _ = await repo.list_pending(PendingFilter(), now=utcnow(), limit=10)
        background = slack.bot.services.background
        background.ack_wait_limit = 60.0  # a wait for the other answer would outlast the test
        answering, answered = asyncio.Event(), asyncio.Event()
        others: list[asyncio.Task[None]] = []

        async def another_request() -> None:
            with background.acknowledging():
                answering.set()
                await answered.wait()

        async def a_request_arrives(body: dict, next: Any) -> Any:
            if body.get("type") == "block_actions":
                others.append(asyncio.create_task(another_request()))
                await answering.wait()
            return await next()

        app = slack.bot.app
        assert isinstance(app, AsyncApp)
        app.middleware(a_request_arrives)
        click = await slack.server.click("U0APPROVER1", card, "approval_approve")
        assert click.status == 200

        async def decided() -> str:
            while (row := await repo.get_approval(pending.id)) is None or row.status == "pending":
                await asyncio.sleep(0.01)
            return row.status

        try:
            assert await asyncio.wait_for(decided(), 10) != "pending"
        finally:
            answered.set()
            await asyncio.gather(*others)
        await slack.settle()
    assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]


async def test_an_approve_click_near_the_signatures_age_limit_is_decided_not_lost(
    repo: Repository,
) -> None:
    """Answered before dispatch, a click is verified twice: here, then by bolt when its
    dispatch runs, later (after the burst's answers, ``ack_wait_limit`` at most). A click
    signed just inside the 5 minutes passed the first check, was told 200, and bolt's
    check, a moment later, refused it: the clicker saw success and nothing was decided.
    Such a click is dispatched before its answer, as the other requests are."""
    with freeze_time("2026-11-30 10:00:00", real_asyncio=True) as clock:
        async with running_bot(make_config(), repo) as slack:
            await slack.mention("U0REQUESTER", calls(("restart_service", {"service": "db"})))
            [card] = slack.cards()
            background = slack.bot.services.background
            # Background work (the early path's dispatch) starts 2 s after the last answer.
            background.quiet = background.ack_wait_limit = 2.0
            signed_at = int(utcnow().timestamp()) - 299  # 299 s old: inside the 5 minutes
            click = await slack.server.click(
                "U0APPROVER1", card, "approval_approve", timestamp=signed_at
            )
            assert click.status == 200
            clock.tick(timedelta(seconds=5))  # before the dispatch: now past the 5 minutes
            await slack.settle()
            pending, _ = await repo.list_pending(PendingFilter(), now=utcnow(), limit=10)
            assert pending == [], "the click was answered 200, then dropped"
    assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]
