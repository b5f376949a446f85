"""The pause/resume engine, on SQLite and PostgreSQL: every acceptance case of the engine issue."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from bot.engine import Request, Runner
from bot.policy import AlreadyDecided, ApprovalExpired, ApprovalNotFound, NotAllowed
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import ops_tools
from tests.support.ops_tools import executed
from tests.support.scripted_model import ScriptedModel, calls

FAIL_EXECUTING_WRITES = {
    "sqlite": [
        "CREATE TRIGGER fail_executing BEFORE UPDATE OF status ON approvals "
        "WHEN NEW.status = 'executing' BEGIN SELECT RAISE(ABORT, 'storage is on fire'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION fail_executing() RETURNS trigger AS $$ BEGIN "
        "RAISE EXCEPTION 'storage is on fire'; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER fail_executing BEFORE UPDATE ON approvals FOR EACH ROW "
        "WHEN (NEW.status = 'executing') EXECUTE FUNCTION fail_executing()",
    ],
}


def request(
    text: str, requester: str = "U0REQUESTER", thread: str = "1700000000.000100"
) -> Request:
    return Request(text=text, requester=requester, team_id="T1", channel="C0OPS", thread_ts=thread)


def tool_results_in(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {
        part["name"]: part["output"]
        for message in messages
        if message["role"] == "tool"
        for part in message["parts"]
    }


async def test_safe_and_gated_call_pause_and_resume_in_a_fresh_process(
    database: Database, config: Any
) -> None:
    first = Runner(await database.open(), config, worker_id="worker-a")
    outcome = await first.start(
        request(calls(("get_status", {"service": "web"}), ("restart_service", {"service": "web"})))
    )
    assert outcome.status == "paused"
    assert [a.tool_name for a in outcome.new_approvals] == ["restart_service"]
    assert executed("get_status") == [{"service": "web"}]
    assert executed("restart_service") == []

    # A new engine and runner: nothing carried over in memory.
    second_repo = await database.open()
    second = Runner(second_repo, make_config(), worker_id="worker-b")
    run = await second_repo.get_run(outcome.run_id)
    assert run is not None and run.status == "paused"
    assert tool_results_in(run.history) == {"get_status": "web is healthy"}

    decision = await second.decide(outcome.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    assert decision.resume_claimed
    resumed = await second.resume(outcome.run_id)

    assert resumed.status == "completed"
    assert executed("restart_service") == [{"service": "web"}]
    assert executed("get_status") == [{"service": "web"}], "the safe call must not run again"
    assert resumed.answer == "Results: get_status=web is healthy; restart_service=restarted web"
    assert tool_results_in(ScriptedModel.seen[-1]) == {
        "get_status": "web is healthy",
        "restart_service": "restarted web",
    }
    approval = await second_repo.get_approval(outcome.new_approvals[0].id)
    assert approval is not None and approval.status == "executed"
    events = [e.event for e in await second_repo.audit_trail(approval_id=approval.id)]
    assert events == [
        "approval_requested",
        "approval_approved",
        "execution_started",
        "execution_finished",
    ]


async def test_two_gated_calls_need_both_decisions(runner: Runner, repo: Repository) -> None:
    outcome = await runner.start(
        request(
            calls(
                ("restart_service", {"service": "web"}),
                ("deploy", {"service": "api", "version": "2.0"}),
            )
        )
    )
    assert outcome.status == "paused"
    restart, deploy = sorted(outcome.new_approvals, key=lambda a: a.tool_name == "deploy")
    assert restart.tool_name == "restart_service" and deploy.tool_name == "deploy"
    assert restart.id != deploy.id and restart.tool_call_id != deploy.tool_call_id

    first = await runner.decide(restart.id, actor="U0APPROVER1", approve=True)
    assert not first.resume_claimed
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "paused"
    assert ops_tools.EXECUTED == []

    second = await runner.decide(deploy.id, actor="U0APPROVER2", approve=True)
    assert second.resume_claimed
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert executed("restart_service") == [{"service": "web"}]
    assert executed("deploy") == [{"service": "api", "version": "2.0"}]


async def test_tools_that_take_llm_tool_call_get_their_call_gated_or_not(
    database: Database,
) -> None:
    tools = [
        *BASE_CONFIG["tools"],
        "tests.support.ops_tools:tag_service",
        "tests.support.ops_tools:untag_service",
    ]
    policies = {**BASE_CONFIG["policies"], "untag_service": {"approvers": ["U0APPROVER1"]}}
    runner = Runner(
        await database.open(), make_config(tools=tools, policies=policies), worker_id="w"
    )
    outcome = await runner.start(
        request(calls(("tag_service", {"service": "web"}), ("untag_service", {"service": "api"})))
    )
    assert outcome.status == "paused"
    (approval,) = outcome.new_approvals
    tag_call = [c for t, c in ops_tools.EXECUTED if t == "tag_service"]
    assert len(tag_call) == 1 and tag_call[0]["call"] not in ("", None, approval.tool_call_id)
    decision = await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    assert decision.resume_claimed
    assert (await runner.resume(outcome.run_id)).status == "completed"
    assert executed("untag_service") == [{"service": "api", "call": approval.tool_call_id}]


async def test_deny_with_reason_never_runs_the_tool(runner: Runner) -> None:
    outcome = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    decision = await runner.decide(
        outcome.new_approvals[0].id,
        actor="U0APPROVER2",
        approve=False,
        reason="not during the freeze",
    )
    resumed = await runner.resume(decision.approval.run_id)
    assert resumed.status == "completed"
    assert executed("restart_service") == []
    result = tool_results_in(ScriptedModel.seen[-1])["restart_service"]
    assert result == "Denied by @U0APPROVER2: not during the freeze. The call was not run."
    assert "not during the freeze" in (resumed.answer or "")


async def test_who_may_decide(make_runner: Any, repo: Repository) -> None:
    runner = make_runner()
    outcome = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    approval_id = outcome.new_approvals[0].id
    with pytest.raises(NotAllowed) as refused:
        await runner.decide(approval_id, actor="U0REQUESTER", approve=True)
    assert refused.value.reason == "self_approval"
    with pytest.raises(NotAllowed) as refused:
        await runner.decide(approval_id, actor="U0OUTSIDER", approve=True)
    assert refused.value.reason == "not_an_approver"
    with pytest.raises(ApprovalNotFound):
        await runner.decide("apr_nope", actor="U0APPROVER1", approve=True)
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "pending"

    # A user group named in the policy lets its members decide.
    grouped = make_runner(
        config=make_config(policies={"restart_service": {"approvers": ["S0ONCALL"]}})
    )
    other = await grouped.start(request(calls(("restart_service", {"service": "x"})), thread="2"))
    decision = await grouped.decide(
        other.new_approvals[0].id, actor="U0ANYONE", approve=True, actor_groups={"S0ONCALL"}
    )
    assert decision.resume_claimed

    # allow_self_approval lets the requester decide their own call.
    selfish = make_runner(
        config=make_config(
            policies={"restart_service": {"approvers": [], "allow_self_approval": True}}
        )
    )
    mine = await selfish.start(request(calls(("restart_service", {"service": "y"})), thread="3"))
    decision = await selfish.decide(mine.new_approvals[0].id, actor="U0REQUESTER", approve=True)
    assert decision.approval.status == "approved"


async def test_already_decided_is_refused(runner: Runner) -> None:
    outcome = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    approval_id = outcome.new_approvals[0].id
    await runner.decide(approval_id, actor="U0APPROVER1", approve=False, reason="no")
    with pytest.raises(AlreadyDecided, match="Already denied by @U0APPROVER1"):
        await runner.decide(approval_id, actor="U0APPROVER2", approve=True)


async def test_expired_approval_cannot_be_approved_and_on_expiry_deny_resumes(
    runner: Runner, repo: Repository
) -> None:
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(calls(("restart_service", {"service": "db"}))))
        approval = outcome.new_approvals[0]
        assert approval.expires_at.isoformat() == "2026-11-30T10:15:00"
        clock.tick(timedelta(minutes=15, seconds=1))
        with pytest.raises(ApprovalExpired, match="expired at 2026-11-30 10:15 UTC") as refused:
            await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
        expiry = refused.value.expiry
        assert expiry is not None and expiry.resume_claimed and not expiry.run_cancelled
        resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert executed("restart_service") == []
    result = tool_results_in(ScriptedModel.seen[-1])["restart_service"]
    assert result == "Expired at 2026-11-30 10:15 UTC with no decision. The call was not run."
    stored = await repo.get_approval(approval.id)
    assert stored is not None and stored.status == "expired"


async def test_on_expiry_cancel_stops_the_run(runner: Runner, repo: Repository) -> None:
    with freeze_time("2026-11-30 10:00:00") as clock:
        outcome = await runner.start(request(calls(("deploy", {"service": "api", "version": "3"}))))
        clock.tick(timedelta(minutes=31))
        swept = await runner.expire_due()
    assert len(swept) == 1 and swept[0].run_cancelled and not swept[0].resume_claimed
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "cancelled"
    assert "expired with no decision" in (run.error or "")
    assert executed("deploy") == []
    with pytest.raises(ApprovalExpired):
        await runner.decide(outcome.new_approvals[0].id, actor="U0APPROVER1", approve=True)


async def test_fifty_concurrent_decisions_one_winner(database: Database, config: Any) -> None:
    repo = await database.open()
    starter = Runner(repo, config, worker_id="starter")
    outcome = await starter.start(request(calls(("restart_service", {"service": "db"}))))
    approval_id = outcome.new_approvals[0].id
    # Separate engines stand in for replicas; each click has its own runner (worker).
    replicas = [await database.open() for _ in range(5)]
    runners = [Runner(replicas[i % 5], config, worker_id=f"w{i}") for i in range(50)]

    async def click(runner: Runner) -> str:
        try:
            decision = await runner.decide(approval_id, actor="U0APPROVER1", approve=True)
        except AlreadyDecided:
            return "lost"
        if decision.resume_claimed:
            await runner.resume(decision.approval.run_id)
        return "won"

    results = await asyncio.gather(*(click(r) for r in runners))
    assert results.count("won") == 1
    assert results.count("lost") == 49
    assert executed("restart_service") == [{"service": "db"}]


async def test_tampered_arguments_are_refused_before_execution(
    runner: Runner, repo: Repository
) -> None:
    outcome = await runner.start(request(calls(("restart_service", {"service": "staging"}))))
    approval_id = outcome.new_approvals[0].id
    await repo.execute_sql(
        "UPDATE approvals SET arguments = :args WHERE id = :id",
        {"args": json.dumps({"service": "production"}), "id": approval_id},
    )
    await runner.decide(approval_id, actor="U0APPROVER1", approve=True)
    resumed = await runner.resume(outcome.run_id)
    assert executed("restart_service") == []
    result = tool_results_in(ScriptedModel.seen[-1])["restart_service"]
    assert result.startswith("Cancelled: what was approved no longer matches what would run")
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "cancelled"
    assert resumed.status == "completed"


async def test_changed_tool_definition_cancels_the_approval(
    runner: Runner, repo: Repository
) -> None:
    outcome = await runner.start(request(calls(("restart_service", {"service": "web"}))))
    approval_id = outcome.new_approvals[0].id
    await runner.decide(approval_id, actor="U0APPROVER1", approve=True)

    # The bot restarts with a restart_service whose schema changed.
    changed = make_config()
    original = next(t for t in changed.tools if t.name == "restart_service")
    original.input_schema = {
        **original.input_schema,
        "properties": {**original.input_schema["properties"], "force": {"type": "boolean"}},
    }
    restarted = Runner(repo, changed, worker_id=runner.worker_id)
    resumed = await restarted.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert executed("restart_service") == []
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "cancelled"
    assert "definition" in (approval.result or "")


async def test_crash_between_executing_and_executed_is_never_rerun(
    runner: Runner, repo: Repository
) -> None:
    outcome = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    approval_id = outcome.new_approvals[0].id
    await runner.decide(approval_id, actor="U0APPROVER1", approve=True)
    # The worker recorded "executing", then died before recording the result; its claims
    # (kept in memory) died with it, and the bot that resumes the run is a new one.
    assert await repo.begin_execution(approval_id, now=runner.clock())
    restarted = Runner(repo, runner.config, worker_id=runner.worker_id)
    resumed = await restarted.resume(outcome.run_id)
    assert executed("restart_service") == []
    result = tool_results_in(ScriptedModel.seen[-1])["restart_service"]
    assert result.startswith("Outcome unknown")
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "unknown"
    assert resumed.status == "completed"


async def test_stale_lease_is_taken_over_by_another_worker(
    make_runner: Any, repo: Repository
) -> None:
    with freeze_time("2026-11-30 10:00:00") as clock:
        crashed = make_runner(worker_id="crashed")
        outcome = await crashed.start(request(calls(("restart_service", {"service": "db"}))))
        decision = await crashed.decide(
            outcome.new_approvals[0].id, actor="U0APPROVER1", approve=True
        )
        assert decision.resume_claimed
        # "crashed" claimed the resume and died. Nobody else may drive the run meanwhile.
        rescuer = make_runner(worker_id="rescuer")
        assert await rescuer.recover_stale_runs() == []
        clock.tick(timedelta(minutes=6))
        outcomes = await rescuer.recover_stale_runs()
    assert [o.status for o in outcomes] == ["completed"]
    assert executed("restart_service") == [{"service": "db"}]
    events = [e.event for e in await repo.audit_trail(run_id=outcome.run_id)]
    assert "run_taken_over" in events


async def test_follow_up_continues_the_conversation(runner: Runner, repo: Repository) -> None:
    first = await runner.start(request("hello"))
    assert first.status == "completed" and first.answer == "You said: hello"
    second = await runner.start(request(calls(("get_status", {"service": "web"}))))
    assert second.run_id == first.run_id
    assert second.status == "completed"
    run = await repo.get_run(first.run_id)
    assert run is not None
    user_texts = [m["parts"][0]["text"] for m in run.history if m["role"] == "user"]
    assert user_texts[0] == "hello" and len(user_texts) == 2
    assert run.history[0]["role"] == "system"


async def test_follow_up_while_paused_is_refused(runner: Runner) -> None:
    paused = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    busy = await runner.start(request("and also this"))
    assert busy.status == "busy" and busy.run_id == paused.run_id
    assert busy.run is not None and busy.run.status == "paused"


async def test_chain_limit_ends_the_run_with_a_readable_message(make_runner: Any) -> None:
    runner = make_runner(config=make_config(chain_limit=1))
    outcome = await runner.start(request(calls(("get_status", {"service": "web"}))))
    assert outcome.status == "failed"
    assert outcome.error is not None and "more than 1 model calls (chain_limit)" in outcome.error


async def test_unknown_model_ends_the_run(make_runner: Any, repo: Repository) -> None:
    runner = make_runner(config=make_config(model="no-such-model"))
    outcome = await runner.start(request("hi"))
    assert outcome.status == "failed"
    assert outcome.error is not None and "unknown model" in outcome.error
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "failed" and run.lease_owner is None


async def test_tool_error_becomes_a_result_and_is_recorded(
    runner: Runner, repo: Repository
) -> None:
    outcome = await runner.start(request(calls(("broken_tool", {"service": "db"}))))
    approval_id = outcome.new_approvals[0].id
    await runner.decide(approval_id, actor="U0APPROVER1", approve=True)
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "completed"
    assert "Error: db exploded" in (resumed.answer or "")
    approval = await repo.get_approval(approval_id)
    assert approval is not None and approval.status == "executed"
    assert approval.result == "Error: db exploded"


async def test_storage_failure_while_pausing_fails_the_run_loudly(
    runner: Runner, repo: Repository
) -> None:
    await repo.execute_sql("ALTER TABLE approvals RENAME TO approvals_gone")
    outcome = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    assert outcome.status == "failed"
    assert outcome.error is not None and "approvals" in outcome.error
    assert executed("restart_service") == []
    run = await repo.get_run(outcome.run_id)
    assert run is not None and run.status == "failed"


async def test_storage_failure_in_the_gate_fails_the_run_loudly(
    runner: Runner, repo: Repository
) -> None:
    outcome = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    approval_id = outcome.new_approvals[0].id
    await runner.decide(approval_id, actor="U0APPROVER1", approve=True)
    # The database refuses the gate's "executing" write: a real storage failure, no mocks.
    for statement in FAIL_EXECUTING_WRITES[repo.dialect]:
        await repo.execute_sql(statement)
    resumed = await runner.resume(outcome.run_id)
    assert resumed.status == "failed"
    assert resumed.error is not None and "storage is on fire" in resumed.error
    assert executed("restart_service") == [], "the gate failed before the tool ran"


async def test_a_reused_tool_call_id_in_a_follow_up_needs_its_own_approval(
    runner: Runner, repo: Repository
) -> None:
    def numbered(service: str) -> str:
        return json.dumps(
            {
                "tool_calls": [
                    {"name": "restart_service", "arguments": {"service": service}, "id": "call_0"}
                ]
            }
        )

    first = await runner.start(request(numbered("payments")))
    await runner.decide(first.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    assert (await runner.resume(first.run_id)).status == "completed"

    # Same thread, same provider-style id, another call: a new approval, not the old one.
    follow_up = await runner.start(request(numbered("billing")))
    assert follow_up.status == "paused"
    assert [a.arguments for a in follow_up.new_approvals] == [{"service": "billing"}]
    await runner.decide(follow_up.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    done = await runner.resume(follow_up.run_id)
    assert done.status == "completed" and "restarted billing" in (done.answer or "")
    assert executed("restart_service") == [{"service": "payments"}, {"service": "billing"}]


async def test_a_decision_landing_while_the_run_re_pauses_is_kept(
    runner: Runner, repo: Repository
) -> None:
    paused = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    [approval] = paused.new_approvals
    run = await repo.get_run(paused.run_id)
    assert run is not None
    # A worker drives the run (it was taken over) and its gate finds the approval pending...
    await repo.execute_sql(
        "UPDATE runs SET status = 'running', lease_owner = 'worker-a', "
        "lease_expires_at = :until WHERE id = :id",
        {"until": runner.clock() + timedelta(minutes=5), "id": run.id},
    )
    # ...the decision lands meanwhile (it cannot resume a run that is not paused)...
    decision = await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    assert not decision.resume_claimed
    # ...and the worker pauses again, waiting on that approval.
    pause = await repo.save_pause(
        run.id,
        worker="worker-a",
        history=run.history,
        drafts=[],
        still_pending=[approval.id],
        lease_until=runner.clock() + timedelta(minutes=5),
        now=runner.clock(),
    )
    assert pause.resume_claimed, "nothing is pending any more: the pausing worker resumes"
    resumed = await runner.resume(run.id)
    assert resumed.status == "completed"
    assert executed("restart_service") == [{"service": "db"}]
    assert len(await repo.approvals_for_run(run.id)) == 1, "no second card for the same call"
