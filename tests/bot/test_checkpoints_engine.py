"""Long tools checkpoint (issue 19, section 3): a gated call that stored a checkpoint is
resumed from it by the drive that takes its run over, with the same arguments; one that
stored none stays "outcome unknown"; a checkpoint over 64 KiB is the tool's error; a shutdown
stops the call at its next checkpoint. SQLite and PostgreSQL (``database``).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any

import pytest

from bot.config import Config
from bot.engine import Runner
from bot.pauses import ToolProgress, checkpoint, last_checkpoint, progress
from tests.bot.test_engine import request, tool_results_in
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.support import checkpoint_tools
from tests.support.scripted_model import ScriptedModel, calls

T0 = datetime(2026, 12, 2, 10, 0, 0)


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(autouse=True)
def _fresh_tools() -> None:
    checkpoint_tools.reset()


def long_config() -> Config:
    gated = {"approvers": ["U0APPROVER1"], "ttl": "1h"}
    return make_config(
        tools=[
            *BASE_CONFIG["tools"],
            "tests.support.checkpoint_tools:migrate_tenants",
            "tests.support.checkpoint_tools:migrate_async",
            "tests.support.checkpoint_tools:huge_checkpoint",
            "tests.support.checkpoint_tools:forgets_await",
        ],
        policies={
            **BASE_CONFIG["policies"],
            "migrate_tenants": gated,
            "migrate_async": gated,
            "huge_checkpoint": gated,
            "forgets_await": gated,
        },
        run_lease="1m",
    )


async def started(runner: Runner, tool: str, arguments: dict[str, Any]) -> tuple[str, str]:
    """Ask for the call, approve it; the run's id and the approval's id (resume claimed)."""
    paused = await runner.start(request(calls((tool, arguments))))
    [approval] = paused.new_approvals
    assert (await runner.decide(approval.id, actor="U0APPROVER1", approve=True)).resume_claimed
    return paused.run_id, approval.id


@pytest.mark.parametrize("tool", ["migrate_tenants", "migrate_async"])
async def test_a_taken_over_call_resumes_from_its_last_checkpoint(
    database: Database, tool: str
) -> None:
    checkpoint_tools.reset(stop_at=7)
    config = long_config()
    repo_a = await database.open()
    dying = Runner(repo_a, config, worker_id="worker-a", clock=Clock())
    run_id, approval_id = await started(dying, tool, {"count": 20})
    drive_a = asyncio.create_task(dying.resume(run_id))
    await asyncio.get_running_loop().run_in_executor(None, checkpoint_tools.REACHED.wait, 30)
    assert list(range(7)) == checkpoint_tools.PROCESSED  # 7 checkpoints stored, then stuck

    # worker-a's lease runs out (its clock stands still): another worker takes the run over.
    repo_b = await database.open()
    rescuer = Runner(repo_b, config, worker_id="worker-b", clock=Clock(T0 + timedelta(minutes=10)))
    [taken] = await rescuer.recover_stale_runs()
    assert taken.status == "completed", taken.error
    assert checkpoint_tools.RESUMED_FROM == [None, {"next": 7}]
    assert list(range(20)) == checkpoint_tools.PROCESSED, "items before the checkpoint ran again"
    assert tool_results_in(ScriptedModel.seen[-1])[tool] == "migrated 20 tenants"
    assert "unknown" not in (taken.answer or "").lower()

    # worker-a wakes up: its next checkpoint is refused (the run is worker-b's), so it stops
    # there, records nothing and says nothing.
    checkpoint_tools.RELEASE.set()
    outcome = await drive_a
    assert outcome.status == "handed_over", outcome.error
    assert [*range(20), 7] == checkpoint_tools.PROCESSED, "the old attempt went past a checkpoint"
    approval = await repo_b.get_approval(approval_id)
    assert approval is not None and approval.status == "executed"
    assert approval.result == "migrated 20 tenants"
    stored = await repo_b.get_checkpoint(approval_id)
    assert stored is not None and stored.state == '{"next":20}' and stored.resumes == 1
    trail = [e.event for e in await repo_b.audit_trail(approval_id=approval_id)]
    assert trail.count("execution_started") == 1
    assert trail.count("execution_resumed") == 1
    assert trail.count("execution_finished") == 1
    run = await repo_b.get_run(run_id)
    assert run is not None and run.status == "completed"


async def test_a_stalled_worker_that_finishes_while_the_call_resumes_elsewhere_records_nothing(
    database: Database,
) -> None:
    """The old attempt (past its last checkpoint when its lease ran out) returns while the
    resumed attempt runs: the call is the resumed attempt's now, so the old result is not
    recorded over it, and the run completes once with the resumed attempt's result."""
    checkpoint_tools.reset(stop_at=5, hold_resumed=True)  # 5: after its last checkpoint
    config = long_config()
    loop = asyncio.get_running_loop()
    dying = Runner(await database.open(), config, worker_id="worker-a", clock=Clock())
    run_id, approval_id = await started(dying, "migrate_tenants", {"count": 5})
    drive_a = asyncio.create_task(dying.resume(run_id))
    await loop.run_in_executor(None, checkpoint_tools.REACHED.wait, 30)

    repo_b = await database.open()
    rescuer = Runner(repo_b, config, worker_id="worker-b", clock=Clock(T0 + timedelta(minutes=10)))
    rescue = asyncio.create_task(rescuer.recover_stale_runs())
    await loop.run_in_executor(None, checkpoint_tools.RESUMED.wait, 30)  # resumed, held

    checkpoint_tools.RELEASE.set()  # the old attempt returns first
    assert (await drive_a).status == "handed_over"
    checkpoint_tools.GO_ON.set()
    [taken] = await rescue
    assert taken.status == "completed", taken.error
    assert checkpoint_tools.RESUMED_FROM == [None, {"next": 5}]
    trail = [e.event for e in await repo_b.audit_trail(approval_id=approval_id)]
    assert trail.count("execution_finished") == 1, trail
    approval = await repo_b.get_approval(approval_id)
    assert approval is not None and approval.status == "executed"


