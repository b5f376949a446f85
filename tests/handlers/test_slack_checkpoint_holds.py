"""Pause at a long tool's checkpoint, end to end (issue 19 §2, §3): the requester clicks Pause
while an approved 200-item tool runs; it stops at its next checkpoint, the thread's message
shows Resume, and Resume carries the call on from its checkpoint, each item once. Signed
clicks against the real bolt app, runner and storage; Slack is our Slack-compatible server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.handlers.test_slack_holds import with_button
from tests.support import checkpoint_tools
from tests.support.polling import until
from tests.support.scripted_model import calls
from tests.support.slack_harness import Harness, running_bot


@pytest.fixture(autouse=True)
def _fresh_tools() -> None:
    checkpoint_tools.reset(stop_at=50)


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.checkpoint_tools:migrate_tenants"],
        policies={
            **BASE_CONFIG["policies"],
            "migrate_tenants": {"approvers": ["U0APPROVER1"], "ttl": "1h"},
        },
    )
    async with running_bot(config, repo) as harness:
        yield harness


async def test_pause_takes_effect_at_the_next_checkpoint_and_resume_carries_the_call_on(
    slack: Harness,
) -> None:
    await slack.mention("U0REQUESTER", calls(("migrate_tenants", {"count": 200})))
    [card] = slack.cards()
    await slack.server.click("U0APPROVER1", card, "approval_approve")
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, checkpoint_tools.REACHED.wait, 60)
    assert list(range(50)) == checkpoint_tools.PROCESSED

    # The progress message shows the tool's progress and keeps Pause (it lost its buttons
    # at the tool's first progress() before).
    await until(lambda: _has_button(slack, "run_pause"), "the Pause button")
    progress = with_button(slack, "run_pause")
    assert "migrate_tenants: " in progress.text and "/ 200" in progress.text
    await slack.server.click("U0REQUESTER", progress, "run_pause")
    await until(lambda: slack.ephemeral_texts("U0REQUESTER"), "the pause's answer")
    checkpoint_tools.RELEASE.set()
    await slack.settle()

    assert list(range(51)) == checkpoint_tools.PROCESSED, "went past the next checkpoint"
    [(run, hold)] = await slack.repo.list_runs()
    assert run.status == "paused" and hold is not None
    held = with_button(slack, "run_resume")
    assert "Paused by <@U0REQUESTER>" in held.text

    await slack.server.click("U0REQUESTER", held, "run_resume")
    await slack.settle()
    assert list(range(200)) == checkpoint_tools.PROCESSED, "each item processed once"
    assert checkpoint_tools.RESUMED_FROM == [None, {"next": 51}]
    finished = await slack.repo.get_run(run.id)
    assert finished is not None and finished.status == "completed"


def _has_button(slack: Harness, action_id: str) -> bool:
    try:
        with_button(slack, action_id)
    except AssertionError:
        return False
    return True
