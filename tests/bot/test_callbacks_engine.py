"""WaitForCallback and callback_url() through the engine, on SQLite and PostgreSQL: the token is
stored before the URL is handed out, the first completion is the call's result exactly once,
and the tool never runs again."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from bot.config import Config
from bot.engine import Runner
from storage.repository import Repository
from tests.bot.test_engine import calls, executed, request, tool_results_in
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import pause_tools
from tests.support.scripted_model import ScriptedModel

PAUSE_TOOLS = [
    "tests.support.pause_tools:start_deploy",
    "tests.support.pause_tools:start_deploy_async",
    "tests.support.pause_tools:peek_url",
    "tests.support.pause_tools:endless_deploy",
    "tests.support.pause_tools:slow_deploy_async",
]


def pause_config(**overrides: Any) -> Config:
    policies = {**BASE_CONFIG["policies"], **overrides.pop("policies", {})}
    return make_config(
        tools=[*BASE_CONFIG["tools"], *PAUSE_TOOLS],
        public_url="https://bot.example.com/",
        policies=policies,
        **overrides,
    )


@pytest.fixture(autouse=True)
def _pipeline() -> Iterator[None]:
    pause_tools.reset()
    yield
    pause_tools.reset()


@pytest.fixture
def runner(repo: Repository) -> Runner:
    return Runner(repo, pause_config(), worker_id="worker-a")


def token_of(url: str) -> str:
    prefix = "https://bot.example.com/callbacks/"
    assert url.startswith(prefix)
    return url[len(prefix) :]


async def test_a_responses_pauses_are_stored_in_the_order_it_asked_for_them(
    runner: Runner,
) -> None:
    # The calls run concurrently: the second reaches its pause first.
    outcome = await runner.start(
        request(
            calls(
                ("slow_deploy_async", {"service": "first", "seconds": 0.05}),
                ("slow_deploy_async", {"service": "second", "seconds": 0}),
            )
        )
    )
    assert [c["service"] for c in executed("slow_deploy_async")] == ["second", "first"]
    assert [a.arguments["service"] for a in outcome.new_approvals] == ["first", "second"]


@pytest.mark.parametrize("tool", ["start_deploy", "start_deploy_async"])
async def test_the_first_callback_is_the_result_once_and_the_tool_runs_once(
    runner: Runner, repo: Repository, tool: str
) -> None:
    outcome = await runner.start(request(calls((tool, {"service": "shop"}))))
    assert outcome.status == "paused"
    (wait,) = outcome.new_approvals
    assert wait.kind == "callback" and wait.status == "pending"
    assert wait.reason.endswith("deploy of shop")
    (url,) = pause_tools.PIPELINE
    token = token_of(url)
    assert len(token) >= 43  # 256 bits, URL-safe
    assert wait.token_hash == hashlib.sha256(token.encode()).hexdigest()
    run = await repo.get_run(outcome.run_id)
    assert run is not None and token not in str(run.history) and token not in str(wait.arguments)

    done = await runner.complete_callback(token, '{"status": "deployed", "version": "2.1"}')
    assert done.status == "completed" and done.resume_claimed
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert tool_results_in(ScriptedModel.seen[-1]) == {
        tool: '{"status": "deployed", "version": "2.1"}'
    }
    assert len(executed(tool)) == 1, "the tool is not run again on resume"

    replay = await runner.complete_callback(token, '{"status": "deployed again"}')
    assert replay.status == "gone" and not replay.resume_claimed
    assert (await runner.complete_callback("x" * 43, "{}")).status == "unknown"
    stored = await repo.get_approval(wait.id)
    assert stored is not None and stored.status == "completed"
    assert stored.result == '{"status": "deployed", "version": "2.1"}'
    assert stored.decided_by == "callback"
    events = [e.event for e in await repo.audit_trail(approval_id=wait.id)]
    assert events == ["callback_armed", "callback_awaited", "callback_completed"]


async def test_a_callback_before_the_pause_is_stored_resumes_the_run_once(
    runner: Runner, repo: Repository
) -> None:
    loop = asyncio.get_running_loop()
    completions = []

    def pipeline_answers_at_once(url: str) -> None:
        # The other system calls back while the tool has not even raised yet.
        done = asyncio.run_coroutine_threadsafe(
            runner.complete_callback(token_of(url), "deployed early"), loop
        ).result()
        completions.append(done)

    pause_tools.ON_URL.append(pipeline_answers_at_once)
    outcome = await runner.start(
        request(calls(("get_status", {"service": "shop"}), ("start_deploy", {"service": "shop"})))
    )
    (done,) = completions
    assert done.status == "completed" and not done.resume_claimed  # the run was running
    assert outcome.status == "completed", "the pause found its callback done and carried on"
    assert outcome.answer == ("Results: get_status=shop is healthy; start_deploy=deployed early")
    assert len(executed("start_deploy")) == 1 and len(executed("get_status")) == 1
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "completed"


async def test_a_url_the_tool_did_not_wait_for_is_void(runner: Runner, repo: Repository) -> None:
    outcome = await runner.start(request(calls(("peek_url", {"service": "shop"}))))
    assert outcome.status == "completed"
    assert outcome.answer == "Results: peek_url=shop: nothing to wait for"
    (url,) = pause_tools.PIPELINE
    late = await runner.complete_callback(token_of(url), "surprise")
    assert late.status == "gone" and late.approval is not None
    assert late.approval.status == "cancelled"
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "completed" and run.answer == outcome.answer


async def test_no_callback_before_the_timeout_tells_the_model(
    runner: Runner, repo: Repository
) -> None:
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(calls(("start_deploy", {"service": "shop"}))))
        (wait,) = outcome.new_approvals
        assert wait.expires_at.isoformat() == "2026-11-30T11:00:00"  # timeout="1h"
        clock.tick(timedelta(hours=1, seconds=1))
        late = await runner.complete_callback(token_of(pause_tools.PIPELINE[0]), "too late")
        assert late.status == "gone" and late.expiry is not None and late.expiry.resume_claimed
        resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    result = tool_results_in(ScriptedModel.seen[-1])["start_deploy"]
    assert result == (
        "No callback came for deploy of shop before 2026-11-30 11:00 UTC: its outcome is "
        "unknown. The call was not run again."
    )
    stored = await repo.get_approval(wait.id)
    assert stored is not None and stored.status == "expired" and stored.result is None
    assert len(executed("start_deploy")) == 1


async def test_on_expiry_cancel_ends_the_run_when_no_callback_comes(repo: Repository) -> None:
    config = pause_config(policies={"start_deploy": {"approval": "never", "on_expiry": "cancel"}})
    runner = Runner(repo, config, worker_id="worker-a")
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(calls(("start_deploy", {"service": "shop"}))))
        clock.tick(timedelta(hours=2))
        (expiry,) = await runner.expire_due()
    assert expiry.run_cancelled
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "cancelled"
    gone = await runner.complete_callback(token_of(pause_tools.PIPELINE[0]), "late")
    assert gone.status == "gone"


async def test_an_approved_call_that_waits_for_a_callback_runs_once(
    repo: Repository,
) -> None:
    config = pause_config(policies={"start_deploy": {"approvers": ["U0APPROVER1"]}})
    runner = Runner(repo, config, worker_id="worker-a")
    outcome = await runner.start(request(calls(("start_deploy", {"service": "shop"}))))
    (approval,) = outcome.new_approvals
    assert approval.kind == "approval"
    decision = await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    waiting = await runner.resume(decision.approval.run_id)
    assert waiting.status == "paused"
    (wait,) = waiting.new_approvals
    assert wait.kind == "callback"
    done = await runner.complete_callback(token_of(pause_tools.PIPELINE[0]), "deployed")
    assert done.resume_claimed
    resumed = await runner.resume(outcome.run_id)
    assert resumed.answer == "Results: start_deploy=deployed"
    assert len(executed("start_deploy")) == 1
    stored = await repo.get_approval(approval.id)
    assert stored is not None and stored.status == "executed"


async def test_a_restart_between_pause_and_callback_loses_nothing(database: Database) -> None:
    first = Runner(await database.open(), pause_config(), worker_id="worker-a")
    outcome = await first.start(request(calls(("start_deploy", {"service": "shop"}))))
    second = Runner(await database.open(), pause_config(), worker_id="worker-b")
    done = await second.complete_callback(token_of(pause_tools.PIPELINE[0]), "deployed")
    assert done.resume_claimed
    resumed = await second.resume(outcome.run_id)
    assert resumed.answer == "Results: start_deploy=deployed"
    assert len(executed("start_deploy")) == 1


async def test_an_operator_completes_a_wait_by_id(runner: Runner) -> None:
    outcome = await runner.start(request(calls(("start_deploy", {"service": "shop"}))))
    (wait,) = outcome.new_approvals
    done = await runner.complete_callback(approval_id=wait.id, body='{"ok": true}')
    assert done.status == "completed" and done.resume_claimed
    assert done.approval is not None and done.approval.decided_by == "operator"
    resumed = await runner.resume(outcome.run_id)
    assert resumed.answer == 'Results: start_deploy={"ok": true}'
    assert (await runner.complete_callback(approval_id=wait.id, body="{}")).status == "gone"


async def test_every_kind_of_pause_in_one_response_resumes_once_when_all_are_settled(
    runner: Runner, repo: Repository
) -> None:
    outcome = await runner.start(
        request(
            calls(
                ("get_status", {"service": "shop"}),
                ("restart_service", {"service": "shop"}),
                ("ask_user", {"question": "Which region?", "choices": ["eu", "us"]}),
                ("start_deploy", {"service": "shop"}),
            )
        )
    )
    assert outcome.status == "paused"
    kinds = {a.kind: a for a in outcome.new_approvals}
    assert sorted(kinds) == ["approval", "callback", "question"]
    assert executed("get_status") == [{"service": "shop"}]

    answered = await runner.answer(kinds["question"].id, actor="U0REQUESTER", answer="eu")
    assert not answered.resume_claimed, "the approval and the callback still wait"
    called = await runner.complete_callback(token_of(pause_tools.PIPELINE[0]), "deployed")
    assert called.status == "completed" and not called.resume_claimed
    decided = await runner.decide(kinds["approval"].id, actor="U0APPROVER1", approve=True)
    assert decided.resume_claimed
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert tool_results_in(ScriptedModel.seen[-1]) == {
        "get_status": "shop is healthy",
        "restart_service": "restarted shop",
        "ask_user": "eu",
        "start_deploy": "deployed",
    }
    assert len(executed("get_status")) == 1
    assert len(executed("restart_service")) == 1
    assert len(executed("start_deploy")) == 1
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "completed"


async def test_a_timeout_beyond_the_calendar_is_a_tool_error_not_a_failed_run(
    runner: Runner, repo: Repository
) -> None:
    """now + timedelta.max raised OverflowError while the pause was drafted: the run failed,
    and the token it had handed out stayed armed."""
    outcome = await runner.start(request(calls(("endless_deploy", {"service": "shop"}))))
    assert outcome.status == "completed" and outcome.new_approvals == [], outcome
    assert "timeout" in (outcome.answer or ""), outcome.answer
    (url,) = pause_tools.PIPELINE
    late = await runner.complete_callback(token_of(url), "done")
    assert late.status == "gone", "the URL of a wait that was refused is void"
