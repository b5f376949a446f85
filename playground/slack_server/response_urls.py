"""Response URLs: issued with clicks and commands, 5 uses within 30 minutes.

What a POST to one does (replace, delete or add a message) and how a slash command's
immediate answer is shown.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from aiohttp import web

from playground.slack_server.blocks import _check_blocks
from playground.slack_server.records import (
    RESPONSE_URL_MAX_USES,
    RESPONSE_URL_TTL_SECONDS,
    Message,
    ResponseCall,
    _ApiError,
    _ResponseUrl,
    _truthy,
)

# ``unreachable(RESPONSE_URL_METHOD)`` drops POSTs to response URLs, as ``unreachable`` does
# a Web API method's calls.
RESPONSE_URL_METHOD = "response_url"


class ResponseUrlsMixin:
    """Response URLs: issuing them and answering POSTs to them.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def issue_response_url(self, user: str, channel: str, source: Message | None = None) -> str:
        """A response URL bound to a user, a channel and (for clicks) the source message."""
        url_id = secrets.token_urlsafe(18)
        self._response_urls[url_id] = _ResponseUrl(url_id, user, channel, self.clock(), source)
        return f"{self.base_url}/response/{url_id}"

    async def _handle_response_url(self, request: web.Request) -> web.Response:
        url_id = request.match_info["url_id"]
        if self._unreachable.get(RESPONSE_URL_METHOD):
            self._unreachable[RESPONSE_URL_METHOD] -= 1
            assert request.transport is not None
            request.transport.abort()  # no answer at all: the client sees a disconnect
            return web.Response(status=500)
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        call = ResponseCall(url_id, body if isinstance(body, dict) else {}, self.clock(), 200)
        self.responses.append(call)
        try:
            call.message = self._respond(url_id, body)
            self._save_messages()
        except _ApiError as exc:
            gone = exc.error in {"invalid_url", "expired_url", "used_up"}
            call.status, call.error = (404 if gone else 400), exc.error
            return web.json_response({"ok": False, "error": exc.error}, status=call.status)
        return web.json_response({"ok": True})

    def _use_response_url(self, url_id: str) -> _ResponseUrl:
        """Slack's limits: 5 uses within 30 minutes."""
        issued = self._response_urls.get(url_id)
        if issued is None:
            raise _ApiError("invalid_url")
        if self.clock() - issued.issued_at > RESPONSE_URL_TTL_SECONDS:
            raise _ApiError("expired_url")
        if issued.uses >= RESPONSE_URL_MAX_USES:
            raise _ApiError("used_up")
        issued.uses += 1
        return issued

    def _respond(self, url_id: str, body: Any) -> Message | None:
        """replace_original edits the source (ephemeral included), else a new message."""
        if not isinstance(body, dict):
            raise _ApiError("invalid_payload")
        issued = self._use_response_url(url_id)
        source = issued.source
        if source is not None and self.message(source.channel, source.ts) is not source:
            source = None  # deleted meanwhile: nothing to replace
        if _truthy(body.get("delete_original")):
            if source is not None:
                self.messages = [m for m in self.messages if m is not source]
                del self._by_ts[(source.channel, source.ts)]
            return None
        text = str(body.get("text") or "")
        blocks = _check_blocks(body["blocks"]) if body.get("blocks") else []
        if _truthy(body.get("replace_original")) and source is not None:
            self._edit(source, text, blocks)  # a full replacement: absent blocks are gone
            return source
        thread_ts = body.get("thread_ts") or (source.thread_ts if source else None)
        if body.get("response_type") == "in_channel":
            return self._post_as_bot(issued.channel, text, blocks, thread_ts=thread_ts)
        return self._post_as_bot(
            issued.channel, text, blocks, thread_ts=thread_ts, ephemeral_to=issued.user
        )

    def _apply_command_ack(self, user: str, channel: str, ack: Any) -> None:
        """A slash command's immediate answer is shown like a response_url message."""
        if not isinstance(ack, dict) or not (ack.get("text") or ack.get("blocks")):
            return
        blocks = _check_blocks(ack["blocks"]) if ack.get("blocks") else []
        text = str(ack.get("text") or "")
        ephemeral = None if ack.get("response_type") == "in_channel" else user
        self._post_as_bot(channel, text, blocks, ephemeral_to=ephemeral)
