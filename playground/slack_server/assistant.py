"""The agent pane: ``assistant.threads.*``, ``agents.sessions.setStatus`` and the pane's events.

The methods check their arguments as Slack's reference states them (required ``channel_id``,
``thread_ts`` and ``status`` for ``setStatus``, at most 10 ``loading_messages``; one to four
prompts with a ``title`` and a ``message`` each; a session status among ``active``,
``processing``, ``suspended`` and ``closed``, a title of at most 200 characters) and keep what
the pane shows: each thread's status (``""`` clears it; every change is also in
``status_log``), the suggested prompts (per DM for the Agent experience, per thread for the
Assistant one), each thread's title and agent session.

The events are those Slack sends an agent app, in their documented shapes: the Messages tab
opened (``app_home_opened``, ``tab: "messages"``), an Assistant thread started, a person's DM
message (``message`` with ``channel_type: "im"``, stored like any message) and Slack's Stop on
an agent session (``agent_session_stopped``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from playground.slack_server.records import BotReply, Json, Message, _ApiError, _arg, _random_id

SESSION_STATUSES = ("active", "processing", "suspended", "closed")
MAX_LOADING_MESSAGES = 10
MAX_PROMPTS = 4
MAX_SESSION_TITLE = 200


@dataclass
class AgentSession:
    """An agent session, scoped to one thread (as Slack's ``agents.sessions.*``)."""

    status: str
    title: str = ""
    initiator: str = ""
    history: list[str] = field(default_factory=list)


class AssistantMixin:
    """The pane's Web API methods and events. A mixin of ``SlackServer``."""

    def _init_assistant(self) -> None:
        self.thread_status: dict[tuple[str, str], str] = {}  # (channel, thread_ts) -> status
        self.status_log: list[tuple[str, str, str]] = []  # (channel, thread_ts, status)
        self.suggested_prompts: dict[tuple[str, str | None], Json] = {}
        self.thread_titles: dict[tuple[str, str], str] = {}
        self.agent_sessions: dict[tuple[str, str], AgentSession] = {}

    # -- Web API --------------------------------------------------------------------------------

    def _api_assistant_threads_set_status(self, args: Json) -> Json:
        channel = _arg(args, "channel_id", "channel_not_found")
        thread_ts = _arg(args, "thread_ts", "invalid_thread_ts")
        status = args.get("status")
        if not isinstance(status, str):
            raise _ApiError("invalid_arguments")
        loading = args.get("loading_messages")
        if loading is not None and (
            not isinstance(loading, list) or len(loading) > MAX_LOADING_MESSAGES
        ):
            raise _ApiError("invalid_arguments")
        self._thread_of(channel, thread_ts)
        if status:
            self.thread_status[(channel, thread_ts)] = status
        else:
            self.thread_status.pop((channel, thread_ts), None)
        self.status_log.append((channel, thread_ts, status))
        return {"ok": True}

    def _api_assistant_threads_set_suggested_prompts(self, args: Json) -> Json:
        channel = _arg(args, "channel_id", "channel_not_found")
        prompts = args.get("prompts")
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_PROMPTS:
            raise _ApiError("invalid_arguments")
        for prompt in prompts:
            if not (
                isinstance(prompt, dict)
                and isinstance(prompt.get("title"), str)
                and isinstance(prompt.get("message"), str)
            ):
                raise _ApiError("invalid_arguments")
        thread_ts = args.get("thread_ts") or None
        if thread_ts is not None:
            self._thread_of(channel, str(thread_ts))
        self.suggested_prompts[(channel, thread_ts)] = {
            "title": args.get("title"),
            "prompts": prompts,
        }
        return {"ok": True}

    def _api_assistant_threads_set_title(self, args: Json) -> Json:
        channel = _arg(args, "channel_id", "channel_not_found")
        thread_ts = _arg(args, "thread_ts", "invalid_thread_ts")
        title = _arg(args, "title", "invalid_arguments")
        self._thread_of(channel, thread_ts)
        self.thread_titles[(channel, thread_ts)] = title
        return {"ok": True}

    def _api_agents_sessions_set_status(self, args: Json) -> Json:
        status = _arg(args, "status", "invalid_arguments")
        if status not in SESSION_STATUSES:
            raise _ApiError("invalid_arguments")
        channel = _arg(args, "channel_id", "channel_not_found")
        thread_ts = _arg(args, "thread_ts", "invalid_thread_ts")
        title = str(args.get("title") or "")
        if len(title) > MAX_SESSION_TITLE:
            raise _ApiError("invalid_arguments")
        self._thread_of(channel, thread_ts)
        session = self.agent_sessions.get((channel, thread_ts))
        if session is None:  # created by its first status; title and initiator only then
            session = AgentSession(status, title, str(args.get("initiator_user_id") or ""))
            self.agent_sessions[(channel, thread_ts)] = session
        session.status = status
        session.history.append(status)
        answer: Json = {"ok": True, "status": status, "title": session.title}
        if status == "processing":
            # Slack: without the event subscription, Stop is a non-interactive indicator.
            answer["agent_status"] = status
        return answer

    def _thread_of(self, channel: str, thread_ts: str) -> Message:
        message = self.message(channel, thread_ts)
        if message is None:
            raise _ApiError("invalid_thread_ts")
        return message

    # -- events ---------------------------------------------------------------------------------

    def pane_channel(self, user: str) -> str:
        """The app's DM with ``user``: where the pane's conversation is."""
        return self.dm_channels.setdefault(user, "D" + user[1:])

    async def open_messages_tab(self, user: str) -> BotReply:
        """``user`` opens the app's Messages tab (the Agent experience's pane)."""
        workspace = self.workspace_of_user(user)
        event: Json = {
            "type": "app_home_opened",
            "user": user,
            "channel": self.pane_channel(user),
            "tab": "messages",
            "event_ts": self._next_ts(),
        }
        payload = self._event_callback(event, _random_id("Ev"), team_id=workspace.team_id)
        return await self.send_event(payload)

    async def start_assistant_thread(self, user: str) -> tuple[Message, BotReply]:
        """``user`` opens the Assistant experience's pane: its root message, then the event."""
        channel = self.pane_channel(user)
        workspace = self.workspace_of_user(user)
        root = self.post_user_message(user, channel, "New chat")
        event: Json = {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": user,
                "context": {"channel_id": "", "team_id": workspace.team_id, "enterprise_id": ""},
                "channel_id": channel,
                "thread_ts": root.ts,
            },
            "event_ts": self._next_ts(),
        }
        payload = self._event_callback(event, _random_id("Ev"), team_id=workspace.team_id)
        return root, await self.send_event(payload)

    async def pane_message(
        self, user: str, text: str, *, thread_ts: str | None = None, event_id: str | None = None
    ) -> BotReply:
        """``user`` writes ``text`` in the pane (their DM with the app): ``message.im``.
        ``reply.message`` is the stored message (its ``ts`` is the event's)."""
        channel = self.pane_channel(user)
        workspace = self.workspace_of_user(user)
        message = self.post_user_message(user, channel, text, thread_ts=thread_ts)
        event: Json = {
            "client_msg_id": message.client_msg_id,
            "type": "message",
            "text": message.text,
            "user": user,
            "ts": message.ts,
            "blocks": message.blocks,
            "team": workspace.team_id,
            "channel": channel,
            "event_ts": message.ts,
            "channel_type": "im",
        }
        if message.thread_ts:
            event.update(thread_ts=message.thread_ts, parent_user_id=message.parent_user_id)
        payload = self._event_callback(
            event, event_id or _random_id("Ev"), team_id=workspace.team_id
        )
        reply: BotReply = await self.send_event(payload)
        reply.message = message
        return reply

    async def stop_session(self, user: str, thread_ts: str) -> BotReply:
        """``user`` clicks Slack's Stop on the agent session of their pane thread."""
        channel = self.pane_channel(user)
        workspace = self.workspace_of_user(user)
        event: Json = {
            "type": "agent_session_stopped",
            "channel": channel,
            "thread_ts": thread_ts,
            "user": user,
            "streaming_message_ts": [],
            "event_ts": self._next_ts(),
        }
        payload = self._event_callback(event, _random_id("Ev"), team_id=workspace.team_id)
        return await self.send_event(payload)
