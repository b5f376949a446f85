"""RetryAt through the engine, on SQLite and PostgreSQL: the run waits until the time, then the
call runs again, once per retry; bad times are a tool error, not a pause."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from bot.clock import utcnow
from bot.config import Config
from bot.engine import Runner
from bot.policy import describe_wait
from storage.repository import Repository
from tests.bot.test_engine import calls, executed, request
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import pause_tools

RETRY_TOOLS = [
    "tests.support.pause_tools:rate_limited",
    "tests.support.pause_tools:naive_retry",
    "tests.support.pause_tools:offsetless_retry",
    "tests.support.pause_tools:edge_of_time_retry",
    "tests.support.pause_tools:ancient_retry",
    "tests.support.pause_tools:far_retry",
]


def retry_config(**overrides: Any) -> Config:
    policies = {**BASE_CONFIG["policies"], **overrides.pop("policies", {})}
    return make_config(tools=[*BASE_CONFIG["tools"], *RETRY_TOOLS], policies=policies, **overrides)


@pytest.fixture(autouse=True)
def _pipeline() -> Iterator[None]:
    pause_tools.reset()
    yield
    pause_tools.reset()


@pytest.fixture
def runner(repo: Repository) -> Runner:
    return Runner(repo, retry_config(), worker_id="worker-a")


async def test_the_call_runs_again_at_its_time_and_not_before(
    runner: Runner, repo: Repository
) -> None:
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(calls(("rate_limited", {"service": "api"}))))
        assert outcome.status == "paused"
        (retry,) = outcome.new_approvals
        assert retry.kind == "retry" and retry.reason == "rate limited"
        assert retry.due_at is not None and retry.due_at.isoformat() == "2026-11-30T10:05:00"
        assert describe_wait(retry) == (
            "Retrying rate_limited at 2026-11-30 10:05:00 UTC: rate limited."
        )
        clock.tick(timedelta(minutes=4, seconds=59))
        assert await runner.due_retries() == []
        assert await runner.expire_due() == [], "a retry does not expire"
        clock.tick(timedelta(seconds=1))
        assert await runner.due_retries() == [outcome.run_id]
        assert await runner.due_retries() == [], "claimed once"
        resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert resumed.answer == "Results: rate_limited=api answered on attempt 2"
    assert len(executed("rate_limited")) == 2, "two attempts, not more"
    stored = await repo.get_approval(retry.id)
    assert stored is not None and stored.status == "executed"
    assert stored.result == "api answered on attempt 2"
    events = [e.event for e in await repo.audit_trail(approval_id=retry.id)]
    assert events == ["retry_scheduled", "retry_due", "execution_started", "execution_finished"]


async def test_a_due_retry_resumes_after_a_restart(database: Database) -> None:
    with freeze_time("2026-11-30 10:00:00") as clock:
        first = Runner(await database.open(), retry_config(), worker_id="worker-a")
        outcome = await first.start(request(calls(("rate_limited", {"service": "api"}))))
        clock.tick(timedelta(hours=1))  # the bot was down when it came due
        second = Runner(await database.open(), retry_config(), worker_id="worker-b")
        assert await second.due_retries() == [outcome.run_id]
        resumed = await second.resume(outcome.run_id)
    assert resumed.answer == "Results: rate_limited=api answered on attempt 2"
    assert len(executed("rate_limited")) == 2


async def test_a_call_that_keeps_failing_waits_again(runner: Runner) -> None:
    pause_tools.FAILURES[0] = 2
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(calls(("rate_limited", {"service": "api"}))))
        clock.tick(timedelta(minutes=5))
        assert await runner.due_retries() == [outcome.run_id]
        again = await runner.resume(outcome.run_id)
        assert again.status == "paused"
        (second_retry,) = again.new_approvals
        assert second_retry.due_at is not None
        assert second_retry.due_at.isoformat() == "2026-11-30T10:10:00"
        clock.tick(timedelta(minutes=5))
        assert await runner.due_retries() == [outcome.run_id]
        resumed = await runner.resume(outcome.run_id)
    assert resumed.answer == "Results: rate_limited=api answered on attempt 3"
    assert len(executed("rate_limited")) == 3


async def test_a_call_that_always_asks_again_gives_up_after_max_retry_attempts(
    database: Database,
) -> None:
    """A tool that always raised RetryAt was retried forever (a row and audit events each
    time). The count is read from the stored retry rows: a restart does not reset it."""
    pause_tools.FAILURES[0] = 1000
    config = retry_config(max_retry_attempts=2)
    with freeze_time("2026-11-30 10:00:00") as clock:
        first = Runner(await database.open(), config, worker_id="worker-a")
        outcome = await first.start(request(calls(("rate_limited", {"service": "api"}))))
        assert outcome.status == "paused"
        clock.tick(timedelta(minutes=5))
        assert await first.due_retries() == [outcome.run_id]
        again = await first.resume(outcome.run_id)
        assert again.status == "paused", "the second retry is still allowed"
        clock.tick(timedelta(minutes=5))
        restarted = Runner(await database.open(), config, worker_id="worker-b")
        assert await restarted.due_retries() == [outcome.run_id]
        resumed = await restarted.resume(outcome.run_id)
    assert resumed.status == "completed" and resumed.new_approvals == []
    assert resumed.answer == (
        "Results: rate_limited=Error: rate_limited gave up after 2 retries: rate limited"
    )
    assert len(executed("rate_limited")) == 3, "the first call and two retries"


async def test_an_approved_call_is_retried_on_its_approval_and_never_after_it_succeeded(
    repo: Repository,
) -> None:
    config = retry_config(policies={"rate_limited": {"approvers": ["U0APPROVER1"]}})
    runner = Runner(repo, config, worker_id="worker-a")
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(calls(("rate_limited", {"service": "api"}))))
        (approval,) = outcome.new_approvals
        decision = await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
        waiting = await runner.resume(decision.approval.run_id)
        assert waiting.status == "paused"
        (retry,) = waiting.new_approvals
        assert retry.kind == "retry" and retry.payload_hash == approval.payload_hash
        clock.tick(timedelta(minutes=5))
        assert await runner.due_retries() == [outcome.run_id]
        resumed = await runner.resume(outcome.run_id)
        assert resumed.answer == "Results: rate_limited=api answered on attempt 2"
        # Nothing can run it a third time: the approval and the retry are both spent.
        assert await runner.due_retries() == []
    assert len(executed("rate_limited")) == 2
    spent = await repo.get_approval(approval.id)
    assert spent is not None and spent.status == "executed"
    assert spent.result is not None and spent.result.startswith("Paused: retry at")
    done = await repo.get_approval(retry.id)
    assert done is not None and done.status == "executed"


async def test_a_naive_time_is_a_clear_tool_error_and_no_pause(runner: Runner) -> None:
    outcome = await runner.start(request(calls(("naive_retry", {"service": "api"}))))
    assert outcome.status == "completed" and outcome.new_approvals == []
    assert "RetryAt needs a timezone-aware datetime" in (outcome.answer or "")


async def test_a_time_zone_without_an_offset_is_as_naive_as_none(runner: Runner) -> None:
    """``tzinfo`` set but ``utcoffset()`` None is naive by Python's rules; it was taken,
    read as the machine's local time."""
    outcome = await runner.start(request(calls(("offsetless_retry", {"service": "api"}))))
    assert outcome.status == "completed" and outcome.new_approvals == []
    assert "RetryAt needs a timezone-aware datetime" in (outcome.answer or "")


