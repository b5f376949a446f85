"""The playground's Slack-like channel page, served next to the Slack API by ``SlackServer``.

Why it exists: to try the real bot the way people will use it (mention it, click its buttons,
fill in its modal, run ``/approvals``) without a Slack workspace, and to test that journey in a
real browser. The page shows one channel (``#ops``) as the person chosen with the identity
switch sees it: channel messages with their threads, that person's ephemeral messages and the
modal opened for them. Whatever they do becomes what Slack would send the bot (signed events,
``block_actions``, ``view_submission``, slash commands), built by ``SlackServer`` from its own
state, so the page can only do what a Slack user could.

Routes (``playground.page_routes.add_page_routes``):

* ``GET /`` — the page; ``?as=U…`` picks who you are (kept in the URL).
* ``GET /playground/state?user=U…`` — JSON the page polls: messages, threads, that user's
  ephemerals, their open modal.
* ``POST /playground/message`` ``{user, text, thread_ts?}`` — ``/command …`` (the app's
  commands only, like Slack), a mention of ``@approval-bot`` or a plain message.
* ``POST /playground/click`` ``{user, channel, ts, action_id, value}`` — a button click.
* ``POST /playground/select`` ``{user, channel, ts, action_id, option}`` — pick the option
  shown as ``option`` in a static_select menu.
* ``POST /playground/submit`` ``{user, view_id, values}`` and ``POST /playground/close``
  ``{user, view_id}`` — submit or cancel a modal.
* ``POST /playground/workflow/run`` ``{user, title, details, approvers, channel, timeout?}``
  — run the Workflow panel's step (:mod:`playground.page_workflow`).
* ``POST /playground/reset`` ``{"confirm": "reset"}`` — start the demo over (the page asks
  first): the bot's database, the pretend services and the channel are emptied.

Posting routes answer ``{"ok": true, "status": "…", "bot_status": 200}``; when the bot answers
with an error status (or not at all) they answer 502/504 with ``{"ok": false, "error": "…"}``,
which the page shows. The rendering (Block Kit and mrkdwn to safe DOM) is in
``static/page.js``; no build step and nothing fetched from the internet.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from playground.page_index import render_index
from playground.slack_server import BotReply, Message, SlackServer

if TYPE_CHECKING:
    from playground.people import Person

log = logging.getLogger(__name__)

Json = dict[str, Any]

STATIC_DIR = Path(__file__).resolve().parent / "static"
COMMANDS = ("/approvals",)  # the slash commands manifest.yml gives the app


def _escape_typed(text: str) -> str:
    """What a Slack client does to typed text: the three control characters become entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _asset_version() -> str:
    """A short hash of the static files, so a browser never runs a stale page.js."""
    digest = hashlib.sha256()
    for path in sorted(STATIC_DIR.glob("*")):
        if path.is_file():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


