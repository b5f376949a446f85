"""The bot's own MCP server (issue 20 section 3), driven by the ``mcp`` SDK's client.

``approval-bot mcp`` runs as a process of its own, as Claude Code or Cursor start it (stdio)
or as a service (``--http PORT`` with a bearer token), on the database of a real
``approval-bot serve`` whose sweeper posts the card to our Slack server; a person clicks the
card (a signed request to serve) and the tool call returns the decision, having sent
progress notifications while it waited. A client that goes away leaves the request; the same
``idempotency_key`` from a new client picks up the wait (``max_wait`` returns it pending
first, for clients that cut long calls off). Bad arguments are tool errors and
store nothing; a missing or unknown token is refused over HTTP before any MCP message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from playground.slack_server import Message
from tests.faults.harness import eventually
from tests.support.api_support import Token, create_token
from tests.support.serve_process import ROOT, ServedBot, free_port, served_bot

CHANNEL = "C0OPS"
OTHER_CHANNEL = "C0SECRET"
APPROVER = "U0APPROVER1"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ServedBot, str]]:
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    # The sweeper sweeps once at start and then not for an hour: the cards of the requests
    # stored later by `approval-bot mcp` come from serve's card outbox (run_card_outbox).
    extra = 'sweep_interval = "1h"\n'
    async with served_bot(url, tmp_path, extra_config=extra, capture_output=True) as bot:
        yield bot, url


def mcp_command(tmp_path: Path, *args: str) -> list[str]:
    return ["-m", "bot.cli", "--config", str(tmp_path / "served-bot.toml"), "mcp", *args]


def mcp_env(url: str, token: str | None = None) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    env.pop("APPROVAL_BOT_TOKEN", None)
    if token is not None:
        env["APPROVAL_BOT_TOKEN"] = token
    return env


async def start_mcp_http(
    tmp_path: Path, url: str, port: int, *args: str
) -> asyncio.subprocess.Process:
    """``approval-bot mcp --http PORT`` (and ``args``) on the database at ``url``, its
    stderr piped for the test to read."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *mcp_command(tmp_path, "--http", str(port), *args),
        env=mcp_env(url),
        cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


