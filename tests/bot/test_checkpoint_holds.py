"""A long tool's ``checkpoint()`` is a safe point for operators (issue 19 §2 and §3): a pause
asked for while a checkpointed call runs stops the call at its next checkpoint (after storing
it); the run is held like at the other safe points, the call stays ``executing`` with its
checkpoint, and Resume on another replica resumes the call from there, each item once. A
Stop there ends the run ``cancelled`` and records the call as stopped at its checkpoint.
SQLite and PostgreSQL (``database``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.engine import Runner
from tests.bot.test_checkpoints_engine import started
from tests.bot.test_engine import tool_results_in
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import checkpoint_tools
from tests.support.scripted_model import ScriptedModel

COUNT = 200
PAUSE_AT = 50  # the tool blocks before item 50, after its checkpoint {"next": 50}


def config() -> Any:
    gated = {"approvers": ["U0APPROVER1"], "ttl": "1h"}
    return make_config(
        tools=[
            *BASE_CONFIG["tools"],
            "tests.support.checkpoint_tools:migrate_tenants",
            "tests.support.checkpoint_tools:migrate_async",
        ],
        policies={**BASE_CONFIG["policies"], "migrate_tenants": gated, "migrate_async": gated},
        run_lease="1m",
        admins=["U0ADMIN"],
    )


async def _drive_until_blocked(runner: Runner, run_id: str) -> asyncio.Task[Any]:
    drive = asyncio.create_task(runner.resume(run_id))
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, checkpoint_tools.REACHED.wait, 60)
    assert list(range(PAUSE_AT)) == checkpoint_tools.PROCESSED
    return drive


@pytest.mark.parametrize("tool", ["migrate_tenants", "migrate_async"])
async def test_a_pause_stops_the_call_at_its_next_checkpoint_and_resume_continues_it_elsewhere(
    database: Database, tool: str
) -> None:
    checkpoint_tools.reset(stop_at=PAUSE_AT)
    first = Runner(await database.open(), config(), worker_id="worker-a")
    run_id, approval_id = await started(first, tool, {"count": COUNT})
    drive = await _drive_until_blocked(first, run_id)

    hold = await first.pause_run(run_id, actor="U0REQUESTER", reason="maintenance window")
    assert hold.result == "requested"
    checkpoint_tools.RELEASE.set()  # item 50 (in flight) runs, then its checkpoint stops it
    held = await drive

    assert held.status == "held", held.error
    assert list(range(PAUSE_AT + 1)) == checkpoint_tools.PROCESSED, "went past the checkpoint"
    run = await first.repo.get_run(run_id)
    assert run is not None and run.status == "paused" and run.lease_owner is None
    assert await first.repo.hold_of(run_id) is not None
    approval = await first.repo.get_approval(approval_id)
    assert approval is not None and approval.status == "executing"
    stored = await first.repo.get_checkpoint(approval_id)
    assert stored is not None and stored.state == '{"next":51}'
    # Nothing resumes a held run by itself.
    assert await first.claim_stranded_runs() == []

    second = Runner(await database.open(), config(), worker_id="worker-b")
    released = await second.resume_run(run_id, actor="U0APPROVER1")
    assert released.claimed is not None
    done = await second.resume(run_id)

    assert done.status == "completed", done.error
    assert checkpoint_tools.RESUMED_FROM == [None, {"next": PAUSE_AT + 1}]
    assert list(range(COUNT)) == checkpoint_tools.PROCESSED, "each item processed once"
    assert tool_results_in(ScriptedModel.seen[-1])[tool] == "migrated 200 tenants"
    approval = await second.repo.get_approval(approval_id)
    assert approval is not None and approval.status == "executed"
    assert approval.result == "migrated 200 tenants"
    trail = [e.event for e in await second.repo.audit_trail(run_id=run_id)]
    assert trail.count("execution_started") == 1
    assert trail.count("execution_resumed") == 1
    assert trail.count("execution_finished") == 1
    assert "run_held" in trail and "run_resume_requested" in trail


async def test_a_stop_at_a_checkpoint_cancels_the_run_and_records_where_the_call_stopped(
    database: Database,
) -> None:
    checkpoint_tools.reset(stop_at=PAUSE_AT)
    runner = Runner(await database.open(), config(), worker_id="worker-a")
    run_id, approval_id = await started(runner, "migrate_tenants", {"count": COUNT})
    drive = await _drive_until_blocked(runner, run_id)

    await runner.stop_run(run_id, actor="U0ADMIN", reason="wrong tenants")
    checkpoint_tools.RELEASE.set()
    outcome = await drive

    assert outcome.status == "cancelled", outcome.error
    assert outcome.error == "Stopped by U0ADMIN: wrong tenants"
    assert list(range(PAUSE_AT + 1)) == checkpoint_tools.PROCESSED
    run = await runner.repo.get_run(run_id)
    assert run is not None and run.status == "cancelled"
    assert await runner.repo.hold_of(run_id) is None
    approval = await runner.repo.get_approval(approval_id)
    assert approval is not None and approval.status == "executed"
    assert approval.result is not None and "stopped at its checkpoint" in approval.result
    stored = await runner.repo.get_checkpoint(approval_id)
    assert stored is not None and stored.state == '{"next":51}'
    # A cancelled run is not taken over: the call never resumes.
    assert await runner.claim_stranded_runs() == []
    assert checkpoint_tools.RESUMED_FROM == [None]


def test_a_tools_except_exception_cannot_swallow_the_stop_at_a_checkpoint() -> None:
    from bot.gate.checkpoints import HeldAtCheckpoint
    from bot.pauses import Interrupted

    assert issubclass(HeldAtCheckpoint, Interrupted)
    assert not issubclass(HeldAtCheckpoint, Exception)
