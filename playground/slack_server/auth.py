"""Tokens and ``auth.test``: which token each Web API method accepts, and who the bot is."""

from __future__ import annotations

from playground.slack_server.records import (
    APP_TOKEN_METHODS,
    CLIENT_AUTH_METHODS,
    ApiCall,
    Json,
    _ApiError,
)


class AuthMixin:
    """Token checks and ``auth.test``.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def _check_token(self, call: ApiCall, token: str) -> None:
        """Bot methods need a workspace's bot token (``call.team`` becomes its workspace);
        apps.connections.open the app-level token; oauth.v2.access the client's secret."""
        if call.method in CLIENT_AUTH_METHODS:
            return
        if not token:
            raise _ApiError("not_authed")
        if token == self.app_token:
            if call.method not in APP_TOKEN_METHODS:
                raise _ApiError("not_allowed_token_type")
            return
        call.team = self._team_of_token(token)
        if call.team is None:
            raise _ApiError("invalid_auth")
        if call.method in APP_TOKEN_METHODS:
            raise _ApiError("not_allowed_token_type")
        channel = call.args.get("channel")
        # A token speaks for its own workspace only.
        if (
            isinstance(channel, str)
            and channel
            and self.workspace_of_channel(channel).team_id != call.team
        ):
            raise _ApiError("channel_not_found")

    def _api_auth_test(self, args: Json) -> Json:
        """Who the calling token is: its workspace and that workspace's bot user."""
        assert self._current_call is not None and self._current_call.team is not None
        workspace = self.workspaces[self._current_call.team]
        return {
            "ok": True,
            "url": f"https://{workspace.domain}.slack.com/",
            "team": workspace.domain,
            "user": self.bot_name,
            "team_id": workspace.team_id,
            "user_id": workspace.bot_user_id,
            "bot_id": workspace.bot_id,
            "is_enterprise_install": False,
        }
