"""Bolt's authorize step in OAuth mode: each request's workspace token, from our clients.

Why not bolt's own (``AsyncInstallationStoreAuthorize``): it refreshes rotating tokens with
a client of its own on Slack's public host, ignoring ``SLACK_API_URL`` (a proxy, GovSlack,
our test server), with no single-flight, so a burst of requests in the refresh window spent
the single-use refresh token several times; and when a workspace has no install it posts its
refusal to the request's ``response_url`` without catching a failure there (an HTTP 500 and
a traceback). This one asks :meth:`WorkspaceClients.bot_for` (the configured base URL,
one refresh per installation) and, for a workspace with no install, raises
:class:`NotInstalled`: bolt then answers the request 200 with its install message in the
body and logs one line, and nothing posts anywhere.
A refresh never holds up the acknowledgement while the current token is valid (it runs on
its own); an expired token that cannot be refreshed raises TokenUnavailable, answered and
logged by bolt the same way.

Owns no durable state: a bounded cache of ``auth.test`` answers per token (the token is found
in the store on every request first, so a revoked install is never served from it).
"""

from __future__ import annotations

from typing import Any

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext

from handlers.slack.workspaces import MAX_CLIENTS, NotInstalled, WorkspaceClients


class WorkspaceAuthorize(AsyncAuthorize):
    """``authorize=`` of the bolt app in OAuth mode."""

    def __init__(self, clients: WorkspaceClients) -> None:
        super().__init__()
        self.clients = clients
        self._results: dict[str, AuthorizeResult] = {}
        # Bolt sets this on the authorize it is given; our clients hold the real setting.
        self.token_rotation_expiration_minutes = clients.rotation_minutes

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        **_actor: Any,
    ) -> AuthorizeResult | None:
        bot = await self.clients.bot_for(
            team_id, enterprise_id, is_enterprise_install=context.is_enterprise_install
        )
        if bot is None:
            raise NotInstalled(team_id or enterprise_id or "")
        token = bot.bot_token
        result = self._results.get(token)
        if result is None:
            answer = await self.clients.default.auth_test(token=token)
            result = AuthorizeResult.from_auth_test_response(
                auth_test_response=answer, bot_token=token, bot_scopes=bot.bot_scopes
            )
            if len(self._results) >= MAX_CLIENTS:
                self._results.clear()
            self._results[token] = result
        return result
