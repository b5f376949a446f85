"""The database refuses to approve a quorum approval without its votes (0014_quorum_guard).

The release before 0012_quorum decides with a statement that knows no ``min_approvals``:
during a rolling deploy, or after a rollback, its first click would approve a call that
needs two people. Its statement is replayed here, verbatim, on both databases. And the
deciding vote racing `runs cancel`. On PostgreSQL the trigger has a WHEN since
0027_quorum_guard_when, so that other status UPDATEs do not call its function.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from alembic import command
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bot.engine import Request, Runner
from storage import migrate
from storage.drivers import Mode
from storage.repository import Repository
from tests.bot.test_quorum import quorum_config

# storage/sql/ DECIDE as the release before 0012_quorum has it.
PREVIOUS_RELEASE_DECIDE = (
    "UPDATE approvals SET status = :status, decided_by = :actor, decided_at = :now, "
    "decided_by_name = :actor_name, reason = :reason "
    "WHERE id = :id AND kind = 'approval' AND status = 'pending' AND expires_at > :now "
    "RETURNING id"
)


async def _ask(runner: Runner, service: str) -> str:
    text = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": service}}]}
    )
    paused = await runner.start(
        Request(text=text, requester="U0REQUESTER", conversation_key=service)
    )
    [approval] = paused.new_approvals
    return approval.id


async def _old_release_approves(repo: Repository, approval_id: str, actor: str) -> None:
    from bot.clock import utcnow

    params = {
        "id": approval_id,
        "status": "approved",
        "actor": actor,
        "actor_name": None,
        "reason": None,
        "now": utcnow(),
    }
    await repo.execute_sql(PREVIOUS_RELEASE_DECIDE, params)


async def test_the_previous_release_cannot_approve_a_quorum_on_one_click(
    repo: Repository,
) -> None:
    runner = Runner(repo, quorum_config(2), worker_id="worker-a")
    approval_id = await _ask(runner, "db")
    with pytest.raises(Exception, match="quorum not reached"):
        await _old_release_approves(repo, approval_id, "U0APPROVER1")
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "pending"

    # Nor after this release recorded one vote: the old click would be the 2nd person's
    # decision without the 2nd person's vote.
    first = await runner.decide(approval_id, actor="U0APPROVER1", approve=True)
    assert first.approval.status == "pending"
    with pytest.raises(Exception, match="quorum not reached"):
        await _old_release_approves(repo, approval_id, "U0APPROVER2")

    # This release's votes are what approve it, exactly once.
    last = await runner.decide(approval_id, actor="U0APPROVER2", approve=True)
    assert last.approval.status == "approved" and last.resume_claimed


async def test_the_guard_leaves_single_approvals_and_denials_alone(repo: Repository) -> None:
    runner = Runner(repo, quorum_config(1), worker_id="worker-a")
    single = await _ask(runner, "web")
    await _old_release_approves(repo, single, "U0APPROVER1")
    approval = await repo.get_approval(single)
    assert approval is not None and approval.status == "approved"

    quorum = Runner(repo, quorum_config(2), worker_id="worker-a")
    denied = await _ask(quorum, "db")
    await repo.execute_sql("UPDATE approvals SET status = 'denied' WHERE id = :id", {"id": denied})
    approval = await repo.get_approval(denied)
    assert approval is not None and approval.status == "denied"


async def test_the_deciding_vote_racing_runs_cancel_leaves_one_consistent_outcome(
    repo: Repository,
) -> None:
    """``runs cancel`` and the N-th vote at once: either the call is approved and the run
    resumes, or both are cancelled; never a cancelled run with an approved call."""
    from bot.clock import utcnow
    from bot.policy import DecisionRefused

    runner = Runner(repo, quorum_config(2), worker_id="worker-a")
    for i in range(8):
        approval_id = await _ask(runner, f"svc{i}")
        await runner.decide(approval_id, actor="U0APPROVER1", approve=True)
        approval = await repo.get_approval(approval_id)
        assert approval is not None
        vote, cancelled = await asyncio.gather(
            runner.decide(approval_id, actor="U0APPROVER2", approve=True),
            repo.cancel_run(approval.run_id, reason="stop", actor="U0OPS", now=utcnow()),
            return_exceptions=True,
        )
        final = await repo.get_approval(approval_id)
        run = await repo.get_run(approval.run_id)
        assert final is not None and run is not None
        if cancelled is True:
            assert isinstance(vote, DecisionRefused), vote
            assert final.status == "cancelled" and run.status == "cancelled", (final, run)
        else:
            assert not isinstance(vote, BaseException), vote
            assert final.status == "approved" and run.status == "resuming", (final, run)


# -- PostgreSQL: the trigger fires only for what it may refuse (0027_quorum_guard_when) ----

GUARD_QUALIFIED = (
    "SELECT tgqual IS NOT NULL FROM pg_trigger "
    "WHERE tgname = 'approvals_quorum_guard' AND tgrelid = 'approvals'::regclass"
)


def _qualified(tx: Any) -> bool | None:
    row = tx.one(GUARD_QUALIFIED)
    return None if row is None else bool(row[0])


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_the_guard_at_head_fires_only_for_a_quorum_approve(repo: Repository) -> None:
    """Regression: without its WHEN the trigger ran its plpgsql function on every UPDATE of
    ``approvals.status`` (three a pause -> decide -> resume cycle, ~0.03 ms of the server's
    time each) although only a ``pending -> approved`` of a quorum approval can trip it. The
    refusals themselves are the tests above, at head on both databases."""
    assert await repo.database.run(_qualified, Mode.READ_ONE) is True


async def test_0027_downgrades_to_the_unqualified_guard_and_back(postgres_database: str) -> None:
    await (await Repository.open(postgres_database)).close()
    engine = create_async_engine(
        postgres_database.replace("postgresql://", "postgresql+asyncpg://")
    )
    try:
        assert await _guard_after(engine, "downgrade", "0026_delegations") is False
        assert await _guard_after(engine, "upgrade", "head") is True
    finally:
        await engine.dispose()


async def _guard_after(engine: AsyncEngine, action: str, revision: str) -> bool | None:
    """Whether the guard has a WHEN, once Alembic's ``action`` to ``revision`` is done."""

    def migrate_to(connection: Connection) -> None:
        config = migrate.alembic_config()
        config.attributes["connection"] = connection
        getattr(command, action)(config, revision)

    async with engine.begin() as connection:
        await connection.run_sync(migrate_to)
    async with engine.connect() as connection:
        row = (await connection.exec_driver_sql(GUARD_QUALIFIED)).first()
    return None if row is None else bool(row[0])


