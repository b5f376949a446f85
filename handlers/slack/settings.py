"""The Slack settings from the environment (one bot token, or OAuth installs; HTTP or Socket
Mode), and the Web API client they make: one that honours Retry-After and counts failures."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import ConfigError
from handlers.slack.instrument import InstrumentedWebClient, RateLimitCounter

SLACK_API_DEFAULT = "https://slack.com/api/"


@dataclass(frozen=True)
class SlackSettings:
    bot_token: str
    signing_secret: str
    app_token: str | None = None
    api_url: str = SLACK_API_DEFAULT
    # OAuth installs (all three set): a token per workspace, from the installation store.
    client_id: str | None = None
    client_secret: str | None = None
    state_secret: str | None = None

    @property
    def oauth(self) -> bool:
        """Installed in several workspaces through OAuth, rather than one SLACK_BOT_TOKEN."""
        return bool(self.client_id and self.client_secret and self.state_secret)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        socket_mode: bool = False,
        web_api_only: bool = False,
    ) -> SlackSettings:
        """``web_api_only``: for calling Slack (the CLI), not for receiving its requests."""
        env = os.environ if environ is None else environ
        receives = not (socket_mode or web_api_only)
        oauth_names = ("SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET", "SLACK_STATE_SECRET")
        oauth_given = [name for name in oauth_names if env.get(name)]
        # OAuth installs replace the one bot token (the CLI's calls too).
        oauth = len(oauth_given) == len(oauth_names)
        missing = [
            name
            for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET")
            if not env.get(name)
            and (receives or name == "SLACK_BOT_TOKEN")
            and not (oauth and name == "SLACK_BOT_TOKEN")
        ]
        if oauth_given and not oauth and not env.get("SLACK_BOT_TOKEN"):
            # Half an OAuth setup and no bot token: say what would complete either.
            missing += [name for name in oauth_names if not env.get(name)]
        if socket_mode and not env.get("SLACK_APP_TOKEN"):
            missing.append("SLACK_APP_TOKEN")
        if missing:
            raise ConfigError(f"missing environment variable(s): {', '.join(missing)}")
        api_url = env.get("SLACK_API_URL") or SLACK_API_DEFAULT
        return cls(
            bot_token="" if oauth else env["SLACK_BOT_TOKEN"],
            signing_secret=env.get("SLACK_SIGNING_SECRET", ""),
            app_token=env.get("SLACK_APP_TOKEN") or None,
            api_url=api_url if api_url.endswith("/") else api_url + "/",
            client_id=env.get("SLACK_CLIENT_ID") if oauth else None,
            client_secret=env.get("SLACK_CLIENT_SECRET") if oauth else None,
            state_secret=env.get("SLACK_STATE_SECRET") if oauth else None,
        )

    def web_client(
        self, session: aiohttp.ClientSession | None = None, *, token: str | None = None
    ) -> AsyncWebClient:
        """A client that honours Retry-After on 429s and retries dropped connections.

        Pass a long-lived ``session``: without one slack_sdk opens a new connection (and
        resolves the host again) for every call.
        """
        return InstrumentedWebClient(
            # No token at all (not ""), in OAuth mode: bolt then finds none to warn about.
            token=(self.bot_token if token is None else token) or None,
            base_url=self.api_url,
            session=session,
            retry_handlers=[
                RateLimitCounter(),  # first: counts every 429, retried or not
                AsyncRateLimitErrorRetryHandler(max_retry_count=3),
                AsyncConnectionErrorRetryHandler(max_retry_count=2),
            ],
        )
