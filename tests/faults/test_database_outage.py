"""The database goes away for a few seconds under a real ``approval-bot serve``.

PostgreSQL: the bot reaches its server through a TCP proxy in the test (``tests/support/
tcp_proxy.py``), which stops accepting and closes every open connection, then listens again;
nothing else on the machine loses its PostgreSQL. SQLite: the database file and its WAL are
made immutable (``chattr +i``): every write fails with "disk I/O error" on the bot's open
connections and "readonly database" on new ones, then they are made writable again. (``chmod``
is no outage here: these tests run as root, which ignores file modes, and a mode never
applies to a file already open. The ``-shm`` file stays writable: SQLite maps it into memory,
and an immutable mapping kills the process with SIGBUS, which is a crash, not an outage.)

What must hold: a tool that finishes during the outage keeps its result and records it once
the database is back (the thread shows the real result, the call ran once); the outage is
logged as one line when it starts and one when it ends, not as a traceback a second; /readyz
says 503 while the database cannot be written.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from playground.slack_server import SlackServer
from tests.conftest import POSTGRES_URL, fresh_postgres_database
from tests.faults.harness import (
    PATIENCE,
    Deployment,
    Replica,
    approve,
    assert_settled,
    eventually,
    request,
)
from tests.support.tcp_proxy import TcpProxy, proxied

SLOW_RESTART = request(("slow_restart", {"service": "outage"}))
# The database stays away this much longer after the tool returned.
OUTAGE_AFTER_TOOL = 3.0
OUTAGE_STARTED = "database unavailable since"
OUTAGE_ENDED = "database available again"


@contextlib.asynccontextmanager
async def postgres_outage(
    slack: SlackServer, tmp_path: Path
) -> AsyncIterator[tuple[Deployment, TcpProxy]]:
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL variant: APPROVAL_BOT_TEST_POSTGRES_URL is not set")
    async with fresh_postgres_database() as url, proxied(url) as proxy:
        deployment = Deployment(
            slack,
            url,
            tmp_path,
            run_lease="20s",
            slow_tool_seconds=4.0,
            bot_database_url=proxy.url_for(url),
        )
        try:
            yield deployment, proxy
        finally:
            await deployment.close()


def immutable(paths: list[Path], on: bool) -> None:
    flag = "+i" if on else "-i"
    existing = [str(p) for p in paths if p.exists()]
    subprocess.run(["chattr", flag, *existing], check=True, capture_output=True)


def require_chattr(tmp_path: Path) -> None:
    """Skip (fail on CI) unless this machine can make a file immutable."""
    probe = tmp_path / "chattr-probe"
    probe.write_text("x")
    ok = shutil.which("chattr") is not None
    if ok:
        ok = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must be able to make the SQLite files immutable (chattr +i)")
        pytest.skip("chattr +i is not available here (needs root on ext4/xfs/btrfs)")


@contextlib.asynccontextmanager
async def sqlite_outage(
    slack: SlackServer, tmp_path: Path
) -> AsyncIterator[tuple[Deployment, list[Path]]]:
    require_chattr(tmp_path)
    db = tmp_path / "bot.db"
    files = [db, Path(f"{db}-wal")]
    deployment = Deployment(
        slack, f"sqlite:///{db}", tmp_path, run_lease="20s", slow_tool_seconds=4.0
    )
    try:
        yield deployment, files
    finally:
        immutable(files, False)  # whatever happened, leave the files deletable
        await deployment.close()


async def tool_finishes_during_outage(
    deployment: Deployment,
    cut: Callable[[], Awaitable[None]],
    restore: Callable[[], Awaitable[None]],
) -> None:
    bot = await deployment.start()
    asked = await deployment.mention(SLOW_RESTART)
    approval_id = await approve(deployment, asked.ts)
    await eventually(
        lambda: deployment.executions("slow_restart", "outage", "started") == 1,
        "the approved slow tool to start",
    )
    await cut()
    try:
        await eventually(
            lambda: deployment.executions("slow_restart", "outage", "finished") == 1,
            "the tool to finish during the outage",
        )
        await asyncio.sleep(OUTAGE_AFTER_TOOL)
    finally:
        await restore()

    def outcome() -> list[str]:
        return [
            m.text
            for m in deployment.bot_replies(asked.ts)
            if "restarted outage slowly" in m.text or "Outcome unknown" in m.text
        ]

    (said,) = await eventually(outcome, lambda: f"an answer; the bot said {bot.output()}")
    assert "Outcome unknown" not in said, f"the result was lost: {said}\n{bot.output()}"
    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="restarted outage slowly",
        card_says="ran",
    )
    assert deployment.executions("slow_restart", "outage", "started") == 1
    assert bot.process.returncode is None, "the bot died with its database"
    assert OUTAGE_STARTED in bot.output(100_000), "the outage never reached the bot"


async def test_postgres_outage_keeps_the_tools_result(slack: SlackServer, tmp_path: Path) -> None:
    async with postgres_outage(slack, tmp_path) as (deployment, proxy):
        await tool_finishes_during_outage(deployment, proxy.cut, proxy.restore)


async def test_sqlite_read_only_keeps_the_tools_result(slack: SlackServer, tmp_path: Path) -> None:
    async with sqlite_outage(slack, tmp_path) as (deployment, files):

        async def cut() -> None:
            immutable(files, True)

        async def restore() -> None:
            immutable(files, False)

        await tool_finishes_during_outage(deployment, cut, restore)


async def readyz(replica: Replica) -> int:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{replica.url}/readyz", timeout=aiohttp.ClientTimeout(total=10)) as r,
        ):
            return r.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def test_postgres_outage_is_logged_once(slack: SlackServer, tmp_path: Path) -> None:
    """Every loop (the sweeper and the due-retry check, each once a second here) fails for
    seconds: one line when the outage starts, one when it ends, no traceback."""
    async with postgres_outage(slack, tmp_path) as (deployment, proxy):
        bot = await deployment.start()
        await proxy.cut()
        try:
            await eventually(
                lambda: OUTAGE_STARTED in bot.output(1_000_000),
                lambda: f"the outage to be logged; the bot logged {bot.output()}",
                timeout=30,
            )
            await asyncio.sleep(4 * deployment.sweep_seconds)  # several sweeps fail
            assert await readyz(bot) == 503
        finally:
            await proxy.restore()
        # As an orchestrator's readiness probe does, every few seconds.
        deadline = asyncio.get_running_loop().time() + PATIENCE
        while await readyz(bot) != 200:
            assert asyncio.get_running_loop().time() < deadline, "never ready again"
            await asyncio.sleep(1)
        await eventually(
            lambda: OUTAGE_ENDED in bot.output(1_000_000),
            lambda: f"the end of the outage to be logged; the bot logged {bot.output()}",
        )
        logged = bot.output(1_000_000)
        assert logged.count(OUTAGE_STARTED) == 1, logged
        assert logged.count(OUTAGE_ENDED) == 1, logged
        assert "Traceback" not in logged, logged


async def test_postgres_outage_longer_than_the_lease_still_records_the_result(
    slack: SlackServer, tmp_path: Path
) -> None:
    """The database stays away twice as long as the run's lease after the tool returned:
    the result is still recorded once it is back (late, and audited so), the run carries
    on, and the outage is two lines in the log, no traceback."""
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL variant: APPROVAL_BOT_TEST_POSTGRES_URL is not set")
    async with fresh_postgres_database() as url, proxied(url) as proxy:
        deployment = Deployment(
            slack,
            url,
            tmp_path,
            run_lease="6s",
            slow_tool_seconds=3.0,
            bot_database_url=proxy.url_for(url),
        )
        try:
            bot = await deployment.start()
            asked = await deployment.mention(SLOW_RESTART)
            approval_id = await approve(deployment, asked.ts)
            await eventually(
                lambda: deployment.executions("slow_restart", "outage", "started") == 1,
                "the approved slow tool to start",
            )
            await proxy.cut()
            try:
                await eventually(
                    lambda: deployment.executions("slow_restart", "outage", "finished") == 1,
                    "the tool to finish during the outage",
                )
                await asyncio.sleep(12)  # twice the lease
            finally:
                await proxy.restore()

            def outcome() -> list[str]:
                return [
                    m.text
                    for m in deployment.bot_replies(asked.ts)
                    if "restarted outage slowly" in m.text or "Outcome unknown" in m.text
                ]

            (said,) = await eventually(outcome, lambda: f"an answer; the bot said {bot.output()}")
            assert "Outcome unknown" not in said, f"the result was lost: {said}\n{bot.output()}"
            await assert_settled(
                deployment,
                asked.ts,
                approval_id,
                status="executed",
                answer="restarted outage slowly",
                card_says="ran",
            )
            trail = await (await deployment.repo()).audit_trail(approval_id=approval_id)
            finished = [e.detail or {} for e in trail if e.event == "execution_finished"]
            assert len(finished) == 1, [e.event for e in trail]
            assert finished[0].get("recorded_late") is True, finished
            assert deployment.executions("slow_restart", "outage", "started") == 1
            await eventually(
                lambda: OUTAGE_ENDED in bot.output(1_000_000),
                lambda: f"the end of the outage to be logged; the bot logged {bot.output()}",
            )
            logged = bot.output(1_000_000)
            assert "Traceback" not in logged, logged
            assert "could not tell its thread" not in logged, logged
        finally:
            await deployment.close()