async def test_0027_waits_for_no_reader_and_holds_up_no_read(postgres_database: str) -> None:
    """A rolling deploy runs 0027 while the old replicas serve. Dropping the trigger took
    ``approvals``' strongest lock: behind a transaction that had read the table (a report,
    ``pg_dump``), the upgrade queued, and every later read of approvals queued behind it, so
    the replicas' clicks timed out for as long as that transaction lasted. Replaced in place,
    the trigger waits for no reader and no read waits for it."""
    await (await Repository.open(postgres_database)).close()
    engine = create_async_engine(
        postgres_database.replace("postgresql://", "postgresql+asyncpg://")
    )
    report = await asyncpg.connect(postgres_database)
    replica = await asyncpg.connect(postgres_database)
    try:
        assert await _guard_after(engine, "downgrade", "0026_delegations") is False
        await report.execute("BEGIN")
        await report.fetch("SELECT count(*) FROM approvals")  # a long read, still open
        upgrade = asyncio.create_task(_guard_after(engine, "upgrade", "head"))
        assert await asyncio.wait_for(asyncio.shield(upgrade), 10) is True, "waited for a reader"
        await replica.fetch("SELECT count(*) FROM approvals", timeout=5)
    finally:
        await report.execute("ROLLBACK")
        await report.close()
        await replica.close()
        await engine.dispose()
