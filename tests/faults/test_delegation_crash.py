"""Sub-agents across kill -9 (issue 20 section 1): a parent delegating to two children on a
real ``approval-bot serve``, killed at ``child_ended`` (the second child's end is stored with
the parent's resume claimed; nobody resumed it yet). After the restart the parent resumes,
once, with both children's answers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from playground.slack_server import SlackServer
from tests.faults.harness import REQUESTER, Deployment, eventually, quiet_sweeps
from tests.support.serve_process import ROOT

AGENTS = """
[agents.researcher]
description = "looks things up, read-only"
tools = ["tests.faults.tools:get_status"]

[agents.writer]
description = "writes notes"
"""


def delegating(*pairs: tuple[str, str]) -> str:
    calls = [{"name": "delegate", "arguments": {"agent": a, "task": t}} for a, t in pairs]
    return json.dumps({"prompt": "please", "tool_calls": calls})


@pytest.fixture
async def deployment(
    slack: SlackServer, database_url: str, tmp_path: Path
) -> AsyncIterator[Deployment]:
    deployment = Deployment(slack, database_url, tmp_path, extra_config=AGENTS)
    try:
        yield deployment
    finally:
        await deployment.close()


def parent_answers(deployment: Deployment, ts: str) -> list[str]:
    return [
        m.text
        for m in deployment.bot_replies(ts)
        if '"name": "delegate"' in m.text and '"tool_results"' in m.text
    ]


async def test_kill_9_between_a_childs_end_and_the_parents_resume(
    deployment: Deployment,
) -> None:
    first = await deployment.start(failpoint="child_ended")
    asked = await deployment.mention(
        delegating(("researcher", "task-alpha"), ("writer", "task-beta"))
    )
    await deployment.crashed_at(first, "child_ended")
    repo = await deployment.repo()
    rows = await deployment.rows(
        "SELECT id, status FROM runs WHERE parent_run_id IS NULL AND agent IS NULL"
    )
    ((parent_id, status),) = rows
    assert status == "resuming", "the claim was stored with the child's end"

    await deployment.start()
    found = await eventually(
        lambda: parent_answers(deployment, asked.ts), "the parent's answer after the restart"
    )
    await quiet_sweeps(deployment)
    assert len(parent_answers(deployment, asked.ts)) == 1, "the parent answered once"
    assert "task-alpha" in found[0] and "task-beta" in found[0]
    parent = await repo.get_run(parent_id)
    assert parent is not None and parent.status == "completed"
    trail = [e.event for e in await repo.audit_trail(run_id=parent_id)]
    assert trail.count("run_resumed") == 1, trail
    assert trail.count("delegation_settled") == 2, trail
    children = await repo.children_of(parent_id)
    assert sorted(c.status for c in children) == ["completed", "completed"]


async def test_kill_9_after_the_pause_that_started_the_children_is_stored(
    deployment: Deployment,
) -> None:
    """The children are inserted with the parent's pause and nobody drove them yet: after the
    restart the sweeper takes each over (its lease ran out), and the parent resumes once."""
    first = await deployment.start(failpoint="pause_stored")
    asked = await deployment.mention(
        delegating(("researcher", "task-gamma"), ("writer", "task-delta"))
    )
    await deployment.crashed_at(first, "pause_stored")
    running = await deployment.rows(
        "SELECT agent, status FROM runs WHERE parent_run_id IS NOT NULL ORDER BY agent"
    )
    assert running == [("researcher", "running"), ("writer", "running")]

    await deployment.start()
    found = await eventually(
        lambda: parent_answers(deployment, asked.ts), "the parent's answer after the restart"
    )
    await quiet_sweeps(deployment)
    assert len(parent_answers(deployment, asked.ts)) == 1, "the parent answered once"
    assert "task-gamma" in found[0] and "task-delta" in found[0]
    repo = await deployment.repo()
    ((parent_id,),) = await deployment.rows("SELECT id FROM runs WHERE parent_run_id IS NULL")
    trail = [e.event for e in await repo.audit_trail(run_id=parent_id)]
    assert trail.count("run_resumed") == 1, trail
    assert len(await repo.children_of(parent_id)) == 2, "no child was started twice"


async def test_kill_9_after_a_held_parents_pause_started_its_children(
    slack: SlackServer, database_url: str, tmp_path: Path
) -> None:
    """Found by review: an operator's Pause asked for while the parent's response runs (its
    delegate call past its safe point, a slow call beside it) holds the children that pause
    starts. The holds were written after the pause's commit, so a kill -9 at
    ``pause_stored`` left the children without them: after the restart the sweeper took
    them over and they worked on while their parent stayed paused. They are inserted held,
    in the pause's transaction."""
    deployment = Deployment(
        slack, database_url, tmp_path, extra_config=AGENTS, slow_tool_seconds=3.0
    )
    try:
        first = await deployment.start(failpoint="pause_stored")
        calls = [
            {"name": "slow_status", "arguments": {"service": "web"}},
            {"name": "delegate", "arguments": {"agent": "writer", "task": "task-epsilon"}},
        ]
        asked = await deployment.mention(json.dumps({"prompt": "please", "tool_calls": calls}))
        await eventually(
            lambda: deployment.executions("slow_status", "web") == 1, "the slow call running"
        )
        ((parent_id,),) = await deployment.rows("SELECT id FROM runs WHERE parent_run_id IS NULL")
        paused = await cli(deployment, "runs", "pause", parent_id, "--as", REQUESTER)
        assert paused.returncode == 0, paused.stdout
        await deployment.crashed_at(first, "pause_stored")

        await deployment.start()  # its sweeper takes the child over once its lease ran out
        for _ in range(600):  # until the take-over's drive held or ended the child
            rows = await deployment.rows("SELECT status FROM runs WHERE parent_run_id IS NOT NULL")
            if rows in ([("paused",)], [("completed",)]):
                break
            await asyncio.sleep(0.1)
        await quiet_sweeps(deployment)
        ((status, held),) = await deployment.rows(
            "SELECT r.status, h.action FROM runs r LEFT JOIN run_holds h ON h.run_id = r.id "
            "WHERE r.parent_run_id IS NOT NULL"
        )
        assert (status, held) == ("paused", "pause"), "the child is held with its parent"
        assert not any("task-epsilon" in m.text for m in deployment.bot_replies(asked.ts)[1:])
    finally:
        await deployment.close()


async def cli(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": deployment.database_url, "PYTHONPATH": str(ROOT)}
    env.pop("SLACK_BOT_TOKEN", None)
    command = [sys.executable, "-m", "bot.cli", "--config", str(deployment.config), *args]
    return await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, check=False
    )
