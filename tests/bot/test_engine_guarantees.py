"""The engine keeps its promises when the config changes, the clock runs out, leases are lost,
tool call ids repeat and runs end halfway (issue 7: defects 1, 5, 8, 10, 14a, 14c).

Each runner stands for a process: runners built from different configs, or with different
worker ids and clocks, share one real database (SQLite and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time

from bot.config import Config
from bot.engine import Runner
from storage.repository import Repository
from tests.bot.test_engine import FAIL_EXECUTING_WRITES, calls, executed, request, tool_results_in
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import held_tools, ops_tools
from tests.support.scripted_model import ScriptedModel

T0 = datetime(2026, 11, 30, 10, 0, 0)


@pytest.fixture(autouse=True)
def _fresh_hold() -> None:
    held_tools.HOLD = held_tools.Hold()
    held_tools.STATUS_HOLD = held_tools.Hold()


def config_with(**policies: dict[str, Any]) -> Config:
    """The base config with some policies replaced (``None`` drops the tool's policy)."""
    merged = {**BASE_CONFIG["policies"], **policies}
    return make_config(policies={k: v for k, v in merged.items() if v is not None})


def held_config(**overrides: Any) -> Config:
    return make_config(
        tools=[
            *BASE_CONFIG["tools"],
            "tests.support.held_tools:held_restart",
            "tests.support.held_tools:held_status",
        ],
        policies={**BASE_CONFIG["policies"], "held_restart": {"approvers": ["U0APPROVER1"]}},
        run_lease="1m",
        **overrides,
    )


class Clock:
    """A clock the test moves by hand; each runner may have its own."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def unanswered_calls(messages: list[dict[str, Any]]) -> list[str]:
    """Tool call ids in a history that no tool result answers."""
    answered = {
        part.get("tool_call_id")
        for message in messages
        if message["role"] == "tool"
        for part in message["parts"]
    }
    return [
        part["tool_call_id"]
        for message in messages
        if message["role"] == "assistant"
        for part in message["parts"]
        if part.get("type") == "tool_call" and part.get("tool_call_id") not in answered
    ]


async def audit_events(repo: Repository, approval_id: str) -> list[str]:
    return [e.event for e in await repo.audit_trail(approval_id=approval_id)]


# -- 1: gating belongs to the approval, not to the config of whoever resumes ----------------


async def test_a_denial_holds_after_the_policy_is_turned_off(database: Database) -> None:
    first = Runner(await database.open(), make_config(), worker_id="before")
    paused = await first.start(request(calls(("restart_service", {"service": "db"}))))
    [approval] = paused.new_approvals

    # The config now says restart_service needs no approval; the card went out before.
    relaxed = Runner(
        await database.open(), config_with(restart_service={"approval": "never"}), worker_id="after"
    )
    decision = await relaxed.decide(approval.id, actor="U0APPROVER1", approve=False, reason="no")
    assert decision.resume_claimed
    resumed = await relaxed.resume(paused.run_id)

    assert resumed.status == "completed"
    assert executed("restart_service") == [], "a denied call must never run"
    result = tool_results_in(ScriptedModel.seen[-1])["restart_service"]
    assert result == "Denied by @U0APPROVER1: no. The call was not run."


async def test_an_approval_still_goes_through_the_gate_after_the_policy_is_turned_off(
    database: Database,
) -> None:
    first = Runner(await database.open(), make_config(), worker_id="before")
    paused = await first.start(request(calls(("restart_service", {"service": "db"}))))
    [approval] = paused.new_approvals

    repo = await database.open()
    relaxed = Runner(repo, config_with(restart_service=None), worker_id="after")
    await relaxed.decide(approval.id, actor="U0APPROVER1", approve=True)
    resumed = await relaxed.resume(paused.run_id)

    assert resumed.status == "completed"
    assert executed("restart_service") == [{"service": "db"}]
    stored = await repo.get_approval(approval.id)
    assert stored is not None and stored.status == "executed"
    assert await audit_events(repo, approval.id) == [
        "approval_requested",
        "approval_approved",
        "execution_started",
        "execution_finished",
    ]


async def test_an_unconfigured_tool_cancels_its_approval_and_says_so(
    database: Database,
) -> None:
    first = Runner(await database.open(), make_config(), worker_id="before")
    paused = await first.start(request(calls(("restart_service", {"service": "db"}))))
    [approval] = paused.new_approvals

    # Restarted with restart_service removed from the tools.
    repo = await database.open()
    without = make_config(tools=["tests.support.ops_tools:get_status"], policies={})
    later = Runner(repo, without, worker_id="after")
    await later.decide(approval.id, actor="U0APPROVER1", approve=True)
    resumed = await later.resume(paused.run_id)

    assert resumed.status == "completed"
    assert executed("restart_service") == []
    expected = "Cancelled: the tool restart_service is no longer configured; the call was not run."
    assert tool_results_in(ScriptedModel.seen[-1]) == {"restart_service": expected}
    stored = await repo.get_approval(approval.id)
    assert stored is not None and stored.status == "cancelled"
    assert "no longer configured" in (stored.result or "")
    assert (await audit_events(repo, approval.id))[-1] == "approval_cancelled"
    run = await repo.get_run(paused.run_id)
    assert run is not None and unanswered_calls(run.history) == []


async def test_with_no_config_at_all_an_approved_call_is_not_lost(database: Database) -> None:
    first = Runner(await database.open(), make_config(), worker_id="before")
    paused = await first.start(
        request(
            calls(
                ("restart_service", {"service": "db"}),
                ("deploy", {"service": "api", "version": "2"}),
            )
        )
    )
    restart, deploy = sorted(paused.new_approvals, key=lambda a: a.tool_name == "deploy")

    repo = await database.open()
    bare = Runner(repo, Config(), worker_id="bare")  # no tools, no policies
    await bare.decide(deploy.id, actor="U0APPROVER1", approve=False, reason="not today")
    assert (await bare.decide(restart.id, actor="U0APPROVER1", approve=True)).resume_claimed
    resumed = await bare.resume(paused.run_id)

    assert resumed.status == "completed"
    assert ops_executed() == []
    assert tool_results_in(ScriptedModel.seen[-1]) == {
        "restart_service": (
            "Cancelled: the tool restart_service is no longer configured; the call was not run."
        ),
        # A decision for a tool that is gone is still the answer.
        "deploy": "Denied by @U0APPROVER1: not today. The call was not run.",
    }
    stored = await repo.get_approval(restart.id)
    assert stored is not None and stored.status == "cancelled"
    stored = await repo.get_approval(deploy.id)
    assert stored is not None and stored.status == "denied"


def ops_executed() -> list[Any]:
    return list(ops_tools.EXECUTED)


CLI_CONFIG = """
model = "scripted"
tools = ["tests.support.ops_tools:get_status", "tests.support.ops_tools:restart_service"]

[policies.restart_service]
approvers = ["U0APPROVER1"]
"""


def test_cli_decisions_under_another_config_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.cli.app import main

    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("APPROVAL_BOT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./approval-bot.toml: all defaults
    gated = tmp_path / "gated.toml"
    gated.write_text(CLI_CONFIG)
    relaxed = tmp_path / "relaxed.toml"
    relaxed.write_text(CLI_CONFIG.replace('approvers = ["U0APPROVER1"]', 'approval = "never"'))

    def cli(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        return code, capsys.readouterr().out

    def ask(thread: str) -> str:
        text = calls(("restart_service", {"service": thread}))
        code, _ = cli(
            "--config", str(gated), "ask", text, "--as", "U0REQ", "--conversation", thread
        )
        assert code == 0
        code, out = cli("--config", str(gated), "approvals", "list", "--json")
        return next(a["id"] for a in json.loads(out) if a["arguments"] == {"service": thread})

    denied = ask("one")
    code, out = cli(
        "--config", str(relaxed), "approvals", "decide", denied, "--deny", "--as", "U0APPROVER1"
    )
    assert code == 0 and "Denied by @U0APPROVER1" in out
    assert ops_executed() == []

    code, out = cli("--config", str(gated), "approvals", "list", "--json")
    assert json.loads(out) == [], "nothing left pending"


def test_cli_decide_without_the_tool_leaves_the_resume_to_the_bot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deciding from a shell with no config (or one without the call's tool) records the
    decision and leaves the run to the bot, instead of cancelling the approved call as "no
    longer configured" while printing that it was approved."""
    from bot.cli.app import main

    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.delenv("APPROVAL_BOT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./approval-bot.toml: all defaults, no tools
    gated = tmp_path / "gated.toml"
    gated.write_text(CLI_CONFIG)

    def cli(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        return code, capsys.readouterr().out

    text = calls(("restart_service", {"service": "web"}))
    assert cli("--config", str(gated), "ask", text, "--as", "U0REQ", "--conversation", "t")[0] == 0
    _, out = cli("--config", str(gated), "approvals", "list", "--json")
    [listed] = json.loads(out)

    code, out = cli("approvals", "decide", listed["id"], "--approve", "--as", "U0APPROVER1")
    assert code == 0
    assert "no restart_service tool, so the run is left to the bot" in out
    assert "no longer configured" not in out
    assert ops_executed() == []
    _, out = cli("runs", "show", listed["run_id"], "--json")
    shown = json.loads(out)
    assert shown["status"] == "paused", "decided, resume left to the bot"
    assert [a["status"] for a in shown["approvals"]] == ["approved"]

    # The bot (here one sweep, with its config) carries the run on: the call runs once.
    code, out = cli("--config", str(gated), "runs", "recover")
    assert code == 0 and f"resumed run {listed['run_id']}" in out
    assert ops_executed() == [("restart_service", {"service": "web"})]
    _, out = cli("runs", "show", listed["run_id"], "--json")
    shown = json.loads(out)
    assert shown["status"] == "completed"
    assert [a["status"] for a in shown["approvals"]] == ["executed"]


# -- 5: expiry is checked again when the approved call starts --------------------------------


async def test_an_approved_call_that_cannot_start_before_its_expiry_is_not_run(
    runner: Runner, repo: Repository
) -> None:
    with freeze_time(T0) as clock:
        paused = await runner.start(
            request(
                calls(
                    ("restart_service", {"service": "db"}),  # expires after 15 minutes
                    ("deploy", {"service": "api", "version": "2"}),  # after 30
                )
            )
        )
        restart, deploy = sorted(paused.new_approvals, key=lambda a: a.tool_name == "deploy")
        clock.tick(timedelta(minutes=1))
        await runner.decide(restart.id, actor="U0APPROVER1", approve=True)
        clock.tick(timedelta(minutes=19))  # restart's approval expired 5 minutes ago
        decision = await runner.decide(deploy.id, actor="U0APPROVER2", approve=True)
        assert decision.resume_claimed
        resumed = await runner.resume(paused.run_id)

    assert resumed.status == "completed"
    assert executed("restart_service") == [], "approved in time, but too late to start"
    assert executed("deploy") == [{"service": "api", "version": "2"}]
    result = tool_results_in(ScriptedModel.seen[-1])["restart_service"]
    assert result == (
        "Cancelled: approved, but the call could not start before the approval expired at "
        "2026-11-30 10:15 UTC. The call was not run."
    )
    stored = await repo.get_approval(restart.id)
    assert stored is not None and stored.status == "cancelled"
    assert "could not start before the approval expired" in (stored.result or "")
    assert (await audit_events(repo, restart.id))[-1] == "approval_cancelled"


# -- 8, 14a: a drive that lost its lease records what it ran and says nothing ----------------


async def test_a_worker_that_lost_its_lease_mid_tool_records_the_result_quietly(
    database: Database,
) -> None:
    config = held_config()
    repo_a = await database.open()
    slow = Runner(repo_a, config, worker_id="worker-a", clock=Clock())
    paused = await slow.start(request(calls(("held_restart", {"service": "web"}))))
    [approval] = paused.new_approvals
    assert (await slow.decide(approval.id, actor="U0APPROVER1", approve=True)).resume_claimed
    drive_a = asyncio.create_task(slow.resume(paused.run_id))
    await held_tools.HOLD.started.wait()  # worker-a is inside the tool

    # worker-a's lease runs out (its clock stands still); another worker takes the run over.
    repo_b = await database.open()
    rescuer = Runner(repo_b, config, worker_id="worker-b", clock=Clock(T0 + timedelta(minutes=10)))
    [taken] = await rescuer.recover_stale_runs()
    assert taken.status == "completed"
    assert "Outcome unknown" in (taken.answer or "")
    model_calls = len(ScriptedModel.seen)

    held_tools.HOLD.release.set()
    outcome = await drive_a
    assert outcome.status == "handed_over", outcome.error  # nothing false said in the thread
    assert outcome.error is None
    assert len(ScriptedModel.seen) == model_calls, "a drive that lost its lease stops"
    assert executed("held_restart") == [{"service": "web"}]
    stored = await repo_b.get_approval(approval.id)
    assert stored is not None and stored.status == "executed"
    assert stored.result == "restarted web (slowly)"
    run = await repo_b.get_run(paused.run_id)
    assert run is not None and run.status == "completed" and run.answer == taken.answer
    trail = await repo_b.audit_trail(approval_id=approval.id)
    assert [e.event for e in trail][-2:] == ["execution_outcome_unknown", "execution_finished"]
    assert trail[-1].detail.get("after_outcome_unknown") is True


async def test_a_drive_longer_than_its_lease_keeps_renewing_it(database: Database) -> None:
    config = held_config()
    config.run_lease = timedelta(seconds=1)  # renewed every third of a second
    repo_a = await database.open()
    slow = Runner(repo_a, config, worker_id="worker-a")
    paused = await slow.start(request(calls(("held_restart", {"service": "web"}))))
    [approval] = paused.new_approvals
    assert (await slow.decide(approval.id, actor="U0APPROVER1", approve=True)).resume_claimed
    drive_a = asyncio.create_task(slow.resume(paused.run_id))
    await held_tools.HOLD.started.wait()

    await asyncio.sleep(2.5)  # two and a half leases inside the tool
    rescuer = Runner(await database.open(), config, worker_id="worker-b")
    assert await rescuer.take_over_stale_runs() == [], "the lease was kept"

    held_tools.HOLD.release.set()
    outcome = await drive_a
    assert outcome.status == "completed", outcome.error
    assert executed("held_restart") == [{"service": "web"}]


async def test_two_drives_of_one_run_in_one_process_are_fenced(database: Database) -> None:
    clock = Clock()
    repo = await database.open()
    runner = Runner(repo, held_config(), worker_id="one-process", clock=clock)
    restart = {"name": "held_restart", "arguments": {"service": "web"}}
    status = {"name": "held_status", "arguments": {"service": "web"}}
    script = {"steps": [{"tool_calls": [restart]}, {"tool_calls": [status]}]}
    paused = await runner.start(request(json.dumps(script)))
    [approval] = paused.new_approvals
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    first = asyncio.create_task(runner.resume(paused.run_id))
    await held_tools.HOLD.started.wait()

    # The same process's sweeper finds the lease run out and drives the run a second time;
    # that drive is busy with the next call when the first one's tool returns.
    clock.now += timedelta(minutes=10)
    second = asyncio.create_task(runner.recover_stale_runs())
    await held_tools.STATUS_HOLD.started.wait()
    model_calls = len(ScriptedModel.seen)
    held_tools.HOLD.release.set()
    # The first drive must stop, not call the model and the next tool again.
    carried_on = asyncio.create_task(held_tools.STATUS_HOLD.again.wait())
    await asyncio.wait([first, carried_on], return_when=asyncio.FIRST_COMPLETED)
    assert not carried_on.done(), "the first drive ran the next call a second time"
    carried_on.cancel()
    outcome = await first
    assert outcome.status == "handed_over"
    assert len(ScriptedModel.seen) == model_calls, "the first drive must not carry on"

    held_tools.STATUS_HOLD.release.set()
    [taken] = await second
    assert taken.status == "completed"
    assert executed("held_restart") == [{"service": "web"}]
    assert executed("held_status") == [{"service": "web"}], "one drive, one run of each call"
    events = [e.event for e in await repo.audit_trail(run_id=paused.run_id)]
    assert events.count("run_completed") == 1


async def test_only_the_lease_owner_may_start_a_gated_call(
    runner: Runner, repo: Repository
) -> None:
    paused = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    [approval] = paused.new_approvals
    decision = await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    # The run's lease is now the deciding worker's drive's: the claim starts the resume.
    assert decision.resume_claimed
    run = await repo.get_run(paused.run_id)
    assert run is not None and run.lease_owner is not None
    assert run.lease_owner.startswith(f"{runner.worker_id}/")
    now = runner.clock()
    assert not await repo.begin_execution(approval.id, now=now, owner="a-drive-that-lost-it")
    assert not await repo.begin_execution(approval.id, now=now, owner=runner.worker_id)
    stored = await repo.get_approval(approval.id)
    assert stored is not None and stored.status == "approved"
    assert await repo.begin_execution(approval.id, now=now, owner=run.lease_owner)


# -- 10: an approval answers the call it was requested for, once ---------------------------


async def test_a_tool_call_id_reused_within_one_drive_needs_its_own_approval(
    runner: Runner, repo: Repository
) -> None:
    def restart(service: str) -> dict[str, Any]:
        call = {"name": "restart_service", "arguments": {"service": service}, "id": "call_0"}
        return {"tool_calls": [call]}

    script = json.dumps({"steps": [restart("web"), restart("billing")]})
    paused = await runner.start(request(script))
    [first] = paused.new_approvals
    await runner.decide(first.id, actor="U0APPROVER1", approve=True)

    # The resumed drive runs the approved call, then the model asks again with "call_0".
    again = await runner.resume(paused.run_id)
    assert again.status == "paused", again.answer
    [second] = again.new_approvals
    assert second.id != first.id and second.arguments == {"service": "billing"}
    assert executed("restart_service") == [{"service": "web"}]

    await runner.decide(second.id, actor="U0APPROVER2", approve=True)
    done = await runner.resume(paused.run_id)
    assert done.status == "completed"
    assert executed("restart_service") == [{"service": "web"}, {"service": "billing"}]
    stored = await repo.get_approval(second.id)
    assert stored is not None and stored.status == "executed"


# -- 14c: a follow-up after a failed or cancelled run has a result for every call ------------


async def test_a_follow_up_after_a_failed_run_answers_every_call(
    runner: Runner, repo: Repository
) -> None:
    paused = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    [approval] = paused.new_approvals
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    for statement in FAIL_EXECUTING_WRITES[repo.dialect]:
        await repo.execute_sql(statement)
    failed = await runner.resume(paused.run_id)
    assert failed.status == "failed"
    await repo.execute_sql(
        "DROP TRIGGER fail_executing" + (" ON approvals" if repo.dialect == "postgresql" else "")
    )

    follow_up = await runner.start(request("what happened?"))
    assert follow_up.status == "completed"
    seen = ScriptedModel.seen[-1]
    assert unanswered_calls(seen) == []
    result = tool_results_in(seen)["restart_service"]
    # The failed run cancelled its approved call (B): the model reads why it never ran.
    assert result.startswith("Cancelled: the run failed: Stopped by an error")
    assert "storage is on fire" in result and result.endswith("The call was not run.")
    run = await repo.get_run(paused.run_id)
    assert run is not None and unanswered_calls(run.history) == []


async def test_a_follow_up_after_a_run_that_ran_its_call_and_then_failed(
    database: Database,
) -> None:
    repo = await database.open()
    runner = Runner(repo, make_config(), worker_id="w")
    paused = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    [approval] = paused.new_approvals
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    # The call runs, then the model call after it fails (chain_limit).
    failed = await Runner(repo, make_config(chain_limit=1), worker_id="w").resume(paused.run_id)
    assert failed.status == "failed"
    assert executed("restart_service") == [{"service": "db"}]

    await runner.start(request("did it restart?"))
    seen = ScriptedModel.seen[-1]
    assert unanswered_calls(seen) == []
    assert tool_results_in(seen)["restart_service"] == "restarted db"


async def test_a_follow_up_after_a_cancelled_run_answers_every_call(
    runner: Runner, repo: Repository
) -> None:
    paused = await runner.start(
        request(calls(("get_status", {"service": "db"}), ("restart_service", {"service": "db"})))
    )
    assert await repo.cancel_run(
        paused.run_id, reason="wrong service", actor="U0APPROVER1", now=runner.clock()
    )
    follow_up = await runner.start(request("never mind; status?"))
    assert follow_up.status == "completed"
    seen = ScriptedModel.seen[-1]
    assert unanswered_calls(seen) == []
    results = tool_results_in(seen)
    assert results["get_status"] == "db is healthy"
    assert results["restart_service"] == ("Cancelled: wrong service. The call was not run.")


# -- an approved call is recorded as started only when it starts -----------------------------


async def test_an_approved_sync_call_starts_even_when_every_pool_thread_is_busy(
    runner: Runner, repo: Repository
) -> None:
    """The gate records ``executing`` and the sync tool must start right then: not wait in
    the default thread pool's queue, where a process that died (or whose shutdown grace
    ended) would leave it "outcome unknown" though it never started, and where it could
    start after its approval expired."""
    paused = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    [approval] = paused.new_approvals
    assert (await runner.decide(approval.id, actor="U0APPROVER1", approve=True)).resume_claimed

    # Every thread of the default pool is taken (by other tools, say) until we let it go.
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(1)
    loop.set_default_executor(pool)
    busy = threading.Event()
    occupied = loop.run_in_executor(None, busy.wait)
    try:
        # Before: ``executing`` was committed, then the call waited behind the busy pool.
        resumed = await asyncio.wait_for(runner.resume(paused.run_id), timeout=30)
    finally:
        busy.set()
        await occupied

    assert resumed.status == "completed"
    assert executed("restart_service") == [{"service": "db"}]
    stored = await repo.get_approval(approval.id)
    assert stored is not None and stored.status == "executed"


async def test_a_decision_that_does_not_claim_the_resume_leaves_it_to_the_sweeper(
    runner: Runner, repo: Repository
) -> None:
    paused = await runner.start(request(calls(("restart_service", {"service": "db"}))))
    [approval] = paused.new_approvals
    decision = await runner.decide(
        approval.id, actor="U0APPROVER1", approve=True, claim_resume=False
    )
    assert not decision.resume_claimed
    run = await repo.get_run(paused.run_id)
    assert run is not None and run.status == "paused"
    assert await runner.claim_stranded_runs() == [paused.run_id]
    assert (await runner.resume(paused.run_id)).status == "completed"
    assert executed("restart_service") == [{"service": "db"}]
