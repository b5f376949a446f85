"""Operators pause and resume runs (issue 19 §2), on SQLite and PostgreSQL.

A pause takes effect at the next safe point (before a tool call starts, before a model call);
calls already executing finish and keep their results; a run waiting on people can be held
and the decisions made meanwhile count after Resume (no second click); Resume works from
another runner (another replica) and continues the run once; who may is checked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from freezegun import freeze_time

from bot.engine import Request, Runner
from bot.policy import HoldRefused
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import hold_tools
from tests.support.ops_tools import executed
from tests.support.scripted_model import calls

STEP_TOOLS = [*BASE_CONFIG["tools"], "tests.support.hold_tools:step"]


def request(text: str, requester: str = "U0REQUESTER") -> Request:
    return Request(text=text, requester=requester, team_id="T1", channel="C0OPS", thread_ts="1.1")


def steps(*numbers: int) -> str:
    return json.dumps(
        {"steps": [{"tool_calls": [{"name": "step", "arguments": {"n": n}}]} for n in numbers]}
    )


@pytest.fixture(autouse=True)
def _no_hook() -> Iterator[None]:
    hold_tools.ON_STEP = None
    yield
    hold_tools.ON_STEP = None


def config(**overrides: Any) -> Any:
    return make_config(tools=STEP_TOOLS, **overrides)


async def test_a_pause_mid_call_takes_effect_before_the_next_model_call_and_resumes_elsewhere(
    database: Database,
) -> None:
    first = Runner(await database.open(), config(), worker_id="worker-a")
    run_ids: list[str] = []

    async def pause_during_step(n: int) -> None:
        if n == 1:
            outcome = await first.pause_run(run_ids[0], actor="U0REQUESTER", reason="lunch")
            assert outcome.result == "requested"

    hold_tools.ON_STEP = pause_during_step
    run = await first.open(request(steps(1, 2, 3)))
    run_ids.append(run.id)
    held = await first.drive(run)

    assert held.status == "held"
    assert executed("step") == [{"n": 1}], "the executing call finished; no later call started"
    stored = await first.repo.get_run(run.id)
    assert stored is not None and stored.status == "paused" and stored.lease_owner is None
    assert any(
        part.get("output") == "step 1 done"
        for message in stored.history
        if message["role"] == "tool"
        for part in message["parts"]
    ), "the finished call keeps its result"
    # Nothing resumes a held run by itself: not the stranded-run sweep.
    assert await first.claim_stranded_runs() == []

    # Another replica, fresh from the database, resumes it.
    hold_tools.ON_STEP = None
    second = Runner(await database.open(), config(), worker_id="worker-b")
    released = await second.resume_run(run.id, actor="U0APPROVER1")
    assert released.claimed is not None
    with pytest.raises(HoldRefused) as again:
        await first.resume_run(run.id, actor="U0REQUESTER")
    assert again.value.code == "not_held"
    done = await second.resume(run.id)

    assert done.status == "completed"
    assert executed("step") == [{"n": 1}, {"n": 2}, {"n": 3}], "each step ran once"
    trail = [e.event for e in await second.repo.audit_trail(run_id=run.id)]
    assert "run_pause_requested" in trail and "run_held" in trail
    assert "run_resume_requested" in trail
    requested = [e for e in await second.repo.audit_trail(run_id=run.id) if e.actor]
    assert ("run_pause_requested", "U0REQUESTER") in [(e.event, e.actor) for e in requested]


async def test_a_pause_takes_effect_before_an_approved_call_starts(
    database: Database,
) -> None:
    runner = Runner(await database.open(), config(), worker_id="worker-a")
    paused = await runner.start(request(calls(("restart_service", {"service": "web"}))))
    assert paused.status == "paused"
    decision = await runner.decide(paused.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    assert decision.resume_claimed
    # Paused after the click claimed the resume, before the drive started the call.
    hold = await runner.pause_run(paused.run_id, actor="U0APPROVER2")
    assert hold.result == "requested"

    held = await runner.resume(paused.run_id)
    assert held.status == "held"
    assert executed("restart_service") == [], "the approved call did not start"

    other = Runner(await database.open(), config(), worker_id="worker-b")
    released = await other.resume_run(paused.run_id, actor="U0REQUESTER")
    assert released.claimed is not None
    done = await other.resume(paused.run_id)
    assert done.status == "completed"
    assert executed("restart_service") == [{"service": "web"}], "ran once, as approved"


async def test_a_run_waiting_on_an_approval_is_held_and_the_click_meanwhile_counts(
    database: Database,
) -> None:
    runner = Runner(await database.open(), config(), worker_id="worker-a")
    paused = await runner.start(request(calls(("restart_service", {"service": "web"}))))
    hold = await runner.pause_run(paused.run_id, actor="U0REQUESTER", reason="freeze")
    assert hold.result == "held"

    decision = await runner.decide(paused.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    assert decision.approval.status == "approved", "the decision is recorded"
    assert not decision.resume_claimed, "the hold keeps the run paused"
    assert await runner.claim_stranded_runs() == []
    assert executed("restart_service") == []

    released = await runner.resume_run(paused.run_id, actor="U0REQUESTER")
    assert released.claimed is not None, "Resume continues with the decision: no second click"
    done = await runner.resume(paused.run_id)
    assert done.status == "completed"
    assert executed("restart_service") == [{"service": "web"}]


async def test_resume_of_a_held_run_still_waiting_on_people_just_releases_it(
    database: Database,
) -> None:
    runner = Runner(await database.open(), config(), worker_id="worker-a")
    paused = await runner.start(request(calls(("restart_service", {"service": "web"}))))
    await runner.pause_run(paused.run_id, actor="U0REQUESTER")
    released = await runner.resume_run(paused.run_id, actor="U0REQUESTER")
    assert released.released and released.claimed is None
    decision = await runner.decide(paused.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    assert decision.resume_claimed, "with the hold gone, the click resumes the run as before"


async def test_who_may_pause_resume_and_stop(database: Database) -> None:
    runner = Runner(
        await database.open(), config(admins=["U0ADMIN", "S0OPS"]), worker_id="worker-a"
    )
    paused = await runner.start(request(calls(("restart_service", {"service": "web"}))))
    with pytest.raises(HoldRefused) as refused:
        await runner.pause_run(paused.run_id, actor="U0STRANGER")
    assert refused.value.code == "not_allowed"
    assert "requester" in str(refused.value) or "asked" in str(refused.value)
    assert await runner.repo.hold_of(paused.run_id) is None, "a refusal changes nothing"
    with pytest.raises(HoldRefused):
        await runner.stop_run(paused.run_id, actor="U0STRANGER")
    run = await runner.repo.get_run(paused.run_id)
    assert run is not None and run.status == "paused"

    # An admin through a group, an admin by id, an approver of a tool, the requester.
    assert (await runner.pause_run(paused.run_id, actor="U0X", actor_groups=["S0OPS"])).hold
    with pytest.raises(HoldRefused) as held:
        await runner.resume_run(paused.run_id, actor="U0STRANGER")
    assert held.value.code == "not_allowed"
    await runner.resume_run(paused.run_id, actor="U0ADMIN")
    await runner.pause_run(paused.run_id, actor="U0APPROVER2")
    await runner.resume_run(paused.run_id, actor="U0REQUESTER")
    with pytest.raises(HoldRefused) as missing:
        await runner.pause_run("run_nope", actor="U0ADMIN")
    assert missing.value.code == "not_found"

    stopped = await runner.stop_run(paused.run_id, actor="U0ADMIN", reason="wrong ticket")
    assert stopped.result == "cancelled"
    run = await runner.repo.get_run(paused.run_id)
    assert run is not None and run.status == "cancelled"
    assert run.error is not None and "U0ADMIN" in run.error and "wrong ticket" in run.error
    with pytest.raises(HoldRefused) as finished:
        await runner.pause_run(paused.run_id, actor="U0ADMIN")
    assert finished.value.code == "finished"


async def test_stop_of_a_working_run_cancels_it_at_the_next_safe_point(
    database: Database,
) -> None:
    runner = Runner(await database.open(), config(admins=["U0ADMIN"]), worker_id="worker-a")
    run_ids: list[str] = []

    async def stop_during_step(n: int) -> None:
        await runner.stop_run(run_ids[0], actor="U0ADMIN", reason="enough")

    hold_tools.ON_STEP = stop_during_step
    run = await runner.open(request(steps(1, 2)))
    run_ids.append(run.id)
    outcome = await runner.drive(run)
    assert outcome.status == "cancelled"
    assert outcome.error == "Stopped by U0ADMIN: enough"
    assert executed("step") == [{"n": 1}]
    stored = await runner.repo.get_run(run.id)
    assert stored is not None and stored.status == "cancelled"
    assert await runner.repo.hold_of(run.id) is None


async def test_pause_ttl_cancels_a_run_held_too_long(database: Database) -> None:
    with freeze_time("2026-12-01 10:00:00") as frozen:
        runner = Runner(await database.open(), config(pause_ttl="1h"), worker_id="worker-a")
        paused = await runner.start(request(calls(("restart_service", {"service": "web"}))))
        await runner.pause_run(paused.run_id, actor="U0REQUESTER")
        frozen.tick(timedelta(minutes=59))
        assert await runner.expire_holds() == []
        frozen.tick(timedelta(minutes=2))
        assert await runner.expire_holds() == [paused.run_id]
        assert await runner.expire_holds() == []
    run = await runner.repo.get_run(paused.run_id)
    assert run is not None and run.status == "cancelled"
    assert run.error == "paused longer than pause_ttl"
    approval = await runner.repo.get_approval(paused.new_approvals[0].id)
    assert approval is not None and approval.status == "cancelled"
    assert await runner.repo.held_count() == 0


async def test_two_resumes_at_once_continue_the_run_once(database: Database) -> None:
    a = Runner(await database.open(), config(), worker_id="worker-a")
    b = Runner(await database.open(), config(), worker_id="worker-b")
    paused = await a.start(request(calls(("restart_service", {"service": "web"}))))
    await a.pause_run(paused.run_id, actor="U0REQUESTER")
    await a.decide(paused.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    assert await a.repo.held_count() == 1
    # The /metrics gauge of paused runs, read from the database at scrape time.
    from prometheus_client import generate_latest

    from bot.ops.metrics import REGISTRY, scrape

    assert (await scrape(a.repo)).held_runs == 1
    assert "approval_bot_paused_runs 1.0" in generate_latest(REGISTRY).decode()
    results = await asyncio.gather(
        a.resume_run(paused.run_id, actor="U0REQUESTER"),
        b.resume_run(paused.run_id, actor="U0APPROVER1"),
        return_exceptions=True,
    )
    won = [r for r in results if not isinstance(r, BaseException)]
    assert len(won) == 1 and won[0].claimed is not None
    assert all(isinstance(r, HoldRefused) for r in results if isinstance(r, BaseException))
    winner = a if results[0] is won[0] else b
    assert (await winner.resume(paused.run_id)).status == "completed"
    assert executed("restart_service") == [{"service": "web"}]


async def test_a_resume_between_the_safe_point_and_its_write_carries_the_run_on(
    database: Database,
) -> None:
    runner = Runner(await database.open(), config(), worker_id="worker-a")
    run = await runner.open(request(steps(1)))
    assert (await runner.pause_run(run.id, actor="U0REQUESTER")).result == "requested"
    released = await runner.resume_run(run.id, actor="U0REQUESTER")
    assert released.released and released.claimed is None, "it had not stopped yet"
    # The drive read the hold just before the Resume and writes its pause just after.
    assert run.lease_owner is not None
    claimed = await runner.repo.hold_run(
        run.id,
        worker=run.lease_owner,
        history=run.history,
        claimer=runner.worker_id,
        lease_until=runner.leases.until(),
        now=runner.clock(),
    )
    assert claimed, "nothing holds it any more: the drive claims its resume itself"
    assert await runner.claim_stranded_runs() == []
    done = await runner.resume(run.id)
    assert done.status == "completed"
    assert executed("step") == [{"n": 1}]
