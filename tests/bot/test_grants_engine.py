"""Standing grants in the engine: a call run under a grant keeps the exactly-once promise when
its worker dies mid-call (a take-over never runs it again), and a grant is judged by the
tool's policy now."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bot.config import Config
from bot.engine import Runner, approve_and_grant
from bot.policy import DecisionRefused
from storage.repository import Repository
from tests.bot.test_engine import calls, executed, request
from tests.bot.test_engine_guarantees import T0, Clock
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import held_tools


@pytest.fixture(autouse=True)
def _fresh_hold() -> None:
    held_tools.HOLD = held_tools.Hold()
    held_tools.STATUS_HOLD = held_tools.Hold()


def held_config(**held_policy: object) -> Config:
    return make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.held_tools:held_restart"],
        policies={
            **BASE_CONFIG["policies"],
            "held_restart": {"approvers": ["U0APPROVER1"], **held_policy},
        },
        run_lease="1m",
    )


async def granted_thread(runner: Runner) -> str:
    """A first held_restart, approved with a one-hour grant in its thread; the run's id."""
    held_tools.HOLD.release.set()
    paused = await runner.start(request(calls(("held_restart", {"service": "web"}))))
    [approval] = paused.new_approvals
    decision, _ = await approve_and_grant(
        runner,
        approval.id,
        actor="U0APPROVER1",
        duration=timedelta(hours=1),
        same_arguments=False,
    )
    assert decision.resume_claimed
    assert (await runner.resume(paused.run_id)).status == "completed"
    assert executed("held_restart") == [{"service": "web"}]
    return paused.run_id


async def test_a_granted_call_whose_worker_died_is_never_run_again(database: Database) -> None:
    config = held_config(grant_max="1h")
    repo_a = await database.open()
    slow = Runner(repo_a, config, worker_id="worker-a", clock=Clock())
    await granted_thread(slow)

    held_tools.HOLD = held_tools.Hold()  # the next call holds until released
    drive_a = asyncio.create_task(slow.start(request(calls(("held_restart", {"service": "api"})))))
    await asyncio.wait_for(held_tools.HOLD.started.wait(), 10)  # running under the grant

    repo_b = await database.open()
    rescuer = Runner(repo_b, config, worker_id="worker-b", clock=Clock(T0 + timedelta(minutes=10)))
    [taken] = await asyncio.wait_for(rescuer.recover_stale_runs(), 10)
    assert taken.status == "completed"
    assert "Outcome unknown" in (taken.answer or "")
    assert not held_tools.HOLD.again.is_set(), "the replay did not start the call again"

    held_tools.HOLD.release.set()
    assert (await drive_a).status == "handed_over"
    assert executed("held_restart") == [{"service": "web"}, {"service": "api"}]
    [ran] = [
        a for a in await repo_b.approvals_for_run(taken.run_id) if a.arguments == {"service": "api"}
    ]
    assert (ran.status, ran.decided_by) == ("executed", "U0APPROVER1")
    events = [e.event for e in await repo_b.audit_trail(approval_id=ran.id)]
    assert events[:3] == ["approval_requested", "grant_used", "execution_started"]
    assert "execution_outcome_unknown" in events


async def test_a_grant_is_judged_by_the_policy_now(repo: Repository) -> None:
    runner = Runner(repo, held_config(grant_max="1h"), worker_id="worker-a", clock=Clock())
    await granted_thread(runner)

    # grant_max removed from the policy: the grant no longer applies; the call asks.
    plain = Runner(repo, held_config(), worker_id="worker-a", clock=Clock())
    held_tools.HOLD = held_tools.Hold()
    held_tools.HOLD.release.set()
    outcome = await plain.start(request(calls(("held_restart", {"service": "web"}))))
    assert outcome.status == "paused"
    [approval] = outcome.new_approvals
    with pytest.raises(DecisionRefused, match="not allowed"):
        await approve_and_grant(
            plain,
            approval.id,
            actor="U0APPROVER1",
            duration=timedelta(minutes=5),
            same_arguments=False,
        )
    # grant_max shortened to 5 minutes: a grant made 10 minutes ago for an hour is over.
    await plain.decide(approval.id, actor="U0APPROVER1", approve=True)
    await plain.resume(outcome.run_id)
    short = Runner(
        repo,
        held_config(grant_max="5m"),
        worker_id="worker-a",
        clock=Clock(T0 + timedelta(minutes=10)),
    )
    outcome = await short.start(request(calls(("held_restart", {"service": "web"}))))
    assert outcome.status == "paused"
    # the approver list no longer names the grantor: the grant does not stand in for them.
    other = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.held_tools:held_restart"],
        policies={
            **BASE_CONFIG["policies"],
            "held_restart": {"approvers": ["U0APPROVER2"], "grant_max": "1h"},
        },
    )
    [pending] = outcome.new_approvals
    await short.decide(pending.id, actor="U0APPROVER1", approve=True)
    await short.resume(outcome.run_id)
    moved = Runner(repo, other, worker_id="worker-a", clock=Clock(T0 + timedelta(minutes=1)))
    outcome = await moved.start(request(calls(("held_restart", {"service": "web"}))))
    assert outcome.status == "paused"
    assert len(executed("held_restart")) == 3, "none of the later calls ran under the grant"


async def test_a_call_outside_a_slack_thread_cannot_be_granted(runner: Runner) -> None:
    from bot.engine import Request

    config = held_config(grant_max="1h")
    runner = Runner(runner.repo, config, worker_id="worker-a", clock=Clock())
    paused = await runner.start(
        Request(text=calls(("held_restart", {"service": "web"})), requester="U0REQUESTER")
    )
    [approval] = paused.new_approvals
    with pytest.raises(DecisionRefused, match="not in a Slack thread"):
        await approve_and_grant(
            runner,
            approval.id,
            actor="U0APPROVER1",
            duration=timedelta(minutes=5),
            same_arguments=False,
        )
    assert (await runner.repo.get_approval(approval.id)).status == "pending"  # type: ignore[union-attr]
    assert await runner.repo.list_grants(now=T0) == []


def test_grant_max_is_a_duration_checked_at_start_up() -> None:
    from bot.config import ConfigError

    assert held_config(grant_max="90m").policies["held_restart"].grant_max == timedelta(minutes=90)
    assert held_config().policies["held_restart"].grant_max is None
    with pytest.raises(ConfigError, match=r"policies\.held_restart\.grant_max: 'soon'"):
        held_config(grant_max="soon")
