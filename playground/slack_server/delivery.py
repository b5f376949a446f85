"""Driving the bot over HTTP: signed events, clicks, submissions and slash commands.

Requests are signed like Slack signs them (``sign``), may carry retry headers
(``redeliver``) or go to several replicas at once (``click_delivered_to``); the bot's
answer comes back as a :class:`~playground.slack_server.records.BotReply` and its ack is
applied (a modal closes, a command's message is shown).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any, Unpack
from urllib.parse import urlencode

import aiohttp

from playground.slack_server.records import (
    SLACK_USER_AGENT,
    BotReply,
    DeliveryOptions,
    Json,
    Message,
)


class DeliveryMixin:
    """Signed HTTP deliveries to the bot.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def sign(self, body: bytes | str, timestamp: int | str) -> str:
        """``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}``, Slack's request signature."""
        raw = body.encode() if isinstance(body, str) else body
        base = b"v0:" + str(timestamp).encode() + b":" + raw
        return "v0=" + hmac.new(self.signing_secret.encode(), base, hashlib.sha256).hexdigest()

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

    async def click_as_seen(
        self,
        user: str,
        message: Message,
        action_id: str,
        *,
        value: str | None = None,
        **delivery: Unpack[DeliveryOptions],
    ) -> BotReply:
        """``user`` clicks a button their screen shows, which may be out of date: one on the
        message now or on an earlier version of it. Slack delivers a click on a stale message
        to the app (the app answers it, "Already approved by @bo"); a button the message never
        had raises LookupError, as with ``click``."""
        payload, trigger_id, response_url = self._prepare_click(
            user, message, action_id, value, as_seen=True
        )
        return await self._send_interactive(payload, trigger_id, response_url, **delivery)

    async def select(
        self,
        user: str,
        message: Message,
        action_id: str,
        option_text: str,
        **delivery: Unpack[DeliveryOptions],
    ) -> BotReply:
        """``user`` picks the option shown as ``option_text`` in a static_select menu."""
        payload, trigger_id, response_url = self._prepare_select(
            user, message, action_id, option_text
        )
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


def _ack_body(reply: BotReply) -> Any:
    """An HTTP ack's body as Slack reads it: JSON, else plain text as a message's text."""
    if not reply.body:
        return None
    if reply.headers.get("Content-Type", "").startswith("application/json"):
        return reply.json()
    return {"text": reply.body}
