"""``approval-bot mcp --http PORT``: the addresses an operator gives it, and its clients'
connections.

``--host ::1`` (the IPv6 loopback) is a loopback like ``127.0.0.1``: the server starts, a
live token is served, and the SDK's DNS-rebinding protection still refuses any other
``Host``. (The issuer URL the SDK's bearer check wants was ``http://::1:PORT``, refused by
its validation: the command died with a traceback.)

An HTTP client whose connection closes mid-wait without ``notifications/cancelled`` (it
crashed, its machine slept) ends the wait: the SDK keeps the call running after its client
left, and the wait would poll the database until the request was settled, one more poller
for each call cut off.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx2
import pytest

from tests.bot.test_mcp_server import (
    CHANNEL,
    _first_answer,
    start_mcp_http,
)
from tests.faults.harness import eventually
from tests.support.api_support import create_token
from tests.support.serve_process import free_port


def _ipv6_port() -> int | None:
    """A free port on ::1, or None where the machine has no IPv6 loopback."""
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
            port: int = sock.getsockname()[1]
            return port
    except OSError:
        return None


async def test_over_http_on_the_ipv6_loopback_a_live_token_is_served(tmp_path: Path) -> None:
    port = _ipv6_port()
    if port is None:
        pytest.skip("no IPv6 loopback on this machine")
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    (tmp_path / "served-bot.toml").write_text("")
    token = await create_token(url, tmp_path, "service", CHANNEL)
    process = await start_mcp_http(tmp_path, url, port, "--host", "::1")
    endpoint = f"http://[::1]:{port}/mcp"
    try:
        async with httpx2.AsyncClient() as http:
            answer = await _first_answer(http, endpoint, token, process)
            assert answer.status_code == 200, answer.text
            headers = {
                "Authorization": f"Bearer {token.token}",
                "Accept": "application/json, text/event-stream",
                "Host": "rebound.example",
            }
            rebound = await http.post(endpoint, json={}, headers=headers)
            assert rebound.status_code == 421, rebound.text
    finally:
        if process.returncode is None:
            process.terminate()
        _, err = await asyncio.wait_for(process.communicate(), 20)
    said = err.decode()
    assert "Traceback" not in said and f"http://[::1]:{port}/mcp" in said, said


async def test_over_http_a_wait_whose_client_disconnected_stops(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    (tmp_path / "served-bot.toml").write_text("")
    token = await create_token(url, tmp_path, "service", CHANNEL)
    port = free_port()
    process = await start_mcp_http(tmp_path, url, port)
    said: list[str] = []

    async def read_stderr() -> None:
        assert process.stderr is not None
        async for line in process.stderr:
            said.append(line.decode())

    reading = asyncio.create_task(read_stderr())
    endpoint = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(60)) as http:
            started = await _first_answer(http, endpoint, token, process)
            session = {
                "Authorization": f"Bearer {token.token}",
                "Accept": "application/json, text/event-stream",
                "mcp-session-id": started.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-06-18",
            }
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(endpoint, json=initialized, headers=session)).is_success
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "request_approval",
                    "arguments": {"action": "Left behind", "channel": CHANNEL},
                    "_meta": {"progressToken": "p"},
                },
            }
            async with http.stream("POST", endpoint, json=call, headers=session) as streamed:
                async for line in streamed.aiter_lines():
                    if "notifications/progress" in line:
                        break  # waiting; the client then drops the connection
        gone = "the client went away; the request stays"
        await eventually(lambda: any(gone in line for line in said), lambda: "".join(said))
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), 20)
        await reading
    assert "Traceback" not in "".join(said)
