"""The MCP server's long waits against what happens meanwhile (issue 20 section 3).

A tool call may wait for hours; the database and the caller's token can change under it. A
token revoked mid-wait ends the wait with a tool error (the request stays, pending), as a
revoked token stops every new call. A database connection dropped mid-wait (a failover, a
proxy closing idle connections) is waited out: ending the call would make a client without
an ``idempotency_key`` ask again, a second card for one question.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Collection
from pathlib import Path

import asyncpg
import httpx2
import pytest

from tests.bot.test_mcp_server import (
    APPROVER,
    CHANNEL,
    Progress,
    _first_answer,
    card_with,
    error_of,
    result_of,
    rows,
    served,
    start_mcp_http,
    stdio_session,
)
from tests.conftest import POSTGRES_URL, _plain, fresh_postgres_database
from tests.faults.harness import eventually
from tests.support.api_support import create_token
from tests.support.serve_process import ROOT, free_port, served_bot

__all__ = ["served"]  # the fixture, imported for pytest


async def _cli(url: str, workdir: Path, *args: str) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        *args,
        env={**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)},
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, (out, err)


async def test_a_token_revoked_mid_wait_ends_the_wait_and_keeps_the_request(
    served: tuple[object, str], tmp_path: Path
) -> None:
    _bot, url = served
    token = await create_token(url, tmp_path, "leaked", CHANNEL)
    async with stdio_session(tmp_path, url, token.token) as session:
        progress = Progress()
        call = asyncio.create_task(
            session.call_tool(
                "request_approval",
                {"action": "Wipe the bucket", "approvers": [APPROVER], "max_wait": 120},
                progress_callback=progress,
            )
        )
        await eventually(lambda: progress.seen, "the call waiting")
        await _cli(url, tmp_path, "api-tokens", "revoke", "leaked")
        said = error_of(await asyncio.wait_for(call, 100))
        assert "revoked or expired while waiting" in said, said
    assert await rows(url, "approvals") == 1  # the request stays, for an operator


@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL: APPROVAL_BOT_TEST_POSTGRES_URL unset")
async def test_a_database_connection_dropped_mid_wait_is_waited_out(tmp_path: Path) -> None:
    async with (
        fresh_postgres_database() as url,
        served_bot(url, tmp_path, extra_config='sweep_interval = "1h"\n') as bot,
    ):
        token = await create_token(url, tmp_path, "agent", CHANNEL)
        serves = await _connections(url)  # kept: this test is about the MCP server's
        async with stdio_session(tmp_path, url, token.token) as session:
            call = asyncio.create_task(
                session.call_tool(
                    "request_approval", {"action": "Failover drill", "approvers": [APPROVER]}
                )
            )
            card = await eventually(lambda: card_with(bot, "Failover drill"), "the card")
            await _drop_connections(url, keep=serves)
            click = await bot.slack.click(APPROVER, card, "approval_approve")
            assert click.status == 200, click.text
            decided = result_of(await asyncio.wait_for(call, 60))
            assert decided["status"] == "approved", decided
    assert "Traceback" not in (tmp_path / "mcp-stderr.log").read_text()


@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL: APPROVAL_BOT_TEST_POSTGRES_URL unset")
async def test_over_http_a_dropped_database_connection_does_not_refuse_a_live_token(
    tmp_path: Path,
) -> None:
    """The bearer check's read on a dropped connection was a 401 (invalid_token) for a live
    token: a client then takes its token for bad (or starts an OAuth flow)."""
    (tmp_path / "served-bot.toml").write_text("")
    async with fresh_postgres_database() as url:
        token = await create_token(url, tmp_path, "service", CHANNEL)
        port = free_port()
        process = await start_mcp_http(tmp_path, url, port)
        endpoint = f"http://127.0.0.1:{port}/mcp"
        try:
            async with httpx2.AsyncClient() as http:
                assert (await _first_answer(http, endpoint, token, process)).status_code == 200
                await _drop_connections(url)
                again = await _first_answer(http, endpoint, token, process)
                assert again.status_code == 200, (again.status_code, again.text)
        finally:
            process.terminate()
            _, err = await asyncio.wait_for(process.communicate(), 20)
        assert "Traceback" not in err.decode()


async def _connections(url: str) -> set[int]:
    """The backends connected to the database now."""
    admin = await asyncpg.connect(_plain(url))
    try:
        found = await admin.fetch(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()
    return {row["pid"] for row in found}


async def _drop_connections(url: str, keep: Collection[int] = ()) -> None:
    """The connections to the database but ``keep`` are dropped, as in a failover."""
    admin = await asyncpg.connect(_plain(url))
    try:
        dropped = await admin.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND NOT pid = ANY($1::int[])",
            list(keep),
        )
    finally:
        await admin.close()
    assert dropped