async def test_a_call_without_a_checkpoint_is_still_outcome_unknown(database: Database) -> None:
    checkpoint_tools.reset(stop_at=0)  # stuck before its first checkpoint
    config = long_config()
    dying = Runner(await database.open(), config, worker_id="worker-a", clock=Clock())
    run_id, approval_id = await started(dying, "migrate_tenants", {"count": 3})
    drive_a = asyncio.create_task(dying.resume(run_id))
    await asyncio.get_running_loop().run_in_executor(None, checkpoint_tools.REACHED.wait, 30)

    repo_b = await database.open()
    rescuer = Runner(repo_b, config, worker_id="worker-b", clock=Clock(T0 + timedelta(minutes=10)))
    [taken] = await rescuer.recover_stale_runs()
    assert taken.status == "completed"
    assert "Outcome unknown" in (taken.answer or "")
    assert checkpoint_tools.RESUMED_FROM == [None], "a call with no checkpoint ran again"
    checkpoint_tools.RELEASE.set()
    assert (await drive_a).status == "handed_over"
    approval = await repo_b.get_approval(approval_id)
    assert approval is not None and approval.status in ("unknown", "executed")


async def test_a_checkpoint_over_64_kib_is_the_tools_error(database: Database) -> None:
    runner = Runner(await database.open(), long_config(), worker_id="worker-a", clock=Clock())
    run_id, approval_id = await started(runner, "huge_checkpoint", {"size": 70_000})
    outcome = await runner.resume(run_id)
    assert outcome.status == "completed", outcome.error
    result = tool_results_in(ScriptedModel.seen[-1])["huge_checkpoint"]
    assert "checkpoint state is 70,011 bytes" in result and "64 KiB" in result, result
    approval = await runner.repo.get_approval(approval_id)
    assert approval is not None and approval.status == "executed"
    assert await runner.repo.get_checkpoint(approval_id) is None


async def test_a_checkpoint_just_under_64_kib_is_stored(database: Database) -> None:
    runner = Runner(await database.open(), long_config(), worker_id="worker-a", clock=Clock())
    run_id, approval_id = await started(runner, "huge_checkpoint", {"size": 65_000})
    outcome = await runner.resume(run_id)
    assert tool_results_in(ScriptedModel.seen[-1])["huge_checkpoint"] == "stored", outcome
    stored = await runner.repo.get_checkpoint(approval_id)
    assert stored is not None and len(stored.state) == 65_011


