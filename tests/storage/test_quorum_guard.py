"""The database refuses to approve a quorum approval without its votes (0014_quorum_guard).

The release before 0012_quorum decides with a statement that knows no ``min_approvals``:
during a rolling deploy, or after a rollback, its first click would approve a call that
needs two people. Its statement is replayed here, verbatim, on both databases. And the
deciding vote racing `runs cancel`.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.engine import Request, Runner
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
