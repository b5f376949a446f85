"""A Slack-compatible server: the one Slack double for integration tests and the playground.

Why it exists: the bot must be tested against Slack's *wire format* (signed HTTP requests,
form-encoded payloads, Web API response shapes, Socket Mode envelopes, response URLs), not
against mocks of our own code. ``slack_sdk.web.async_client.AsyncWebClient(base_url=api_url)``
and ``slack_sdk.socket_mode.aiohttp.SocketModeClient`` talk to it exactly as they talk to Slack,
so bolt runs unmodified.

State it owns, all in memory (it is a double of Slack for one workspace, nothing persists):

* ``messages``: every message in every channel, in posting order, user messages, bot
  messages and ephemeral ones (``ephemeral_to`` set). ``ts`` values are unique and increasing.
* ``views``: modals opened through ``views.open`` (id -> :class:`OpenView`, with the user
  whose ``trigger_id`` opened it).
* ``calls``: every Web API call the bot made (:class:`ApiCall`), ``unknown_calls`` the ones
  this server does not implement (logged at ERROR: the double must never silently drift from
  what the bot uses), ``responses``: every POST to a response URL (:class:`ResponseCall`).
* Issued ``trigger_id``s (3 s life, single use) and response URLs (5 uses, 30 min), so the
  bot is held to Slack's rules about them.
* Injected faults: ``rate_limit()`` (HTTP 429 + ``Retry-After``), ``fail()`` (ok:false),
  ``unreachable()`` (the connection is dropped unanswered) and ``hold()`` (a call takes
  effect, its answer waits: the caller can die not knowing).
* Socket Mode connections and the acks awaited on them.

Driving the bot (``mention``, ``click``, ``submit_view``, ``slash_command`` and their
``socket_*`` twins) builds the payloads Slack would send, from this server's own state (the
buttons actually on the message, trigger ids and response URLs it issued), and signs HTTP
requests with the signing secret like Slack does.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import hashlib
import hmac
import itertools
import json
import logging
import re
import secrets
import string
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypedDict, Unpack
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

log = logging.getLogger(__name__)

Json = dict[str, Any]
SocketPayloadType = Literal["events_api", "interactive", "slash_commands"]

TRIGGER_TTL_SECONDS = 3.0
RESPONSE_URL_TTL_SECONDS = 30 * 60
RESPONSE_URL_MAX_USES = 5
ACK_TIMEOUT_SECONDS = 3.0
VERIFICATION_TOKEN = "XXYYZZverificationtoken"  # deprecated by Slack, still sent in payloads
SLACK_USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"
# Arguments slack_sdk JSON-encodes when it sends a form body (and we store structured).
JSON_ARGS = frozenset({"blocks", "attachments", "view", "metadata"})
APP_TOKEN_METHODS = frozenset({"apps.connections.open"})
MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
MAX_MESSAGE_TEXT = 40_000
MENTION_RE = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


# ---------------------------------------------------------------------------------------------
# Records


@dataclass
class ApiCall:
    """One Web API call as the bot made it: tests assert on what the bot asked Slack to do."""

    method: str
    args: Json
    at: float
    status: int = 200
    response: Json = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether Slack (this server) answered ok:true."""
        return bool(self.response.get("ok"))


@dataclass
class Message:
    """A message as Slack stores it; ephemeral ones are visible to ``ephemeral_to`` only."""

    channel: str
    ts: str
    user: str
    text: str = ""
    blocks: list[Json] = field(default_factory=list)
    thread_ts: str | None = None
    parent_user_id: str | None = None
    bot_id: str | None = None
    app_id: str | None = None
    team: str | None = None
    ephemeral_to: str | None = None
    edited: bool = False
    edited_ts: str | None = None
    client_msg_id: str | None = None

    @property
    def is_ephemeral(self) -> bool:
        """Ephemeral messages cannot be edited by chat.update, only through a response URL."""
        return self.ephemeral_to is not None

    def buttons(self) -> Iterator[tuple[str, Json]]:
        """(block_id, element) for each interactive element: what a user could click."""
        for block in self.blocks:
            if block.get("type") == "actions":
                for element in block.get("elements", []):
                    yield block.get("block_id", ""), element
            elif isinstance(block.get("accessory"), dict):
                yield block.get("block_id", ""), block["accessory"]

    def to_api(self) -> Json:
        """The message object as Slack returns it in API responses and payloads."""
        data: Json = {"type": "message", "user": self.user, "text": self.text, "ts": self.ts}
        if self.team:
            data["team"] = self.team
        if self.bot_id:
            data.update(bot_id=self.bot_id, app_id=self.app_id)
        if self.client_msg_id:
            data["client_msg_id"] = self.client_msg_id
        if self.blocks:
            data["blocks"] = copy.deepcopy(self.blocks)
        if self.thread_ts:
            data["thread_ts"] = self.thread_ts
        if self.parent_user_id:
            data["parent_user_id"] = self.parent_user_id
        if self.edited:
            data["edited"] = {"user": self.user, "ts": self.edited_ts}
        return data


@dataclass
class OpenView:
    """A modal opened by the bot; ``user`` is who the trigger_id belonged to."""

    id: str
    user: str
    view: Json
    trigger_id: str
    opened_at: float
    closed: bool = False


@dataclass
class ResponseCall:
    """One POST to a response URL, with what it did (``message`` created or edited, if any)."""

    url_id: str
    body: Json
    at: float
    status: int
    error: str | None = None
    message: Message | None = None


@dataclass
class BotReply:
    """The bot's HTTP answer to something this server sent it.

    ``sent`` is the payload as sent (decoded); ``event_id``/``message`` are set for mentions
    (the event id and the user's message, whose ``ts`` is the event's ``ts``);
    ``trigger_id``/``response_url`` for clicks and slash commands. ``elapsed`` is seconds until
    the bot answered (Slack wants it under 3).
    """

    status: int
    body: str
    headers: Mapping[str, str]
    elapsed: float
    sent: Any = None
    event_id: str | None = None
    message: Message | None = None
    trigger_id: str | None = None
    response_url: str | None = None

    def json(self) -> Any:
        """The body decoded as JSON (bolt answers acks with a JSON body or nothing)."""
        return json.loads(self.body) if self.body else None


@dataclass
class SocketReply:
    """The ack a Socket Mode client sent back for one envelope, plus what was sent."""

    envelope_id: str
    ack: Json
    sent: Json
    elapsed: float
    event_id: str | None = None
    message: Message | None = None
    trigger_id: str | None = None
    response_url: str | None = None

    @property
    def payload(self) -> Json | None:
        """The ack's response payload (slash command message, view response_action)."""
        return self.ack.get("payload")


class DeliveryOptions(TypedDict, total=False):
    """Overrides for a signed HTTP delivery, to test the bot's verification and retries."""

    timestamp: int | str
    signature: str
    retry_num: int
    retry_reason: str
    # Deliver to this URL instead of ``bot_url``: one of several replicas behind Slack.
    bot_url: str


