"""Operators pause and resume runs across processes (issue 19 §2): pause on one replica,
restart both, resume on the other, and the run continues once, from where it was.

Real ``approval-bot serve`` processes on one database: on PostgreSQL two replicas (the run
driven by the first, Pause clicked on the second, both killed with SIGKILL and started again,
Resume clicked on the other one); on SQLite one process, killed and started again.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from playground.slack_server import Message
from tests.faults.harness import (
    APPROVER,
    CHANNEL,
    PATIENCE,
    REQUESTER,
    Deployment,
    eventually,
    quiet_sweeps,
    request,
)
from tests.faults.hold_tools import RELEASE_ENV


def with_button(deployment: Deployment, thread_ts: str, action_id: str) -> Message | None:
    found = [
        m
        for m in deployment.bot_replies(thread_ts)
        if any(e.get("action_id") == action_id for _, e in m.buttons())
    ]
    return found[-1] if found else None


async def test_pause_restart_resume_on_the_other_replica(
    deployment: Deployment, tmp_path: Path
) -> None:
    release = tmp_path / "release-slow-check"
    os.environ[RELEASE_ENV] = str(release)  # the bots inherit the test's environment
    try:
        await _pause_restart_resume(deployment, release)
    finally:
        os.environ.pop(RELEASE_ENV, None)


async def _pause_restart_resume(deployment: Deployment, release: Path) -> None:
    deployment.config.write_text(
        deployment.config.read_text().replace(
            "tools = [\n", 'tools = [\n    "tests.faults.hold_tools:slow_check",\n', 1
        )
    )
    postgres = deployment.database_url.startswith("postgresql")
    first = await deployment.start()
    second = await deployment.start() if postgres else first
    slack = deployment.slack
    slack.ack_timeout = 30.0

    asked = await slack.mention(
        REQUESTER,
        CHANNEL,
        f"<@U0BOT> {request(('slow_check', {'service': 'web'}))}",
        bot_url=first.events_url,
    )
    assert asked.status == 200 and asked.message is not None
    thread = asked.message.ts
    await eventually(
        lambda: deployment.executions("slow_check", "web", "started") == 1, "slow_check to start"
    )
    progress = await eventually(
        lambda: with_button(deployment, thread, "run_pause"), "the Pause button"
    )
    # Pause, clicked on the other replica than the one driving the run.
    click = await slack.click(APPROVER, progress, "run_pause", bot_url=second.events_url)
    assert click.status == 200
    repo = await deployment.repo()
    run_id = (await repo.list_runs())[0][0].id
    await _until_held(deployment, run_id)
    release.touch()  # the executing call finishes and keeps its result

    held = await eventually(
        lambda: with_button(deployment, thread, "run_resume"), "the Resume button"
    )
    run = await repo.get_run(run_id)
    assert run is not None and run.status == "paused" and run.lease_owner is None
    assert "Paused by" in held.text

    # Restart everything: SIGKILL, then new processes on the same database.
    for replica in {first.name: first, second.name: second}.values():
        await deployment.kill(replica, signal.SIGKILL)
    again = await deployment.start()
    other = await deployment.start() if postgres else again
    await quiet_sweeps(deployment, 3)
    run = await repo.get_run(run_id)
    assert run is not None and run.status == "paused", "nobody resumes a held run by itself"
    assert deployment.answers(thread, "checked web slowly") == []

    held = with_button(deployment, thread, "run_resume")
    assert held is not None
    click = await slack.click(REQUESTER, held, "run_resume", bot_url=other.events_url)
    assert click.status == 200
    await deployment.answer(thread, "checked web slowly")
    await quiet_sweeps(deployment, 2)

    run = await repo.get_run(run_id)
    assert run is not None and run.status == "completed", run
    assert deployment.executions("slow_check", "web", "started") == 1, "from where it was"
    assert deployment.executions("slow_check", "web", "finished") == 1
    assert len(deployment.answers(thread, "checked web slowly")) == 1, "continued once"
    trail = [e.event for e in await repo.audit_trail(run_id=run_id)]
    assert trail.count("run_held") == 1 and trail.count("run_resumed") == 1, trail
    assert trail.count("run_pause_requested") == 1 and trail.count("run_resume_requested") == 1


async def _until_held(deployment: Deployment, run_id: str) -> None:
    """Until the database has the run's hold (the click is handled in the background)."""
    repo = await deployment.repo()
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while await repo.hold_of(run_id) is None:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"within {PATIENCE:.0f}s: the pause of {run_id} recorded")
        await asyncio.sleep(0.1)
