"""OAuth mode when a token refresh cannot get through: the current token serves while valid.

The real bolt app, handlers and storage behind a loopback port, our Slack server in front,
on both databases. With ``oauth.v2.access`` unreachable (its connection dropped) or slow, a
request in the refresh window used to wait for the refresh under the installation's lock
(about 9 s of the client's retries, then a 500 and a traceback; or the whole slow refresh,
past Slack's 3 s). Now a token that has not expired serves at once and the refresh goes on in
the background; only an expired token that cannot be refreshed is refused, in one line and a
200 telling the person, never a 500.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from storage.repository import Repository
from tests.handlers.test_oauth import ALPHA, ALPHA_REQUESTER, installed_bot
from tests.handlers.test_oauth_authorize import (
    approvals_command,
    install_in_refresh_window,
    refreshes,
)


def answered(reply: object) -> bool:
    body = getattr(reply, "body", "")
    return getattr(reply, "status", 0) == 200 and ("Nothing" in body or "waiting" in body)


async def stored_bot(repo: Repository) -> dict[str, object]:
    found = await repo.find_installation(enterprise_id=None, team_id=ALPHA)
    assert found is not None
    bot: dict[str, object] = json.loads(found.bot)
    return bot


async def test_an_unreachable_refresh_leaves_a_valid_token_serving(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    async with installed_bot(repo, token_expires_in=3600) as slack:
        await install_in_refresh_window(slack)
        before = await stored_bot(repo)
        slack.server.unreachable("oauth.v2.access", times=100)
        with caplog.at_level(logging.INFO):
            replies = await asyncio.gather(*(approvals_command(slack) for _ in range(4)))
            await slack.settle()
        assert all(answered(r) for r in replies), [(r.status, r.body[:200]) for r in replies]
        assert not [r for r in caplog.records if r.exc_info], "no traceback"
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        told = [r.getMessage() for r in caplog.records if "not refreshed" in r.getMessage()]
        assert told and all("\n" not in m for m in told), told
        assert (await stored_bot(repo))["bot_token"] == before["bot_token"]

        # Slack reachable again: the next request's refresh stores a new token.
        slack.server.unreachable("oauth.v2.access", times=0)
        assert answered(await approvals_command(slack))
        await slack.settle()
        assert (await stored_bot(repo))["bot_token"] != before["bot_token"]


async def test_a_slow_refresh_holds_no_acknowledgement(repo: Repository) -> None:
    async with installed_bot(repo, token_expires_in=3600) as slack:
        await install_in_refresh_window(slack)
        held = slack.server.hold("oauth.v2.access")
        replies = await asyncio.gather(*(approvals_command(slack) for _ in range(4)))
        # Every request was answered while the refresh waited for Slack (released only now).
        await asyncio.wait_for(held.arrived.wait(), 30)
        assert all(answered(r) for r in replies), [(r.status, r.body[:200]) for r in replies]
        held.release.set()
        await slack.settle()
        assert len(refreshes(slack.server)) == 1, "one refresh for the burst"
        assert (await stored_bot(repo))["bot_token"] in slack.server.tokens_of(ALPHA)


async def test_an_expired_token_that_cannot_be_refreshed_is_one_line_not_a_500(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    async with installed_bot(repo, token_expires_in=2) as slack:
        await slack.install(ALPHA, ALPHA_REQUESTER)
        slack.server.token_expires_in = 12 * 3600
        slack.server.unreachable("oauth.v2.access", times=100)
        await asyncio.sleep(2.5)  # the stored token has expired
        with caplog.at_level(logging.INFO):
            reply = await approvals_command(slack)
            await slack.settle()
        assert reply.status == 200, reply.body
        assert not answered(reply) and "install" in reply.body.lower(), reply.body
        assert not [r for r in caplog.records if r.exc_info], "no traceback"
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors and all("\n" not in m for m in errors), errors

        slack.server.unreachable("oauth.v2.access", times=0)
        assert answered(await approvals_command(slack)), "refreshed once Slack answers"
