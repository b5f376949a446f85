"""``chat.*``: posting, updating, ephemeral messages and permalinks, with Slack's errors."""

from __future__ import annotations

import re
from typing import Any

from playground.slack_server.blocks import MAX_MESSAGE_TEXT, _check_blocks
from playground.slack_server.records import Json, Message, _ApiError, _arg

_EVENT_TYPE = re.compile(r"[A-Za-z0-9_]{1,255}")


def check_metadata(metadata: Any) -> Json:
    """Message metadata as Slack takes it: ``{"event_type", "event_payload"}``, the type an
    alphanumeric name, the payload an object whose values are strings, numbers, booleans,
    flat objects of those or lists of such objects; else Slack's errors."""
    if not isinstance(metadata, dict):
        raise _ApiError("invalid_metadata_format")
    event_type, payload = metadata.get("event_type"), metadata.get("event_payload")
    if not isinstance(event_type, str) or not _EVENT_TYPE.fullmatch(event_type):
        raise _ApiError("invalid_metadata_schema")
    if not isinstance(payload, dict) or not all(_payload_value(v) for v in payload.values()):
        raise _ApiError("invalid_metadata_schema")
    return {"event_type": event_type, "event_payload": payload}


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def _flat(value: Any) -> bool:
    return isinstance(value, dict) and all(_scalar(v) for v in value.values())


def _payload_value(value: Any) -> bool:
    return (
        _scalar(value) or _flat(value) or (isinstance(value, list) and all(_flat(v) for v in value))
    )


def _message_content(args: Json) -> tuple[str, list[Json]]:
    """text and blocks of chat.postMessage/postEphemeral, with Slack's errors."""
    text = str(args.get("text") or "")
    blocks = args.get("blocks")
    if not text and not blocks and not args.get("attachments"):
        raise _ApiError("no_text")
    if len(text) > MAX_MESSAGE_TEXT:
        raise _ApiError("msg_too_long")
    return text, (_check_blocks(blocks) if blocks else [])


class ChatMixin:
    """The ``chat.*`` Web API methods.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def _api_chat_post_message(self, args: Json) -> Json:
        channel = _arg(args, "channel", "channel_not_found")
        text, blocks = _message_content(args)
        metadata = check_metadata(args["metadata"]) if args.get("metadata") else None
        message = self._post_as_bot(channel, text, blocks, thread_ts=args.get("thread_ts"))
        message.metadata = metadata
        return {"ok": True, "channel": channel, "ts": message.ts, "message": message.to_api()}

    def _api_chat_update(self, args: Json) -> Json:
        """Replaces what is given; like Slack, absent ``blocks`` keep the old ones (buttons!)."""
        channel = _arg(args, "channel", "channel_not_found")
        message = self.message(channel, _arg(args, "ts", "message_not_found"))
        if message is None or message.is_ephemeral:
            raise _ApiError("message_not_found")
        if message.user != self.workspace_of_channel(channel).bot_user_id:
            raise _ApiError("cant_update_message")
        text = str(args["text"]) if "text" in args else message.text
        if len(text) > MAX_MESSAGE_TEXT:
            raise _ApiError("msg_too_long")
        blocks = _check_blocks(args["blocks"]) if "blocks" in args else message.blocks
        if args.get("metadata"):  # like blocks, absent metadata keeps the old
            message.metadata = check_metadata(args["metadata"])
        self._edit(message, text, blocks)
        if message.stream_state == "streaming":
            message.stream_state = "stopped"  # an edit ends a stream (slack_sdk's fallback)
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

    def _permalink(self, message: Message) -> str:
        link = (
            f"https://{self.team_domain}.slack.com/archives/"
            f"{message.channel}/p{message.ts.replace('.', '')}"
        )
        if message.thread_ts and message.thread_ts != message.ts:
            link += f"?thread_ts={message.thread_ts}&cid={message.channel}"
        return link
