"""Several workspaces, OAuth installs and token rotation: ``oauth.v2.access``.

The server starts as one workspace (``team_id``, whose bot token is ``bot_token``). A test
adds others with :meth:`OAuthMixin.add_workspace` (their own team, bot user and channels)
and installs the app into one as Slack would: :meth:`grant_code` is the person clicking
*Allow* on Slack's authorize page, which sends them back to the app's redirect URL with a
``code``; the app exchanges it with ``oauth.v2.access`` for that workspace's bot token.

Every token belongs to one workspace: ``auth.test`` answers for the token's workspace, a
call naming a channel of another workspace answers ``channel_not_found`` (as Slack does),
and each :class:`ApiCall` records the ``team`` its token is for, so tests can tell which
workspace's token a call used. :meth:`uninstall` revokes a workspace's tokens and tells
the bot (``app_uninstalled``).

Token rotation (``token_expires_in`` set): tokens are issued with ``expires_in`` and a
refresh token, and ``oauth.v2.access`` with ``grant_type=refresh_token`` exchanges a
refresh token for a new pair. Expired tokens answer ``token_expired``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from playground.slack_server.records import BotReply, Json, _ApiError, _arg, _random_id


@dataclass
class Workspace:
    """One Slack workspace the app may be installed in."""

    team_id: str
    domain: str
    bot_user_id: str
    bot_id: str
    channels: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)


@dataclass
class _Token:
    team_id: str
    expires_at: float | None = None


@dataclass
class _Code:
    team_id: str
    user: str
    redirect_uri: str | None


class OAuthMixin:
    """Workspaces, their tokens, ``oauth.v2.access`` and uninstalls.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses (it calls
    :meth:`_init_workspaces`).
    """

    def _init_workspaces(self) -> None:
        self.client_id = "1111.2222"
        self.client_secret = "test-client-secret"
        # Seconds a token issued by oauth.v2.access lives; None: tokens that never expire.
        self.token_expires_in: int | None = None
        self.workspaces: dict[str, Workspace] = {
            self.team_id: Workspace(self.team_id, self.team_domain, self.bot_user_id, self.bot_id)
        }
        self._tokens: dict[str, _Token] = {self.bot_token: _Token(self.team_id)}
        self._refresh_tokens: dict[str, str] = {}  # refresh token -> team
        self._codes: dict[str, _Code] = {}

    def add_workspace(
        self,
        team_id: str,
        *,
        domain: str,
        channels: list[str],
        users: list[str],
        bot_user_id: str | None = None,
    ) -> Workspace:
        """Another workspace, with its own channels and people (the app not installed yet)."""
        workspace = Workspace(
            team_id,
            domain,
            bot_user_id or _random_id("U"),
            _random_id("B"),
            set(channels),
            set(users),
        )
        self.workspaces[team_id] = workspace
        return workspace

    def workspace_of_channel(self, channel: str) -> Workspace:
        """The workspace a channel is in; channels nobody claimed are the first workspace's."""
        for workspace in self.workspaces.values():
            if channel in workspace.channels:
                return workspace
        return self.workspaces[self.team_id]

    def workspace_of_user(self, user: str) -> Workspace:
        for workspace in self.workspaces.values():
            if user in workspace.users:
                return workspace
        return self.workspaces[self.team_id]

    def grant_code(self, team_id: str, user: str, redirect_uri: str | None = None) -> str:
        """``user`` allowed the install in ``team_id`` on Slack's page: the redirect's code."""
        if team_id not in self.workspaces:
            raise LookupError(f"no workspace {team_id}")
        code = secrets.token_hex(16)
        self._codes[code] = _Code(team_id, user, redirect_uri)
        return code

    def tokens_of(self, team_id: str) -> list[str]:
        return [token for token, t in self._tokens.items() if t.team_id == team_id]

    async def uninstall(self, team_id: str) -> BotReply:
        """Someone removed the app from ``team_id``: its tokens stop working, the bot is told."""
        for token in self.tokens_of(team_id):
            del self._tokens[token]
        for refresh, team in list(self._refresh_tokens.items()):
            if team == team_id:
                del self._refresh_tokens[refresh]
        event = {"type": "app_uninstalled", "event_ts": self._next_ts()}
        payload = self._event_callback(event, _random_id("Ev"), team_id=team_id)
        return await self.send_event(payload)

    async def revoke_bot_token(self, team_id: str) -> BotReply:
        """An admin revokes the bot's tokens in ``team_id``: ``tokens_revoked`` is sent."""
        revoked = self.tokens_of(team_id)
        for token in revoked:
            del self._tokens[token]
        workspace = self.workspaces[team_id]
        event = {
            "type": "tokens_revoked",
            "tokens": {"oauth": [], "bot": [workspace.bot_user_id]},
            "event_ts": self._next_ts(),
        }
        payload = self._event_callback(event, _random_id("Ev"), team_id=team_id)
        return await self.send_event(payload)

    # -- tokens ---------------------------------------------------------------------------

    def _team_of_token(self, token: str) -> str | None:
        issued = self._tokens.get(token)
        if issued is None:
            return None
        if issued.expires_at is not None and issued.expires_at <= self.clock():
            raise _ApiError("token_expired")
        return issued.team_id

    def _issue_bot_token(self, team_id: str) -> Json:
        prefix = "xoxe.xoxb-" if self.token_expires_in is not None else "xoxb-"
        token = prefix + secrets.token_hex(12)
        expires_at = None
        granted: Json = {"access_token": token, "token_type": "bot"}
        if self.token_expires_in is not None:
            expires_at = self.clock() + self.token_expires_in
            refresh = "xoxe-1-" + secrets.token_hex(12)
            self._refresh_tokens[refresh] = team_id
            granted.update(refresh_token=refresh, expires_in=self.token_expires_in)
        self._tokens[token] = _Token(team_id, expires_at)
        return granted

    # -- oauth.v2.access ------------------------------------------------------------------

    def _api_oauth_v2_access(self, args: Json) -> Json:
        """The code exchange, or (``grant_type=refresh_token``) a token rotation.

        The app authenticates with its client id and secret (HTTP Basic, as slack_sdk
        sends them, or form fields)."""
        if (args.get("client_id"), args.get("client_secret")) != (
            self.client_id,
            self.client_secret,
        ):
            raise _ApiError("invalid_client_id")
        if args.get("grant_type") == "refresh_token":
            team_id = self._refresh_tokens.pop(_arg(args, "refresh_token"), None)
            if team_id is None:
                raise _ApiError("invalid_refresh_token")
            granted = self._issue_bot_token(team_id)
            return {"ok": True, **granted, "team": {"id": team_id}, "enterprise": None}
        granted_code = self._codes.pop(_arg(args, "code", "invalid_code"), None)
        if granted_code is None:
            raise _ApiError("invalid_code")
        if granted_code.redirect_uri and args.get("redirect_uri") != granted_code.redirect_uri:
            raise _ApiError("bad_redirect_uri")
        workspace = self.workspaces[granted_code.team_id]
        return {
            "ok": True,
            **self._issue_bot_token(workspace.team_id),
            "scope": "app_mentions:read,chat:write,commands,im:write,usergroups:read",
            "bot_user_id": workspace.bot_user_id,
            "app_id": self.app_id,
            "team": {"id": workspace.team_id, "name": workspace.domain},
            "enterprise": None,
            "is_enterprise_install": False,
            "authed_user": {"id": granted_code.user},
        }
