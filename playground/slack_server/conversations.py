"""``conversations.replies``: a thread as the bot reads it back."""

from __future__ import annotations

from playground.slack_server.records import Json, Message, _ApiError, _arg


class ConversationsMixin:
    """The ``conversations.*`` Web API methods.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

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
