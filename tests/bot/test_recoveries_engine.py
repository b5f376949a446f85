"""Recovery by a person (on_error = "ask") through the engine, on SQLite and PostgreSQL: a
tool that raises pauses the run on a recovery row; Retry runs the call again once, Skip and
Stop reach the model or end the run, max_recoveries and recovery_ttl give the model the error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from bot.config import Config, ConfigError
from bot.engine import Runner
from bot.policy import AlreadyDecided, DecisionRefused, InvalidEdit, NotAllowed
from storage.repository import Repository
from tests.bot.test_engine import calls, executed, request
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import recovery_tools


def recovery_config(**overrides: Any) -> Config:
    policies = {**BASE_CONFIG["policies"], **overrides.pop("policies", {})}
    tools = [*BASE_CONFIG["tools"], "tests.support.recovery_tools:flaky"]
    return make_config(tools=tools, policies=policies, **{"on_error": "ask", **overrides})


@pytest.fixture(autouse=True)
def _flaky() -> Iterator[None]:
    recovery_tools.reset()
    yield
    recovery_tools.reset()


@pytest.fixture
def runner(repo: Repository) -> Runner:
    return Runner(repo, recovery_config(), worker_id="worker-a")


def restarted(runner: Runner, repo: Repository) -> Runner:
    """The bot after ``runner``'s worker died: the same worker id, none of its claims."""
    return Runner(repo, runner.config, worker_id=runner.worker_id)


async def test_retry_runs_the_failed_call_once_more(runner: Runner, repo: Repository) -> None:
    outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
    assert outcome.status == "paused"
    (row,) = outcome.new_approvals
    assert row.kind == "recovery" and row.attempt == 1 and row.recovery_cause == "error"
    assert row.reason is not None and row.reason.startswith("api is down")
    assert row.approvers == ["U0REQUESTER"], "no approval needed: the requester decides"
    decision = await runner.recover(row.id, actor="U0REQUESTER", choice="retry")
    assert decision.resume_claimed
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert resumed.answer == "Results: flaky=api answered"
    assert len(executed("flaky")) == 2, "the first run and one retry"
    stored = await repo.get_approval(row.id)
    assert stored is not None and stored.status == "executed"
    assert stored.decided_by == "U0REQUESTER"
    events = [e.event for e in await repo.audit_trail(approval_id=row.id)]
    assert events == [
        "recovery_requested",
        "recovery_retry",
        "execution_started",
        "execution_finished",
    ]


async def test_retry_clicked_twice_at_once_runs_the_call_once(
    database: Database,
) -> None:
    first = Runner(await database.open(), recovery_config(), worker_id="worker-a")
    second = Runner(await database.open(), recovery_config(), worker_id="worker-b")
    outcome = await first.start(request(calls(("flaky", {"service": "api"}))))
    (row,) = outcome.new_approvals
    results = await asyncio.gather(
        first.recover(row.id, actor="U0REQUESTER", choice="retry"),
        second.recover(row.id, actor="U0REQUESTER", choice="retry"),
        return_exceptions=True,
    )
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], AlreadyDecided)
    winner = first if won[0] is results[0] else second
    resumed = await winner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert len(executed("flaky")) == 2, "one retry, not two"


async def test_an_approved_call_that_fails_asks_its_approvers_and_keeps_its_binding(
    runner: Runner, repo: Repository
) -> None:
    outcome = await runner.start(request(calls(("broken_tool", {"service": "db"}))))
    (approval,) = outcome.new_approvals
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    paused = await runner.resume(outcome.run_id)
    assert paused.status == "paused"
    (row,) = paused.new_approvals
    assert row.kind == "recovery" and row.approvers == ["U0APPROVER1"]
    assert row.payload_hash == approval.payload_hash and row.recovery_of == approval.id
    stored = await repo.get_approval(approval.id)
    assert stored is not None and stored.status == "executed"  # recorded failed, as before
    with pytest.raises(NotAllowed):
        await runner.recover(row.id, actor="U0REQUESTER", choice="retry")
    await runner.recover(row.id, actor="U0APPROVER1", choice="skip", actor_name="Ann (@ann)")
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert "Skipped by Ann (@ann) after the error: db exploded." in (resumed.answer or "")
    assert len(executed("broken_tool")) == 1


async def test_recovery_by_overrides_who_decides(repo: Repository) -> None:
    config = recovery_config(recovery_by=["U0ONCALL"])
    runner = Runner(repo, config, worker_id="worker-a")
    outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
    (row,) = outcome.new_approvals
    assert row.approvers == ["U0ONCALL"]
    with pytest.raises(NotAllowed):
        await runner.recover(row.id, actor="U0REQUESTER", choice="skip")


