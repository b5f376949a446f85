"""PostgreSQL: a run's start and end in one statement each (issue 22), with the full
transaction behind them for every other case.

``open_run`` of a new conversation (with or without the Slack event it came in) and
``finish_run`` of a run that is nobody's child are each one statement in autocommit
(``Mode.WRITE_ONE``), which changes nothing unless its whole common case holds. These tests
count the statements, compare every row the one statement writes with what the full
transaction writes (``ONE_STATEMENT`` off), run each case the full transaction still handles
(a continued conversation, a busy one, a redelivered event, a child's end, a lost lease), and
race a concurrent claim of the event against the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from storage.drivers import pg_direct
from storage.records import DuplicateEvent, LeaseLost, RunBusy
from storage.repository import Mode, Repository, Tx
from storage.sql.approvals import INSERT_APPROVAL
from storage.sql.columns import APPROVAL_COLUMNS
from storage.stores import runs as run_store
from tests.conftest import POSTGRES_URL, Database

NOW = datetime(2026, 12, 2, 12, 0, 0)
LEASE = NOW + timedelta(minutes=5)
POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


@contextlib.contextmanager
def statements() -> Iterator[list[str]]:
    """The statements the direct path sends meanwhile (BEGIN and COMMIT included)."""
    sent: list[str] = []
    pg_direct.STATEMENT_HOOKS.append(sent.append)
    try:
        yield sent
    finally:
        pg_direct.STATEMENT_HOOKS.remove(sent.append)


@contextlib.contextmanager
def one_statement(on: bool) -> Iterator[None]:
    saved = run_store.ONE_STATEMENT
    run_store.ONE_STATEMENT = on
    try:
        yield
    finally:
        run_store.ONE_STATEMENT = saved


async def open_run(
    repo: Repository, prefix: str, *, event: str | None = None, key: str = "thread", **kw: Any
) -> Any:
    return await repo.open_run(
        run_id=f"{prefix}_run{kw.pop('n', '')}",
        conversation_key=f"{prefix}:{key}",
        requester="U0REQUESTER",
        model_id="echo",
        new_messages=[{"role": "user", "content": "restart svc"}],
        worker="drive",
        lease_until=LEASE,
        now=NOW,
        opening_messages=[{"role": "system", "content": "be careful"}],
        team_id="T1",
        channel=kw.pop("channel", "C0OPS"),
        thread_ts="1.0",
        event_id=None if event is None else f"{prefix}-{event}",
        **kw,
    )


async def add_approval(
    repo: Repository, run_id: str, approval_id: str, status: str, kind: str = "approval"
) -> None:
    row: dict[str, Any] = {
        "id": approval_id,
        "run_id": run_id,
        "turn": 0,
        "tool_call_id": f"call_{approval_id}",
        "tool_name": "restart_service",
        "arguments": {"service": "svc"},
        "payload_hash": "0" * 64,
        "status": status,
        "requester": "U0REQUESTER",
        "team_id": "T1",
        "channel": "C0OPS",
        "thread_ts": "1.0",
        "approvers": [],
        "approved_by": [],
        "edited_arguments": None,
        "allow_self_approval": False,
        "on_expiry": "deny",
        "created_at": NOW,
        "expires_at": NOW + timedelta(hours=1),
        "kind": kind,
        "min_approvals": 1,
        "allow_edit": False,
    }

    def body(tx: Tx) -> None:
        tx.execute(INSERT_APPROVAL, APPROVAL_COLUMNS.params(row))

    await repo.database.run(body, Mode.WRITE)


async def rows_of(repo: Repository, prefix: str) -> dict[str, list[Any]]:
    """Every row a scenario wrote (its ids all start with ``prefix``), audit trail in id order,
    with the prefix taken out so two scenarios' rows compare equal."""
    like = f"{prefix}%"
    queries = {
        "runs": "SELECT * FROM runs WHERE id LIKE :p ORDER BY id",
        "approvals": "SELECT * FROM approvals WHERE run_id LIKE :p ORDER BY id",
        "audit_events": (
            "SELECT at, run_id, approval_id, event, actor, detail FROM audit_events "
            "WHERE run_id LIKE :p ORDER BY id"
        ),
        "run_answers": "SELECT * FROM run_answers WHERE run_id LIKE :p ORDER BY run_id, turn",
        "processed_events": (
            "SELECT * FROM processed_events WHERE event_id LIKE :p ORDER BY event_id"
        ),
    }

    def body(tx: Tx) -> dict[str, list[Any]]:
        return {name: tx.all(sql, {"p": like}) for name, sql in queries.items()}

    found = await repo.database.run(body, Mode.READ)
    text = json.dumps(found, default=str, sort_keys=True).replace(prefix, "X")
    result: dict[str, list[Any]] = json.loads(text)
    return result


