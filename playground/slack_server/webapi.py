"""The ``/api/{method}`` endpoint: reading arguments, dispatching, recording, injected faults.

Every call is recorded (``calls``), answered by the method family that implements it (or
reported loudly in ``unknown_calls``), and may be rate limited, failed, dropped or held
back on a test's request (``rate_limit``, ``fail``, ``unreachable``, ``hold``).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from playground.slack_server.records import (
    JSON_ARGS,
    ApiCall,
    HeldAnswer,
    Json,
    _ApiError,
    _Injection,
)

log = logging.getLogger("playground.slack_server")


def _decode_arg(name: str, value: Any) -> Any:
    """slack_sdk JSON-encodes blocks/view/... in form posts: decode them back to structures."""
    if name in JSON_ARGS and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _bearer(request: web.Request) -> str | None:
    """The token slack_sdk puts in ``Authorization: Bearer``."""
    header = request.headers.get("Authorization", "")
    return header[len("Bearer ") :].strip() if header.startswith("Bearer ") else None


def _basic(request: web.Request) -> dict[str, str]:
    """``client_id`` and ``client_secret`` from ``Authorization: Basic`` (oauth.v2.access)."""
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        return {}
    try:
        client_id, _, secret = base64.b64decode(header[len("Basic ") :]).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return {}
    return {"client_id": client_id, "client_secret": secret}


async def _read_args(request: web.Request) -> Json:
    """Arguments from the query string plus a form or JSON body, as slack_sdk sends them."""
    args: Json = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except json.JSONDecodeError as exc:
                raise _ApiError("invalid_json") from exc
            if not isinstance(body, dict):
                raise _ApiError("invalid_json")
            args.update(body)
        else:
            form = await request.post()
            args.update({k: v for k, v in form.items() if isinstance(v, str)})
    return {name: _decode_arg(name, value) for name, value in args.items()}


class WebApiMixin:
    """``/api/{method}`` dispatch and fault injection.

    A mixin of ``SlackServer``, whose ``__init__`` sets the state it uses.
    """

    # -- fault injection ------------------------------------------------------------------------

    def rate_limit(
        self,
        method: str,
        times: int = 1,
        retry_after: int = 1,
        when: Callable[[Json], bool] | None = None,
    ) -> None:
        """The next ``times`` calls of ``method`` (whose arguments match ``when``, if given)
        answer HTTP 429 with ``Retry-After``."""
        self._injections.setdefault(method, []).append(
            _Injection(times=times, error="ratelimited", retry_after=retry_after, when=when)
        )

    def fail(
        self,
        method: str,
        error: str = "internal_error",
        times: int = 1,
        when: Callable[[Json], bool] | None = None,
    ) -> None:
        """The next ``times`` calls of ``method`` (whose arguments match ``when``, if given)
        answer ``{"ok": false, "error": error}``."""
        self._injections.setdefault(method, []).append(
            _Injection(times=times, error=error, when=when)
        )

    def unreachable(self, method: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` have their connection dropped unanswered, as
        when Slack cannot be reached (the client sees a disconnect, after its retries too).
        ``times=0`` makes it reachable again; ``"response_url"`` stands for POSTs to response
        URLs."""
        self._unreachable[method] = times

    def hold(self, method: str, when: Callable[[Json], bool] = lambda _args: True) -> HeldAnswer:
        """The next call of ``method`` whose arguments match ``when`` takes effect at once (a
        posted message is in the channel) but is answered only after ``release`` is set."""
        held = HeldAnswer(method, when)
        self._holds.append(held)
        return held

    def _take_hold(self, call: ApiCall) -> HeldAnswer | None:
        for held in self._holds:
            if held.method == call.method and held.when(call.args):
                self._holds.remove(held)
                held.call = call
                held.arrived.set()
                return held
        return None

    def _take_injection(self, method: str, args: Json) -> _Injection | None:
        queue = self._injections.get(method)
        if not queue:
            return None
        injection = queue[0]
        if injection.when is not None and not injection.when(args):
            return None
        injection.times -= 1
        if injection.times <= 0:
            queue.pop(0)
        return injection

    # -- Web API --------------------------------------------------------------------------------

    async def _handle_api(self, request: web.Request) -> web.Response:
        """``/api/{method}``: record the call, then answer it as Slack would."""
        method = request.match_info["method"]
        if self._unreachable.get(method):
            self._unreachable[method] -= 1
            assert request.transport is not None
            request.transport.abort()  # no answer at all: the client sees a disconnect
            return web.Response(status=500)
        try:
            args = await _read_args(request)
            parse_error = None
        except _ApiError as exc:
            args, parse_error = {}, exc
        token = _bearer(request) or str(args.pop("token", "") or "")
        args.update(_basic(request))
        call = ApiCall(method=method, args=args, at=self.clock(), token=token)
        self.calls.append(call)
        status, body, headers = self._answer(call, token, parse_error)
        call.status, call.response = status, body
        self._save_messages()
        held = self._take_hold(call)
        if held is not None:
            await held.release.wait()
        return web.json_response(body, status=status, headers=headers)

    def _answer(
        self, call: ApiCall, token: str, parse_error: _ApiError | None
    ) -> tuple[int, Json, dict[str, str]]:
        handler = self._methods.get(call.method)
        if handler is None:
            self._report_unknown(call)
            return 200, {"ok": False, "error": "unknown_method", "req_method": call.method}, {}
        try:
            self._check_token(call, token)
            if parse_error is not None:
                raise parse_error
            injection = self._take_injection(call.method, call.args)
            if injection is not None and injection.retry_after is not None:
                headers = {"Retry-After": str(injection.retry_after)}
                return 429, {"ok": False, "error": "ratelimited"}, headers
            if injection is not None:
                raise _ApiError(injection.error)
            self._current_call = call
            try:
                return 200, handler(call.args), {}
            finally:
                self._current_call = None
        except _ApiError as exc:
            return 200, {"ok": False, "error": exc.error, **exc.extra}, {}

    def _report_unknown(self, call: ApiCall) -> None:
        """Loud on purpose: the bot uses a method this double does not speak."""
        self.unknown_calls.append(call)
        log.error(
            "SlackServer: UNKNOWN Web API method %r called (args=%r). The Slack double does "
            "not implement it: implement it in playground/slack_server/ or stop using it.",
            call.method,
            call.args,
        )
