"""Multi-workspace installs (OAuth): the install flow against our Slack-compatible server,
two workspaces each served with its own token and blind to the other, uninstalls, token
rotation. Real bolt app, handlers, runner and storage, on both databases."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import aiohttp
import pytest
from aiohttp import web

from bot.config import ConfigError
from bot.serve import started_bot
from handlers.slack import SlackSettings
from playground.slack_server import SlackServer
from storage.repository import PendingFilter, Repository
from tests.conftest import make_config
from tests.support import ops_tools
from tests.support.slack_harness import SECRET, has_buttons

ALPHA, BETA = "T0001TEAM", "T0002BETA"
ALPHA_CHANNEL, BETA_CHANNEL = "C0OPS", "C0BETA"
# Each workspace has a requester and an approver the shared policy names.
ALPHA_REQUESTER, ALPHA_APPROVER = "U0REQUESTER", "U0APPROVER1"
BETA_REQUESTER, BETA_APPROVER = "U0BREQUESTER", "U0APPROVER2"


def is_card(message: Any) -> bool:
    return not message.is_ephemeral and has_buttons(message)


def calls(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": arguments}]})


class Installed:
    """The bot in OAuth mode behind a loopback port, and Slack with two workspaces."""

    def __init__(self, server: SlackServer, bot: Any, repo: Repository, url: str) -> None:
        self.server, self.bot, self.repo, self.url = server, bot, repo, url

    async def settle(self) -> None:
        await self.bot.services.background.idle()

    async def install(self, team_id: str, installer: str) -> aiohttp.ClientResponse:
        """What a person does: open /slack/install, allow on Slack's page, come back."""
        async with aiohttp.ClientSession() as browser:
            start = await browser.get(f"{self.url}/slack/install", allow_redirects=False)
            assert start.status == 302
            authorize = urlparse(start.headers["Location"])
            query = parse_qs(authorize.query)
            assert "chat:write" in query["scope"][0]
            code = self.server.grant_code(team_id, installer)
            # The state cookie is Secure (HTTPS in production): sent by hand over loopback.
            cookie = start.headers["Set-Cookie"].split(";")[0]
            back = await browser.get(
                f"{self.url}/slack/oauth_redirect",
                params={"code": code, "state": query["state"][0]},
                headers={"Cookie": cookie},
                allow_redirects=False,
            )
            await back.read()
            return back

    async def mention(self, user: str, channel: str, text: str) -> None:
        workspace = self.server.workspace_of_channel(channel)
        await self.server.mention(user, channel, f"<@{workspace.bot_user_id}> {text}")
        await self.settle()

    def calls_in(self, channel: str) -> list[Any]:
        return [c for c in self.server.calls if c.args.get("channel") == channel]


