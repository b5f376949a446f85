"""Socket Mode: ``apps.connections.open``, the WebSocket, envelopes and their acks.

The ``socket_*`` twins of the HTTP drivers in :mod:`.delivery` send the same payloads in
envelopes and wait for the client's ack (Slack wants it within 3 seconds).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid

import aiohttp
from aiohttp import web

from playground.slack_server.records import Json, Message, SocketPayloadType, SocketReply

log = logging.getLogger("playground.slack_server")


class SocketModeMixin:
    """Socket Mode connections and envelopes.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    def _api_apps_connections_open(self, args: Json) -> Json:
        ticket = str(uuid.uuid4())
        self._socket_tickets.add(ticket)
        ws_base = self.base_url.replace("http://", "ws://", 1)
        return {"ok": True, "url": f"{ws_base}/socket-mode?ticket={ticket}&app_id={self.app_id}"}

    # -- Socket Mode ----------------------------------------------------------------------------

    async def _handle_socket(self, request: web.Request) -> web.StreamResponse:
        """A Socket Mode connection: hello, then acks; aiohttp answers the client's pings."""
        ticket = request.query.get("ticket", "")
        if ticket not in self._socket_tickets:
            return web.Response(status=401, text="invalid or used ticket")
        self._socket_tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.socket_connects += 1
        self._socket_connected.set()
        try:
            await ws.send_json(self._hello())
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    self._on_socket_text(msg.data)
        finally:
            self._sockets.remove(ws)
            if not self._sockets:
                self._socket_connected.clear()
        return ws

    def _hello(self) -> Json:
        return {
            "type": "hello",
            "num_connections": len(self._sockets),
            "debug_info": {
                "host": "applink-playground",
                "build_number": 1,
                "approximate_connection_time": 18060,
            },
            "connection_info": {"app_id": self.app_id},
        }

    def _on_socket_text(self, data: str) -> None:
        try:
            ack = json.loads(data)
        except json.JSONDecodeError:
            log.warning("SlackServer: non-JSON Socket Mode message %r", data)
            return
        self.socket_acks.append(ack)
        future = self._pending_acks.pop(str(ack.get("envelope_id")), None)
        if future is None:
            log.warning("SlackServer: Socket Mode message for no pending envelope: %r", ack)
        elif not future.done():
            future.set_result(ack)

    async def wait_socket_connected(self, timeout: float = 5.0) -> None:
        """Wait until a Socket Mode client has connected (raises TimeoutError)."""
        await asyncio.wait_for(self._socket_connected.wait(), timeout)

    async def socket_disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's ``disconnect`` message: the client is expected to reconnect elsewhere."""
        message = {
            "type": "disconnect",
            "reason": reason,
            "debug_info": {"host": "applink-playground"},
        }
        for ws in list(self._sockets):
            await ws.send_json(message)

    async def send_socket_event(
        self,
        payload_type: SocketPayloadType,
        payload: Json,
        *,
        accepts_response_payload: bool | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
        timeout: float | None = None,
    ) -> Json:
        """Send one envelope to the newest connection and return its ack (Slack wants < 3 s)."""
        envelope = self._envelope(payload_type, payload, accepts_response_payload)
        if payload_type == "events_api":
            envelope.update(retry_attempt=retry_attempt, retry_reason=retry_reason)
        future: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._pending_acks[envelope["envelope_id"]] = future
        try:
            await self._newest_socket().send_json(envelope)
            return await asyncio.wait_for(future, timeout or self.ack_timeout)
        finally:
            self._pending_acks.pop(envelope["envelope_id"], None)

    @staticmethod
    def _envelope(payload_type: str, payload: Json, accepts: bool | None) -> Json:
        """Slack sets accepts_response_payload where an ack can carry a response."""
        if accepts is None:
            accepts = payload_type == "slash_commands" or payload.get("type") == "view_submission"
        return {
            "envelope_id": str(uuid.uuid4()),
            "payload": payload,
            "type": payload_type,
            "accepts_response_payload": accepts,
        }

    def _newest_socket(self) -> web.WebSocketResponse:
        if not self._sockets:
            raise RuntimeError("no Socket Mode client is connected")
        return self._sockets[-1]

    async def _socket_send(self, payload_type: SocketPayloadType, payload: Json) -> SocketReply:
        started = time.monotonic()
        ack = await self.send_socket_event(payload_type, payload)
        envelope_id = str(ack.get("envelope_id"))
        return SocketReply(envelope_id, ack, payload, time.monotonic() - started)

    async def socket_mention(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        event_id: str | None = None,
    ) -> SocketReply:
        """``mention`` over Socket Mode: the same event_callback inside an events_api envelope."""
        message, payload = self._mention_payload(user, channel, text, thread_ts, event_id)
        reply = await self._socket_send("events_api", payload)
        reply.event_id, reply.message = payload["event_id"], message
        return reply

    async def socket_click(
        self, user: str, message: Message, action_id: str, *, value: str | None = None
    ) -> SocketReply:
        """``click`` over Socket Mode (an ``interactive`` envelope)."""
        payload, trigger_id, response_url = self._prepare_click(user, message, action_id, value)
        reply = await self._socket_send("interactive", payload)
        reply.trigger_id, reply.response_url = trigger_id, response_url
        return reply

    async def socket_submit_view(
        self, user: str, view_id: str, values: dict[str, dict[str, Json]]
    ) -> SocketReply:
        """``submit_view`` over Socket Mode; the ack's payload is applied to the modal."""
        opened, payload = self._prepare_submission(user, view_id, values)
        reply = await self._socket_send("interactive", payload)
        reply.trigger_id = payload["trigger_id"]
        self._apply_view_ack(opened, reply.payload)
        return reply

    async def socket_slash_command(
        self, user: str, channel: str, command: str = "/approvals", text: str = ""
    ) -> SocketReply:
        """``slash_command`` over Socket Mode (the payload is the form as a JSON object)."""
        fields = self._slash_fields(user, channel, command, text)
        reply = await self._socket_send("slash_commands", dict(fields))
        reply.trigger_id, reply.response_url = fields["trigger_id"], fields["response_url"]
        self._apply_command_ack(user, channel, reply.payload)
        return reply
