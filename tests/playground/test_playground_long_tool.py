"""The playground's long tool (issue 19, section 3): ``migrate tenants`` migrates 200 pretend
tenants with a checkpoint after each and its progress on the thread; stopping the playground
half-way and starting it again carries the call on from its last checkpoint, by itself, and no
tenant is migrated twice. The whole playground: the real bot, our Slack server, signed requests.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

import pytest

from playground.app import CHANNEL, running_playground
from playground.demo import DEMO_STATE_FILE
from playground.demo_model import choose_tool
from playground.migrations import ITEM_SECONDS_ENV
from playground.slack_server import Message

ANA, BO = "U0REQUESTER", "U0APPROVER1"


def migrated(data_dir: Path) -> dict[str, int]:
    path = data_dir / DEMO_STATE_FILE  # where the demo tools keep their pretend state
    if not path.exists():
        return {}
    with sqlite3.connect(path) as db:
        try:
            return dict(db.execute("SELECT tenant, times FROM migrated").fetchall())
        except sqlite3.OperationalError:  # no tenant migrated yet
            return {}


async def until(check, what: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := check()):
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)
    return value


def test_the_demo_knows_the_long_tool() -> None:
    assert choose_tool("migrate tenants") == ("migrate_tenants", {"count": 200})


async def test_stopping_the_playground_half_way_carries_the_migration_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ITEM_SECONDS_ENV, "0.03")
    async with running_playground(data_dir=tmp_path) as pg:
        asked = await pg.server.mention(ANA, CHANNEL, "<@U0BOT> migrate tenants")
        card: Message = await until(
            lambda: next(
                (m for m in pg.server.messages if "migrate_tenants" in str(m.blocks)), None
            ),
            "the approval card",
        )
        await pg.server.click(BO, card, "approval_approve")
        await until(lambda: len(migrated(tmp_path)) >= 10, "10 tenants migrated")
        await until(
            # On the progress message, or (the playground streams answers) its task's details.
            lambda: any(
                "migrate_tenants: " in shown and "/ 200" in shown
                for m in pg.server.messages
                for shown in [m.text, *(str(t.get("details", "")) for t in m.tasks)]
            ),
            "the progress message to show the migration",
        )
    stopped_at = len(migrated(tmp_path))
    assert stopped_at < 200, "the stop waited for the whole migration"

    async with running_playground(data_dir=tmp_path) as pg:
        thread = asked.message.ts  # type: ignore[union-attr]
        # The answer streams in word by word: wait for the whole sentence, not its first words.
        answer = await until(
            lambda: next(
                (
                    m
                    for m in pg.server.thread(CHANNEL, thread)
                    if re.search(r"migrated 200 tenants \(resumed at tenant \d+\)", m.text)
                ),
                None,
            ),
            "the migration to finish after the restart",
        )
        assert f"resumed at tenant {stopped_at + 1})" in answer.text, answer.text
    done = migrated(tmp_path)
    assert len(done) == 200 and set(done.values()) == {1}, "a tenant was migrated twice"
