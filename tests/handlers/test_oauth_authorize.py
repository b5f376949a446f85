"""OAuth mode's authorize step over HTTP: a workspace with no install, and token refreshes.

The real bolt app, handlers and storage behind a loopback port, our Slack server in front,
on both databases. A request from a workspace with no install gets a 2xx and one log line,
whatever its ``response_url`` does; a rotating token is refreshed through the configured
``SLACK_API_URL`` (no other host is ever asked for), once for a burst of requests, and two
replicas sharing the installation both keep serving when one of them wins the refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from bot.serve import started_bot
from handlers.slack import SlackSettings
from playground.slack_server import SlackServer
from storage.repository import Repository
from tests.conftest import make_config
from tests.handlers.test_oauth import (
    ALPHA,
    ALPHA_CHANNEL,
    ALPHA_REQUESTER,
    BETA_CHANNEL,
    BETA_REQUESTER,
    Installed,
    installed_bot,
)
from tests.support.serve_process import SECRET as SERVE_SECRET
from tests.support.serve_process import served_bot
from tests.support.slack_harness import SECRET

FORM = "application/x-www-form-urlencoded"
OAUTH_ENV = {
    "SLACK_CLIENT_SECRET": "test-client-secret",
    "SLACK_STATE_SECRET": "test-state-secret-0123",
}


def closed_port() -> int:
    """A loopback port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def refreshes(server: SlackServer) -> list[Any]:
    return [
        c for c in server.calls_to("oauth.v2.access") if c.args.get("grant_type") == "refresh_token"
    ]