@dataclass
class _TriggerId:
    value: str
    user: str
    issued_at: float
    used: bool = False


@dataclass
class _ResponseUrl:
    id: str
    user: str
    channel: str
    issued_at: float
    source: Message | None = None
    uses: int = 0


@dataclass
class _Injection:
    times: int
    error: str
    retry_after: int | None = None


@dataclass
class HeldAnswer:
    """A Web API call that took effect but whose answer is held back until ``release``.

    ``arrived`` is set when the call came in. Between the two the caller has done something
    in Slack without knowing it (its process may die there, as it would on a slow network).
    """

    method: str
    when: Callable[[Json], bool]
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    call: ApiCall | None = None


class _ApiError(Exception):
    """A Web API error answered as HTTP 200 ``{"ok": false, "error": ...}``."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


# ---------------------------------------------------------------------------------------------
# Small pure helpers


def _random_id(prefix: str, length: int = 10) -> str:
    """Slack-looking ids (``V0ABC...``, ``Ev0ABC...``): uppercase letters and digits."""
    alphabet = string.ascii_uppercase + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def _ts_key(ts: str) -> tuple[int, int]:
    """Sort key for a Slack ts ("1700000000.000100") without float rounding."""
    seconds, _, micros = ts.partition(".")
    return int(seconds), int(micros or 0)


def _decode_arg(name: str, value: Any) -> Any:
    """slack_sdk JSON-encodes blocks/view/... in form posts: decode them back to structures."""
    if name in JSON_ARGS and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _truthy(value: Any) -> bool:
    """Slack reads booleans from forms as "true"/"1" and from JSON as booleans."""
    if isinstance(value, str):
        return value.lower() in {"true", "1", "yes"}
    return bool(value)


def _arg(args: Json, name: str, error: str = "invalid_arguments") -> str:
    """A required string argument, or the Slack error a missing one gives."""
    value = args.get(name)
    if value in (None, ""):
        raise _ApiError(error)
    return str(value)


def _bearer(request: web.Request) -> str | None:
    """The token slack_sdk puts in ``Authorization: Bearer``."""
    header = request.headers.get("Authorization", "")
    return header[len("Bearer ") :].strip() if header.startswith("Bearer ") else None


async def _read_args(request: web.Request) -> Json:
    """Arguments from the query string plus a form or JSON body, as slack_sdk sends them."""
    args: Json = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except json.JSONDecodeError as exc:
                raise _ApiError("invalid_json") from exc
            if not isinstance(body, dict):
                raise _ApiError("invalid_json")
            args.update(body)
        else:
            form = await request.post()
            args.update({k: v for k, v in form.items() if isinstance(v, str)})
    return {name: _decode_arg(name, value) for name, value in args.items()}


def _text_length(obj: Any) -> int:
    """Length of a text object's ``text`` (0 when absent)."""
    return len(obj.get("text", "")) if isinstance(obj, dict) else 0


def _element_problems(element: Json) -> list[str]:
    """Limits Slack enforces on a block element (the bot must truncate, not fail)."""
    problems = []
    if len(element.get("action_id", "")) > 255:
        problems.append("action_id must be at most 255 characters")
    if element.get("type") == "button":
        if len(element.get("value", "")) > 2000:
            problems.append("button value must be at most 2000 characters")
        if _text_length(element.get("text")) > 75:
            problems.append("button text must be at most 75 characters")
    return problems


def _block_problems(block: Any) -> list[str]:
    """Limits Slack enforces on one block."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return ["every block must be an object with a type"]
    problems = []
    if len(block.get("block_id", "")) > 255:
        problems.append("block_id must be at most 255 characters")
    if block["type"] == "section" and _text_length(block.get("text")) > 3000:
        problems.append("section text must be at most 3000 characters")
    if block["type"] == "header" and _text_length(block.get("text")) > 150:
        problems.append("header text must be at most 150 characters")
    fields = block.get("fields", []) if block["type"] == "section" else []
    if not isinstance(fields, list) or len(fields) > 10:
        problems.append("section fields must be a list of at most 10 items")
    elif any(_text_length(f) > 2000 for f in fields):
        problems.append("each section field must be at most 2000 characters")
    context = block.get("elements", []) if block["type"] == "context" else []
    if not isinstance(context, list) or len(context) > 10:
        problems.append("a context block holds at most 10 elements")
    elif any(_text_length(e) > 3000 for e in context):
        problems.append("context text must be at most 3000 characters")
    elements = block.get("elements", []) if block["type"] == "actions" else []
    if len(elements) > 25:
        problems.append("an actions block holds at most 25 elements")
    action_ids = [e.get("action_id") for e in elements if isinstance(e, dict)]
    if len(action_ids) != len(set(action_ids)):
        problems.append("action_ids must be unique within a block")
    for element in [*elements, block.get("accessory")]:
        if isinstance(element, dict):
            problems += _element_problems(element)
    return problems


def _blocks_problems(blocks: Any, limit: int) -> list[str]:
    """Everything Slack would reject about a list of blocks (empty when valid)."""
    if not isinstance(blocks, list):
        return ["blocks must be a list"]
    problems = [f"no more than {limit} items allowed"] if len(blocks) > limit else []
    block_ids = [b.get("block_id") for b in blocks if isinstance(b, dict) and b.get("block_id")]
    if len(block_ids) != len(set(block_ids)):
        problems.append("block_id values must be unique")
    for block in blocks:
        problems += _block_problems(block)
    return problems


def _check_blocks(blocks: Any, limit: int = MAX_MESSAGE_BLOCKS) -> list[Json]:
    """Validated, defensively copied blocks with missing block_ids filled in like Slack does."""
    if isinstance(blocks, str):
        raise _ApiError("invalid_blocks_format")
    problems = _blocks_problems(blocks, limit)
    if problems:
        raise _ApiError("invalid_blocks", errors=problems)
    stored = copy.deepcopy(blocks)
    for block in stored:
        block.setdefault("block_id", _random_id("", 5))
    return stored


def _rich_text_blocks(text: str) -> list[Json]:
    """The rich_text block Slack clients attach to a typed message, mentions as user elements."""
    elements: list[Json] = []
    cursor = 0
    for match in MENTION_RE.finditer(text):
        if match.start() > cursor:
            elements.append({"type": "text", "text": text[cursor : match.start()]})
        elements.append({"type": "user", "user_id": match.group(1)})
        cursor = match.end()
    if cursor < len(text):
        elements.append({"type": "text", "text": text[cursor:]})
    section = {"type": "rich_text_section", "elements": elements}
    return [{"type": "rich_text", "block_id": _random_id("", 5), "elements": [section]}]


def _find_button(message: Message, action_id: str, value: str | None) -> tuple[str, Json]:
    """The one button with that action_id (and value) actually on the message."""
    matches = [
        (block_id, element)
        for block_id, element in message.buttons()
        if element.get("action_id") == action_id
        and (value is None or element.get("value") == value)
    ]
    if not matches:
        shown = [(e.get("action_id"), e.get("value")) for _, e in message.buttons()]
        raise LookupError(f"no button {action_id!r} (value={value!r}) on message; it has {shown}")
    if len(matches) > 1:
        raise LookupError(f"{len(matches)} buttons {action_id!r} on the message: pass value=")
    block_id, element = matches[0]
    if element.get("type") != "button":
        raise ValueError(f"{action_id!r} is a {element.get('type')}; only buttons are clickable")
    return block_id, element


def _button_action(block_id: str, element: Json, action_ts: str) -> Json:
    """One entry of block_actions' ``actions``, shaped like Slack sends it for a button."""
    action: Json = {
        "action_id": element["action_id"],
        "block_id": block_id,
        "text": copy.deepcopy(element.get("text", {"type": "plain_text", "text": ""})),
        "type": "button",
        "action_ts": action_ts,
    }
    if "value" in element:
        action["value"] = element["value"]
    if "style" in element:
        action["style"] = element["style"]
    return action


