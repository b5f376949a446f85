"""PostgreSQL: a new conversation's start in one statement (issue 22), with the full
transaction behind it for every other case.

``open_run`` of a new conversation, with or without the Slack event it came in, is one
statement in autocommit (``Mode.WRITE_ONE``) that stores nothing unless it stores it all: the
run, its audit row and the event's claim. These tests count the statements, compare the rows
with the full transaction's (``ONE_STATEMENT`` off), run each case the full transaction still
handles (a continued or busy conversation, a redelivered event, an event claimed elsewhere),
and race a concurrent claim of the event against the one statement.
"""

from __future__ import annotations

import asyncio

import pytest

from storage.errors import DuplicateEvent, LeaseLost, RunBusy
from storage.repository import Repository
from tests.conftest import Database
from tests.support.one_statement_runs import (
    NOW,
    POSTGRES,
    beside,
    blocking,
    both_ways,
    open_run,
    rows_of,
    sent_alone,
)
from tests.support.statements import statements


@POSTGRES
async def test_a_new_conversation_starts_in_one_statement_with_the_full_transactions_rows(
    repo: Repository,
) -> None:
    async def scenario(prefix: str) -> None:
        with statements() as sent:
            run = await open_run(repo, prefix, event="Ev1")
        if prefix == "fast":
            sent_alone(sent)
        assert run.status == "running" and run.turn == 0
        assert await repo.get_run(run.id) is not None
        with statements() as sent:
            await open_run(repo, prefix, key="other", n=2)  # no event
        if prefix == "fast":
            sent_alone(sent)

    rows = await both_ways(repo, scenario)
    assert [r[3] for r in rows["audit_events"]] == ["run_started", "run_started"]
    assert len(rows["processed_events"]) == 1 and len(rows["runs"]) == 2


@POSTGRES
async def test_a_redelivered_event_stores_nothing_either_way(repo: Repository) -> None:
    async def scenario(prefix: str) -> None:
        await open_run(repo, prefix, event="Ev1")
        before = await rows_of(repo, prefix)
        # The same event again (the same thread), and an event some other handler already
        # claimed (repo.claim_event) coming with a thread of its own.
        with pytest.raises(DuplicateEvent):
            await open_run(repo, prefix, event="Ev1", n=2)
        assert await rows_of(repo, prefix) == before
        assert await repo.claim_event(f"{prefix}-Ev2", now=NOW)
        before = await rows_of(repo, prefix)
        with pytest.raises(DuplicateEvent):
            await open_run(repo, prefix, event="Ev2", key="new", n=3)
        assert await rows_of(repo, prefix) == before

    await both_ways(repo, scenario)


@POSTGRES
async def test_a_continued_or_busy_conversation_takes_the_full_transaction(
    repo: Repository,
) -> None:
    async def scenario(prefix: str) -> None:
        run = await open_run(repo, prefix, event="Ev1")
        # Busy: RunBusy, and the event is recorded all the same.
        with pytest.raises(RunBusy):
            await open_run(repo, prefix, event="Ev2", n=2)
        await repo.finish_run(run.id, worker="drive", status="completed", answer="done", now=NOW)
        with statements() as sent:
            continued = await open_run(repo, prefix, event="Ev3", n=3)
        assert continued.id == run.id and continued.turn == 1
        if prefix == "fast":
            # The one statement found the conversation's run: the full transaction does not
            # try inserting it again (BEGIN, claim, read, continue with its audit, COMMIT),
            # one round trip fewer than before this path existed (7).
            assert len(sent) == 6, sent
            assert sum("INSERT INTO runs" in s for s in sent) == 1
        # A failed run's continuation settles its history (the full transaction's part).
        await repo.finish_run(run.id, worker="drive", status="failed", error="boom", now=NOW)
        await open_run(
            repo,
            prefix,
            n=4,
            settle_history=lambda history, status, error, approvals: [
                *history,
                {"role": "user", "content": f"{status}: {error}"},
            ],
        )

    rows = await both_ways(repo, scenario)
    assert [r[3] for r in rows["audit_events"]] == [
        "run_started",
        "run_completed",
        "run_continued",
        "run_failed",
        "run_continued",
    ]
    assert [r[0] for r in rows["processed_events"]] == ["X-Ev1", "X-Ev2", "X-Ev3"]


@POSTGRES
@pytest.mark.parametrize("other_commits", [True, False], ids=["committed", "rolled-back"])
async def test_an_event_claimed_concurrently_is_a_duplicate_and_the_start_stores_nothing(
    database: Database, other_commits: bool
) -> None:
    """The statement's snapshot cannot see a claim another transaction has not committed:
    its INSERT of the claim waits for it, and fails (so the whole statement does) when that
    one commits; the full transaction then says DuplicateEvent. Rolled back: the start goes on.
    """
    repo = await database.open()
    admin = await beside(repo)
    try:
        other = admin.transaction()
        await other.start()
        await admin.execute(
            "INSERT INTO processed_events (event_id, received_at) VALUES ($1, $2)",
            "race-Ev1",
            NOW,
        )
        start = asyncio.create_task(open_run(repo, "race", event="Ev1"))
        # The start waits on the other's claim: the claim's INSERT is blocked.
        assert await blocking(admin), "the start did not wait for the other's claim"
        await (other.commit() if other_commits else other.rollback())
        if other_commits:
            with pytest.raises(DuplicateEvent):
                await start
            assert (await rows_of(repo, "race"))["runs"] == []
        else:
            run = await start
            assert run.id == "race_run"
            rows = await rows_of(repo, "race")
            assert [r[3] for r in rows["audit_events"]] == ["run_started"]
            assert len(rows["processed_events"]) == 1
    finally:
        await admin.close()


async def test_the_same_calls_behave_the_same_on_either_backend(repo: Repository) -> None:
    """SQLite keeps the full transactions (one statement buys nothing in-process)."""
    run = await open_run(repo, "lite", event="Ev1")
    with pytest.raises(DuplicateEvent):
        await open_run(repo, "lite", event="Ev1", n=2)
    with pytest.raises(RunBusy):
        await open_run(repo, "lite", event="Ev2", n=3)
    await repo.finish_run(run.id, worker="drive", status="failed", error="x", now=NOW)
    with pytest.raises(LeaseLost):
        await repo.finish_run(run.id, worker="drive", status="completed", now=NOW)
    continued = await open_run(repo, "lite", event="Ev3", n=4)
    assert continued.id == run.id and continued.turn == 1
    assert [e.event for e in await repo.audit_trail(run_id=run.id)] == [
        "run_started",
        "run_failed",
        "run_continued",
    ]
