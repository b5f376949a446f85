"""Time limits on acknowledgement paths: the answer says truly whether the write committed."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event

from bot.clock import utcnow
from storage.limits import PG_UNRESPONSIVE_GRACE, DatabaseBusy, time_limit
from storage.repository import DecisionOutcome, Repository
from tests.conftest import POSTGRES_URL
from tests.storage.test_storage import approval_row

LIMIT = 2.0


def run_row(now: datetime) -> dict[str, Any]:
    return {
        "id": "run_00000",
        "conversation_key": "k0",
        "team_id": "T1",
        "channel": "C1",
        "thread_ts": "1.0",
        "requester": "U0REQ",
        "status": "paused",
        "model_id": "m",
        "history": [],
        "turn": 1,
        "created_at": now,
        "updated_at": now,
    }


@pytest.fixture
def backend() -> str:
    """PostgreSQL only (the ``repo`` fixture follows this): SQLite commits on the calling
    thread, with no client-side timer to outlive."""
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL only: APPROVAL_BOT_TEST_POSTGRES_URL is not set")
    return "postgres"


async def decide(repo: Repository, now: datetime) -> DecisionOutcome | None:
    return await repo.decide(
        "apr_00000",
        actor="U1",
        approve=True,
        reason=None,
        worker="worker-a",
        lease_until=now + timedelta(minutes=5),
        now=now,
    )


async def test_a_decision_whose_commit_outlasts_the_limit_is_not_reported_as_failed(
    repo: Repository,
) -> None:
    """The event loop stalls (a busy process) while the server commits a decision: the clicker
    must not be told "try again" for a decision that was stored (the replicas benchmark saw
    it: the run then waited for its 5-minute lease with nobody resuming it)."""
    now = utcnow()
    await repo.insert_rows_for_benchmark(
        runs=[run_row(now)], approvals=[approval_row(0, ["U1"], now)]
    )
    # COMMIT takes 0.5 s on the server (the test's schema is the search_path).
    await repo.database.execute_sql(
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$"
    )
    await repo.database.execute_sql(
        "CREATE CONSTRAINT TRIGGER slow_commit AFTER UPDATE ON approvals "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()"
    )

    engine = repo.database.engine.sync_engine  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()

    def stall_loop_during_commit(connection: Any) -> None:
        # Once COMMIT is on the wire, the loop stops for longer than the whole limit.
        loop.call_later(0.1, time.sleep, LIMIT + PG_UNRESPONSIVE_GRACE + 1)

    event.listen(engine, "commit", stall_loop_during_commit)
    try:
        with time_limit(LIMIT):
            outcome = await decide(repo, now)
    except DatabaseBusy:
        outcome = None
    finally:
        event.remove(engine, "commit", stall_loop_during_commit)

    approval = await repo.get_approval("apr_00000")
    assert approval is not None
    if outcome is None:
        assert approval.status == "pending", "told 'try again' for a decision that was stored"
    else:
        assert approval.status == "approved" and outcome.resume_claimed


async def test_a_transaction_cut_off_before_commit_commits_nothing_and_drops_its_connection(
    repo: Repository,
) -> None:
    """The loop stalls past the limit while the decision's UPDATE is in flight: DatabaseBusy,
    nothing stored, and the connection (mid-statement, state unknown) is not pooled again."""
    now = utcnow()
    await repo.insert_rows_for_benchmark(
        runs=[run_row(now)], approvals=[approval_row(0, ["U1"], now)]
    )
    engine = repo.database.engine.sync_engine  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()
    invalidated: list[object] = []

    def stall_loop_during_update(connection: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE APPROVALS"):
            loop.call_soon(time.sleep, LIMIT + PG_UNRESPONSIVE_GRACE + 1)

    def record(dbapi_connection: Any, record: Any, exception: Any) -> None:
        invalidated.append(dbapi_connection)

    event.listen(engine, "before_cursor_execute", stall_loop_during_update)
    event.listen(engine.pool, "invalidate", record)
    try:
        with pytest.raises(DatabaseBusy), time_limit(LIMIT):
            await decide(repo, now)
    finally:
        event.remove(engine, "before_cursor_execute", stall_loop_during_update)
    assert invalidated, "a connection cut off mid-statement must not return to the pool"
    approval = await repo.get_approval("apr_00000")
    assert approval is not None and approval.status == "pending"
    # The pool still serves: the clicker's retry is recorded.
    with time_limit(LIMIT):
        outcome = await decide(repo, now)
    assert outcome is not None and outcome.approval.status == "approved"
