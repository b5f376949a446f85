"""What is committed when in a pause -> decide -> resume cycle, and that the merged steps hold.

The at-most-once promise needs the pause, the decision with its resume claim, ``executing``
and ``executed``; the request is stored first (it must outlive a crash mid-turn) and the run's
end last. A decision's claim is the resume's start (the lease goes to the drive that will
resume it), and a gated call's result renews the drive's lease in the same transaction.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.engine import Runner
from storage.repository import LeaseLost, Repository
from tests.bot.test_engine import calls, executed, request
from tests.conftest import Database, make_config


def write_transactions(repo: Repository, statements: list[str]) -> list[list[str]]:
    """The write transactions traced on a SQLite repository's connections, statement by
    statement (``BEGIN IMMEDIATE`` ... ``COMMIT``)."""
    transactions: list[list[str]] = []
    current: list[str] | None = None
    for statement in statements:
        if statement.startswith("BEGIN IMMEDIATE"):
            current = []
        elif statement.startswith("COMMIT"):
            if current is not None:
                transactions.append(current)
            current = None
        elif current is not None:
            current.append(statement)
    return transactions


async def test_a_cycle_commits_six_write_transactions_on_sqlite(tmp_path: object) -> None:
    """request, pause, decision + claim, executing, executed + lease, end (SQLite traces)."""
    repo = await Repository.open(f"sqlite:///{tmp_path}/bot.db")
    try:
        runner = Runner(repo, make_config(), worker_id="counted")

        async def cycle(thread: str) -> None:
            text = calls(("restart_service", {"service": "web"}))
            paused = await runner.start(request(text, thread=thread))
            approval_id = paused.new_approvals[0].id
            decision = await runner.decide(approval_id, actor="U0APPROVER1", approve=True)
            assert decision.resume_claimed
            assert (await runner.resume(paused.run_id)).status == "completed"

        await cycle("1.0")  # every connection a cycle uses is open (the writer thread's too)
        statements: list[str] = []
        connections = list(repo.database._connections)  # type: ignore[attr-defined]
        for connection in connections:
            connection.set_trace_callback(statements.append)
        await cycle("2.0")
        for connection in connections:
            connection.set_trace_callback(None)
        transactions = write_transactions(repo, statements)
        first_writes = [t[0].split()[0:3] for t in transactions]
        assert len(transactions) == 6, first_writes
        renewals = [s for s in statements if s.startswith("UPDATE runs SET lease_expires_at")]
        assert len(renewals) == 1, "the lease check rides with the result's record"
        assert not [s for s in statements if "status = 'running', lease_owner" in s], (
            "the claim started the resume: no resuming -> running commit"
        )
    finally:
        await repo.close()


async def test_a_decision_claim_hands_the_lease_to_the_resuming_drive(
    database: Database,
) -> None:
    repo = await database.open()
    runner = Runner(repo, make_config(), worker_id="decider")
    paused = await runner.start(request(calls(("restart_service", {"service": "web"}))))
    decision = await runner.decide(paused.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    assert decision.resume_claimed

    run = await repo.get_run(paused.run_id)
    assert run is not None and run.status == "resuming"
    assert run.lease_owner is not None and run.lease_owner.startswith("decider/")
    trail = [e.event for e in await repo.audit_trail(run_id=paused.run_id)]
    assert trail[-1] == "run_resumed", trail

    done = await runner.resume(paused.run_id)
    assert done.status == "completed"
    assert executed("restart_service") == [{"service": "web"}]
    trail = [e.event for e in await repo.audit_trail(run_id=paused.run_id)]
    assert trail.count("run_resumed") == 1
    finished = await repo.get_run(paused.run_id)
    assert finished is not None and finished.status == "completed"
    assert finished.lease_owner is None


async def test_a_claim_this_runner_forgot_is_resumed_from_the_database_and_fences_the_first(
    database: Database,
) -> None:
    """Another runner object of the same worker (or one whose memory dropped the claim)
    starts the claimed run afresh; the drive the claim was made for is then fenced off."""
    repo = await database.open()
    config = make_config()
    decider = Runner(repo, config, worker_id="same-worker")
    paused = await decider.start(request(calls(("restart_service", {"service": "web"}))))
    await decider.decide(paused.new_approvals[0].id, actor="U0APPROVER1", approve=True)

    other = Runner(repo, config, worker_id="same-worker")
    done = await other.resume(paused.run_id)
    assert done.status == "completed"

    late = await decider.resume(paused.run_id)
    assert late.status == "handed_over"
    assert executed("restart_service") == [{"service": "web"}], "run once"


async def test_a_stale_claim_is_not_driven_from_memory(database: Database) -> None:
    """A claim whose lease ran out before ``resume`` (a slow card edit) starts from the
    database, which refuses it once another worker has taken the run over."""
    repo = await database.open()
    config = make_config(run_lease="1m")
    decider = Runner(repo, config, worker_id="slow")
    paused = await decider.start(request(calls(("restart_service", {"service": "web"}))))
    await decider.decide(paused.new_approvals[0].id, actor="U0APPROVER1", approve=True)

    later = decider.clock() + timedelta(minutes=5)
    rescuer = Runner(repo, config, worker_id="rescuer", clock=lambda: later)
    [taken] = await rescuer.recover_stale_runs()
    assert taken.status == "completed"

    decider.clock = lambda: later
    with pytest.raises(LeaseLost):  # as for any claim found gone when resuming
        await decider.resume(paused.run_id)
    assert executed("restart_service") == [{"service": "web"}]


async def test_recording_a_result_renews_the_lease_or_says_it_was_lost(
    database: Database,
) -> None:
    repo = await database.open()
    runner = Runner(repo, make_config(), worker_id="recorder")
    paused = await runner.start(request(calls(("restart_service", {"service": "web"}))))
    [approval] = paused.new_approvals
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    run = await repo.get_run(paused.run_id)
    assert run is not None and run.lease_owner is not None
    owner, now = run.lease_owner, runner.clock()
    assert await repo.begin_execution(approval.id, now=now, owner=owner)

    later = now + timedelta(hours=1)
    assert await repo.record_execution(
        approval.id, result="ok", failed=False, now=now, owner=owner, lease_until=later
    )
    renewed = await repo.get_run(paused.run_id)
    assert renewed is not None and renewed.lease_expires_at == later

    # A record by a drive that no longer holds its run: kept, and the lease is not renewed.
    paused_again = await runner.start(
        request(calls(("restart_service", {"service": "db"})), thread="1700000000.000200")
    )
    [other] = paused_again.new_approvals
    await runner.decide(other.id, actor="U0APPROVER1", approve=True)
    other_run = await repo.get_run(paused_again.run_id)
    assert other_run is not None and other_run.lease_owner is not None
    assert await repo.begin_execution(other.id, now=now, owner=other_run.lease_owner)
    assert not await repo.record_execution(
        other.id,
        result="ok",
        failed=False,
        now=now,
        owner="a-drive-that-lost-it",
        lease_until=later,
    )
    stored = await repo.get_approval(other.id)
    assert stored is not None and stored.status == "executed" and stored.result == "ok"
    unchanged = await repo.get_run(paused_again.run_id)
    assert unchanged is not None and unchanged.lease_expires_at != later