async def both_ways(
    repo: Repository, scenario: Callable[[str], Awaitable[None]]
) -> dict[str, list[Any]]:
    """The scenario's rows with the one statement paths, asserted equal to the full
    transactions' rows."""
    with one_statement(True):
        await scenario("fast")
    with one_statement(False):
        await scenario("full")
    fast, full = await rows_of(repo, "fast"), await rows_of(repo, "full")
    assert fast == full
    return fast


def sent_alone(sent: list[str]) -> None:
    assert len(sent) == 1, sent
    assert sent[0] not in ("BEGIN", "COMMIT")


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
async def test_a_run_ends_in_one_statement_with_the_full_transactions_rows(
    repo: Repository,
) -> None:
    async def scenario(prefix: str) -> None:
        completed = await open_run(repo, prefix)
        await repo.set_progress(completed.id, "2.0")
        with statements() as sent:
            parent = await repo.finish_run(
                completed.id,
                worker="drive",
                status="completed",
                answer="done",
                history=[{"role": "assistant", "content": "done"}],
                now=NOW,
            )
        assert parent is None
        if prefix == "fast":
            sent_alone(sent)
        # A failed run cancels its unfinished approvals (audited after the run's end), and
        # leaves its decided ones; a run without a thread stores no answer.
        failed = await open_run(repo, prefix, key="failed", n=2, channel="")
        for suffix, status in (("a", "pending"), ("b", "approved"), ("c", "denied")):
            await add_approval(repo, failed.id, f"{prefix}_apr_{suffix}", status)
        with statements() as sent:
            await repo.finish_run(failed.id, worker="drive", status="failed", error="x", now=NOW)
        if prefix == "fast":
            sent_alone(sent)
        cancelled = await open_run(repo, prefix, key="cancelled", n=3)
        with statements() as sent:
            await repo.finish_run(
                cancelled.id, worker="drive", status="cancelled", error="stop", now=NOW
            )
        if prefix == "fast":
            sent_alone(sent)

    rows = await both_ways(repo, scenario)
    audited = [(r[1], r[2], r[3]) for r in rows["audit_events"]]
    assert audited[-5:] == [
        ("X_run2", None, "run_failed"),
        ("X_run2", "X_apr_a", "approval_cancelled"),
        ("X_run2", "X_apr_b", "approval_cancelled"),
        ("X_run3", None, "run_started"),
        ("X_run3", None, "run_cancelled"),
    ]
    assert [(r[0], r[2], r[3], r[4]) for r in rows["run_answers"]] == [
        ("X_run", "completed", "done", "2.0"),
        ("X_run3", "cancelled", "stop", None),
    ]


@POSTGRES
async def test_a_lost_lease_still_raises_lease_lost_and_changes_nothing(
    repo: Repository,
) -> None:
    async def scenario(prefix: str) -> None:
        run = await open_run(repo, prefix)
        before = await rows_of(repo, prefix)
        for status in ("completed", "failed"):
            with pytest.raises(LeaseLost):
                await repo.finish_run(run.id, worker="another", status=status, now=NOW)
        assert await rows_of(repo, prefix) == before
        await repo.finish_run(run.id, worker="drive", status="completed", now=NOW)
        with pytest.raises(LeaseLost):  # ended already
            await repo.finish_run(run.id, worker="drive", status="completed", now=NOW)

    await both_ways(repo, scenario)