async def test_stop_run_cancels_the_run_and_says_who(runner: Runner, repo: Repository) -> None:
    outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
    (row,) = outcome.new_approvals
    decision = await runner.recover(
        row.id, actor="U0REQUESTER", choice="stop", actor_name="Req (@req)"
    )
    assert not decision.resume_claimed
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "cancelled"
    assert run.error == "Req (@req) stopped the run after the error"
    assert len(executed("flaky")) == 1


async def test_max_recoveries_then_the_model_reads_the_error(database: Database) -> None:
    recovery_tools.FAILURES[0] = 1000
    config = recovery_config(max_recoveries=2)
    runner = Runner(await database.open(), config, worker_id="worker-a")
    outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
    (row,) = outcome.new_approvals
    await runner.recover(row.id, actor="U0REQUESTER", choice="retry")
    again = await runner.resume(outcome.run_id)
    assert again.status == "paused"
    (second,) = again.new_approvals
    assert second.attempt == 2 and second.recovery_of == row.id
    # A restart (another runner) does not reset the count: it is on the rows.
    other = Runner(await database.open(), config, worker_id="worker-b")
    await other.recover(second.id, actor="U0REQUESTER", choice="retry")
    done = await other.resume(outcome.run_id)
    assert done.status == "completed"
    assert "Error: api is down" in (done.answer or "")
    assert len(executed("flaky")) == 3


async def test_recovery_ttl_unanswered_the_model_reads_the_error(repo: Repository) -> None:
    runner = Runner(repo, recovery_config(recovery_ttl="10m"), worker_id="worker-a")
    with freeze_time("2026-12-02 10:00:00") as clock:
        outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
        (row,) = outcome.new_approvals
        assert row.expires_at.isoformat() == "2026-12-02T10:10:00"
        clock.tick(timedelta(minutes=9))
        assert await runner.expire_due() == []
        clock.tick(timedelta(minutes=1))
        (expiry,) = await runner.expire_due()
        assert expiry.resume_claimed
        resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert "Error: api is down" in (resumed.answer or "")
    assert len(executed("flaky")) == 1


async def test_on_error_fail_is_todays_behaviour(repo: Repository) -> None:
    runner = Runner(repo, recovery_config(on_error="fail"), worker_id="worker-a")
    outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
    assert outcome.status == "completed"
    assert "Error: api is down" in (outcome.answer or "")


async def test_a_per_tool_key_overrides_the_top_level_one(repo: Repository) -> None:
    policies = {"flaky": {"approval": "never", "on_error": "fail"}}
    runner = Runner(repo, recovery_config(policies=policies), worker_id="worker-a")
    outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
    assert outcome.status == "completed"


async def test_an_unknown_outcome_asks_and_it_ran_tells_the_model(
    runner: Runner, repo: Repository
) -> None:
    outcome = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    (approval,) = outcome.new_approvals
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    # The worker recorded "executing", then died before recording the result; its claims
    # (kept in memory) died with it, and the bot that resumes the run is a new one.
    assert await repo.begin_execution(approval.id, now=runner.clock())
    paused = await restarted(runner, repo).resume(outcome.run_id)
    assert paused.status == "paused"
    (row,) = paused.new_approvals
    assert row.kind == "recovery" and row.recovery_cause == "unknown"
    assert row.recovery_of == approval.id and row.approvers == ["U0APPROVER1", "U0APPROVER2"]
    assert executed("restart_service") == [], "never run again without a person's choice"
    stored = await repo.get_approval(approval.id)
    assert stored is not None and stored.status == "unknown"
    await runner.recover(row.id, actor="U0APPROVER2", choice="resolve", note="saw it restart")
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert "ran and succeeded" in (resumed.answer or "")
    assert "saw it restart" in (resumed.answer or "")
    assert executed("restart_service") == []


async def test_an_unknown_outcome_retried_runs_once_more(runner: Runner, repo: Repository) -> None:
    outcome = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    (approval,) = outcome.new_approvals
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    assert await repo.begin_execution(approval.id, now=runner.clock())  # then it died
    (row,) = (await restarted(runner, repo).resume(outcome.run_id)).new_approvals
    with pytest.raises(DecisionRefused):
        await runner.recover(row.id, actor="U0APPROVER1", choice="bogus")
    await runner.recover(row.id, actor="U0APPROVER1", choice="retry")
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert resumed.answer == "Results: restart_service=restarted db"
    assert executed("restart_service") == [{"service": "db"}]


