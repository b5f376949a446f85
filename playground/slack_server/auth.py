"""Tokens and ``auth.test``: which token each Web API method accepts, and who the bot is."""

from __future__ import annotations

from playground.slack_server.records import APP_TOKEN_METHODS, Json, _ApiError


class AuthMixin:
    """Token checks and ``auth.test``.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def _check_token(self, method: str, token: str) -> None:
        """Bot methods need the bot token; apps.connections.open the app-level token."""
        if not token:
            raise _ApiError("not_authed")
        if token not in (self.bot_token, self.app_token):
            raise _ApiError("invalid_auth")
        wanted = self.app_token if method in APP_TOKEN_METHODS else self.bot_token
        if token != wanted:
            raise _ApiError("not_allowed_token_type")

    def _api_auth_test(self, args: Json) -> Json:
        return {
            "ok": True,
            "url": f"https://{self.team_domain}.slack.com/",
            "team": self.team_domain,
            "user": self.bot_name,
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }
