"""``POST /callbacks/{token}``: another system reports back to a call in ``WaitForCallback``.

On the same port as ``/slack/events``. The first valid POST answers 202 and its body (JSON or
text, at most ``MAX_CALLBACK_BODY`` bytes) becomes the waiting call's result, exactly once:
the conditional UPDATE in the repository decides. A retry of that same body answers 202 again
(its sender may never have heard the first answer); a used token with another body, or an
expired or cancelled one, answers 410, an unknown one 404; none of these changes anything.
The database gets ``CALLBACK_TIME_LIMIT`` seconds, as a Slack acknowledgement gets its
limit: a lock held longer (or a database that does not answer) makes it 503 with
``Retry-After``, having recorded nothing, so the sender's retry is answered in time. The run
is resumed (and its thread told) after the answer, as a tracked background task. Tokens are
never logged: the access log shows ``/callbacks/…``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from storage.repository import DATABASE_FAILURES, CallbackOutcome, time_limit

log = logging.getLogger(__name__)

CALLBACK_ROUTE = "/callbacks/{token}"
MAX_CALLBACK_BODY = 64 * 1024
# secrets.token_urlsafe output; anything else is not one of ours (no database look-up).
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{20,128}")
# How long recording a callback may wait for the database (a write lock, a slow server)
# before the sender hears 503: well within the timeouts pipelines use (often 10 s).
CALLBACK_TIME_LIMIT = 5.0
# Seconds the 503's Retry-After asks the sender to wait.
RETRY_AFTER = 2

# What to do once a callback has moved a run on (resume it, edit its card): spawned as a
# tracked background task by the caller.
AfterCallback = Callable[[CallbackOutcome], Coroutine[Any, Any, None]]
Spawn = Callable[[Coroutine[Any, Any, None], str], Any]
# The runner's ``complete_callback``: the first completion of a token wins.
Complete = Callable[[str, str], Awaitable[CallbackOutcome]]


def add_callback_route(
    web_app: web.Application,
    complete: Complete,
    *,
    after: AfterCallback,
    spawn: Spawn,
    seconds: float = CALLBACK_TIME_LIMIT,
) -> None:
    async def callback(request: web.Request) -> web.Response:
        token = request.match_info["token"]
        if not TOKEN_SHAPE.fullmatch(token):
            return _answer(404, "unknown callback")
        if (request.content_length or 0) > MAX_CALLBACK_BODY:
            return _too_large()
        raw = await _read_at_most(request, MAX_CALLBACK_BODY + 1)
        if len(raw) > MAX_CALLBACK_BODY:
            return _too_large()
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _answer(400, "the body must be UTF-8 text or JSON")
        if request.content_type == "application/json":
            try:
                json.loads(body)
            except (ValueError, RecursionError):  # deep nesting raises RecursionError
                return _answer(400, "the body says it is JSON but is not valid JSON")
        try:
            with time_limit(seconds):
                outcome = await complete(token, body)
        except DATABASE_FAILURES as exc:
            log.error("a callback could not be recorded (the database failed): %s", exc)
            response = _answer(503, "not recorded; try again")
            response.headers["Retry-After"] = str(RETRY_AFTER)
            return response
        if outcome.status == "completed":
            assert outcome.approval is not None
            spawn(after(outcome), f"callback {outcome.approval.id}")
            return _answer(202, "accepted")
        if outcome.status == "repeated":
            return _answer(202, "accepted already (the same body was recorded before)")
        if outcome.status == "gone":
            if outcome.expiry is not None and outcome.approval is not None:
                spawn(after(outcome), f"callback expired {outcome.approval.id}")
            return _answer(410, "this callback URL was used already, expired or was cancelled")
        return _answer(404, "unknown callback")

    web_app.router.add_post(CALLBACK_ROUTE, callback)


async def _read_at_most(request: web.Request, limit: int) -> bytes:
    """The whole body, or its first ``limit`` bytes. ``read(n)`` returns what has arrived so
    far: a body sent in pieces (a slow sender, chunked encoding) would be cut short, and the
    single-use token spent on the first piece."""
    pieces: list[bytes] = []
    size = 0
    while size < limit:
        piece = await request.content.read(limit - size)
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    return b"".join(pieces)


def _answer(status: int, message: str) -> web.Response:
    key = "status" if status < 400 else "error"
    return web.json_response({key: message}, status=status)


def _too_large() -> web.Response:
    return _answer(413, f"the body is larger than {MAX_CALLBACK_BODY} bytes")


class RedactingAccessLogger(AbstractAccessLogger):
    """aiohttp's access log line, with callback tokens left out (a token is a credential)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        path = request.path
        if path.startswith("/callbacks/"):
            path = "/callbacks/…"
        self.logger.info(
            '%s "%s %s" %s %s %.3fs',
            request.remote,
            request.method,
            path,
            response.status,
            response.body_length,
            time,
        )
