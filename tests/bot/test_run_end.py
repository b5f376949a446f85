"""A run that ends failed or cancelled takes the approvals it leaves with it.

An approved call that never started, or one still waiting for a decision, will never run once
its run has ended: it is cancelled with the reason in the transaction that ends the run
(audited), so no approval stays "approved" for ever and its card can say what happened.
"""

from __future__ import annotations

from datetime import timedelta

from bot.engine import Runner
from storage.repository import Repository
from tests.bot.test_engine import calls, request

TWO_GATED = calls(
    ("restart_service", {"service": "db"}), ("deploy", {"service": "api", "version": "2"})
)


async def _paused_with_two(runner: Runner) -> tuple[str, str, str]:
    paused = await runner.start(request(TWO_GATED))
    assert paused.status == "paused"
    first, second = (a.id for a in paused.new_approvals)
    return paused.run_id, first, second


async def _audited(repo: Repository, approval_id: str) -> list[str]:
    return [e.event for e in await repo.audit_trail(approval_id=approval_id)]


async def test_cancelling_a_run_cancels_its_approved_call(runner: Runner, repo: Repository) -> None:
    run_id, approved, pending = await _paused_with_two(runner)
    await runner.decide(approved, actor="U0APPROVER1", approve=True, reason="go ahead")

    assert await repo.cancel_run(run_id, reason="not now", actor="U0OPS", now=runner.clock())

    stored = await repo.get_approval(approved)
    assert stored is not None and stored.status == "cancelled"
    assert "the run was cancelled: not now" in (stored.result or "")
    assert stored.reason == "go ahead", "the approver's words are kept"
    assert (await _audited(repo, approved))[-1] == "approval_cancelled"
    other = await repo.get_approval(pending)
    assert other is not None and other.status == "cancelled"


async def test_a_failed_run_cancels_its_approved_and_pending_calls(
    runner: Runner, repo: Repository
) -> None:
    run_id, first, second = await _paused_with_two(runner)
    await runner.decide(first, actor="U0APPROVER1", approve=True)
    decision = await runner.decide(second, actor="U0APPROVER1", approve=True)
    assert decision.resume_claimed
    # The resumed drive fails before it started either call (a model or storage error).
    now = runner.clock()
    await repo.start_resumed_run(
        run_id,
        worker=runner.worker_id,
        owner="drive",
        lease_until=now + timedelta(minutes=1),
        now=now,
    )
    await repo.finish_run(run_id, worker="drive", status="failed", error="boom", now=now)

    for approval_id in (first, second):
        stored = await repo.get_approval(approval_id)
        assert stored is not None and stored.status == "cancelled", stored
        assert stored.result == "the run failed: boom"
        assert (await _audited(repo, approval_id))[-1] == "approval_cancelled"
    run = await repo.get_run(run_id)
    assert run is not None and run.status == "failed"


async def test_a_completed_run_leaves_its_approvals_alone(runner: Runner, repo: Repository) -> None:
    run_id, first, second = await _paused_with_two(runner)
    await runner.decide(first, actor="U0APPROVER1", approve=True)
    await runner.decide(second, actor="U0APPROVER1", approve=False)
    outcome = await runner.resume(run_id)
    assert outcome.status == "completed"
    statuses = {a.id: a.status for a in await repo.approvals_for_run(run_id)}
    assert statuses == {first: "executed", second: "denied"}
