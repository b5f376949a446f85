"""A long tool's ``progress()`` on the thread's progress message (issue 19, section 3):
``migrate_tenants: 7,431 / 10,000 (acme)``, edited at most once a second (a burst of reports
is one edit now and one with the latest later), never over the run's answer. SQLite and
PostgreSQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest

from bot.pauses import ToolProgress
from handlers.blocks.progress import tool_progress_text
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support import checkpoint_tools
from tests.support.slack_harness import CHANNEL, Harness, running_bot

REQUESTER = "U0REQUESTER"
PROGRESS = re.compile(r"^:hourglass_flowing_sand: migrate_tenants: (\d+) / 50 \(t(\d+)\)$")


@pytest.fixture(autouse=True)
def _fresh_tools() -> None:
    checkpoint_tools.reset()


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.checkpoint_tools:migrate_tenants"]
    )
    async with running_bot(config, repo) as harness:
        yield harness


def test_the_progress_line() -> None:
    line = tool_progress_text(ToolProgress("run_1", "migrate_tenants", 7431, 10000, "acme"))
    assert line == ":hourglass_flowing_sand: migrate_tenants: 7,431 / 10,000 (acme)"
    assert tool_progress_text(ToolProgress("run_1", "scan", 12)).endswith("scan: 12")
    hostile = tool_progress_text(ToolProgress("run_1", "scan", 1, 2, "<!channel> & co"))
    assert hostile.endswith("scan: 1 / 2 (&lt;!channel&gt; &amp; co)")


async def test_a_burst_of_progress_is_one_edit_and_never_replaces_the_answer(
    slack: Harness,
) -> None:
    text = json.dumps({"tool_calls": [{"name": "migrate_tenants", "arguments": {"count": 50}}]})
    await slack.mention(REQUESTER, text)
    await slack.bot.services.background.idle()
    assert list(range(50)) == checkpoint_tools.PROCESSED

    shown = [
        c.args.get("text", "")
        for c in slack.server.calls_to("chat.update")
        if PROGRESS.match(str(c.args.get("text", "")))
    ]
    assert 1 <= len(shown) <= 2, shown  # 50 reports within a second: not 50 edits
    first = PROGRESS.match(shown[0])
    assert first is not None and int(first[1]) == int(first[2]) + 1
    replies = [m for m in slack.server.messages if m.bot_id and m.channel == CHANNEL]
    assert replies, "nothing in the thread"
    assert "migrated 50 tenants" in replies[-1].text, [m.text for m in replies]
    assert not any(PROGRESS.match(m.text) for m in replies), "progress outlived the answer"
