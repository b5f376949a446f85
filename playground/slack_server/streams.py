"""``chat.startStream``, ``chat.appendStream`` and ``chat.stopStream``: Slack's text streaming.

A stream is a bot message in a thread that grows as chunks arrive and stops taking them once
stopped (``message_not_in_streaming_state``). Every chunk is recorded on the message in the
order it came (``Message.chunks``), so tests can assert what was streamed; the message's text
is its markdown so far, its blocks are those of its ``blocks`` chunks (Pause and Stop) and of
``stopStream``'s ``blocks``, and ``Message.tasks`` folds the ``task_update`` chunks into each
task's latest state, as Slack shows them. The shapes checked are Slack's documented ones: the
four chunk types (``markdown_text``, ``task_update``, ``plan_update``, ``blocks``), a task's
``id``, ``title`` and ``status`` (``pending``, ``in_progress``, ``complete``, ``error``),
12,000 characters of markdown per field, and in a channel (not a DM) ``recipient_user_id``
with ``recipient_team_id``. A workspace can be made to refuse streaming
(:meth:`StreamsMixin.refuse_streaming`), as one whose Slack lacks the feature does.
"""

from __future__ import annotations

from typing import Any

from playground.slack_server.blocks import _check_blocks
from playground.slack_server.records import Json, Message, _ApiError, _arg

MARKDOWN_LIMIT = 12_000
CHUNK_TYPES = frozenset({"markdown_text", "task_update", "plan_update", "blocks"})
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
TASK_DISPLAY_MODES = frozenset({"timeline", "plan"})


def _markdown(text: Any) -> str:
    if not isinstance(text, str):
        raise _ApiError("invalid_arguments")
    if len(text) > MARKDOWN_LIMIT:
        raise _ApiError("msg_too_long")
    return text


def _checked_chunks(args: Json) -> list[Json]:
    """The call's chunks (``markdown_text`` given alone counts as one), each checked."""
    chunks = args.get("chunks")
    if chunks is None:
        chunks = []
    if not isinstance(chunks, list):
        raise _ApiError("invalid_chunks")
    checked: list[Json] = []
    if args.get("markdown_text") not in (None, ""):
        checked.append({"type": "markdown_text", "text": _markdown(args["markdown_text"])})
    for chunk in chunks:
        if not isinstance(chunk, dict) or chunk.get("type") not in CHUNK_TYPES:
            raise _ApiError("invalid_chunks")
        kind = chunk["type"]
        if kind == "markdown_text":
            _markdown(chunk.get("text"))
        elif kind == "task_update":
            if not chunk.get("id") or not isinstance(chunk.get("title"), str):
                raise _ApiError("invalid_chunks")
            if chunk.get("status") not in TASK_STATUSES:
                raise _ApiError("invalid_chunks")
        elif kind == "plan_update":
            if not isinstance(chunk.get("title"), str):
                raise _ApiError("invalid_chunks")
        else:
            _check_blocks(chunk.get("blocks") or [])
        checked.append(dict(chunk))
    return checked


class StreamsMixin:
    """The streaming ``chat.*`` methods. A mixin of ``SlackServer``."""

    def refuse_streaming(self, team_id: str | None = None, error: str = "not_allowed") -> None:
        """chat.startStream answers ``error`` in that workspace (default: the first one)."""
        self.streaming_refused[team_id or self.team_id] = error

    def streams(self) -> list[Message]:
        """Every streamed message, oldest first."""
        return [m for m in self.messages if m.stream_state is not None]

    def _api_chat_start_stream(self, args: Json) -> Json:
        channel = _arg(args, "channel", "channel_not_found")
        workspace = self.workspace_of_channel(channel)
        refused = self.streaming_refused.get(workspace.team_id)
        if refused:
            raise _ApiError(refused)
        if not channel.startswith("D") and not (
            args.get("recipient_user_id") and args.get("recipient_team_id")
        ):
            # Slack: "Required when streaming to channels."
            raise _ApiError("invalid_arguments")
        mode = args.get("task_display_mode")
        if mode is not None and mode not in TASK_DISPLAY_MODES:
            raise _ApiError("invalid_arguments")
        chunks = _checked_chunks(args)
        message = self._post_as_bot(channel, "", [], thread_ts=args.get("thread_ts"))
        message.stream_state = "streaming"
        self._add_chunks(message, chunks)
        return {"ok": True, "channel": channel, "ts": message.ts}

    def _api_chat_append_stream(self, args: Json) -> Json:
        message = self._streaming_message(args)
        chunks = _checked_chunks(args)
        if not chunks:
            raise _ApiError("no_text")
        self._add_chunks(message, chunks)
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def _api_chat_stop_stream(self, args: Json) -> Json:
        message = self._streaming_message(args)
        self._add_chunks(message, _checked_chunks(args))
        if args.get("blocks"):
            message.blocks = message.blocks + _check_blocks(args["blocks"])
        message.stream_state = "stopped"
        answer = {"ok": True, "channel": message.channel, "ts": message.ts}
        return {**answer, "message": message.to_api()}

    def _streaming_message(self, args: Json) -> Message:
        channel = _arg(args, "channel", "channel_not_found")
        message = self.message(channel, _arg(args, "ts", "message_not_found"))
        if message is None or message.stream_state is None:
            raise _ApiError("message_not_found")
        if message.stream_state != "streaming":
            raise _ApiError("message_not_in_streaming_state")
        return message

    def _add_chunks(self, message: Message, chunks: list[Json]) -> None:
        for chunk in chunks:
            message.chunks.append(chunk)
            if chunk["type"] == "markdown_text":
                message.text += chunk["text"]
            elif chunk["type"] == "blocks":
                message.blocks = message.blocks + list(chunk.get("blocks") or [])