@contextlib.asynccontextmanager
async def stdio_session(
    tmp_path: Path, url: str, token: str, *args: str
) -> AsyncIterator[ClientSession]:
    """``approval-bot mcp`` started by the SDK's stdio client, as an MCP host starts it."""
    params = StdioServerParameters(
        command=sys.executable,
        args=mcp_command(tmp_path, *args),
        env=mcp_env(url, token),
        cwd=str(tmp_path),
    )
    with (tmp_path / "mcp-stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


class Progress:
    """The progress notifications a call received."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))


def card_with(bot: ServedBot, text: str) -> Message | None:
    for message in bot.slack.messages:
        shown = message.channel == CHANNEL and text in json.dumps(message.blocks)
        if shown and any(message.buttons()):
            return message
    return None


def result_of(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    structured: dict[str, Any] = result.structured_content
    return structured


def error_of(result: Any) -> str:
    assert result.is_error, result
    return " ".join(part.text for part in result.content)


async def rows(url: str, table: str) -> int:
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
        [(count,)] = db.execute(f"SELECT COUNT(*) FROM {table}").fetchall()
    return int(count)


async def test_a_client_over_stdio_gets_the_decision_after_a_click_with_progress(
    served: tuple[ServedBot, str], tmp_path: Path
) -> None:
    bot, url = served
    token = await create_token(url, tmp_path, "claude-code", CHANNEL, "--requester", "U0DEV")
    async with stdio_session(tmp_path, url, token.token) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        assert {"request_approval", "ask_human"} <= listed
        progress = Progress()
        arguments = {
            "action": "Drop the staging database",
            "details": {"database": "staging", "rows": 1200},
            "approvers": [APPROVER],
            "idempotency_key": "drop-staging-1",
        }
        call = asyncio.create_task(
            session.call_tool("request_approval", arguments, progress_callback=progress)
        )
        card = await eventually(
            lambda: card_with(bot, "Drop the staging database"),
            lambda: f"the card (the call: {call})",
        )
        assert "staging" in json.dumps(card.blocks)
        assert not call.done(), "the call returned before anyone decided"
        click = await bot.slack.click(APPROVER, card, "approval_approve")
        assert click.status == 200, click.text
        decided = result_of(await asyncio.wait_for(call, 60))
        assert decided["status"] == "approved", decided
        assert decided["decided_by"]["id"] == APPROVER
        assert decided["details"] == arguments["details"]
        assert progress.seen, "no progress notification while it waited"
        assert any("waiting for" in (message or "") for _, _, message in progress.seen)
        values = [value for value, _, _ in progress.seen]
        assert values == sorted(values) and len(set(values)) == len(values)

        # A question, answered from its card's buttons.
        asking = asyncio.create_task(
            session.call_tool(
                "ask_human",
                {
                    "question": "Which region first?",
                    "choices": ["eu-west", "us-east"],
                    "answerers": [APPROVER],
                },
                progress_callback=progress,
            )
        )
        card = await eventually(lambda: card_with(bot, "Which region first?"), "the question")
        click = await bot.slack.click(APPROVER, card, "question_choice:1")
        assert click.status == 200, click.text
        answered = result_of(await asyncio.wait_for(asking, 60))
        assert answered["status"] == "answered" and answered["answer"] == "us-east"
    assert await rows(url, "api_requests") == 2


async def test_the_same_idempotency_key_after_the_client_went_away_picks_up_the_wait(
    served: tuple[ServedBot, str], tmp_path: Path
) -> None:
    bot, url = served
    token = await create_token(url, tmp_path, "cursor", CHANNEL)
    arguments = {
        "action": "Rotate the API keys",
        "details": {"scope": "all"},
        "approvers": [APPROVER],
        "idempotency_key": "rotate-keys",
    }
    async with stdio_session(tmp_path, url, token.token) as session:
        call = asyncio.create_task(session.call_tool("request_approval", arguments))
        card = await eventually(lambda: card_with(bot, "Rotate the API keys"), "the card")
        call.cancel()  # the client goes away: its process and the server's end
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await call
    assert await rows(url, "approvals") == 1
    async with stdio_session(tmp_path, url, token.token) as session:
        # A client that cuts long calls off asks to wait a second at most: still pending.
        brief = result_of(await session.call_tool("request_approval", {**arguments, "max_wait": 1}))
        assert brief["status"] == "pending" and "same idempotency_key" in brief["note"]
        progress = Progress()
        again = asyncio.create_task(
            session.call_tool("request_approval", arguments, progress_callback=progress)
        )
        await eventually(lambda: progress.seen, "the new call waiting")
        assert not again.done()
        click = await bot.slack.click(APPROVER, card, "approval_approve")
        assert click.status == 200, click.text
        decided = result_of(await asyncio.wait_for(again, 60))
        assert decided["status"] == "approved", decided
        assert decided["decided_by"]["id"] == APPROVER
        # Once decided, the same key returns the decision at once.
        assert result_of(await session.call_tool("request_approval", arguments)) == decided
    assert await rows(url, "approvals") == 1
    # The server whose client went away mid-wait stopped quietly.
    assert "Traceback" not in (tmp_path / "mcp-stderr.log").read_text()


async def test_over_http_a_bearer_token_is_required_and_the_decision_returns(
    served: tuple[ServedBot, str], tmp_path: Path
) -> None:
    bot, url = served
    token = await create_token(url, tmp_path, "service", CHANNEL)
    port = free_port()
    process = await start_mcp_http(tmp_path, url, port)
    endpoint = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient() as http:
            refused = await _first_answer(http, endpoint, None, process)
            assert refused.status_code == 401
            bad = Token("tok_x", "abt_" + "x" * 43, "")
            assert (await _first_answer(http, endpoint, bad, process)).status_code == 401
        headers = {"Authorization": f"Bearer {token.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120)) as http,
            streamable_http_client(endpoint, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            progress = Progress()
            call = asyncio.create_task(
                session.call_tool(
                    "request_approval",
                    {"action": "Scale the cluster to 40 nodes", "approvers": [APPROVER]},
                    progress_callback=progress,
                )
            )
            card = await eventually(lambda: card_with(bot, "Scale the cluster"), "the card")
            click = await bot.slack.click(APPROVER, card, "approval_approve")
            assert click.status == 200, click.text
            decided = result_of(await asyncio.wait_for(call, 60))
            assert decided["status"] == "approved" and decided["channel"] == CHANNEL
            assert progress.seen
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 20)


async def _first_answer(
    http: httpx2.AsyncClient, endpoint: str, token: Token | None, process: Any
) -> httpx2.Response:
    """An MCP ``initialize`` POSTed as a client would, once the server listens."""
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token.token}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    for _ in range(600):
        assert process.returncode is None, (await process.stderr.read()).decode()
        try:
            return await http.post(endpoint, json=body, headers=headers)
        except httpx2.TransportError:
            await asyncio.sleep(0.1)
    raise AssertionError("the MCP server never listened")


async def test_bad_arguments_are_tool_errors_and_store_nothing(tmp_path: Path) -> None:
    """No serve needed: nothing gets as far as a card."""
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    (tmp_path / "served-bot.toml").write_text("")
    token = await create_token(url, tmp_path, "agent", f"{CHANNEL},C0OTHER")
    good = {"action": "Deploy", "channel": CHANNEL, "details": {"v": 1}}
    bad_calls = [
        ({**good, "channel": "general"}, "channel"),  # not a channel id
        ({**good, "channel": OTHER_CHANNEL}, "may not post to C0SECRET"),
        ({k: v for k, v in good.items() if k != "channel"}, "channel: name one of"),
        ({**good, "action": "   "}, "action: must be a non-empty string"),
        ({**good, "action": "x" * 300}, "action: may be at most 255"),
        ({**good, "details": [1, 2]}, "details"),
        ({**good, "details": "a string"}, "details"),
        ({**good, "details": {"blob": "x" * 20000}}, "details: may be at most"),
        ({**good, "approvers": ["ana"]}, "approvers"),
        ({**good, "timeout": "soon"}, "timeout"),
        ({**good, "timeout": 10**30}, "timeout: may be at most 30 days"),  # overflowed
        ({**good, "idempotency_key": "k" * 300}, "idempotency_key"),
        ({**good, "max_wait": -1}, "max_wait"),
        ({"details": {}}, "action"),  # missing
    ]
    async with stdio_session(tmp_path, url, token.token) as session:
        for arguments, expected in bad_calls:
            said = error_of(await session.call_tool("request_approval", arguments))
            assert expected in said, (arguments, said)
        question = {"question": "Which?", "channel": CHANNEL, "choices": ["a", "a"]}
        said = error_of(await session.call_tool("ask_human", question))
        assert "choices" in said
        said = error_of(await session.call_tool("ask_human", {**question, "choices": ["a"]}))
        assert "answerers" in said  # the token names no requester: say who may answer
        # The server is still there after every refusal.
        assert {t.name for t in (await session.list_tools()).tools} >= {"request_approval"}
    assert await rows(url, "approvals") == 0
    assert await rows(url, "api_requests") == 0
    assert "Traceback" not in (tmp_path / "mcp-stderr.log").read_text()


async def test_stdio_without_a_live_token_does_not_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    (tmp_path / "served-bot.toml").write_text("")
    token = await create_token(url, tmp_path, "agent", CHANNEL)
    cases = [
        (None, (), "needs an API token"),
        ("abt_" + "y" * 43, (), "unknown, revoked or expired"),
        (token.token, ("--channel", OTHER_CHANNEL), "not one of the token's channels"),
    ]
    for bearer, args, expected in cases:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *mcp_command(tmp_path, *args),
            env=mcp_env(url, bearer),
            cwd=tmp_path,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 2, (bearer, out, err)
        assert expected in err.decode() and out == b""