async def test_times_beyond_the_calendar_in_utc_do_not_fail_the_run(runner: Runner) -> None:
    """Converting them to UTC raised OverflowError, and the whole run failed."""
    outcome = await runner.start(request(calls(("edge_of_time_retry", {"service": "api"}))))
    assert outcome.status == "completed" and outcome.new_approvals == []
    assert "more than max_retry_wait" in (outcome.answer or ""), outcome.answer
    past = await runner.start(
        request(calls(("ancient_retry", {"service": "api"})), thread="1700000000.000400")
    )
    assert past.status == "paused", "a time long past is due at once"
    (retry,) = past.new_approvals
    assert retry.due_at is not None and retry.due_at <= runner.clock()


async def test_a_time_beyond_max_retry_wait_is_a_clear_tool_error(repo: Repository) -> None:
    runner = Runner(repo, retry_config(max_retry_wait="40d"), worker_id="worker-a")
    allowed = await runner.start(request(calls(("far_retry", {"service": "api"}))))
    assert allowed.status == "paused"
    default = Runner(repo, retry_config(), worker_id="worker-a")
    refused = await default.start(
        request(calls(("far_retry", {"service": "api"})), thread="1700000000.000300")
    )
    assert refused.status == "completed" and refused.new_approvals == []
    assert "more than max_retry_wait (1 day, 0:00:00) from now" in (refused.answer or "")


async def test_a_retry_whose_worker_died_mid_call_is_reported_unknown_not_run_again(
    runner: Runner, repo: Repository
) -> None:
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(calls(("rate_limited", {"service": "api"}))))
        (retry,) = outcome.new_approvals
        clock.tick(timedelta(minutes=5))
        assert await runner.due_retries() == [outcome.run_id]
        run = await repo.start_resumed_run(
            outcome.run_id,
            worker="worker-a",
            owner="worker-a/dead",
            lease_until=utcnow() + timedelta(minutes=5),
            now=utcnow(),
        )
        # The dead drive recorded the retry's start, then the process died.
        assert run.lease_owner == "worker-a/dead"
        assert await repo.begin_retry(retry.id, owner="worker-a/dead", now=utcnow())
        clock.tick(timedelta(minutes=6))
        (taken,) = await runner.take_over_stale_runs()
        resumed = await runner.carry_on(taken)
    assert resumed.status == "completed"
    assert len(executed("rate_limited")) == 1, "the retry that may have run is not run again"
    assert "Outcome unknown" in (resumed.answer or "")
    stored = await repo.get_approval(retry.id)
    assert stored is not None and stored.status == "unknown"
