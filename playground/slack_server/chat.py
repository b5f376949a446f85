"""``chat.*``: posting, updating, ephemeral messages and permalinks, with Slack's errors."""

from __future__ import annotations

from playground.slack_server.blocks import MAX_MESSAGE_TEXT, _check_blocks
from playground.slack_server.records import Json, Message, _ApiError, _arg


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
        message = self._post_as_bot(channel, text, blocks, thread_ts=args.get("thread_ts"))
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

    def _permalink(self, message: Message) -> str:
        link = (
            f"https://{self.team_domain}.slack.com/archives/"
            f"{message.channel}/p{message.ts.replace('.', '')}"
        )
        if message.thread_ts and message.thread_ts != message.ts:
            link += f"?thread_ts={message.thread_ts}&cid={message.channel}"
        return link