class PageError(Exception):
    """A request the page should show as an error (HTTP ``status``, ``message`` for people)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ChannelPage:
    """The page's routes for one channel of one ``SlackServer``."""

    def __init__(
        self,
        server: SlackServer,
        people: Sequence[Person],
        channel: str,
        commands: Sequence[str] = COMMANDS,
        reset: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.server = server
        self.reset = reset
        self.people = list(people)
        self.channel = channel
        self.commands = tuple(commands)
        self.names = {p.id: p.name for p in self.people}
        self.version = _asset_version()

    # -- helpers --------------------------------------------------------------------------------

    @property
    def channel_name(self) -> str:
        return self.server.channels.get(self.channel, self.channel.lower())

    def _person(self, user: Any) -> str:
        if not isinstance(user, str) or user not in self.names:
            raise PageError(400, f"unknown user {user!r}; one of {sorted(self.names)}")
        return user

    @staticmethod
    async def _body(request: web.Request) -> Json:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PageError(400, "the body must be a JSON object") from exc
        if not isinstance(body, dict):
            raise PageError(400, "the body must be a JSON object")
        return body

    def _name(self, user: str) -> str:
        if user == self.server.bot_user_id:
            return self.server.bot_name
        return self.names.get(user) or self.server.user_name(user)

    def _message_json(self, message: Message) -> Json:
        return {
            "ts": message.ts,
            "thread_ts": message.thread_ts,
            "user": message.user,
            "name": self._name(message.user),
            "bot": message.bot_id is not None,
            "text": message.text,
            "blocks": message.blocks,
            "edited": message.edited,
            "ephemeral": message.is_ephemeral,
            # A streamed answer (chat.startStream): still streaming or stopped, its tasks.
            "stream": message.stream_state,
            "tasks": message.tasks,
        }

    def state(self, user: str) -> Json:
        """What ``user`` sees: channel messages with threads, their ephemerals, their modal."""
        visible = [
            m
            for m in self.server.messages
            if m.channel == self.channel and m.ephemeral_to in (None, user)
        ]
        by_ts = {m.ts for m in visible if not m.thread_ts or m.thread_ts == m.ts}
        top: list[Json] = []
        replies: dict[str, list[Json]] = {}
        for message in sorted(visible, key=lambda m: _ts_key(m.ts)):
            data = self._message_json(message)
            if message.thread_ts and message.thread_ts != message.ts and message.thread_ts in by_ts:
                replies.setdefault(message.thread_ts, []).append(data)
            else:
                top.append(data)
        for data in top:
            data["replies"] = replies.get(data["ts"], [])
        return {
            "user": user,
            "channel": {"id": self.channel, "name": self.channel_name},
            "messages": top,
            "modal": self._open_modal(user),
        }

    def _open_modal(self, user: str) -> Json | None:
        """The newest modal opened for ``user`` and not closed (Slack shows one at a time)."""
        opened = [v for v in self.server.views.values() if v.user == user and not v.closed]
        if not opened:
            return None
        newest = max(opened, key=lambda v: v.opened_at)
        view = newest.view
        return {
            "id": newest.id,
            "hash": view.get("hash", ""),
            "title": view.get("title"),
            "submit": view.get("submit"),
            "close": view.get("close"),
            "blocks": view.get("blocks", []),
        }

    async def _drive(self, action: Awaitable[BotReply], what: str) -> BotReply:
        """Await a delivery to the bot; a refused, failed or missing answer is a PageError."""
        try:
            reply = await action
        except TimeoutError as exc:
            timeout = self.server.ack_timeout
            raise PageError(
                504, f"approval-bot did not answer the {what} within {timeout:g} s"
            ) from exc
        except aiohttp.ClientError as exc:
            raise PageError(502, f"cannot reach approval-bot for the {what}: {exc}") from exc
        except (LookupError, PermissionError, ValueError) as exc:
            # Raised by SlackServer before sending: what the person acted on is gone or theirs
            # was not to act on (a button no longer on the message, a closed modal).
            raise PageError(409, f"that {what} is not possible any more: {exc}") from exc
        except RuntimeError as exc:
            raise PageError(503, f"approval-bot is not connected: {exc}") from exc
        if reply.status >= 400:
            detail = reply.body.strip()[:200]
            message = f"approval-bot answered the {what} with HTTP {reply.status}"
            raise PageError(502, f"{message}: {detail}" if detail else message)
        return reply

    # -- routes ---------------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        wanted = request.query.get("as", "")
        current = wanted if wanted in self.names else self.people[0].id
        page = render_index(
            self.people,
            current,
            channel=(self.channel, self.channel_name),
            bot=(self.server.bot_user_id, self.server.bot_name),
            channels=self.server.channels,
            version=self.version,
        )
        return web.Response(text=page, content_type="text/html")

    async def get_state(self, request: web.Request) -> web.Response:
        user = self._person(request.query.get("user"))
        return web.json_response(self.state(user), headers={"Cache-Control": "no-store"})

    async def post_message(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        user = self._person(body.get("user"))
        text = str(body.get("text") or "").strip()
        thread_ts = body.get("thread_ts") or None
        if not text:
            raise PageError(400, "write something first")
        if thread_ts is not None and self.server.message(self.channel, str(thread_ts)) is None:
            raise PageError(404, "that thread no longer exists")
        if text.startswith("/"):
            command, _, rest = text.partition(" ")
            if command not in self.commands:
                # Slack answers this itself; the app never hears of it.
                raise PageError(400, f"{command} is not a valid command.")
            if thread_ts:
                log.info("playground: slash commands are not threaded; sending to the channel")
            reply = await self._drive(
                self.server.slash_command(
                    user, self.channel, command, text=_escape_typed(rest.strip())
                ),
                f"{command} command",
            )
            return _ok("command", reply)
        typed = self._with_mentions(_escape_typed(text))
        bot_mention = f"<@{self.server.bot_user_id}>"
        if bot_mention in typed:
            reply = await self._drive(
                self.server.mention(user, self.channel, typed, thread_ts=thread_ts), "mention"
            )
            return _ok("mention", reply, ts=reply.message.ts if reply.message else None)
        message = self.server.post_user_message(user, self.channel, typed, thread_ts=thread_ts)
        return web.json_response({"ok": True, "status": "posted", "ts": message.ts})

    def _with_mentions(self, text: str) -> str:
        """``@approval-bot`` and ``@ana`` become ``<@U…>``, as Slack's composer does."""
        handles = {self.server.bot_name: self.server.bot_user_id} | {
            p.name: p.id for p in self.people
        }
        names = "|".join(re.escape(name) for name in sorted(handles, key=len, reverse=True))
        pattern = re.compile(rf"(?<![\w<@])@({names})(?![\w-])")
        return pattern.sub(lambda m: f"<@{handles[m.group(1)]}>", text)

    async def post_click(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        user = self._person(body.get("user"))
        channel = str(body.get("channel") or self.channel)
        message = self.server.message(channel, str(body.get("ts") or ""))
        if message is None or message.ephemeral_to not in (None, user):
            raise PageError(404, "that message is gone")
        action_id = str(body.get("action_id") or "")
        value = body.get("value")
        # What the person's screen showed, which may be a version the bot has since edited.
        click = self.server.click_as_seen(
            user, message, action_id, value=None if value is None else str(value)
        )
        reply = await self._drive(click, "click")
        return _ok("clicked", reply)

    async def post_select(self, request: web.Request) -> web.Response:
        """Pick an option of a static_select menu (by the text it shows, as a person does)."""
        body = await self._body(request)
        user = self._person(body.get("user"))
        channel = str(body.get("channel") or self.channel)
        message = self.server.message(channel, str(body.get("ts") or ""))
        if message is None or message.ephemeral_to not in (None, user):
            raise PageError(404, "that message is gone")
        selection = self.server.select(
            user, message, str(body.get("action_id") or ""), str(body.get("option") or "")
        )
        reply = await self._drive(selection, "choice")
        return _ok("selected", reply)

    async def post_submit(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        user = self._person(body.get("user"))
        view_id = str(body.get("view_id") or "")
        values = body.get("values") or {}
        if not isinstance(values, dict):
            raise PageError(400, "values must be an object")
        submission = self.server.submit_view(user, view_id, values)
        reply = await self._drive(submission, "dialog submission")
        ack = _json_or_none(reply)
        if isinstance(ack, dict) and ack.get("response_action") == "errors":
            errors = ack.get("errors") if isinstance(ack.get("errors"), dict) else {}
            return web.json_response(
                {"ok": True, "status": "errors", "errors": errors, "bot_status": reply.status}
            )
        return _ok("submitted", reply)

    async def post_close(self, request: web.Request) -> web.Response:
        """Cancel a modal. Our modals don't ask for ``view_closed`` (``notify_on_close``)."""
        body = await self._body(request)
        user = self._person(body.get("user"))
        opened = self.server.views.get(str(body.get("view_id") or ""))
        if opened is None or opened.user != user:
            raise PageError(404, "no such dialog")
        if opened.view.get("notify_on_close"):
            log.warning("playground: view %s wants view_closed, which is not sent", opened.id)
        opened.closed = True
        return web.json_response({"ok": True, "status": "closed"})

    async def post_reset(self, request: web.Request) -> web.Response:
        """Start the demo over; the body must say ``{"confirm": "reset"}`` (no accidents)."""
        body = await self._body(request)
        if self.reset is None:
            raise PageError(404, "this playground cannot be reset")
        if body.get("confirm") != "reset":
            raise PageError(400, 'say {"confirm": "reset"} to empty the playground')
        await self.reset()
        return web.json_response({"ok": True, "status": "reset"})


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return int(seconds), int(micros or 0)


def _json_or_none(reply: BotReply) -> Any:
    try:
        return reply.json()
    except json.JSONDecodeError:
        return None


def _ok(status: str, reply: BotReply, **extra: Any) -> web.Response:
    return web.json_response({"ok": True, "status": status, "bot_status": reply.status, **extra})
