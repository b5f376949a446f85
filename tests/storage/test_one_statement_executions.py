"""PostgreSQL: an approved call's start and its recording are one statement each.

``begin_execution`` and ``record_execution`` first send one statement (autocommit: no BEGIN,
no COMMIT) that does the usual case with its audit row and writes nothing otherwise; then,
only when it did nothing, the full transaction, which says why (a hold to stop at, a lost
lease, a call recorded late or twice). Each case here runs with the one statement and with
the full transaction alone (``ONE_STATEMENT = False``): the rows must be the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from bot.engine import Runner
from storage.repository import Mode, Repository, RunHeld, StorageError, Tx
from storage.stores import executions
from tests.bot.test_engine import calls, request
from tests.conftest import POSTGRES_URL, Database, make_config
from tests.support.statements import begin_hold
from tests.support.statements import statements as sent

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)

NOW = datetime(2026, 12, 2, 12, 0, 0)
LEASE = NOW + timedelta(minutes=5)  # the claim's lease, the same in every case
LATER = NOW + timedelta(minutes=10)  # as a recording renews it


class Call:
    """An approved call whose run's resume is claimed (``resuming``, under ``owner``)."""

    def __init__(self, repo: Repository, run_id: str, approval_id: str, owner: str) -> None:
        self.repo, self.run_id, self.id, self.owner = repo, run_id, approval_id, owner

    async def begin(self, **kwargs: Any) -> bool:
        kwargs.setdefault("owner", self.owner)
        return await self.repo.begin_execution(self.id, now=NOW, **kwargs)

    async def record(self, **kwargs: Any) -> bool:
        kwargs.setdefault("owner", self.owner)
        kwargs.setdefault("lease_until", LATER)
        return await self.repo.record_execution(
            self.id, result="done", failed=False, now=NOW, **kwargs
        )

    async def state(self) -> dict[str, Any]:
        """What the execution wrote: the approval, the run, and the audit since the claim,
        with the ids written as names (two cases on two runs compare equal)."""
        names = {self.run_id: "run", self.id: "approval", self.owner: "owner"}

        def body(tx: Tx) -> dict[str, Any]:
            approval = tx.one(
                "SELECT status, executed_at, result FROM approvals WHERE id = :id",
                {"id": self.id},
            )
            run = tx.one(
                "SELECT status, lease_owner, lease_expires_at FROM runs WHERE id = :id",
                {"id": self.run_id},
            )
            audit = tx.all(
                "SELECT at, run_id, approval_id, event, actor, detail FROM audit_events "
                "WHERE run_id = :id AND event LIKE 'execution%' ORDER BY id",
                {"id": self.run_id},
            )
            return {"approval": approval, "run": run, "audit": audit}

        rows = await self.repo.database.run(body, Mode.READ)
        return {
            key: [[names.get(v, v) if isinstance(v, str) else v for v in row] for row in value]
            if key == "audit"
            else [names.get(v, v) if isinstance(v, str) else v for v in value]
            for key, value in rows.items()
        }


async def approved_call(repo: Repository, thread: str) -> Call:
    runner = Runner(repo, make_config(), worker_id="fast")
    paused = await runner.start(
        request(calls(("restart_service", {"service": "web"})), thread=thread)
    )
    [approval] = paused.new_approvals
    assert (await runner.decide(approval.id, actor="U0APPROVER1", approve=True)).resume_claimed
    run = await repo.get_run(paused.run_id)
    assert run is not None and run.lease_owner is not None and run.status == "resuming"
    await repo.database.execute_sql(
        "UPDATE runs SET lease_expires_at = :at WHERE id = :id", {"at": LEASE, "id": run.id}
    )
    return Call(repo, run.id, approval.id, run.lease_owner)


Case = Callable[[Call], Awaitable[Any]]


async def both_ways(
    database: Database, monkeypatch: pytest.MonkeyPatch, case: Case
) -> tuple[Any, list[str], dict[str, Any]]:
    """``case`` on a call of its own, with the one statement and without: what it returned,
    the statements it sent with the one statement and the rows it wrote, which must be the
    full transaction's."""
    repo = await database.open()
    full, fast = await approved_call(repo, "1.0"), await approved_call(repo, "2.0")
    monkeypatch.setattr(executions, "ONE_STATEMENT", False)
    expected = await _outcome(case, full)
    monkeypatch.setattr(executions, "ONE_STATEMENT", True)
    with sent() as statements:
        outcome = await _outcome(case, fast)
    assert outcome == expected
    state = await fast.state()
    assert state == await full.state()
    return outcome, statements, state


async def _outcome(case: Case, call: Call) -> Any:
    try:
        return await case(call)
    except StorageError as exc:
        return type(exc)


def is_one(statement: str) -> bool:
    return statement.startswith(("WITH run AS", "WITH changed AS", "WITH fresh AS"))


