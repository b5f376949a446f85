"""Safe points that take their hold read from a statement the drive makes anyway (issue 19's
"no slower" item), on SQLite and PostgreSQL: an approved call's start, its result's
recording (before the next model call), the pause that asks for new calls' approval, a new
run's opening. A pause asked for at any moment still takes effect at the next safe point;
and a cycle with no hold makes no ``run_holds`` read of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bot.engine import Request, Runner
from storage.repository import Repository, RunHeld
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import hold_tools
from tests.support.ops_tools import executed
from tests.support.scripted_model import ScriptedModel, calls

STEP_TOOLS = [*BASE_CONFIG["tools"], "tests.support.hold_tools:step"]
GATED_STEP = {**BASE_CONFIG["policies"], "step": {"approvers": ["U0APPROVER1"]}}


def request(text: str, thread: str = "1.1") -> Request:
    return Request(
        text=text, requester="U0REQUESTER", team_id="T1", channel="C0OPS", thread_ts=thread
    )


def steps(*responses: list[dict[str, Any]]) -> str:
    return json.dumps({"steps": [{"tool_calls": calls_} for calls_ in responses]})


def step(n: int) -> dict[str, Any]:
    return {"name": "step", "arguments": {"n": n}}


@pytest.fixture(autouse=True)
def _no_hook() -> Iterator[None]:
    hold_tools.ON_STEP = None
    yield
    hold_tools.ON_STEP = None


async def test_a_pause_during_an_approved_call_stops_the_run_before_the_next_model_call(
    database: Database,
) -> None:
    """The result's recording reads the hold: it must not let the model call through."""
    runner = Runner(
        await database.open(),
        make_config(tools=STEP_TOOLS, policies=GATED_STEP),
        worker_id="worker-a",
    )
    paused = await runner.start(request(steps([step(1)], [step(2)])))
    assert paused.status == "paused"

    async def pause_during_step(n: int) -> None:
        hold = await runner.pause_run(paused.run_id, actor="U0REQUESTER")
        assert hold.result == "requested"

    hold_tools.ON_STEP = pause_during_step
    decision = await runner.decide(paused.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    assert decision.resume_claimed
    prompts = len(ScriptedModel.seen)
    held = await runner.resume(paused.run_id)

    assert held.status == "held"
    assert executed("step") == [{"n": 1}]
    assert len(ScriptedModel.seen) == prompts, "no model call after the pause"
    approvals = await runner.repo.approvals_for_run(paused.run_id)
    assert [a.status for a in approvals] == ["executed"], "step 2 was never asked for"


async def test_a_pause_before_a_new_gated_call_asks_no_approval_for_it(
    database: Database,
) -> None:
    """A new gated call's safe point is the pause that would ask for it: a hold committed
    before that pause is stored stops the run there, with no approval and no card."""
    runner = Runner(await database.open(), make_config(tools=STEP_TOOLS), worker_id="worker-a")
    run_ids: list[str] = []

    async def pause_during_step(n: int) -> None:
        hold = await runner.pause_run(run_ids[0], actor="U0REQUESTER")
        assert hold.result == "requested"

    hold_tools.ON_STEP = pause_during_step
    # One response: an ungated step (which pauses the run while it runs) and a gated call.
    text = steps([step(1), {"name": "restart_service", "arguments": {"service": "web"}}])
    run = await runner.open(request(text))
    run_ids.append(run.id)
    held = await runner.drive(run)

    assert held.status == "held", held
    assert held.new_approvals == []
    assert await runner.repo.approvals_for_run(run.id) == [], "no approval was asked for"
    assert executed("step") == [{"n": 1}] and executed("restart_service") == []

    released = await runner.resume_run(run.id, actor="U0REQUESTER")
    assert released.claimed is not None
    hold_tools.ON_STEP = None
    again = await runner.resume(run.id)
    assert again.status == "paused", "after Resume the call asks for its approval"
    assert [a.tool_name for a in again.new_approvals] == ["restart_service"]
    assert executed("step") == [{"n": 1}], "the finished step kept its result"


async def test_a_pause_found_by_the_pause_transaction_writes_nothing(
    database: Database,
) -> None:
    repo = await database.open()
    runner = Runner(repo, make_config(tools=STEP_TOOLS), worker_id="worker-a")
    run = await runner.open(request("hello"))
    await runner.pause_run(run.id, actor="U0REQUESTER")
    assert run.lease_owner is not None
    with pytest.raises(RunHeld) as held:
        await repo.save_pause(
            run.id,
            worker=run.lease_owner,
            history=run.history,
            drafts=[],
            lease_until=run.lease_expires_at or runner.clock(),
            now=runner.clock(),
            stop_if_held=True,
        )
    assert held.value.action == "pause"
    stored = await repo.get_run(run.id)
    assert stored is not None and stored.status == "running", "rolled back"


async def test_a_cycle_without_holds_makes_no_hold_read_of_its_own(tmp_path: object) -> None:
    """The safe points of start -> pause -> decide -> resume -> complete ride on the
    statements the drive makes anyway (SQLite traces)."""
    repo = await Repository.open(f"sqlite:///{tmp_path}/bot.db")
    try:
        runner = Runner(repo, make_config(), worker_id="counted")

        async def cycle(thread: str) -> None:
            text = calls(("restart_service", {"service": "web"}))
            paused = await runner.start(request(text, thread=thread))
            decision = await runner.decide(
                paused.new_approvals[0].id, actor="U0APPROVER1", approve=True
            )
            assert decision.resume_claimed
            assert (await runner.resume(paused.run_id)).status == "completed"

        await cycle("1.0")
        statements: list[str] = []
        connections = list(repo.database._connections)  # type: ignore[attr-defined]
        for connection in connections:
            connection.set_trace_callback(statements.append)
        await cycle("2.0")
        for connection in connections:
            connection.set_trace_callback(None)
        reads = [s for s in statements if s.startswith("SELECT") and "run_holds" in s]
        assert reads == []
        assert [s for s in statements if "run_holds" in s], "the hold is still read"
    finally:
        await repo.close()
