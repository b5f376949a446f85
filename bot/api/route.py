"""``/api/v1``: approvals and questions other systems ask for, on the port of ``/slack/events``.

Every request but ``openapi.json`` carries ``Authorization: Bearer <token>``; the token is
looked up by its hash (401 when unknown, revoked or expired) and may create requests only in
its channels (403), read and cancel only its own (404 for everyone else's, so ids leak
nothing). A client's mistake is answered before anything is stored, as JSON naming the
field: 400, 413 (a body over ``MAX_BODY``), 409 (an idempotency key reused with another body,
or a cancel of a settled request), 429 (the token's rate, ``api_rate_limit``). A database
that fails answers 503 with ``Retry-After``: the request may be sent again as it is.

``GET …/{id}?wait=N`` holds the request until the status is no longer the one it had
(N ≤ 60 seconds), reading the row every ``POLL`` seconds: a click on any replica is seen
within that time, and a primary-key read is cheap. A created request's card is posted at
once by a tracked background task (the card outbox posts it after a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from bot.api.limits import RateLimit
from bot.api.openapi import openapi
from bot.api.tokens import TOKEN_SHAPE, hash_token
from bot.clock import utcnow
from bot.engine.requests import (
    ChannelNotAllowed,
    HumanRequest,
    IdempotencyConflict,
    RequestInputError,
    create_request,
    read_approval,
    read_question,
    request_view,
)
from handlers.flows.runs import announce_cancelled
from handlers.services import Services
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, StoredToken, time_limit

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
MAX_BODY = 64 * 1024
LONGEST_WAIT = 60
POLL = 0.2  # seconds between reads of a long-poll
TIME_LIMIT = 5.0  # the database's time for one request's work
RETRY_AFTER = 2
ID_SHAPE = re.compile(r"apr_[0-9A-Z]{26}")
KINDS = {"approvals": "approval", "questions": "question"}

Handler = Callable[[web.Request], Awaitable[web.Response]]


class Refused(Exception):
    """A request answered with an error status; nothing was changed."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.headers: dict[str, str] = {}


