"""The Slack double's records and constants: what tests assert on and what its parts share.

:class:`ApiCall`, :class:`Message`, :class:`OpenView`, :class:`ResponseCall`, :class:`BotReply`,
:class:`SocketReply`, :class:`HeldAnswer` and the private bookkeeping records (trigger ids,
response URLs, injected faults); Slack's limits and deadlines as constants; ``_ApiError`` (an
``ok: false`` answer) and the few pure helpers every Web API family uses.
"""

from __future__ import annotations

import asyncio
import copy
import json
import secrets
import string
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

Json = dict[str, Any]
SocketPayloadType = Literal["events_api", "interactive", "slash_commands"]

TRIGGER_TTL_SECONDS = 3.0
RESPONSE_URL_TTL_SECONDS = 30 * 60
RESPONSE_URL_MAX_USES = 5
ACK_TIMEOUT_SECONDS = 3.0
VERIFICATION_TOKEN = "XXYYZZverificationtoken"  # deprecated by Slack, still sent in payloads
SLACK_USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"
# Arguments slack_sdk JSON-encodes when it sends a form body (and we store structured).
JSON_ARGS = frozenset({"blocks", "attachments", "view", "metadata", "chunks", "outputs"})
APP_TOKEN_METHODS = frozenset({"apps.connections.open"})
# Called with the app's client id and secret, not a token.
CLIENT_AUTH_METHODS = frozenset({"oauth.v2.access"})


def _button_elements(blocks: list[Json]) -> Iterator[tuple[str, Json]]:
    """(block_id, element) for each interactive element of a message or a view."""
    for block in blocks:
        if block.get("type") == "actions":
            for element in block.get("elements", []):
                yield block.get("block_id", ""), element
        elif isinstance(block.get("accessory"), dict):
            yield block.get("block_id", ""), block["accessory"]


@dataclass
class ApiCall:
    """One Web API call as the bot made it: tests assert on what the bot asked Slack to do."""

    method: str
    args: Json
    at: float
    status: int = 200
    response: Json = field(default_factory=dict)
    token: str = ""
    # The workspace the call's token belongs to (None: no valid bot token).
    team: str | None = None

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
    # Buttons earlier versions showed ([block_id, element]): a person whose screen is not
    # up to date yet can still click one, and Slack delivers that click (see click_as_seen).
    former_buttons: list[list[Any]] = field(default_factory=list)
    # Message metadata ({"event_type", "event_payload"}), as chat.postMessage/update set it.
    metadata: Json | None = None
    # A streamed message (chat.startStream): "streaming" until stopped, then "stopped"; its
    # chunks in the order they came (playground.slack_server.streams).
    stream_state: str | None = None
    chunks: list[Json] = field(default_factory=list)

    @property
    def tasks(self) -> list[Json]:
        """A streamed message's tasks as Slack shows them: each one's latest update, in the
        order they first came."""
        latest: dict[str, Json] = {}
        for chunk in self.chunks:
            if chunk.get("type") == "task_update":
                latest[str(chunk["id"])] = chunk
        return list(latest.values())

    @property
    def is_ephemeral(self) -> bool:
        """Ephemeral messages cannot be edited by chat.update, only through a response URL."""
        return self.ephemeral_to is not None

    def buttons(self) -> Iterator[tuple[str, Json]]:
        """(block_id, element) for each interactive element: what a user could click."""
        return _button_elements(self.blocks)

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
        if self.metadata is not None:
            data["metadata"] = copy.deepcopy(self.metadata)
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
    execution_id: str | None = None  # a custom step's run (run_function)

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
    # Only calls whose arguments match (None: every call of the method).
    when: Callable[[Json], bool] | None = None


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


def _random_id(prefix: str, length: int = 10) -> str:
    """Slack-looking ids (``V0ABC...``, ``Ev0ABC...``): uppercase letters and digits."""
    alphabet = string.ascii_uppercase + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def _ts_key(ts: str) -> tuple[int, int]:
    """Sort key for a Slack ts ("1700000000.000100") without float rounding."""
    seconds, _, micros = ts.partition(".")
    return int(seconds), int(micros or 0)


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
