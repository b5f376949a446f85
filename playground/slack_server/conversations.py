"""``conversations.replies`` (a thread as the bot reads it back) and ``conversations.open``
(the bot's DM with a person)."""

from __future__ import annotations

from playground.slack_server.records import Json, Message, _ApiError, _arg


class ConversationsMixin:
    """The ``conversations.*`` Web API methods.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    dm_channels: dict[str, str]  # user -> the bot's DM channel with them

    def _api_conversations_open(self, args: Json) -> Json:
        """The bot's direct message channel with one person, as Slack answers it: the same
        ``D…`` id every time (``already_open`` after the first)."""
        users = str(args.get("users") or "").strip()
        if not users:
            raise _ApiError("users_list_not_supplied")
        if "," in users:
            raise _ApiError("not_enough_users")  # a group DM: the bot never opens one
        already = users in self.dm_channels
        channel = self.dm_channels.setdefault(users, "D" + users[1:])  # as app_home_opened says
        answer: Json = {"ok": True, "channel": {"id": channel}}
        if already:
            answer.update(no_op=True, already_open=True)
        return answer

    def dm_channel(self, user: str) -> str | None:
        """The DM channel the bot opened with ``user``, if it did."""
        return self.dm_channels.get(user)

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