def error(status: int, message: str, field: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return web.json_response(body, status=status)


def add_api_routes(
    web_app: web.Application, services: Services, closing: asyncio.Event | None = None
) -> None:
    """Serve ``/api/v1`` from ``web_app``; once ``closing`` is set (the process is shutting
    down), held long-polls answer with the request as it is."""
    closing = closing or asyncio.Event()
    limit = RateLimit(services.config.api_rate_limit)
    repo = services.repo

    async def authorised(request: web.Request) -> StoredToken:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not TOKEN_SHAPE.fullmatch(token.strip()):
            raise Refused(401, "a valid bearer token is required (Authorization: Bearer …)")
        with time_limit(TIME_LIMIT):
            stored = await repo.api_token_by_hash(hash_token(token.strip()))
        if stored is None or not stored.usable(utcnow()):
            raise Refused(401, "unknown, revoked or expired token")
        wait = limit.retry_after(stored.id)
        if wait is not None:
            refused = Refused(429, f"over this token's rate of {limit.per_minute} a minute")
            refused.headers["Retry-After"] = str(wait)
            raise refused
        return stored

    def answering(handler: Callable[[web.Request], Awaitable[web.Response]]) -> Handler:
        async def wrapped(request: web.Request) -> web.Response:
            try:
                return await handler(request)
            except Refused as refused:
                response = error(refused.status, refused.message, refused.field)
                response.headers.update(refused.headers)
                return response
            except DATABASE_FAILURES as exc:
                log.error(
                    "%s %s: the database failed (answered 503): %s",
                    request.method,
                    request.path,
                    exc,
                )
                response = error(503, "not recorded; try again")
                response.headers["Retry-After"] = str(RETRY_AFTER)
                return response

        return wrapped

    async def read_json(request: web.Request) -> Any:
        if (request.content_length or 0) > MAX_BODY:
            raise Refused(413, f"the body is larger than {MAX_BODY} bytes")
        raw = await request.content.read(MAX_BODY + 1)
        while len(raw) <= MAX_BODY:
            more = await request.content.read(MAX_BODY + 1 - len(raw))
            if not more:
                break
            raw += more
        if len(raw) > MAX_BODY:
            raise Refused(413, f"the body is larger than {MAX_BODY} bytes")
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise Refused(400, "the body must be a JSON object", "body") from None

    async def create(request: web.Request, reader: Callable[[Any], HumanRequest]) -> web.Response:
        token = await authorised(request)
        body = await read_json(request)
        try:
            asked = reader(body)
        except RequestInputError as bad:
            raise Refused(400, str(bad), bad.field) from None
        try:
            with time_limit(TIME_LIMIT):
                created = await create_request(repo, services.config, token, asked)
                approval = await repo.get_approval(created.approval_id)
        except ChannelNotAllowed as refused:
            raise Refused(403, str(refused), "channel") from None
        except IdempotencyConflict as conflict:
            raise Refused(409, str(conflict), "idempotency_key") from None
        except RequestInputError as bad:
            raise Refused(400, str(bad), bad.field) from None
        assert approval is not None
        if approval.status == "pending" and not approval.card_ts:
            services.background.spawn(
                services.publisher.cards.post_card(approval.id), name=f"api {approval.id}"
            )
        if created.created:
            log.info("api: %s %s requested by token %s", asked.kind, approval.id, token.name)
        view = request_view(approval)
        answer = {"id": approval.id, "status": view["status"], "expires_at": view["expires_at"]}
        return web.json_response(answer, status=201 if created.created else 200)

    async def own(request: web.Request, token: StoredToken) -> Approval:
        """The request the path names, if this token created it and its kind is the path's."""
        approval_id = request.match_info["id"]
        kind = KINDS[request.match_info["kind"]]
        if ID_SHAPE.fullmatch(approval_id):
            with time_limit(TIME_LIMIT):
                row = await repo.api_request(approval_id)
                approval = await repo.get_approval(approval_id) if row else None
            mine = row is not None and row.token_id == token.id
            if mine and approval is not None and approval.kind == kind:
                return approval
        raise Refused(404, f"there is no {kind} {approval_id[:40]} for this token")

    async def post_approval(request: web.Request) -> web.Response:
        return await create(request, read_approval)

    async def post_question(request: web.Request) -> web.Response:
        return await create(request, read_question)

    async def get_request(request: web.Request) -> web.Response:
        token = await authorised(request)
        wait = _wait(request)
        approval = await own(request, token)
        if wait and approval.status == "pending":
            approval = await _changed(repo.get_approval, approval, wait, closing)
        return web.json_response(request_view(approval))

    async def delete_request(request: web.Request) -> web.Response:
        token = await authorised(request)
        approval = await own(request, token)
        with time_limit(TIME_LIMIT):
            cancelled = await repo.cancel_api_request(
                approval.id, reason=f"cancelled through the API by {token.name}", now=utcnow()
            )
            current = await repo.get_approval(approval.id) or approval
        if not cancelled:
            if current.status == "cancelled":
                return web.json_response(request_view(current))  # a retried DELETE
            raise Refused(409, f"it is {request_view(current)['status']} already", "id")
        services.background.spawn(
            announce_cancelled(services, current.run_id), name=f"api cancel {current.id}"
        )
        return web.json_response(request_view(current))

    async def spec(_request: web.Request) -> web.Response:
        return web.json_response(openapi())

    async def unknown(request: web.Request) -> web.Response:
        return error(404, f"no such API route: {request.method} {request.path[:100]}")

    router = web_app.router
    router.add_get(f"{PREFIX}/openapi.json", spec)
    router.add_post(f"{PREFIX}/approvals", answering(post_approval))
    router.add_post(f"{PREFIX}/questions", answering(post_question))
    item = f"{PREFIX}/{{kind:approvals|questions}}/{{id}}"
    router.add_get(item, answering(get_request))
    router.add_delete(item, answering(delete_request))
    router.add_route("*", f"{PREFIX}/{{tail:.*}}", unknown)


def _wait(request: web.Request) -> int:
    raw = request.query.get("wait")
    if raw is None or raw == "":
        return 0
    if not raw.isdigit() or int(raw) > LONGEST_WAIT:
        raise Refused(400, f"wait must be a whole number of seconds, 0 to {LONGEST_WAIT}", "wait")
    return int(raw)


async def _changed(
    read: Callable[[str], Awaitable[Approval | None]],
    approval: Approval,
    seconds: int,
    closing: asyncio.Event,
) -> Approval:
    """The approval once its status is no longer what it was, or as it is after ``seconds``
    (or at once when the process starts shutting down)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline and not closing.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(closing.wait(), min(POLL, max(deadline - loop.time(), 0)))
        with time_limit(TIME_LIMIT):
            current = await read(approval.id)
        if current is not None and current.status != approval.status:
            return current
    return approval