async def test_it_ran_is_only_for_an_unknown_outcome(runner: Runner) -> None:
    outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
    (row,) = outcome.new_approvals
    with pytest.raises(DecisionRefused):
        await runner.recover(row.id, actor="U0REQUESTER", choice="resolve")


def test_the_keys_are_checked_and_resolved_per_tool() -> None:
    with pytest.raises(ConfigError) as error:
        recovery_config(on_error="retry", policies={"flaky": {"max_recoveries": 0}})
    problems = "\n".join(error.value.problems)
    assert "on_error" in problems and "policies.flaky.max_recoveries" in problems
    config = recovery_config(
        max_recoveries=5,
        recovery_ttl="2h",
        policies={"flaky": {"approval": "never", "recovery_by": ["S0ONCALL"]}},
    )
    flaky = config.recovery_policy("flaky")
    assert flaky.asks and flaky.recovery_by == ["S0ONCALL"] and flaky.max_recoveries == 5
    assert flaky.ttl == timedelta(hours=2) and not flaky.gated
    restart = config.recovery_policy("restart_service")
    assert restart.gated and restart.approvers == ["U0APPROVER1", "U0APPROVER2"]
    assert restart.deciders("U0REQUESTER") == (["U0APPROVER1", "U0APPROVER2"], False)
    assert config.recovery_policy("get_status").deciders("U0REQUESTER") == (["U0REQUESTER"], True)
    default = make_config().recovery_policy("restart_service")
    assert not default.asks and default.max_recoveries == 3 and default.ttl == timedelta(minutes=15)


EDITABLE = {
    "flaky": {
        "approval": "never",
        "allow_edit": True,
        "rules": [
            {"when": 'args.service == "prod"', "approval": "required", "approvers": ["U0APPROVER1"]}
        ],
    }
}


async def test_edit_then_retry_runs_the_edited_call_once(repo: Repository) -> None:
    runner = Runner(repo, recovery_config(policies=EDITABLE), worker_id="worker-a")
    recovery_tools.FAILURES[0] = 1
    outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
    (row,) = outcome.new_approvals
    assert row.allow_edit
    with pytest.raises(InvalidEdit):
        await runner.edit_and_retry(row.id, actor="U0REQUESTER", arguments={"service": 5})
    decision = await runner.edit_and_retry(
        row.id, actor="U0REQUESTER", arguments={"service": "backup"}
    )
    assert decision.resume_claimed and decision.approval.status == "due"
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert "backup answered" in (resumed.answer or "")
    assert executed("flaky") == [{"service": "api"}, {"service": "backup"}]
    events = [e.event for e in await repo.audit_trail(approval_id=row.id)]
    assert events == [
        "recovery_requested",
        "recovery_edited",
        "execution_started",
        "execution_finished",
    ]


async def test_edit_then_retry_of_a_call_a_rule_now_gates_asks_for_approval(
    repo: Repository,
) -> None:
    runner = Runner(repo, recovery_config(policies=EDITABLE), worker_id="worker-a")
    outcome = await runner.start(request(calls(("flaky", {"service": "api"}))))
    (row,) = outcome.new_approvals
    await runner.edit_and_retry(row.id, actor="U0REQUESTER", arguments={"service": "prod"})
    paused = await runner.resume(outcome.run_id)
    assert paused.status == "paused"
    (approval,) = paused.new_approvals
    assert approval.kind == "approval" and approval.approvers == ["U0APPROVER1"]
    assert approval.edited_arguments == {"service": "prod"}
    assert approval.payload_hash == (await repo.get_approval(row.id)).payload_hash  # type: ignore[union-attr]
    assert executed("flaky") == [{"service": "api"}], "not run before the approval"
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert "prod answered" in (resumed.answer or "")
    assert executed("flaky") == [{"service": "api"}, {"service": "prod"}]


async def test_a_call_a_rule_gated_is_recovered_by_those_who_could_approve_it(
    repo: Repository,
) -> None:
    runner = Runner(repo, recovery_config(policies=EDITABLE), worker_id="worker-a")
    outcome = await runner.start(request(calls(("flaky", {"service": "prod"}))))
    (approval,) = outcome.new_approvals
    assert approval.kind == "approval" and approval.approvers == ["U0APPROVER1"]
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    (row,) = (await runner.resume(outcome.run_id)).new_approvals
    assert row.kind == "recovery" and row.approvers == ["U0APPROVER1"]
    assert not row.allow_self_approval
    with pytest.raises(NotAllowed):
        await runner.recover(row.id, actor="U0REQUESTER", choice="skip")
