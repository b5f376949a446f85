"""Hostile HTTP against ``approval-bot serve`` as users run it (a real process, ``-v``, OAuth
mode): an over-long request line or header gets a 400 and one log line, no traceback; a
failed OAuth redirect's ``code`` and ``state`` never reach the logs, nor does the code of a
code exchange Slack refused (bolt's warning), in text or JSON logs."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from urllib.parse import parse_qs, urlparse, urlsplit

import aiohttp
import pytest

from playground.slack_server import SlackServer
from tests.handlers.test_oauth import ALPHA, ALPHA_REQUESTER
from tests.support.serve_process import SECRET as SERVE_SECRET
from tests.support.serve_process import served_bot

OAUTH_ENV = {
    "SLACK_CLIENT_ID": "1111.2222",
    "SLACK_CLIENT_SECRET": "test-client-secret",
    "SLACK_STATE_SECRET": "test-state-secret-0123",
}


async def raw_request(url: str, request: bytes) -> bytes:
    """Send bytes over a plain socket; what comes back before the server closes."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 30)
    finally:
        writer.close()


async def test_hostile_requests_to_serve_get_one_line_and_leak_nothing(tmp_path: Path) -> None:
    code, state = "code-" + secrets.token_hex(12), "state-" + secrets.token_hex(12)
    async with served_bot(
        f"sqlite:///{tmp_path / 'hostile.db'}",
        tmp_path,
        capture_output=True,
        cli_args=("-v",),
        env=OAUTH_ENV,
    ) as served:
        # A request line over aiohttp's 8190 bytes, then a header line over it.
        line = await raw_request(
            served.url, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: bot\r\n\r\n"
        )
        header = await raw_request(
            served.url,
            b"GET /healthz HTTP/1.1\r\nHost: bot\r\nX-Long: " + b"b" * 9000 + b"\r\n\r\n",
        )
        # A redirect back from Slack's authorize page that fails (a state we never issued).
        async with (
            aiohttp.ClientSession() as browser,
            browser.get(
                f"{served.url}/slack/oauth_redirect",
                params={"code": code, "state": state},
                allow_redirects=False,
            ) as failed,
        ):
            await failed.read()
    output = served.output.decode()
    assert served.process.returncode == 0, output[-3000:]
    for answer in (line, header):
        assert answer.split(b" ", 2)[1] in (b"400", b"414", b"431"), answer[:200]
    assert "Traceback" not in output, output[-3000:]
    said = [entry for entry in output.splitlines() if "bad HTTP request" in entry]
    assert len(said) == 2, said  # one line each
    assert not any("a" * 100 in entry or "b" * 100 in entry for entry in said)

    assert failed.status >= 400
    assert "OAuth callback failure" in output, "bolt's debug line is there (-v)"
    assert code not in output and state not in output


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_failed_code_exchange_never_logs_the_code(
    database_url: str, tmp_path: Path, log_format: str
) -> None:
    """Slack refuses the code exchange: bolt warns "Failed to fetch oauth.v2.access result
    with code: …" (at WARNING, so without ``-v`` too); the code is redacted there."""
    slack = SlackServer(signing_secret=SERVE_SECRET)
    env = {**OAUTH_ENV, "SLACK_CLIENT_ID": slack.client_id}
    async with (
        slack,
        served_bot(
            database_url,
            tmp_path,
            slack=slack,
            env=env,
            capture_output=True,
            cli_args=("--log-format", log_format),
        ) as served,
    ):
        slack.fail("oauth.v2.access", "internal_error")
        code = slack.grant_code(ALPHA, ALPHA_REQUESTER)
        async with aiohttp.ClientSession() as browser:
            start = await browser.get(f"{served.url}/slack/install", allow_redirects=False)
            state = parse_qs(urlparse(start.headers["Location"]).query)["state"][0]
            cookie = start.headers["Set-Cookie"].split(";")[0]
            back = await browser.get(
                f"{served.url}/slack/oauth_redirect",
                params={"code": code, "state": state},
                headers={"Cookie": cookie},
                allow_redirects=False,
            )
            await back.read()
        assert back.status >= 400
    output = served.output.decode()
    assert "oauth.v2.access" in output, "bolt's warning is there"
    assert code not in output and state not in output, [
        line for line in output.splitlines() if code in line or state in line
    ]
    assert "Traceback" not in output
