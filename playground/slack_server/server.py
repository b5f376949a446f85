"""The :class:`SlackServer` itself: its state, lifecycle and message store.

Each Web API family and each way of driving the bot lives in its own mixin module; this
one sets the state they share (see the package docstring), listens on a port, and keeps
the messages (in posting order, optionally on disk for the playground).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web

from playground.slack_server.assistant import AssistantMixin
from playground.slack_server.auth import AuthMixin
from playground.slack_server.blocks import _rich_text_blocks
from playground.slack_server.chat import ChatMixin
from playground.slack_server.conversations import ConversationsMixin
from playground.slack_server.delivery import DeliveryMixin
from playground.slack_server.functions import FunctionsMixin
from playground.slack_server.home import HomeMixin
from playground.slack_server.oauth import OAuthMixin
from playground.slack_server.payloads import PayloadsMixin
from playground.slack_server.records import (
    ACK_TIMEOUT_SECONDS,
    TRIGGER_TTL_SECONDS,
    ApiCall,
    HeldAnswer,
    Json,
    Message,
    OpenView,
    ResponseCall,
    _Injection,
    _ResponseUrl,
    _TriggerId,
    _ts_key,
)
from playground.slack_server.response_urls import ResponseUrlsMixin
from playground.slack_server.socket_mode import SocketModeMixin
from playground.slack_server.streams import StreamsMixin
from playground.slack_server.usergroups import UsergroupsMixin
from playground.slack_server.users import UsersMixin
from playground.slack_server.views import ViewsMixin
from playground.slack_server.webapi import WebApiMixin


class SlackServer(
    FunctionsMixin,
    OAuthMixin,
    HomeMixin,
    AssistantMixin,
    AuthMixin,
    ChatMixin,
    StreamsMixin,
    ConversationsMixin,
    UsersMixin,
    UsergroupsMixin,
    ViewsMixin,
    ResponseUrlsMixin,
    PayloadsMixin,
    DeliveryMixin,
    SocketModeMixin,
    WebApiMixin,
):
    """Slack for one workspace, on a local port. See the package docstring for its state."""

    def __init__(
        self,
        *,
        signing_secret: str,
        bot_url: str | None = None,
        team_id: str = "T0001TEAM",
        team_domain: str = "example-workspace",
        bot_user_id: str = "U0BOT",
        bot_id: str = "B0BOT",
        app_id: str = "A0001APP",
        bot_token: str = "xoxb-test-token",
        app_token: str = "xapp-test-token",
        usergroups: dict[str, list[str]] | None = None,
        users: dict[str, str] | None = None,
        real_names: dict[str, str] | None = None,
        channels: dict[str, str] | None = None,
        bot_name: str = "approval-bot",
    ) -> None:
        self.signing_secret = signing_secret
        self.bot_url = bot_url
        self.team_id = team_id
        self.team_domain = team_domain
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.app_id = app_id
        self.bot_token = bot_token
        self.app_token = app_token
        self.usergroups = usergroups or {}
        self.users = users or {}
        # id -> full name ("Bo Lee"), which users.info answers as real_name.
        self.real_names = real_names or {}
        self.channels = channels or {}
        self.bot_name = bot_name
        # Overridable knobs: tests may move the clock or relax deadlines (the playground does).
        self.clock: Callable[[], float] = time.time
        self.trigger_ttl = TRIGGER_TTL_SECONDS
        self.ack_timeout = ACK_TIMEOUT_SECONDS

        self.messages: list[Message] = []
        self.dm_channels: dict[str, str] = {}  # user -> the bot's DM channel (conversations.open)
        # (channel, ts) -> message: lookups stay O(1) with the tens of thousands of messages a
        # benchmark posts (a scan per Web API call made the double the bottleneck).
        self._by_ts: dict[tuple[str, str], Message] = {}
        self.views: dict[str, OpenView] = {}
        self.calls: list[ApiCall] = []
        self.unknown_calls: list[ApiCall] = []
        self.responses: list[ResponseCall] = []
        self.socket_acks: list[Json] = []
        self.socket_connects = 0  # connections ever accepted: reconnects are observable

        self._last_ts_micros = 0
        self._counter = itertools.count(1)
        self._triggers: dict[str, _TriggerId] = {}
        self._response_urls: dict[str, _ResponseUrl] = {}
        self._injections: dict[str, list[_Injection]] = {}
        self._unreachable: dict[str, int] = {}
        self._holds: list[HeldAnswer] = []
        self._event_bodies: dict[str, bytes] = {}
        self._current_call: ApiCall | None = None  # the call a method handler answers
        # Workspaces whose chat.startStream is refused, with the error (refuse_streaming).
        self.streaming_refused: dict[str, str] = {}
        self._init_workspaces()
        self._init_home()
        self._init_assistant()
        self._init_functions()
        self._socket_tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._socket_connected = asyncio.Event()
        self._pending_acks: dict[str, asyncio.Future[Json]] = {}
        self._methods: dict[str, Callable[[Json], Json]] = {
            "auth.test": self._api_auth_test,
            "chat.postMessage": self._api_chat_post_message,
            "chat.update": self._api_chat_update,
            "chat.postEphemeral": self._api_chat_post_ephemeral,
            "chat.getPermalink": self._api_chat_get_permalink,
            "chat.startStream": self._api_chat_start_stream,
            "chat.appendStream": self._api_chat_append_stream,
            "chat.stopStream": self._api_chat_stop_stream,
            "views.open": self._api_views_open,
            "views.update": self._api_views_update,
            "users.info": self._api_users_info,
            "usergroups.users.list": self._api_usergroups_users_list,
            "conversations.replies": self._api_conversations_replies,
            "conversations.open": self._api_conversations_open,
            "apps.connections.open": self._api_apps_connections_open,
            "oauth.v2.access": self._api_oauth_v2_access,
            "views.publish": self._api_views_publish,
            "assistant.threads.setStatus": self._api_assistant_threads_set_status,
            "assistant.threads.setSuggestedPrompts": (
                self._api_assistant_threads_set_suggested_prompts
            ),
            "assistant.threads.setTitle": self._api_assistant_threads_set_title,
            "agents.sessions.setStatus": self._api_agents_sessions_set_status,
            "functions.completeSuccess": self._api_functions_complete_success,
            "functions.completeError": self._api_functions_complete_error,
        }
        # More routes on the same port (the playground's page); applied at start().
        self.route_hooks: list[Callable[[web.Application], None]] = []
        # Where messages are kept between runs (the playground); None keeps them in memory.
        self.state_file: Path | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._base_url: str | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_post("/response/{url_id}", self._handle_response_url)
        app.router.add_get("/socket-mode", self._handle_socket)
        for add_routes in self.route_hooks:
            add_routes(app)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on host:port (0 picks a free port; read it back from ``base_url``)."""
        self._runner = web.AppRunner(self._build_app(), shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self._base_url = f"http://{bound_host}:{bound_port}"
        self._session = aiohttp.ClientSession()

    async def stop(self) -> None:
        """Close Socket Mode connections first: aiohttp would otherwise wait for them."""
        for ws in list(self._sockets):
            await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"server stopping")
        for future in self._pending_acks.values():
            future.cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SlackServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """``http://host:port`` once started."""
        if self._base_url is None:
            raise RuntimeError("SlackServer is not started")
        return self._base_url

    @property
    def api_url(self) -> str:
        """What ``AsyncWebClient(base_url=...)`` takes (the trailing slash matters to it)."""
        return f"{self.base_url}/api/"

    # -- state helpers --------------------------------------------------------------------------

    def message(self, channel: str, ts: str) -> Message | None:
        """The message (ephemeral or not) with that ts in that channel, if it still exists."""
        found = self._by_ts.get((channel, ts))
        if found is not None:
            return found
        # Not posted through this server (a test appended it itself): look the slow way.
        return next((m for m in self.messages if m.channel == channel and m.ts == ts), None)

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """A thread as everyone sees it: parent first, then replies; no ephemeral messages."""
        found = [
            m
            for m in self.messages
            if m.channel == channel
            and not m.is_ephemeral
            and (m.ts == thread_ts or m.thread_ts == thread_ts)
        ]
        return sorted(found, key=lambda m: _ts_key(m.ts))

    def ephemerals_for(self, user: str) -> list[Message]:
        """Ephemeral messages only ``user`` can see, oldest first."""
        return [m for m in self.messages if m.ephemeral_to == user]

    def calls_to(self, method: str) -> list[ApiCall]:
        """Web API calls of one method, in order."""
        return [c for c in self.calls if c.method == method]

    def user_name(self, user: str) -> str:
        """The handle payloads carry for a user (``users`` map, else the lowercased id)."""
        return self.users.get(user, user.lower())

    def post_user_message(
        self, user: str, channel: str, text: str, *, thread_ts: str | None = None
    ) -> Message:
        """Record a message typed by a person (what a Slack client would post)."""
        return self._add_message(
            channel,
            user,
            text,
            _rich_text_blocks(text),
            thread_ts=thread_ts,
            client_msg_id=str(uuid.uuid4()),
        )

    def keep_messages_in(self, path: Path) -> None:
        """Load the messages kept at ``path`` and keep every change there from now on.

        Slack keeps a channel's history; so does the playground, across restarts. Triggers,
        response URLs and open modals are short-lived in Slack too and are not kept.
        """
        self.state_file = path
        if path.exists():
            self.messages = [Message(**fields) for fields in json.loads(path.read_text())]
            self._by_ts = {(m.channel, m.ts): m for m in self.messages}
            stamps = [int(m.ts.replace(".", "")) for m in self.messages]
            self._last_ts_micros = max([self._last_ts_micros, *stamps])

    def forget_messages(self) -> None:
        """Empty every channel and close every modal (the playground's "reset demo")."""
        self.messages = []
        self._by_ts = {}
        for view in self.views.values():
            view.closed = True
        self._save_messages()

    def _save_messages(self) -> None:
        if self.state_file is None:
            return
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps([dataclasses.asdict(m) for m in self.messages]))
        temporary.replace(self.state_file)  # never a half-written file

    def _next_ts(self) -> str:
        """A unique, increasing ts near the current time, as Slack assigns them."""
        micros = max(int(self.clock() * 1_000_000), self._last_ts_micros + 1)
        self._last_ts_micros = micros
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    def _thread_root(self, channel: str, thread_ts: str | None) -> tuple[str | None, str | None]:
        """(thread_ts, parent_user_id); a reply's ts is folded to its parent's, like Slack."""
        if not thread_ts:
            return None, None
        parent = self.message(channel, thread_ts)
        if parent is None:
            return thread_ts, None
        if parent.thread_ts and parent.thread_ts != parent.ts:
            return self._thread_root(channel, parent.thread_ts)
        return thread_ts, parent.user

    def _add_message(
        self,
        channel: str,
        user: str,
        text: str,
        blocks: list[Json],
        *,
        thread_ts: str | None = None,
        bot: bool = False,
        ephemeral_to: str | None = None,
        client_msg_id: str | None = None,
    ) -> Message:
        root, parent_user = self._thread_root(channel, thread_ts)
        workspace = self.workspace_of_channel(channel)
        message = Message(
            channel=channel,
            ts=self._next_ts(),
            user=user,
            text=text,
            blocks=blocks,
            thread_ts=root,
            parent_user_id=parent_user,
            bot_id=workspace.bot_id if bot else None,
            app_id=self.app_id if bot else None,
            team=workspace.team_id,
            ephemeral_to=ephemeral_to,
            client_msg_id=client_msg_id,
        )
        self.messages.append(message)
        self._by_ts[(channel, message.ts)] = message
        self._save_messages()
        return message

    def _post_as_bot(self, channel: str, text: str, blocks: list[Json], **kw: Any) -> Message:
        bot_user = self.workspace_of_channel(channel).bot_user_id
        return self._add_message(channel, bot_user, text, blocks, bot=True, **kw)

    def _edit(self, message: Message, text: str, blocks: list[Json]) -> None:
        for block_id, element in message.buttons():
            if [block_id, element] not in message.former_buttons:
                message.former_buttons.append([block_id, copy.deepcopy(element)])
        message.text, message.blocks = text, blocks
        message.edited, message.edited_ts = True, self._next_ts()