@POSTGRES
async def test_a_childs_end_settles_its_parent_in_the_full_transaction(
    repo: Repository,
) -> None:
    async def scenario(prefix: str) -> None:
        parent = await open_run(repo, prefix)
        child = await open_run(repo, prefix, key="child", n=2)
        approval_id = f"{prefix}_apr_delegation"
        await add_approval(repo, parent.id, approval_id, "pending", kind="delegation")
        await repo.database.execute_sql(
            "UPDATE runs SET status = 'paused', lease_owner = NULL, lease_expires_at = NULL "
            "WHERE id = :parent",
            {"parent": parent.id},
        )
        await repo.database.execute_sql(
            "UPDATE runs SET parent_run_id = :parent, parent_approval_id = :approval "
            "WHERE id = :child",
            {"parent": parent.id, "approval": approval_id, "child": child.id},
        )
        resumed = await repo.finish_run(
            child.id,
            worker="drive",
            status="completed",
            answer="child's answer",
            now=NOW,
            claimer="drive/2",
            lease_until=LEASE,
        )
        assert resumed == parent.id  # settled, and its resume claimed

    rows = await both_ways(repo, scenario)
    assert [r[3] for r in rows["audit_events"]][-3:] == [
        "run_completed",
        "delegation_settled",
        "run_resumed",
    ]


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
    admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://"))
    schema = await repo.database.run(lambda tx: tx.one("SELECT current_schema()"), Mode.READ_ONE)
    assert schema is not None
    try:
        await admin.execute(f'SET search_path TO "{schema[0]}"')
        other = admin.transaction()
        await other.start()
        await admin.execute(
            "INSERT INTO processed_events (event_id, received_at) VALUES ($1, $2)",
            "race-Ev1",
            NOW,
        )
        start = asyncio.create_task(open_run(repo, "race", event="Ev1"))
        # The start waits on the other's claim: the claim's INSERT is blocked.
        for _ in range(100):
            waiting = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE pg_blocking_pids(pid) @> ARRAY[pg_backend_pid()]"
            )
            if waiting:
                break
            await asyncio.sleep(0.02)
        assert waiting, "the start did not wait for the other transaction's claim"
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


@POSTGRES
@pytest.mark.parametrize("fast", [True, False], ids=["one-statement", "full"])
async def test_a_failed_end_waiting_on_the_run_lock_cancels_what_is_unfinished_once_it_has_it(
    database: Database, fast: bool
) -> None:
    """The one statement's snapshot is taken before it waits for the run's row: approvals
    another transaction decided meanwhile (holding the run's lock, as a decision does) are
    re-read once locked, so what the end cancels is what the full transaction cancels."""
    repo = await database.open()
    admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://"))
    schema = await repo.database.run(lambda tx: tx.one("SELECT current_schema()"), Mode.READ_ONE)
    assert schema is not None
    try:
        await admin.execute(f'SET search_path TO "{schema[0]}"')
        run = await open_run(repo, "lock")
        for suffix, status in (("a", "pending"), ("b", "approved"), ("c", "pending")):
            await add_approval(repo, run.id, f"lock_apr_{suffix}", status)
        other = admin.transaction()
        await other.start()
        await admin.execute("SELECT id FROM runs WHERE id = $1 FOR NO KEY UPDATE", run.id)
        await admin.execute("UPDATE approvals SET status = 'denied' WHERE id = 'lock_apr_a'")
        await admin.execute("UPDATE approvals SET status = 'executed' WHERE id = 'lock_apr_b'")
        await admin.execute("UPDATE approvals SET status = 'approved' WHERE id = 'lock_apr_c'")
        with one_statement(fast), statements() as sent:
            end = asyncio.create_task(
                repo.finish_run(run.id, worker="drive", status="failed", error="x", now=NOW)
            )
            for _ in range(100):
                waiting = await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE pg_blocking_pids(pid) @> ARRAY[pg_backend_pid()]"
                )
                if waiting:
                    break
                await asyncio.sleep(0.02)
            assert waiting, "the end did not wait for the run's lock"
            await other.commit()
            assert await end is None
        if fast:
            sent_alone(sent)
        rows = await rows_of(repo, "lock")
        assert [(r[0], r[7]) for r in rows["approvals"]] == [
            ("X_apr_a", "denied"),
            ("X_apr_b", "executed"),
            ("X_apr_c", "cancelled"),
        ]
        assert [(r[2], r[3]) for r in rows["audit_events"]] == [
            (None, "run_started"),
            (None, "run_failed"),
            ("X_apr_c", "approval_cancelled"),
        ]
    finally:
        await admin.close()