@pytest.fixture
def hosts_asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every host name any client of this process resolves (aiohttp's default resolver
    asks the standard library): which hosts the bot tried to reach."""
    asked: list[str] = []
    real = socket.getaddrinfo

    def recording(host: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(host.decode() if isinstance(host, bytes) else str(host))
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    return asked


async def test_a_command_from_a_workspace_with_no_install_gets_no_500(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    """Bolt's multi-team authorization posted its refusal to the response_url and let that
    failure through: 500 and a traceback when the response_url did not answer."""
    async with installed_bot(repo) as slack:  # nothing installed: neither workspace
        fields = slack.server.command_fields(BETA_REQUESTER, BETA_CHANNEL, text="")
        fields["response_url"] = f"http://127.0.0.1:{closed_port()}/response"
        click = slack.server.click_payload(BETA_REQUESTER, BETA_CHANNEL, "approval_approve", "x")
        click["response_url"] = f"http://127.0.0.1:{closed_port()}/response"
        with caplog.at_level(logging.DEBUG):
            command = await slack.server.send_raw(urlencode(fields).encode(), FORM)
            clicked = await slack.server.send_raw(
                urlencode({"payload": json.dumps(click)}).encode(), FORM
            )
            await slack.settle()
        for reply in (command, clicked):
            assert 200 <= reply.status < 500, reply.body
        assert "install" in command.body.lower(), "the person is told why"
        assert not [r for r in caplog.records if r.exc_info], "no traceback"
        told = [r for r in caplog.records if "not installed" in r.getMessage()]
        assert len(told) == 2, [r.getMessage() for r in caplog.records]  # one each
        assert not [r for r in told if "\n" in r.getMessage()], "one line each"
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
            r.getMessage() for r in told
        ]


async def install_in_refresh_window(slack: Installed) -> None:
    """Installed with a token inside the refresh window (it expires in an hour: bolt's
    window is two); tokens issued after live twelve hours, outside it."""
    await slack.install(ALPHA, ALPHA_REQUESTER)
    slack.server.token_expires_in = 12 * 3600


async def approvals_command(slack: Installed, url: str | None = None) -> Any:
    fields = slack.server.command_fields(ALPHA_REQUESTER, ALPHA_CHANNEL, text="mine")
    body = urlencode(fields).encode()
    if url is None:
        return await slack.server.send_raw(body, FORM)
    return await slack.server.send_raw(body, FORM, bot_url=url)


async def test_a_burst_in_the_refresh_window_refreshes_once_through_our_slack(
    repo: Repository, hosts_asked: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    async with installed_bot(repo, token_expires_in=3600) as slack:
        await install_in_refresh_window(slack)
        before = json.loads((await repo.find_installation(enterprise_id=None, team_id=ALPHA)).bot)  # type: ignore[union-attr]
        with caplog.at_level(logging.INFO):
            replies = await asyncio.gather(*(approvals_command(slack) for _ in range(12)))
            await slack.settle()
        assert [r.status for r in replies] == [200] * 12
        assert all("Nothing" in r.body or "waiting" in r.body for r in replies), replies[0].body
        [refresh] = refreshes(slack.server)
        assert refresh.ok and refresh.args["refresh_token"] == before["bot_refresh_token"]
        stored = json.loads((await repo.find_installation(enterprise_id=None, team_id=ALPHA)).bot)  # type: ignore[union-attr]
        assert stored["bot_token"] in slack.server.tokens_of(ALPHA)
        assert stored["bot_token"] != before["bot_token"]
        assert set(hosts_asked) <= {"127.0.0.1", "localhost"}, set(hosts_asked)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@contextlib.asynccontextmanager
async def second_replica(slack: Installed, repo: Repository) -> AsyncIterator[str]:
    """Another bot process's app on the same database and Slack: its URL."""
    settings = SlackSettings(
        bot_token="",
        signing_secret=SECRET,
        api_url=slack.server.api_url,
        client_id=slack.server.client_id,
        client_secret=slack.server.client_secret,
        state_secret="test-state-secret",
    )
    async with started_bot(make_config(), settings, repo=repo, sweep=False) as bot:
        runner = web.AppRunner(bot.web_app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            yield f"http://127.0.0.1:{port}/slack/events"
        finally:
            await bot.services.background.idle()
            await runner.cleanup()


async def test_two_replicas_refreshing_at_once_both_keep_serving(
    repo: Repository, hosts_asked: list[str]
) -> None:
    """Each replica refreshes once; the one whose refresh Slack refuses (the token was
    used by the other) serves with the stored or the current token instead of failing."""
    async with installed_bot(repo, token_expires_in=3600) as slack:
        await install_in_refresh_window(slack)
        async with second_replica(slack, repo) as other:
            urls = [slack.server.bot_url, other] * 6
            replies = await asyncio.gather(*(approvals_command(slack, url) for url in urls))
            await slack.settle()
            assert [r.status for r in replies] == [200] * 12
            assert all("Nothing" in r.body or "waiting" in r.body for r in replies)
            done = refreshes(slack.server)
            assert 1 <= len(done) <= 2 and sum(c.ok for c in done) == 1
            stored = json.loads(
                (await repo.find_installation(enterprise_id=None, team_id=ALPHA)).bot
            )  # type: ignore[union-attr]
            assert stored["bot_token"] in slack.server.tokens_of(ALPHA)
            # A later request on either replica uses the stored token and refreshes nothing.
            for url in (slack.server.bot_url, other):
                assert (await approvals_command(slack, url)).status == 200
            assert len(refreshes(slack.server)) == len(done)
        assert set(hosts_asked) <= {"127.0.0.1", "localhost"}, set(hosts_asked)


async def test_two_serve_processes_refresh_once_each_at_most_and_all_answer(
    database_url: str, tmp_path: Path
) -> None:
    """The same on two real ``serve`` processes sharing one database (as replicas do): a
    burst in the refresh window delivered to both, every request answered, one successful
    refresh in all, the stored token Slack's, nothing logged as an error or a traceback."""
    slack = SlackServer(signing_secret=SERVE_SECRET)
    slack.token_expires_in = 3600
    env = {**OAUTH_ENV, "SLACK_CLIENT_ID": slack.client_id}
    async with (
        slack,
        served_bot(database_url, tmp_path, slack=slack, env=env, capture_output=True) as one,
        served_bot(database_url, tmp_path, slack=slack, env=env, capture_output=True) as two,
    ):
        await install_through(one.url, slack, ALPHA, ALPHA_REQUESTER)
        slack.token_expires_in = 12 * 3600
        urls = [f"{one.url}/slack/events", f"{two.url}/slack/events"] * 8
        fields = [slack.command_fields(ALPHA_REQUESTER, ALPHA_CHANNEL, text="mine") for _ in urls]
        replies = await asyncio.gather(
            *(
                slack.send_raw(urlencode(f).encode(), FORM, bot_url=url)
                for f, url in zip(fields, urls, strict=True)
            )
        )
        assert [r.status for r in replies] == [200] * len(urls), [r.body for r in replies]
        assert all("Nothing" in r.body or "waiting" in r.body for r in replies)
        done = refreshes(slack)
        assert 1 <= len(done) <= 2 and sum(c.ok for c in done) == 1, done
        later = await asyncio.gather(
            *(
                slack.send_raw(
                    urlencode(slack.command_fields(ALPHA_REQUESTER, ALPHA_CHANNEL)).encode(),
                    FORM,
                    bot_url=f"{served.url}/slack/events",
                )
                for served in (one, two)
            )
        )
        assert [r.status for r in later] == [200, 200]
        assert refreshes(slack) == done, "the stored token serves both processes now"
    for served in (one, two):
        output = served.output.decode()
        assert served.process.returncode == 0, output[-3000:]
        assert "Traceback" not in output and " ERROR " not in output, output[-3000:]


async def install_through(url: str, slack: SlackServer, team_id: str, installer: str) -> None:
    """What a person does: /slack/install on one process, allow on Slack's page, come back."""
    async with aiohttp.ClientSession() as browser:
        start = await browser.get(f"{url}/slack/install", allow_redirects=False)
        assert start.status == 302
        state = parse_qs(urlparse(start.headers["Location"]).query)["state"][0]
        cookie = start.headers["Set-Cookie"].split(";")[0]
        back = await browser.get(
            f"{url}/slack/oauth_redirect",
            params={"code": slack.grant_code(team_id, installer), "state": state},
            headers={"Cookie": cookie},
            allow_redirects=False,
        )
        assert back.status == 200, await back.text()


async def test_a_refresh_token_another_replica_used_is_not_spent_again_by_each_request(
    repo: Repository,
) -> None:
    """Another replica has used the refresh token and not yet stored its new token (a slow
    commit under load): this replica's first refresh is refused ``invalid_refresh_token``;
    the next requests of the burst serve with the current token and ask Slack nothing."""
    async with installed_bot(repo, token_expires_in=3600) as slack:
        await install_in_refresh_window(slack)
        bot = json.loads((await repo.find_installation(enterprise_id=None, team_id=ALPHA)).bot)  # type: ignore[union-attr]
        other_replica = AsyncWebClient(base_url=slack.server.api_url)
        won = await other_replica.oauth_v2_access(
            client_id=slack.server.client_id,
            client_secret=slack.server.client_secret,
            grant_type="refresh_token",
            refresh_token=bot["bot_refresh_token"],
        )
        assert won["ok"]
        for _ in range(4):
            reply = await approvals_command(slack)
            await slack.settle()
            assert reply.status == 200 and ("Nothing" in reply.body or "waiting" in reply.body)
        refused = [c for c in refreshes(slack.server) if not c.ok]
        assert len(refused) == 1, refused