async def test_the_usual_start_and_recording_are_one_statement_each(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    holds: list[str | None] = []

    async def case(call: Call) -> tuple[bool, bool]:
        return await call.begin(stop_if_held=True), await call.record(on_hold=holds.append)

    outcome, statements, _ = await both_ways(database, monkeypatch, case)
    assert outcome == (True, True)
    assert len(statements) == 2 and all(is_one(s) for s in statements), statements
    assert holds == [None, None]  # the full transaction's, then the one statement's


async def test_a_start_without_a_lease_owner_and_a_recording_without_a_lease(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def case(call: Call) -> tuple[bool, bool]:
        started = await call.repo.begin_execution(call.id, now=NOW)
        return started, await call.record(owner=None, lease_until=None)

    outcome, statements, _ = await both_ways(database, monkeypatch, case)
    assert outcome == (True, True)
    assert len(statements) == 2 and all(is_one(s) for s in statements), statements


async def test_a_hold_to_stop_at_writes_nothing_and_raises(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def case(call: Call) -> bool:
        await call.repo.request_hold(
            call.run_id, action="pause", actor="U0OPS", reason=None, now=NOW
        )
        with sent() as statements:
            try:
                return await call.begin(stop_if_held=True)
            finally:
                assert "ROLLBACK" in statements  # the full transaction's, rolled back

    outcome, _, state = await both_ways(database, monkeypatch, case)
    assert outcome is RunHeld
    # Nothing written: the run still ``resuming``, the call still ``approved``, no audit.
    assert state["run"][0] == "resuming" and state["approval"][0] == "approved"
    assert state["audit"] == []


async def test_a_hold_not_to_stop_at_is_returned_by_the_one_statement(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    holds: list[str | None] = []

    async def case(call: Call) -> tuple[bool, bool]:
        await call.repo.request_hold(
            call.run_id, action="stop", actor="U0OPS", reason=None, now=NOW
        )
        with sent() as statements:
            outcome = await call.begin(), await call.record(on_hold=holds.append)
        if executions.ONE_STATEMENT:
            assert len(statements) == 2 and all(is_one(s) for s in statements), statements
        return outcome

    outcome, _, _ = await both_ways(database, monkeypatch, case)
    assert outcome == (True, True) and holds == ["stop", "stop"]


async def test_a_start_by_a_drive_that_lost_the_run(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def case(call: Call) -> bool:
        return await call.begin(owner="a-drive-that-lost-it", stop_if_held=True)

    outcome, statements, _ = await both_ways(database, monkeypatch, case)
    assert outcome is False
    assert is_one(statements[0]) and statements[1] == "BEGIN", statements


async def test_a_recording_by_a_drive_that_lost_the_run_is_kept(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def case(call: Call) -> bool:
        assert await call.begin()
        return await call.record(owner="a-drive-that-lost-it")

    outcome, statements, _ = await both_ways(database, monkeypatch, case)
    assert outcome is False  # recorded (compared), the lease not renewed
    assert len(statements) == 2 and all(is_one(s) for s in statements), statements


async def test_a_checkpointed_call_of_a_lost_run_records_nothing(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def case(call: Call) -> bool:
        assert await call.begin()
        saved = await call.repo.save_checkpoint(
            call.id, state="{}", owner=call.owner, lease_until=LATER, now=NOW
        )
        assert saved
        with sent() as statements:
            recorded = await call.record(owner="a-drive-that-lost-it")
        if executions.ONE_STATEMENT:
            assert is_one(statements[0]) and statements[1] == "BEGIN", statements
        return recorded

    outcome, _, state = await both_ways(database, monkeypatch, case)
    assert outcome is False
    assert state["approval"][0] == "executing" and state["approval"][2] is None
    assert [row[3] for row in state["audit"]] == ["execution_started"]


async def test_a_checkpointed_call_of_the_drive_holding_its_run_is_one_statement(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def case(call: Call) -> bool:
        assert await call.begin()
        await call.repo.save_checkpoint(
            call.id, state="{}", owner=call.owner, lease_until=LATER, now=NOW
        )
        with sent() as statements:
            recorded = await call.record()
        if executions.ONE_STATEMENT:
            assert len(statements) == 1 and is_one(statements[0]), statements
        return recorded

    assert (await both_ways(database, monkeypatch, case))[0] is True


@pytest.mark.parametrize("late", [False, True], ids=["in time", "late"])
async def test_a_recording_over_outcome_unknown(
    database: Database, monkeypatch: pytest.MonkeyPatch, late: bool
) -> None:
    async def case(call: Call) -> bool:
        assert await call.begin()
        assert await call.repo.mark_outcome_unknown(call.id, now=NOW)
        return await call.record(late=late)

    assert (await both_ways(database, monkeypatch, case))[0] is True


async def test_a_late_recording_in_one_statement(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def case(call: Call) -> bool:
        assert await call.begin()
        return await call.record(late=True)

    outcome, statements, _ = await both_ways(database, monkeypatch, case)
    assert outcome is True and len(statements) == 2, statements


async def test_a_recording_again_and_one_of_a_call_not_executing(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def case(call: Call) -> tuple[Any, ...]:
        assert await call.begin()
        first = await call.record()
        again = await call.record(again=True)  # the same result: success, not audited twice
        try:
            await call.record()
        except StorageError as exc:
            return first, again, type(exc)
        return first, again, None

    assert (await both_ways(database, monkeypatch, case))[0] == (True, True, StorageError)


# -- concurrency: the run's row before the approval's, a take-over while waiting --------


def _plain() -> str:
    return POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://")


async def _connect(database: Database) -> asyncpg.Connection:
    settings = database.engine_kwargs["connect_args"]["server_settings"]
    return await asyncpg.connect(_plain(), server_settings=settings)


async def _waiting_for_a_lock(
    admin: asyncpg.Connection, pid_of: asyncpg.Connection, at_least: int = 1
) -> None:
    """Until ``at_least`` backends wait, directly or behind another waiter, for a lock
    ``pid_of``'s backend holds (others' tests share the database: any backend waiting for any
    lock is not enough)."""
    mine = pid_of.get_server_pid()
    for _ in range(200):
        rows = await admin.fetch(
            "SELECT pid, pg_blocking_pids(pid) AS blockers FROM pg_stat_activity "
            "WHERE datname = current_database()"
        )
        behind = {mine}
        while True:
            more = {r["pid"] for r in rows if behind & set(r["blockers"])} - behind
            if not more:
                break
            behind |= more
        if len(behind) - 1 >= at_least:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("nothing waited for the lock")


@pytest.mark.parametrize("which", ["begin", "record"])
async def test_the_run_row_is_locked_before_the_approval_row(
    database: Database, which: str
) -> None:
    """While the one statement waits for the approval's row, it already holds the run's: it
    takes them in the order every transaction does (see LOCK_RUN), so none deadlocks it."""
    repo = await database.open()
    call = await approved_call(repo, "1.0")
    if which == "record":
        assert await call.begin()
    blocker, probe = await _connect(database), await _connect(database)
    try:
        blocker_tx = blocker.transaction()
        await blocker_tx.start()
        await blocker.execute("SELECT 1 FROM approvals WHERE id = $1 FOR UPDATE", call.id)
        task = asyncio.create_task(call.begin() if which == "begin" else call.record())
        await _waiting_for_a_lock(probe, blocker)
        with pytest.raises(asyncpg.LockNotAvailableError):
            await probe.execute(
                "SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE NOWAIT", call.run_id
            )
        await blocker_tx.rollback()
        assert await task is True
    finally:
        await blocker.close()
        await probe.close()


@pytest.mark.parametrize("checkpointed", [False, True], ids=["start", "checkpointed record"])
async def test_a_take_over_committed_while_waiting_for_the_run_fences_the_call(
    database: Database, checkpointed: bool
) -> None:
    """The one statement waits for the run's row; the run is taken over meanwhile: the lease
    it then checks is the taker's (the run's latest row), not the one its snapshot saw, so the
    call does not start (or, with a checkpoint, its result is not recorded), as with the
    full transaction's separate statements."""
    repo = await database.open()
    call = await approved_call(repo, "1.0")
    if checkpointed:
        assert await call.begin()
        assert await repo.save_checkpoint(
            call.id, state="{}", owner=call.owner, lease_until=LATER, now=NOW
        )
    taker, probe = await _connect(database), await _connect(database)
    try:
        taker_tx = taker.transaction()
        await taker_tx.start()
        await taker.execute("UPDATE runs SET lease_owner = 'taker' WHERE id = $1", call.run_id)
        task = asyncio.create_task(call.record() if checkpointed else call.begin())
        await _waiting_for_a_lock(probe, taker)
        await taker_tx.commit()
        assert await task is False
    finally:
        await taker.close()
        await probe.close()
    [approval] = await repo.approvals_for_run(call.run_id)
    assert approval.status == ("executing" if checkpointed else "approved")
    assert approval.result is None


async def test_a_stop_committed_while_the_start_waits_for_the_run_is_seen(
    database: Database,
) -> None:
    """A Stop asked for (as request_hold asks: the run's lock, then the hold) while the call's
    start waits for the run's lock, at the call's safe point: the hold is not in the
    statement's snapshot, but the run's newer row is seen, so the full transaction starts
    instead, and it finds the hold: RunHeld, the call not started."""
    repo = await database.open()
    call = await approved_call(repo, "3.0")
    operator, probe = await _connect(database), await _connect(database)
    try:
        hold_tx = await begin_hold(operator, call.run_id, "stop", NOW)
        task = asyncio.create_task(call.begin(stop_if_held=True))
        await _waiting_for_a_lock(probe, operator)
        await hold_tx.commit()
        with pytest.raises(RunHeld):
            await task
    finally:
        await operator.close()
        await probe.close()
    [approval] = await repo.approvals_for_run(call.run_id)
    assert approval.status == "approved" and approval.executed_at is None