def _message_content(args: Json) -> tuple[str, list[Json]]:
    """text and blocks of chat.postMessage/postEphemeral, with Slack's errors."""
    text = str(args.get("text") or "")
    blocks = args.get("blocks")
    if not text and not blocks and not args.get("attachments"):
        raise _ApiError("no_text")
    if len(text) > MAX_MESSAGE_TEXT:
        raise _ApiError("msg_too_long")
    return text, (_check_blocks(blocks) if blocks else [])


# ---------------------------------------------------------------------------------------------
# The server


class SlackServer:
    """Slack for one workspace, on a local port. See the module docstring for its state."""

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
        self.channels = channels or {}
        self.bot_name = bot_name
        # Overridable knobs: tests may move the clock or relax deadlines (the playground does).
        self.clock: Callable[[], float] = time.time
        self.trigger_ttl = TRIGGER_TTL_SECONDS
        self.ack_timeout = ACK_TIMEOUT_SECONDS

        self.messages: list[Message] = []
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
            "views.open": self._api_views_open,
            "views.update": self._api_views_update,
            "users.info": self._api_users_info,
            "usergroups.users.list": self._api_usergroups_users_list,
            "conversations.replies": self._api_conversations_replies,
            "apps.connections.open": self._api_apps_connections_open,
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
        message = Message(
            channel=channel,
            ts=self._next_ts(),
            user=user,
            text=text,
            blocks=blocks,
            thread_ts=root,
            parent_user_id=parent_user,
            bot_id=self.bot_id if bot else None,
            app_id=self.app_id if bot else None,
            team=self.team_id,
            ephemeral_to=ephemeral_to,
            client_msg_id=client_msg_id,
        )
        self.messages.append(message)
        self._by_ts[(channel, message.ts)] = message
        self._save_messages()
        return message

    def _post_as_bot(self, channel: str, text: str, blocks: list[Json], **kw: Any) -> Message:
        return self._add_message(channel, self.bot_user_id, text, blocks, bot=True, **kw)

    def _edit(self, message: Message, text: str, blocks: list[Json]) -> None:
        message.text, message.blocks = text, blocks
        message.edited, message.edited_ts = True, self._next_ts()

    def _permalink(self, message: Message) -> str:
        link = (
            f"https://{self.team_domain}.slack.com/archives/"
            f"{message.channel}/p{message.ts.replace('.', '')}"
        )
        if message.thread_ts and message.thread_ts != message.ts:
            link += f"?thread_ts={message.thread_ts}&cid={message.channel}"
        return link

    # -- fault injection ------------------------------------------------------------------------

    def rate_limit(self, method: str, times: int = 1, retry_after: int = 1) -> None:
        """The next ``times`` calls of ``method`` answer HTTP 429 with ``Retry-After``."""
        self._injections.setdefault(method, []).append(
            _Injection(times=times, error="ratelimited", retry_after=retry_after)
        )

    def fail(self, method: str, error: str = "internal_error", times: int = 1) -> None:
        """The next ``times`` calls of ``method`` answer ``{"ok": false, "error": error}``."""
        self._injections.setdefault(method, []).append(_Injection(times=times, error=error))

    def unreachable(self, method: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` have their connection dropped unanswered, as
        when Slack cannot be reached (the client sees a disconnect, after its retries too).
        ``times=0`` makes it reachable again."""
        self._unreachable[method] = times

    def hold(self, method: str, when: Callable[[Json], bool] = lambda _args: True) -> HeldAnswer:
        """The next call of ``method`` whose arguments match ``when`` takes effect at once (a
        posted message is in the channel) but is answered only after ``release`` is set."""
        held = HeldAnswer(method, when)
        self._holds.append(held)
        return held

    def _take_hold(self, call: ApiCall) -> HeldAnswer | None:
        for held in self._holds:
            if held.method == call.method and held.when(call.args):
                self._holds.remove(held)
                held.call = call
                held.arrived.set()
                return held
        return None

    def _take_injection(self, method: str) -> _Injection | None:
        queue = self._injections.get(method)
        if not queue:
            return None
        injection = queue[0]
        injection.times -= 1
        if injection.times <= 0:
            queue.pop(0)
        return injection

    # -- Web API --------------------------------------------------------------------------------

    async def _handle_api(self, request: web.Request) -> web.Response:
        """``/api/{method}``: record the call, then answer it as Slack would."""
        method = request.match_info["method"]
        if self._unreachable.get(method):
            self._unreachable[method] -= 1
            assert request.transport is not None
            request.transport.abort()  # no answer at all: the client sees a disconnect
            return web.Response(status=500)
        try:
            args = await _read_args(request)
            parse_error = None
        except _ApiError as exc:
            args, parse_error = {}, exc
        token = _bearer(request) or str(args.pop("token", "") or "")
        call = ApiCall(method=method, args=args, at=self.clock())
        self.calls.append(call)
        status, body, headers = self._answer(call, token, parse_error)
        call.status, call.response = status, body
        self._save_messages()
        held = self._take_hold(call)
        if held is not None:
            await held.release.wait()
        return web.json_response(body, status=status, headers=headers)

    def _answer(
        self, call: ApiCall, token: str, parse_error: _ApiError | None
    ) -> tuple[int, Json, dict[str, str]]:
        handler = self._methods.get(call.method)
        if handler is None:
            self._report_unknown(call)
            return 200, {"ok": False, "error": "unknown_method", "req_method": call.method}, {}
        try:
            self._check_token(call.method, token)
            if parse_error is not None:
                raise parse_error
            injection = self._take_injection(call.method)
            if injection is not None and injection.retry_after is not None:
                headers = {"Retry-After": str(injection.retry_after)}
                return 429, {"ok": False, "error": "ratelimited"}, headers
            if injection is not None:
                raise _ApiError(injection.error)
            return 200, handler(call.args), {}
        except _ApiError as exc:
            return 200, {"ok": False, "error": exc.error, **exc.extra}, {}

    def _report_unknown(self, call: ApiCall) -> None:
        """Loud on purpose: the bot uses a method this double does not speak."""
        self.unknown_calls.append(call)
        log.error(
            "SlackServer: UNKNOWN Web API method %r called (args=%r). The Slack double does "
            "not implement it: implement it in playground/slack_server.py or stop using it.",
            call.method,
            call.args,
        )

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

    def _api_chat_post_message(self, args: Json) -> Json:
        channel = _arg(args, "channel", "channel_not_found")
        text, blocks = _message_content(args)
        message = self._post_as_bot(channel, text, blocks, thread_ts=args.get("thread_ts"))
        return {"ok": True, "channel": channel, "ts": message.ts, "message": message.to_api()}

    def _api_chat_update(self, args: Json) -> Json:
        """Replaces what is given; like Slack, absent ``blocks`` keep the old ones (buttons!)."""
        channel = _arg(args, "channel", "channel_not_found")
        message = self.message(channel, _arg(args, "ts", "message_not_found"))
        if message is None or message.is_ephemeral:
            raise _ApiError("message_not_found")
        if message.user != self.bot_user_id:
            raise _ApiError("cant_update_message")
        text = str(args["text"]) if "text" in args else message.text
        if len(text) > MAX_MESSAGE_TEXT:
            raise _ApiError("msg_too_long")
        blocks = _check_blocks(args["blocks"]) if "blocks" in args else message.blocks
        self._edit(message, text, blocks)
        return {
            "ok": True,
            "channel": channel,
            "ts": message.ts,
            "text": message.text,
            "message": message.to_api(),
        }

    def _api_chat_post_ephemeral(self, args: Json) -> Json:
        channel = _arg(args, "channel", "channel_not_found")
        user = _arg(args, "user", "user_not_found")
        text, blocks = _message_content(args)
        message = self._post_as_bot(
            channel, text, blocks, thread_ts=args.get("thread_ts"), ephemeral_to=user
        )
        return {"ok": True, "message_ts": message.ts}

    def _api_chat_get_permalink(self, args: Json) -> Json:
        channel = _arg(args, "channel", "channel_not_found")
        message = self.message(channel, _arg(args, "message_ts", "message_not_found"))
        if message is None or message.is_ephemeral:
            raise _ApiError("message_not_found")
        return {"ok": True, "channel": channel, "permalink": self._permalink(message)}

    def _api_views_open(self, args: Json) -> Json:
        trigger = self._exchange_trigger(_arg(args, "trigger_id", "invalid_trigger_id"))
        view_id = _random_id("V")
        stored = self._full_view(view_id, self._view_arg(args))
        self.views[view_id] = OpenView(view_id, trigger.user, stored, trigger.value, self.clock())
        return {"ok": True, "view": copy.deepcopy(stored)}

    def _api_views_update(self, args: Json) -> Json:
        opened = self._find_view(args)
        if args.get("hash") and args["hash"] != opened.view["hash"]:
            raise _ApiError("hash_conflict")
        opened.view = self._full_view(opened.id, self._view_arg(args), previous=opened.view)
        return {"ok": True, "view": copy.deepcopy(opened.view)}

    def _api_users_info(self, args: Json) -> Json:
        user = _arg(args, "user", "user_not_found")
        if user != self.bot_user_id and user not in self.users:
            raise _ApiError("user_not_found")
        return {"ok": True, "user": self._user_object(user)}

    def _api_usergroups_users_list(self, args: Json) -> Json:
        group = _arg(args, "usergroup", "no_such_subteam")
        if group not in self.usergroups:
            raise _ApiError("no_such_subteam")
        return {"ok": True, "users": list(self.usergroups[group])}

    def _api_conversations_replies(self, args: Json) -> Json:
        channel = _arg(args, "channel", "channel_not_found")
        messages = self.thread(channel, _arg(args, "ts", "thread_not_found"))
        if not messages:
            raise _ApiError("thread_not_found")
        rendered = [m.to_api() for m in messages]
        self._add_reply_summary(rendered[0], messages[1:])
        return {
            "ok": True,
            "messages": rendered,
            "has_more": False,
            "response_metadata": {"next_cursor": ""},
        }

    def _api_apps_connections_open(self, args: Json) -> Json:
        ticket = str(uuid.uuid4())
        self._socket_tickets.add(ticket)
        ws_base = self.base_url.replace("http://", "ws://", 1)
        return {"ok": True, "url": f"{ws_base}/socket-mode?ticket={ticket}&app_id={self.app_id}"}

    @staticmethod
    def _add_reply_summary(parent: Json, replies: list[Message]) -> None:
        """A thread parent carries thread_ts and reply counts once it has replies."""
        if not replies:
            return
        parent.update(
            thread_ts=parent["ts"],
            reply_count=len(replies),
            reply_users=sorted({m.user for m in replies}),
            reply_users_count=len({m.user for m in replies}),
            latest_reply=replies[-1].ts,
        )

    def _user_object(self, user: str) -> Json:
        is_bot = user == self.bot_user_id
        name = self.bot_name if is_bot else self.user_name(user)
        return {
            "id": user,
            "team_id": self.team_id,
            "name": name,
            "deleted": False,
            "real_name": name,
            "tz": "Etc/UTC",
            "is_admin": False,
            "is_owner": False,
            "is_bot": is_bot,
            "is_app_user": False,
            "profile": {
                "real_name": name,
                "display_name": name,
                "real_name_normalized": name,
                "display_name_normalized": name,
                "team": self.team_id,
                **({"bot_id": self.bot_id} if is_bot else {}),
            },
        }

    # -- views and trigger ids ------------------------------------------------------------------

    def issue_trigger_id(self, user: str, *, age: float = 0.0) -> str:
        """A trigger_id for ``user``, as sent with clicks/commands; ``age`` backdates it."""
        issued_at = self.clock() - age
        value = f"{int(issued_at * 1000)}.{next(self._counter):04d}.{secrets.token_hex(16)}"
        self._triggers[value] = _TriggerId(value=value, user=user, issued_at=issued_at)
        return value

    def _exchange_trigger(self, value: str) -> _TriggerId:
        """Slack's rules: issued by us, used once, within 3 seconds."""
        trigger = self._triggers.get(value)
        if trigger is None:
            raise _ApiError("invalid_trigger_id")
        if trigger.used:
            raise _ApiError("exchanged_trigger_id")
        if self.clock() - trigger.issued_at > self.trigger_ttl:
            raise _ApiError("expired_trigger_id")
        trigger.used = True
        return trigger

    @staticmethod
    def _view_arg(args: Json) -> Json:
        view = args.get("view")
        if not isinstance(view, dict) or view.get("type") != "modal" or "title" not in view:
            raise _ApiError("invalid_arguments")
        return view

    def _find_view(self, args: Json) -> OpenView:
        if args.get("view_id"):
            opened = self.views.get(str(args["view_id"]))
        else:
            external = args.get("external_id")
            found = (
                v for v in self.views.values() if external and v.view["external_id"] == external
            )
            opened = next(found, None)
        if opened is None or opened.closed:
            raise _ApiError("not_found")
        return opened

    def _full_view(self, view_id: str, view: Json, previous: Json | None = None) -> Json:
        """The view object Slack returns and sends back in view_submission payloads."""
        return {
            "id": view_id,
            "team_id": self.team_id,
            "type": "modal",
            "blocks": _check_blocks(view.get("blocks", []), MAX_VIEW_BLOCKS),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "state": {"values": {}},
            "hash": f"{int(self.clock())}.{secrets.token_hex(4)}",
            "title": copy.deepcopy(view["title"]),
            "clear_on_close": bool(view.get("clear_on_close", False)),
            "notify_on_close": bool(view.get("notify_on_close", False)),
            "close": copy.deepcopy(view.get("close")),
            "submit": copy.deepcopy(view.get("submit")),
            "previous_view_id": previous["previous_view_id"] if previous else None,
            "root_view_id": previous["root_view_id"] if previous else view_id,
            "app_id": self.app_id,
            "external_id": view.get("external_id", ""),
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }

    def _apply_view_ack(self, opened: OpenView, ack: Any) -> None:
        """What Slack does with the answer to a view_submission."""
        action = ack.get("response_action") if isinstance(ack, dict) else None
        if action == "errors":
            return
        if action == "update" and isinstance(ack.get("view"), dict):
            opened.view = self._full_view(opened.id, ack["view"], previous=opened.view)
            return
        if action == "push" and isinstance(ack.get("view"), dict):
            pushed = _random_id("V")
            view = self._full_view(pushed, ack["view"])
            self.views[pushed] = OpenView(pushed, opened.user, view, "", self.clock())
            return
        opened.closed = True  # empty ack or "clear": the modal closes

    # -- response URLs --------------------------------------------------------------------------

    def issue_response_url(self, user: str, channel: str, source: Message | None = None) -> str:
        """A response URL bound to a user, a channel and (for clicks) the source message."""
        url_id = secrets.token_urlsafe(18)
        self._response_urls[url_id] = _ResponseUrl(url_id, user, channel, self.clock(), source)
        return f"{self.base_url}/response/{url_id}"

    async def _handle_response_url(self, request: web.Request) -> web.Response:
        url_id = request.match_info["url_id"]
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        call = ResponseCall(url_id, body if isinstance(body, dict) else {}, self.clock(), 200)
        self.responses.append(call)
        try:
            call.message = self._respond(url_id, body)
            self._save_messages()
        except _ApiError as exc:
            gone = exc.error in {"invalid_url", "expired_url", "used_up"}
            call.status, call.error = (404 if gone else 400), exc.error
            return web.json_response({"ok": False, "error": exc.error}, status=call.status)
        return web.json_response({"ok": True})

    def _use_response_url(self, url_id: str) -> _ResponseUrl:
        """Slack's limits: 5 uses within 30 minutes."""
        issued = self._response_urls.get(url_id)
        if issued is None:
            raise _ApiError("invalid_url")
        if self.clock() - issued.issued_at > RESPONSE_URL_TTL_SECONDS:
            raise _ApiError("expired_url")
        if issued.uses >= RESPONSE_URL_MAX_USES:
            raise _ApiError("used_up")
        issued.uses += 1
        return issued

    def _respond(self, url_id: str, body: Any) -> Message | None:
        """replace_original edits the source (ephemeral included), else a new message."""
        if not isinstance(body, dict):
            raise _ApiError("invalid_payload")
        issued = self._use_response_url(url_id)
        source = issued.source
        if source is not None and self.message(source.channel, source.ts) is not source:
            source = None  # deleted meanwhile: nothing to replace
        if _truthy(body.get("delete_original")):
            if source is not None:
                self.messages = [m for m in self.messages if m is not source]
                del self._by_ts[(source.channel, source.ts)]
            return None
        text = str(body.get("text") or "")
        blocks = _check_blocks(body["blocks"]) if body.get("blocks") else []
        if _truthy(body.get("replace_original")) and source is not None:
            self._edit(source, text, blocks)  # a full replacement: absent blocks are gone
            return source
        thread_ts = body.get("thread_ts") or (source.thread_ts if source else None)
        if body.get("response_type") == "in_channel":
            return self._post_as_bot(issued.channel, text, blocks, thread_ts=thread_ts)
        return self._post_as_bot(
            issued.channel, text, blocks, thread_ts=thread_ts, ephemeral_to=issued.user
        )

    def _apply_command_ack(self, user: str, channel: str, ack: Any) -> None:
        """A slash command's immediate answer is shown like a response_url message."""
        if not isinstance(ack, dict) or not (ack.get("text") or ack.get("blocks")):
            return
        blocks = _check_blocks(ack["blocks"]) if ack.get("blocks") else []
        text = str(ack.get("text") or "")
        ephemeral = None if ack.get("response_type") == "in_channel" else user
        self._post_as_bot(channel, text, blocks, ephemeral_to=ephemeral)

    # -- payloads Slack sends -------------------------------------------------------------------

    def sign(self, body: bytes | str, timestamp: int | str) -> str:
        """``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}``, Slack's request signature."""
        raw = body.encode() if isinstance(body, str) else body
        base = b"v0:" + str(timestamp).encode() + b":" + raw
        return "v0=" + hmac.new(self.signing_secret.encode(), base, hashlib.sha256).hexdigest()

    def _user_ref(self, user: str) -> Json:
        name = self.user_name(user)
        return {"id": user, "username": name, "name": name, "team_id": self.team_id}

    def _channel_ref(self, channel: str) -> Json:
        return {"id": channel, "name": self.channels.get(channel, channel.lower())}

    def _event_callback(self, event: Json, event_id: str) -> Json:
        """The Events API envelope around an event, as in fixtures/app_mention.json."""
        return {
            "token": VERIFICATION_TOKEN,
            "team_id": self.team_id,
            "context_team_id": self.team_id,
            "context_enterprise_id": None,
            "api_app_id": self.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(self.clock()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": "4-" + secrets.token_urlsafe(24),
        }

    def _mention_payload(
        self, user: str, channel: str, text: str, thread_ts: str | None, event_id: str | None
    ) -> tuple[Message, Json]:
        """Post the user's message, then build its app_mention event_callback."""
        mention = f"<@{self.bot_user_id}>"
        message = self.post_user_message(
            user, channel, text if mention in text else f"{mention} {text}", thread_ts=thread_ts
        )
        event: Json = {
            "client_msg_id": message.client_msg_id,
            "type": "app_mention",
            "text": message.text,
            "user": user,
            "ts": message.ts,
            "blocks": copy.deepcopy(message.blocks),
            "team": self.team_id,
        }
        if message.thread_ts:
            event.update(thread_ts=message.thread_ts, parent_user_id=message.parent_user_id)
        event.update(channel=channel, event_ts=message.ts)
        return message, self._event_callback(event, event_id or _random_id("Ev"))

    def _container(self, message: Message) -> Json:
        container: Json = {
            "type": "message",
            "message_ts": message.ts,
            "channel_id": message.channel,
            "is_ephemeral": message.is_ephemeral,
        }
        if message.thread_ts:
            container["thread_ts"] = message.thread_ts
        return container

    def _block_actions_payload(
        self, user: str, message: Message, action: Json, trigger_id: str, response_url: str
    ) -> Json:
        """block_actions as in fixtures/block_actions.json (no ``message`` when ephemeral)."""
        payload: Json = {
            "type": "block_actions",
            "user": self._user_ref(user),
            "api_app_id": self.app_id,
            "token": VERIFICATION_TOKEN,
            "container": self._container(message),
            "trigger_id": trigger_id,
            "team": {"id": self.team_id, "domain": self.team_domain},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": self._channel_ref(message.channel),
        }
        if not message.is_ephemeral:
            payload["message"] = message.to_api()
        payload.update(state={"values": {}}, response_url=response_url, actions=[action])
        return payload

    def _visible_message(self, user: str, message: Message) -> Message:
        """The message as it is now; a deleted or someone else's ephemeral can't be clicked."""
        current = self.message(message.channel, message.ts)
        if current is None:
            raise LookupError(f"message {message.channel}/{message.ts} no longer exists")
        if current.ephemeral_to not in (None, user):
            raise PermissionError(f"{user} cannot see {current.ephemeral_to}'s ephemeral message")
        return current

    def _prepare_click(
        self, user: str, message: Message, action_id: str, value: str | None
    ) -> tuple[Json, str, str]:
        current = self._visible_message(user, message)
        block_id, element = _find_button(current, action_id, value)
        return self._prepare_action(user, current, block_id, element)

    def _prepare_action(
        self, user: str, message: Message, block_id: str, element: Json
    ) -> tuple[Json, str, str]:
        """(payload, trigger_id, response_url) for a click on ``element``."""
        trigger_id = self.issue_trigger_id(user)
        response_url = self.issue_response_url(user, message.channel, source=message)
        action = _button_action(block_id, element, self._next_ts())
        payload = self._block_actions_payload(user, message, action, trigger_id, response_url)
        return payload, trigger_id, response_url

    def _prepare_raw_click(
        self, user: str, channel: str, action_id: str, value: str, options: Json
    ) -> tuple[Json, str, str]:
        """A click that needs no real button: the stored message if ``message_ts`` names one."""
        message = self.message(channel, options["message_ts"]) if options["message_ts"] else None
        if message is None:
            message = Message(
                channel=channel,
                ts=options["message_ts"] or self._next_ts(),
                user=self.bot_user_id,
                thread_ts=options["thread_ts"],
                bot_id=self.bot_id,
                app_id=self.app_id,
                team=self.team_id,
                ephemeral_to=user if options["is_ephemeral"] else None,
            )
        element = {
            "type": "button",
            "action_id": action_id,
            "value": value,
            "text": {"type": "plain_text", "text": action_id, "emoji": True},
        }
        return self._prepare_action(user, message, options["block_id"], element)

    def _prepare_submission(
        self, user: str, view_id: str, values: dict[str, dict[str, Json]]
    ) -> tuple[OpenView, Json]:
        """view_submission for a modal open for ``user``, values keyed like Slack's state."""
        opened = self.views.get(view_id)
        if opened is None or opened.closed:
            raise LookupError(f"no open view {view_id}")
        if opened.user != user:
            raise PermissionError(f"view {view_id} was opened for {opened.user}, not {user}")
        input_ids = {b.get("block_id") for b in opened.view["blocks"] if b.get("type") == "input"}
        unknown = set(values) - input_ids
        if unknown:
            raise LookupError(f"view {view_id} has no input blocks {sorted(unknown)}")
        view = copy.deepcopy(opened.view)
        view["state"] = {"values": copy.deepcopy(values)}
        payload: Json = {
            "type": "view_submission",
            "team": {"id": self.team_id, "domain": self.team_domain},
            "user": self._user_ref(user),
            "api_app_id": self.app_id,
            "token": VERIFICATION_TOKEN,
            "trigger_id": self.issue_trigger_id(user),
            "view": view,
            "response_urls": [],
            "is_enterprise_install": False,
            "enterprise": None,
        }
        return opened, payload

    def _slash_fields(self, user: str, channel: str, command: str, text: str) -> dict[str, str]:
        """The slash command form, field for field as in fixtures/slash_command.txt."""
        return {
            "token": VERIFICATION_TOKEN,
            "team_id": self.team_id,
            "team_domain": self.team_domain,
            "channel_id": channel,
            "channel_name": self._channel_ref(channel)["name"],
            "user_id": user,
            "user_name": self.user_name(user),
            "command": command,
            "text": text,
            "api_app_id": self.app_id,
            "is_enterprise_install": "false",
            "response_url": self.issue_response_url(user, channel),
            "trigger_id": self.issue_trigger_id(user),
        }

    # -- driving the bot over HTTP --------------------------------------------------------------

    async def _post_to_bot(
        self, body: bytes, content_type: str, **delivery: Unpack[DeliveryOptions]
    ) -> BotReply:
        """POST a signed request to ``bot_url`` and wait (``ack_timeout``) for its answer."""
        bot_url = delivery.get("bot_url") or self.bot_url
        if bot_url is None or self._session is None:
            raise RuntimeError("bot_url is not set or the server is not started")
        timestamp = str(delivery.get("timestamp", int(self.clock())))
        headers = {
            "Content-Type": content_type,
            "User-Agent": SLACK_USER_AGENT,
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": delivery.get("signature") or self.sign(body, timestamp),
        }
        if "retry_num" in delivery:
            headers["X-Slack-Retry-Num"] = str(delivery["retry_num"])
            headers["X-Slack-Retry-Reason"] = delivery.get("retry_reason", "http_timeout")
        started = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=self.ack_timeout)
        async with self._session.post(bot_url, data=body, headers=headers, timeout=timeout) as resp:
            text = await resp.text()
            return BotReply(resp.status, text, resp.headers.copy(), time.monotonic() - started)

    async def _post_json(self, payload: Json, **delivery: Unpack[DeliveryOptions]) -> BotReply:
        body = json.dumps(payload).encode()
        return await self._post_to_bot(body, "application/json", **delivery)

    async def _post_form(
        self, fields: Mapping[str, str], **delivery: Unpack[DeliveryOptions]
    ) -> BotReply:
        body = urlencode(fields).encode()
        return await self._post_to_bot(body, "application/x-www-form-urlencoded", **delivery)

    async def send_raw(
        self, body: bytes, content_type: str, **delivery: Unpack[DeliveryOptions]
    ) -> BotReply:
        """Any body, signed like Slack signs (unless ``signature`` overrides): for tests of
        what the bot does with requests Slack would never send."""
        return await self._post_to_bot(body, content_type, **delivery)

    def mention_payload(
        self, user: str, channel: str, text: str, *, thread_ts: str | None = None
    ) -> Json:
        """The app_mention event_callback a mention would send (the message is posted)."""
        return self._mention_payload(user, channel, text, thread_ts, None)[1]

    def click_payload(self, user: str, channel: str, action_id: str, value: str) -> Json:
        """A block_actions payload for a click on a button with ``action_id`` and ``value``."""
        options = {
            "block_id": "actions",
            "message_ts": None,
            "thread_ts": None,
            "is_ephemeral": False,
        }
        return self._prepare_raw_click(user, channel, action_id, value, options)[0]

    def submission_payload(
        self, user: str, view_id: str, values: dict[str, dict[str, Json]]
    ) -> Json:
        """The view_submission payload for ``user`` submitting an open modal."""
        return self._prepare_submission(user, view_id, values)[1]

    def command_fields(self, user: str, channel: str, text: str = "") -> dict[str, str]:
        """The form fields of ``/approvals text``."""
        return self._slash_fields(user, channel, "/approvals", text)

    async def mention(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        event_id: str | None = None,
        **delivery: Unpack[DeliveryOptions],
    ) -> BotReply:
        """A user @-mentions the bot: the message is stored, then the app_mention event sent.

        ``reply.event_id`` and ``reply.message`` (its ``ts`` is the event's) identify it.
        """
        message, payload = self._mention_payload(user, channel, text, thread_ts, event_id)
        reply = await self.send_event(payload, **delivery)
        reply.message = message
        return reply

    async def send_event(self, payload: Json, **delivery: Unpack[DeliveryOptions]) -> BotReply:
        """Deliver any event_callback; its body is kept so ``redeliver`` can resend it."""
        body = json.dumps(payload).encode()
        self._event_bodies[payload["event_id"]] = body
        reply = await self._post_to_bot(body, "application/json", **delivery)
        reply.sent, reply.event_id = payload, payload["event_id"]
        return reply

    async def change_usergroup(
        self, group: str, members: list[str], *, notify: bool = True
    ) -> BotReply | None:
        """An admin sets a user group's members. With ``notify`` Slack tells the bot, as it
        does apps with ``usergroups:read``: a ``subteam_members_changed`` event (a delta).
        Without, the change is as seen by a replica the event went to another of."""
        before = set(self.usergroups.get(group, []))
        self.usergroups[group] = list(members)
        if not notify:
            return None
        added, removed = sorted(set(members) - before), sorted(before - set(members))
        return await self.send_event(self.members_changed_payload(group, added, removed))

    def members_changed_payload(self, group: str, added: list[str], removed: list[str]) -> Json:
        """The ``subteam_members_changed`` event_callback, as Slack sends it."""
        now = int(self.clock())
        event = {
            "type": "subteam_members_changed",
            "subteam_id": group,
            "team_id": self.team_id,
            "date_previous_update": now - 60,
            "date_update": now,
            "added_users": added,
            "added_users_count": str(len(added)),
            "removed_users": removed,
            "removed_users_count": str(len(removed)),
            "event_ts": self._next_ts(),
        }
        return self._event_callback(event, _random_id("Ev"))

    async def usergroup_updated(self, group: str) -> BotReply:
        """Slack's ``subteam_updated`` event: the group as it is now (``users`` included)."""
        return await self.send_event(self.group_updated_payload(group))

    def group_updated_payload(self, group: str) -> Json:
        """The ``subteam_updated`` event_callback, as Slack sends it."""
        users = list(self.usergroups.get(group, []))
        now = int(self.clock())
        subteam = {
            "id": group,
            "team_id": self.team_id,
            "is_usergroup": True,
            "name": group,
            "handle": group.lower(),
            "is_external": False,
            "date_create": now - 86_400,
            "date_update": now,
            "date_delete": 0,
            "created_by": "U0ADMIN",
            "updated_by": "U0ADMIN",
            "deleted_by": None,
            "prefs": {"channels": [], "groups": []},
            "users": users,
            "user_count": str(len(users)),
        }
        event = {"type": "subteam_updated", "subteam": subteam, "event_ts": self._next_ts()}
        return self._event_callback(event, _random_id("Ev"))

    async def redeliver(
        self,
        event_id: str,
        retry_num: int = 1,
        retry_reason: str = "http_timeout",
        **delivery: Unpack[DeliveryOptions],
    ) -> BotReply:
        """Slack's retry: the same body, a fresh timestamp and signature, retry headers."""
        body = self._event_bodies[event_id]
        delivery.update(retry_num=retry_num, retry_reason=retry_reason)
        reply = await self._post_to_bot(body, "application/json", **delivery)
        reply.sent, reply.event_id = json.loads(body), event_id
        return reply

    async def click(
        self,
        user: str,
        message: Message,
        action_id: str,
        *,
        value: str | None = None,
        **delivery: Unpack[DeliveryOptions],
    ) -> BotReply:
        """``user`` clicks a button that is on ``message`` now (raises if it is not there)."""
        payload, trigger_id, response_url = self._prepare_click(user, message, action_id, value)
        return await self._send_interactive(payload, trigger_id, response_url, **delivery)

    async def click_delivered_to(
        self,
        user: str,
        message: Message,
        action_id: str,
        bot_urls: list[str],
        *,
        value: str | None = None,
    ) -> list[BotReply | BaseException]:
        """One click whose payload reaches several replicas at once (a balancer's retry).

        The same payload, signed afresh for each delivery, is posted to every URL
        concurrently; each answer, or the error that replaced it, in the order of ``bot_urls``.
        """
        payload, trigger_id, response_url = self._prepare_click(user, message, action_id, value)
        return list(
            await asyncio.gather(
                *(
                    self._send_interactive(payload, trigger_id, response_url, bot_url=url)
                    for url in bot_urls
                ),
                return_exceptions=True,
            )
        )

    async def click_raw(
        self,
        user: str,
        channel: str,
        action_id: str,
        value: str,
        *,
        block_id: str = "actions",
        message_ts: str | None = None,
        thread_ts: str | None = None,
        is_ephemeral: bool = False,
        **delivery: Unpack[DeliveryOptions],
    ) -> BotReply:
        """A block_actions with any action_id/value, for tests of forged or stale clicks."""
        options = {
            "block_id": block_id,
            "message_ts": message_ts,
            "thread_ts": thread_ts,
            "is_ephemeral": is_ephemeral,
        }
        payload, trigger_id, url = self._prepare_raw_click(user, channel, action_id, value, options)
        return await self._send_interactive(payload, trigger_id, url, **delivery)

    async def _send_interactive(
        self, payload: Json, trigger_id: str, url: str, **delivery: Unpack[DeliveryOptions]
    ) -> BotReply:
        reply = await self._post_form({"payload": json.dumps(payload)}, **delivery)
        reply.sent, reply.trigger_id, reply.response_url = payload, trigger_id, url
        return reply

    async def submit_view(
        self,
        user: str,
        view_id: str,
        values: dict[str, dict[str, Json]],
        **delivery: Unpack[DeliveryOptions],
    ) -> BotReply:
        """``user`` submits a modal; the ack (e.g. response_action errors) is applied."""
        opened, payload = self._prepare_submission(user, view_id, values)
        reply = await self._post_form({"payload": json.dumps(payload)}, **delivery)
        reply.sent, reply.trigger_id = payload, payload["trigger_id"]
        if reply.status == 200:
            self._apply_view_ack(opened, _ack_body(reply))
        return reply

    async def slash_command(
        self,
        user: str,
        channel: str,
        command: str = "/approvals",
        text: str = "",
        **delivery: Unpack[DeliveryOptions],
    ) -> BotReply:
        """``user`` types ``command text`` in ``channel``; a message ack is shown to them."""
        fields = self._slash_fields(user, channel, command, text)
        reply = await self._post_form(fields, **delivery)
        reply.sent, reply.trigger_id = fields, fields["trigger_id"]
        reply.response_url = fields["response_url"]
        if reply.status == 200:
            self._apply_command_ack(user, channel, _ack_body(reply))
        return reply

    # -- Socket Mode ----------------------------------------------------------------------------

    async def _handle_socket(self, request: web.Request) -> web.StreamResponse:
        """A Socket Mode connection: hello, then acks; aiohttp answers the client's pings."""
        ticket = request.query.get("ticket", "")
        if ticket not in self._socket_tickets:
            return web.Response(status=401, text="invalid or used ticket")
        self._socket_tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.socket_connects += 1
        self._socket_connected.set()
        try:
            await ws.send_json(self._hello())
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    self._on_socket_text(msg.data)
        finally:
            self._sockets.remove(ws)
            if not self._sockets:
                self._socket_connected.clear()
        return ws

    def _hello(self) -> Json:
        return {
            "type": "hello",
            "num_connections": len(self._sockets),
            "debug_info": {
                "host": "applink-playground",
                "build_number": 1,
                "approximate_connection_time": 18060,
            },
            "connection_info": {"app_id": self.app_id},
        }

    def _on_socket_text(self, data: str) -> None:
        try:
            ack = json.loads(data)
        except json.JSONDecodeError:
            log.warning("SlackServer: non-JSON Socket Mode message %r", data)
            return
        self.socket_acks.append(ack)
        future = self._pending_acks.pop(str(ack.get("envelope_id")), None)
        if future is None:
            log.warning("SlackServer: Socket Mode message for no pending envelope: %r", ack)
        elif not future.done():
            future.set_result(ack)

    async def wait_socket_connected(self, timeout: float = 5.0) -> None:
        """Wait until a Socket Mode client has connected (raises TimeoutError)."""
        await asyncio.wait_for(self._socket_connected.wait(), timeout)

    async def socket_disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's ``disconnect`` message: the client is expected to reconnect elsewhere."""
        message = {
            "type": "disconnect",
            "reason": reason,
            "debug_info": {"host": "applink-playground"},
        }
        for ws in list(self._sockets):
            await ws.send_json(message)

    async def send_socket_event(
        self,
        payload_type: SocketPayloadType,
        payload: Json,
        *,
        accepts_response_payload: bool | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
        timeout: float | None = None,
    ) -> Json:
        """Send one envelope to the newest connection and return its ack (Slack wants < 3 s)."""
        envelope = self._envelope(payload_type, payload, accepts_response_payload)
        if payload_type == "events_api":
            envelope.update(retry_attempt=retry_attempt, retry_reason=retry_reason)
        future: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._pending_acks[envelope["envelope_id"]] = future
        try:
            await self._newest_socket().send_json(envelope)
            return await asyncio.wait_for(future, timeout or self.ack_timeout)
        finally:
            self._pending_acks.pop(envelope["envelope_id"], None)

    @staticmethod
    def _envelope(payload_type: str, payload: Json, accepts: bool | None) -> Json:
        """Slack sets accepts_response_payload where an ack can carry a response."""
        if accepts is None:
            accepts = payload_type == "slash_commands" or payload.get("type") == "view_submission"
        return {
            "envelope_id": str(uuid.uuid4()),
            "payload": payload,
            "type": payload_type,
            "accepts_response_payload": accepts,
        }

    def _newest_socket(self) -> web.WebSocketResponse:
        if not self._sockets:
            raise RuntimeError("no Socket Mode client is connected")
        return self._sockets[-1]

    async def _socket_send(self, payload_type: SocketPayloadType, payload: Json) -> SocketReply:
        started = time.monotonic()
        ack = await self.send_socket_event(payload_type, payload)
        envelope_id = str(ack.get("envelope_id"))
        return SocketReply(envelope_id, ack, payload, time.monotonic() - started)

    async def socket_mention(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        event_id: str | None = None,
    ) -> SocketReply:
        """``mention`` over Socket Mode: the same event_callback inside an events_api envelope."""
        message, payload = self._mention_payload(user, channel, text, thread_ts, event_id)
        reply = await self._socket_send("events_api", payload)
        reply.event_id, reply.message = payload["event_id"], message
        return reply

    async def socket_click(
        self, user: str, message: Message, action_id: str, *, value: str | None = None
    ) -> SocketReply:
        """``click`` over Socket Mode (an ``interactive`` envelope)."""
        payload, trigger_id, response_url = self._prepare_click(user, message, action_id, value)
        reply = await self._socket_send("interactive", payload)
        reply.trigger_id, reply.response_url = trigger_id, response_url
        return reply

    async def socket_submit_view(
        self, user: str, view_id: str, values: dict[str, dict[str, Json]]
    ) -> SocketReply:
        """``submit_view`` over Socket Mode; the ack's payload is applied to the modal."""
        opened, payload = self._prepare_submission(user, view_id, values)
        reply = await self._socket_send("interactive", payload)
        reply.trigger_id = payload["trigger_id"]
        self._apply_view_ack(opened, reply.payload)
        return reply

    async def socket_slash_command(
        self, user: str, channel: str, command: str = "/approvals", text: str = ""
    ) -> SocketReply:
        """``slash_command`` over Socket Mode (the payload is the form as a JSON object)."""
        fields = self._slash_fields(user, channel, command, text)
        reply = await self._socket_send("slash_commands", dict(fields))
        reply.trigger_id, reply.response_url = fields["trigger_id"], fields["response_url"]
        self._apply_command_ack(user, channel, reply.payload)
        return reply


def _ack_body(reply: BotReply) -> Any:
    """An HTTP ack's body as Slack reads it: JSON, else plain text as a message's text."""
    if not reply.body:
        return None
    if reply.headers.get("Content-Type", "").startswith("application/json"):
        return reply.json()
    return {"text": reply.body}