async def test_a_shutdown_stops_the_call_at_its_next_checkpoint_and_it_resumes_elsewhere(
    database: Database,
) -> None:
    checkpoint_tools.reset(stop_at=4)
    config = long_config()
    repo_a = await database.open()
    stopping = Runner(repo_a, config, worker_id="worker-a", clock=Clock())
    run_id, approval_id = await started(stopping, "migrate_tenants", {"count": 10})
    drive_a = asyncio.create_task(stopping.resume(run_id))
    await asyncio.get_running_loop().run_in_executor(None, checkpoint_tools.REACHED.wait, 30)
    stopping.stop_at_checkpoints("the bot is shutting down")  # what serve's shutdown does
    checkpoint_tools.RELEASE.set()
    outcome = await drive_a
    assert outcome.status == "handed_over", outcome.error
    assert checkpoint_tools.PROCESSED == [0, 1, 2, 3, 4], "it did not stop at its checkpoint"
    assert await repo_a.release_leases("worker-a", now=T0) == [run_id]

    repo_b = await database.open()
    other = Runner(repo_b, config, worker_id="worker-b", clock=Clock(T0 + timedelta(seconds=1)))
    [taken] = await other.recover_stale_runs()
    assert taken.status == "completed", taken.error
    assert checkpoint_tools.RESUMED_FROM == [None, {"next": 5}]
    assert list(range(10)) == checkpoint_tools.PROCESSED
    approval = await repo_b.get_approval(approval_id)
    assert approval is not None and approval.result == "migrated 10 tenants"


async def test_progress_reaches_the_runners_progress_hook(database: Database) -> None:
    runner = Runner(await database.open(), long_config(), worker_id="worker-a", clock=Clock())
    seen: list[ToolProgress] = []
    runner.drives.on_progress = seen.append
    run_id, _ = await started(runner, "migrate_tenants", {"count": 3})
    await runner.resume(run_id)
    await asyncio.sleep(0)  # progress from the tool's thread lands on the loop
    assert [(p.tool_name, p.done, p.total, p.note) for p in seen] == [
        ("migrate_tenants", 1, 3, "t0"),
        ("migrate_tenants", 2, 3, "t1"),
        ("migrate_tenants", 3, 3, "t2"),
    ]
    assert {p.run_id for p in seen} == {run_id}


async def test_outside_the_bot_the_api_does_nothing() -> None:
    """A tool's own tests call it directly: nothing to store, nothing to resume."""
    assert last_checkpoint() is None
    await checkpoint({"next": 1})  # awaitable, like in an async tool
    checkpoint({"next": 2})
    progress(1, 2, "x")
    with pytest.raises(ValueError, match="64 KiB"):
        checkpoint("x" * 70_000)
    with pytest.raises(ValueError, match="JSON value"):
        checkpoint({1, 2})


async def test_a_call_needing_no_approval_finishes_through_a_shutdown(database: Database) -> None:
    """Its checkpoints are not stored (the run's history replays it from its start), so a
    shutdown does not stop it half-way: it finishes within the grace, as it always did."""
    checkpoint_tools.reset(stop_at=2)
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.checkpoint_tools:migrate_tenants"],
        run_lease="1m",
    )
    runner = Runner(await database.open(), config, worker_id="worker-a", clock=Clock())
    drive = asyncio.create_task(runner.start(request(calls(("migrate_tenants", {"count": 5})))))
    await asyncio.get_running_loop().run_in_executor(None, checkpoint_tools.REACHED.wait, 30)
    runner.stop_at_checkpoints("the bot is shutting down")
    checkpoint_tools.RELEASE.set()
    outcome = await drive
    assert outcome.status == "completed", outcome.error
    assert list(range(5)) == checkpoint_tools.PROCESSED
    assert checkpoint_tools.RESUMED_FROM == [None]


async def test_an_async_tool_that_forgets_to_await_checkpoint_is_named_in_an_error(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """``checkpoint(state)`` without ``await`` in an async tool stores nothing: it was silent
    but for Python's anonymous "never awaited" warning (review of issue 19)."""
    runner = Runner(await database.open(), long_config(), worker_id="worker-a", clock=Clock())
    run_id, approval_id = await started(runner, "forgets_await", {"count": 3})
    with caplog.at_level(logging.ERROR, logger="bot.pauses"):
        outcome = await runner.resume(run_id)
    assert outcome.status == "completed", outcome.error
    said = [r.getMessage() for r in caplog.records if r.name == "bot.pauses"]
    assert any("forgets_await called checkpoint() without await" in m for m in said), said
    assert await runner.repo.get_checkpoint(approval_id) is None
