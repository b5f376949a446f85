"""PostgreSQL: a run's end in one statement (issue 22), with the full transaction behind it
for every other case.

``finish_run`` of a run that is nobody's child is one statement in autocommit
(``Mode.WRITE_ONE``): the run's end, its audit, its answer in the outbox and, for a failed or
cancelled run, its unfinished approvals cancelled; it changes nothing for any other run. These
tests count the statements, compare the rows with the full transaction's (``ONE_STATEMENT``
off), run each case the full transaction still handles (a child's end, a lost lease), and end
a run that waited for its lock while another transaction decided its approvals.
"""

from __future__ import annotations

import asyncio

import pytest

from storage.errors import LeaseLost
from storage.repository import Repository
from tests.conftest import Database
from tests.support.one_statement_runs import (
    LEASE,
    NOW,
    POSTGRES,
    add_approval,
    beside,
    blocking,
    both_ways,
    one_statement,
    open_run,
    rows_of,
    sent_alone,
)
from tests.support.statements import statements


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
@pytest.mark.parametrize("fast", [True, False], ids=["one-statement", "full"])
async def test_a_failed_end_waiting_on_the_run_lock_cancels_what_is_unfinished_once_it_has_it(
    database: Database, fast: bool
) -> None:
    """The one statement's snapshot is taken before it waits for the run's row: approvals
    another transaction decided meanwhile (holding the run's lock, as a decision does) are
    re-read once locked, so what the end cancels is what the full transaction cancels."""
    repo = await database.open()
    admin = await beside(repo)
    try:
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
            assert await blocking(admin), "the end did not wait for the run's lock"
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
