"""The agent pane's Web API calls: suggested prompts, the thread's status and title, the agent
session's status, and the lines and card copies the pane posts.

Slack has two experiences for an agent app (see docs/slack.md, "The agent pane"): the Agent
messaging experience (manifest ``features.agent_view``; conversations in the app's Messages
tab) and the older Assistant one (``assistant_view``; a split pane). The calls here work in
both, with the differences Slack documents: ``assistant.threads.setSuggestedPrompts`` takes
no ``thread_ts`` for an agent app (the call would silently fail with one) and a thread's for
an assistant thread; ``agents.sessions.*`` exists only for apps declared as agents.

Everything here is best effort, as the progress message is: the run, its cards and its answer
never wait on a status. A refusal is logged once per workspace, method and error (a workspace
on the Assistant experience refuses ``agents.sessions.setStatus`` on every run), and a
workspace that refuses agent sessions as such (the app is no agent there, the method is
unknown or not allowed: :data:`NO_SESSIONS_ERRORS`) is not asked again until the process
restarts. Any other refusal (``thread_not_found``, ``invalid_arguments``…) is one thread's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_sdk.errors import SlackApiError

from handlers.blocks.assistant import PROMPTS_TITLE, SUGGESTED_PROMPTS
from handlers.slack.failures import SLACK_FAILURES, transient
from handlers.slack.workspaces import WorkspaceClients

log = logging.getLogger(__name__)

# agents.sessions.setStatus's lifecycle values (Slack: "active processing suspended closed").
PROCESSING, ACTIVE, SUSPENDED, CLOSED = "processing", "active", "suspended", "closed"
# agents.sessions.* refusals that hold for the whole workspace (no agent sessions there).
NO_SESSIONS_ERRORS = frozenset(
    {
        "unknown_method",
        "not_allowed",
        "not_allowed_token_type",
        "method_not_supported_for_channel_type",
        "not_an_agent",
        "app_not_agent",
        "feature_not_enabled",
        "missing_scope",
        "no_permission",
    }
)


class PaneCalls:
    """The pane's Slack calls, through the workspace's client."""

    def __init__(self, clients: WorkspaceClients) -> None:
        self.clients = clients
        self._logged: set[tuple[str, str, str]] = set()
        self._no_sessions: set[str] = set()  # workspaces that refused agent sessions
        self._domains: dict[str, str] = {}  # workspace -> its domain (links)
        # The pane runs this process drives now: run id -> (team, channel, thread_ts).
        self.threads: dict[str, tuple[str, str, str]] = {}
        # One at a time per thread: a call's status never lands after the waiting status.
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def lock(self, channel: str, thread_ts: str) -> asyncio.Lock:
        return self._locks.setdefault((channel, thread_ts), asyncio.Lock())

    def forget(self, channel: str, thread_ts: str) -> None:
        """The thread's run ended here: its lock goes (unless someone holds it)."""
        lock = self._locks.get((channel, thread_ts))
        if lock is not None and not lock.locked():
            del self._locks[(channel, thread_ts)]

    async def _call(self, team: str, method: str, **args: Any) -> dict[str, Any] | None:
        """Call Slack's ``method`` ("assistant.threads.setStatus"); its response, or None
        (logged once per kind of refusal)."""
        try:
            client = await self.clients.for_team(team)
            # slack_sdk's own method: each sends its arguments as Slack's reference says.
            call = getattr(client, method.replace(".", "_"))
            response = await call(**args)
            return dict(response.data) if isinstance(response.data, dict) else {}
        except SLACK_FAILURES as exc:
            error = (
                str(exc.response.get("error"))
                if isinstance(exc, SlackApiError) and exc.response is not None
                else type(exc).__name__
            )
            key = (team, method, error)
            if key not in self._logged or transient(exc):
                self._logged.add(key)
                log.warning("%s refused in workspace %s: %s", method, team or "-", error)
            if method.startswith("agents.sessions.") and error in NO_SESSIONS_ERRORS:
                self._no_sessions.add(team)
            return None

    async def domain(self, team: str) -> str:
        """The workspace's domain ("acme" of acme.slack.com), for links as /approvals makes
        them (events carry no domain; ``auth.test``'s url does); "" when Slack does not say."""
        if team not in self._domains:
            answer = await self._call(team, "auth.test")
            url = str((answer or {}).get("url") or "")
            host = url.split("//", 1)[-1].split("/", 1)[0]
            if not host.endswith(".slack.com"):
                return ""
            self._domains[team] = host.removesuffix(".slack.com")
        return self._domains[team]

    async def suggest_prompts(self, team: str, channel: str, thread_ts: str | None) -> bool:
        """The greeting's prompts: for the Messages tab (``thread_ts`` None, the Agent
        experience) or for one assistant thread."""
        args: dict[str, Any] = {
            "channel_id": channel,
            "prompts": SUGGESTED_PROMPTS,
            "title": PROMPTS_TITLE,
        }
        if thread_ts:
            args["thread_ts"] = thread_ts
        return await self._call(team, "assistant.threads.setSuggestedPrompts", **args) is not None

    async def set_status(self, team: str, channel: str, thread_ts: str, status: str) -> None:
        """The thread's status ("is working on …"); "" clears it."""
        await self._call(
            team,
            "assistant.threads.setStatus",
            channel_id=channel,
            thread_ts=thread_ts,
            status=status,
        )

    async def set_title(self, team: str, channel: str, thread_ts: str, title: str) -> None:
        await self._call(
            team, "assistant.threads.setTitle", channel_id=channel, thread_ts=thread_ts, title=title
        )

    async def session(
        self,
        team: str,
        channel: str,
        thread_ts: str,
        status: str,
        *,
        title: str | None = None,
        initiator: str | None = None,
    ) -> None:
        """The agent session's status (Slack shows Stop while it is ``processing``); the
        title and initiator count only when this creates the session."""
        if team in self._no_sessions:
            return
        args: dict[str, Any] = {"channel_id": channel, "thread_ts": thread_ts, "status": status}
        if title:
            args["title"] = title
        if initiator:
            args["initiator_user_id"] = initiator
        await self._call(team, "agents.sessions.setStatus", **args)

    async def say(self, team: str, channel: str, thread_ts: str | None, text: str) -> str | None:
        """A line in the pane's thread; its ts, or None."""
        args: dict[str, Any] = {"channel": channel, "text": text}
        if thread_ts:
            args["thread_ts"] = thread_ts
        response = await self._call(team, "chat.postMessage", **args)
        return str(response["ts"]) if response and response.get("ts") else None

    async def post_blocks(
        self,
        team: str,
        channel: str,
        thread_ts: str | None,
        text: str,
        blocks: list[dict[str, Any]],
    ) -> str | None:
        args: dict[str, Any] = {"channel": channel, "text": text, "blocks": blocks}
        if thread_ts:
            args["thread_ts"] = thread_ts
        response = await self._call(team, "chat.postMessage", **args)
        return str(response["ts"]) if response and response.get("ts") else None

    async def permalink(self, team: str, channel: str, ts: str) -> str | None:
        response = await self._call(team, "chat.getPermalink", channel=channel, message_ts=ts)
        link = response.get("permalink") if response else None
        return link if isinstance(link, str) else None