@contextlib.asynccontextmanager
async def installed_bot(
    repo: Repository, *, token_expires_in: int | None = None
) -> AsyncIterator[Installed]:
    server = SlackServer(signing_secret=SECRET)
    server.users.update({ALPHA_REQUESTER: "ana", BETA_REQUESTER: "ben"})
    server.add_workspace(
        BETA, domain="beta", channels=[BETA_CHANNEL], users=[BETA_REQUESTER, BETA_APPROVER]
    )
    server.token_expires_in = token_expires_in
    await server.start()
    settings = SlackSettings(
        bot_token="",
        signing_secret=SECRET,
        api_url=server.api_url,
        client_id=server.client_id,
        client_secret=server.client_secret,
        state_secret="test-state-secret",
    )
    async with started_bot(make_config(), settings, repo=repo, sweep=False) as bot:
        runner = web.AppRunner(bot.web_app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        server.bot_url = f"http://127.0.0.1:{port}/slack/events"
        try:
            yield Installed(server, bot, repo, f"http://127.0.0.1:{port}")
            await bot.services.background.idle()
            assert server.unknown_calls == [], [c.method for c in server.unknown_calls]
        finally:
            await bot.services.background.idle()
            await runner.cleanup()
            await server.stop()


async def pending(repo: Repository, team_id: str | None = None) -> list[Any]:
    from bot.clock import utcnow

    approvals, _ = await repo.list_pending(PendingFilter(team_id=team_id), now=utcnow(), limit=100)
    return approvals


async def test_install_flow_stores_each_workspace_token(repo: Repository) -> None:
    async with installed_bot(repo) as slack:
        assert await repo.find_installation(enterprise_id=None, team_id=ALPHA) is None
        done = await slack.install(ALPHA, ALPHA_REQUESTER)
        assert done.status == 200
        await slack.install(BETA, BETA_REQUESTER)
        alpha = await repo.find_installation(enterprise_id=None, team_id=ALPHA)
        beta = await repo.find_installation(enterprise_id=None, team_id=BETA)
        assert alpha is not None and beta is not None
        alpha_token = json.loads(alpha.bot)["bot_token"]
        beta_token = json.loads(beta.bot)["bot_token"]
        assert alpha_token in slack.server.tokens_of(ALPHA)
        assert beta_token in slack.server.tokens_of(BETA)
        assert alpha_token != beta_token


async def test_a_forged_or_reused_state_installs_nothing(repo: Repository) -> None:
    async with installed_bot(repo) as slack, aiohttp.ClientSession() as browser:

        async def come_back(state: str) -> int:
            code = slack.server.grant_code(ALPHA, ALPHA_REQUESTER)
            response = await browser.get(
                f"{slack.url}/slack/oauth_redirect",
                params={"code": code, "state": state},
                headers={"Cookie": f"slack-app-oauth-state={state}"},
                allow_redirects=False,
            )
            return response.status

        assert await come_back("made-up.0000") == 401
        assert await come_back("na\u00efve.\u00e9t\u00e9") == 401  # never a 500
        assert await repo.find_installation(enterprise_id=None, team_id=ALPHA) is None
        assert slack.server.calls_to("oauth.v2.access") == []

        start = await browser.get(f"{slack.url}/slack/install", allow_redirects=False)
        state = parse_qs(urlparse(start.headers["Location"]).query)["state"][0]
        assert await come_back(state) == 200
        await repo.delete_installation(enterprise_id=None, team_id=ALPHA)
        assert await come_back(state) == 401, "a state is good for one install only"
        assert await repo.find_installation(enterprise_id=None, team_id=ALPHA) is None


async def test_two_workspaces_each_use_their_own_token_and_see_only_their_own(
    repo: Repository,
) -> None:
    async with installed_bot(repo) as slack:
        await slack.install(ALPHA, ALPHA_REQUESTER)
        await slack.install(BETA, BETA_REQUESTER)
        await slack.mention(
            ALPHA_REQUESTER, ALPHA_CHANNEL, calls("restart_service", {"service": "alpha-db"})
        )
        await slack.mention(
            BETA_REQUESTER, BETA_CHANNEL, calls("restart_service", {"service": "beta-db"})
        )

        # Every call about a workspace's channel used that workspace's token, and worked.
        for channel, team in ((ALPHA_CHANNEL, ALPHA), (BETA_CHANNEL, BETA)):
            made = slack.calls_in(channel)
            assert made and all(c.ok and c.team == team for c in made), [
                (c.method, c.team, c.response.get("error")) for c in made
            ]
        [alpha_approval] = await pending(repo, ALPHA)
        [beta_approval] = await pending(repo, BETA)

        # The policy names U0APPROVER2 in both workspaces; in beta's /approvals only beta's.
        listing = await slack.server.slash_command(BETA_APPROVER, BETA_CHANNEL, text="")
        assert "beta-db" in listing.body and "alpha-db" not in listing.body
        everything = await slack.server.slash_command(BETA_REQUESTER, BETA_CHANNEL, text="all")
        assert "alpha-db" not in everything.body

        # Beta's approver's App Home lists beta's approval only, published with beta's token.
        await slack.server.open_home(BETA_APPROVER)
        await slack.settle()
        home = json.dumps(slack.server.home_of(BETA_APPROVER))
        assert "beta-db" in home and "alpha-db" not in home
        assert [c.team for c in slack.server.calls_to("views.publish") if c.ok] == [BETA]

        # A click from beta on alpha's approval is refused and changes nothing.
        await slack.server.click_raw(
            BETA_APPROVER, BETA_CHANNEL, "approval_approve", alpha_approval.id
        )
        await slack.settle()
        assert [a.id for a in await pending(repo, ALPHA)] == [alpha_approval.id]

        # Each approves its own; the answer lands in its own thread with its own token.
        [alpha_card] = [
            m for m in slack.server.messages if m.channel == ALPHA_CHANNEL and is_card(m)
        ]
        await slack.server.click(ALPHA_APPROVER, alpha_card, "approval_approve")
        [beta_card] = [m for m in slack.server.messages if m.channel == BETA_CHANNEL and is_card(m)]
        await slack.server.click(BETA_APPROVER, beta_card, "approval_approve")
        await slack.settle()
        assert sorted(args["service"] for _, args in ops_tools.EXECUTED) == ["alpha-db", "beta-db"]
        assert await pending(repo) == []
        for channel, team in ((ALPHA_CHANNEL, ALPHA), (BETA_CHANNEL, BETA)):
            assert all(c.ok and c.team == team for c in slack.calls_in(channel))
        texts = [m.text for m in slack.server.messages if m.channel == BETA_CHANNEL]
        assert "Results: restart_service=restarted beta-db" in texts
        assert beta_approval.id not in json.dumps(
            [m.blocks for m in slack.server.messages if m.channel == ALPHA_CHANNEL]
        )


async def test_uninstall_cancels_that_workspaces_pending_approvals(repo: Repository) -> None:
    async with installed_bot(repo) as slack:
        await slack.install(ALPHA, ALPHA_REQUESTER)
        await slack.install(BETA, BETA_REQUESTER)
        await slack.mention(
            ALPHA_REQUESTER, ALPHA_CHANNEL, calls("restart_service", {"service": "alpha-db"})
        )
        await slack.mention(
            BETA_REQUESTER, BETA_CHANNEL, calls("restart_service", {"service": "beta-db"})
        )
        [beta_approval] = await pending(repo, BETA)

        reply = await slack.server.uninstall(BETA)
        assert reply.status == 200
        await slack.settle()

        assert await repo.find_installation(enterprise_id=None, team_id=BETA) is None
        assert await pending(repo, BETA) == []
        cancelled = await repo.get_approval(beta_approval.id)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert "the app was uninstalled from this workspace" in (cancelled.reason or "")
        run = await repo.get_run(beta_approval.run_id)
        assert run is not None and run.status == "cancelled"
        # The other workspace is untouched and still served.
        assert len(await pending(repo, ALPHA)) == 1
        assert await repo.find_installation(enterprise_id=None, team_id=ALPHA) is not None


async def test_revoked_bot_tokens_uninstall_too(repo: Repository) -> None:
    async with installed_bot(repo) as slack:
        await slack.install(BETA, BETA_REQUESTER)
        await slack.mention(
            BETA_REQUESTER, BETA_CHANNEL, calls("restart_service", {"service": "beta-db"})
        )
        [approval] = await pending(repo, BETA)
        reply = await slack.server.revoke_bot_token(BETA)
        assert reply.status == 200
        await slack.settle()
        assert await repo.find_installation(enterprise_id=None, team_id=BETA) is None
        cancelled = await repo.get_approval(approval.id)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert "uninstalled" in (cancelled.reason or "")


async def test_rotating_tokens_are_refreshed_and_stored(repo: Repository) -> None:
    # Tokens that expire within bolt's rotation window are refreshed before use.
    async with installed_bot(repo, token_expires_in=3600) as slack:
        await slack.install(ALPHA, ALPHA_REQUESTER)
        first = await repo.find_installation(enterprise_id=None, team_id=ALPHA)
        assert first is not None and json.loads(first.bot)["bot_refresh_token"]
        await slack.mention(ALPHA_REQUESTER, ALPHA_CHANNEL, calls("get_status", {"service": "web"}))
        refreshes = [
            c
            for c in slack.server.calls_to("oauth.v2.access")
            if c.args.get("grant_type") == "refresh_token"
        ]
        assert refreshes and all(c.ok for c in refreshes)
        latest = await repo.find_installation(enterprise_id=None, team_id=ALPHA)
        assert latest is not None
        stored = json.loads(latest.bot)
        assert stored["bot_token"] != json.loads(first.bot)["bot_token"]
        assert stored["bot_token"] in slack.server.tokens_of(ALPHA)
        made = slack.calls_in(ALPHA_CHANNEL)
        assert made and all(c.ok and c.team == ALPHA for c in made)


def test_oauth_settings_come_from_the_environment() -> None:
    oauth = {
        "SLACK_CLIENT_ID": "1.2",
        "SLACK_CLIENT_SECRET": "shh",
        "SLACK_STATE_SECRET": "state",
        "SLACK_SIGNING_SECRET": "sig",
    }
    settings = SlackSettings.from_env(oauth)
    assert settings.oauth and settings.bot_token == "" and settings.client_id == "1.2"
    # The CLI calls Slack with each workspace's stored token too.
    assert SlackSettings.from_env(oauth, web_api_only=True).oauth
    # One bot token, as before: no OAuth.
    single = SlackSettings.from_env({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "sig"})
    assert not single.oauth and single.bot_token == "xoxb-1"
    # Half an OAuth configuration, and no bot token, names what is missing.
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN, SLACK_STATE_SECRET"):
        SlackSettings.from_env({**oauth, "SLACK_STATE_SECRET": ""})
    # Beside a bot token, a stray OAuth variable changes nothing.
    stray = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "SLACK_CLIENT_SECRET": "x"}
    assert not SlackSettings.from_env(stray).oauth
