"""The MCP server's two tools, ``request_approval`` and ``ask_human``: the HTTP API's
requests, asked over MCP, and waited for.

Each call is turned into the JSON body ``POST /api/v1/approvals`` (or ``/questions``) takes
and goes through the same path: :func:`bot.engine.requests.read_approval` (or
``read_question``) checks it, :func:`~bot.engine.requests.create_request` stores it for the
caller's API token (its channels, its idempotency keys, its requester), and
:func:`~bot.engine.requests.request_view` is what the caller is told. A bad argument is a
tool error naming it (the MCP name: ``timeout`` where the API says ``ttl``), before
anything is stored. The card is not posted from here: the row waits in the card outbox until
a running ``approval-bot serve`` on the same database posts it
(``handlers.flows.sweeper.run_card_outbox``, within about a second).

The call then waits until the request is settled (:mod:`bot.mcp_server.waiting`). If the
client goes away the request stays; a call with the same ``idempotency_key`` (and the same
arguments) finds it again and waits on, returning the decision once it is made. While it
waits, a database that fails (a connection dropped, a failover) is waited out as ``serve``
waits it out: ending the call would make a client without a key ask a second time. And the
caller's token is read again every ``TOKEN_RECHECK`` seconds: a token revoked or expired
mid-wait ends the wait with a tool error (the request stays, for an operator to cancel).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.api.tokens import TOKEN_SHAPE, hash_token
from bot.clock import utcnow
from bot.config import Config
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
from bot.mcp_server.waiting import (
    ClientGone,
    Gone,
    Progress,
    Read,
    overdue,
    wait_until_settled,
)
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, Repository, StoredToken, time_limit

log = logging.getLogger(__name__)

LONGEST_MAX_WAIT = 24 * 3600  # seconds
TIME_LIMIT = 5.0  # the database's time for one step of a call (as the HTTP API's)
TOKEN_RECHECK = 5.0  # seconds between reads of the caller's token while a call waits
# The API's field names that the tools call otherwise.
MCP_NAMES = {"ttl": "timeout", "body": "arguments"}


class Refusal(Exception):
    """A call refused with a sentence for the client (a tool error); nothing was stored."""


async def token_by_bearer(repo: Repository, bearer: str) -> StoredToken | None:
    """The live API token whose text is ``bearer``, or None (unknown, revoked, expired).

    A database failure is tried once more: a connection the database dropped (a failover, a
    restart) fails the first read on it, and the pool then opens new ones; over HTTP that
    first failure was a 401 for a live token, which clients take as a bad token."""
    bearer = bearer.strip()
    if not TOKEN_SHAPE.fullmatch(bearer):
        return None
    try:
        with time_limit(TIME_LIMIT):
            stored = await repo.api_token_by_hash(hash_token(bearer))
    except DATABASE_FAILURES as exc:
        log.warning("mcp: the database failed reading a token; trying once more: %s", exc)
        with time_limit(TIME_LIMIT):
            stored = await repo.api_token_by_hash(hash_token(bearer))
    if stored is None or not stored.usable(utcnow()):
        return None
    return stored


@dataclass
class Asking:
    """What the tools need: the database, the configuration (default lifetimes), the
    channel used when a call names none, and the clock."""

    repo: Repository
    config: Config
    default_channel: str | None = None
    clock: Callable[[], datetime] = utcnow

    async def request_approval(
        self,
        token: StoredToken,
        progress: Progress,
        *,
        action: str,
        details: dict[str, Any] | None,
        channel: str | None,
        approvers: list[str] | None,
        timeout: str | int | None,
        idempotency_key: str | None,
        max_wait: int | None = None,
        gone: Gone | None = None,
    ) -> dict[str, Any]:
        body = {
            "channel": self._channel(token, channel),
            "action": action,
            "details": details,
            "approvers": approvers,
            "ttl": timeout,
            "idempotency_key": idempotency_key,
        }
        return await self._ask(token, progress, read_approval, body, max_wait, gone)

    async def ask_human(
        self,
        token: StoredToken,
        progress: Progress,
        *,
        question: str,
        choices: list[str] | None,
        channel: str | None,
        answerers: list[str] | None,
        timeout: str | int | None,
        idempotency_key: str | None,
        max_wait: int | None = None,
        gone: Gone | None = None,
    ) -> dict[str, Any]:
        body = {
            "channel": self._channel(token, channel),
            "question": question,
            "choices": choices,
            "answerers": answerers,
            "ttl": timeout,
            "idempotency_key": idempotency_key,
        }
        return await self._ask(token, progress, read_question, body, max_wait, gone)

    def _channel(self, token: StoredToken, channel: str | None) -> str:
        if channel:
            return channel
        if self.default_channel:
            return self.default_channel
        if len(token.channels) == 1:
            return token.channels[0]
        raise Refusal("channel: name one of this token's channels: " + ", ".join(token.channels))

    async def _ask(
        self,
        token: StoredToken,
        progress: Progress,
        reader: Callable[[Any], HumanRequest],
        body: dict[str, Any],
        max_wait: int | None,
        gone: Gone | None = None,
    ) -> dict[str, Any]:
        if max_wait is not None and not 0 <= max_wait <= LONGEST_MAX_WAIT:
            raise Refusal(f"max_wait: must be 0 to {LONGEST_MAX_WAIT} seconds (or left out)")
        try:
            asked = reader(body)
            with time_limit(TIME_LIMIT):
                created = await create_request(
                    self.repo, self.config, token, asked, clock=self.clock
                )
                approval = await self.repo.get_approval(created.approval_id)
        except RequestInputError as bad:
            raise Refusal(f"{MCP_NAMES.get(bad.field, bad.field)}: {bad.message}") from None
        except ChannelNotAllowed as refused:
            raise Refusal(
                f"channel: {refused}; it may post to " + ", ".join(token.channels)
            ) from None
        except IdempotencyConflict as conflict:
            raise Refusal(
                f"idempotency_key: used for {conflict.approval_id} with other arguments; "
                "call again with the same arguments to wait for it, or use a new key"
            ) from None
        assert approval is not None
        if created.created:
            log.info("mcp: %s %s requested by token %s", asked.kind, approval.id, token.name)
        try:
            settled = await wait_until_settled(
                self._reader(token),
                approval,
                progress,
                clock=self.clock,
                at_most=max_wait,
                gone=gone,
            )
        except ClientGone:
            log.info("mcp: %s: the client went away; the request stays", approval.id)
            raise Refusal(f"the client went away; {approval.id} stays pending") from None
        view = request_view(settled)
        if settled.status == "pending" and not overdue(settled, self.clock()):
            view["note"] = (
                f"still waiting after {max_wait} s: call again with the same idempotency_key "
                "and arguments to wait on"
                if asked.idempotency_key
                else f"still waiting after {max_wait} s (without an idempotency_key, "
                "calling again asks again)"
            )
        if overdue(settled, self.clock()):
            view["note"] = (
                "it expired with no decision, but no running `approval-bot serve` on this "
                "database has recorded the expiry yet"
            )
        return view

    def _reader(self, token: StoredToken) -> Read:
        """The wait's read of the request: None while the database fails (the wait goes
        on; one line when that starts and ends); a Refusal once the token is not usable."""
        loop = asyncio.get_running_loop()
        checked_at = loop.time()
        failing = False

        async def read(approval_id: str) -> Approval | None:
            nonlocal checked_at, failing
            try:
                with time_limit(TIME_LIMIT):
                    if loop.time() - checked_at >= TOKEN_RECHECK:
                        live = await self.repo.api_token(token.id)
                        checked_at = loop.time()
                        if live is None or not live.usable(self.clock()):
                            raise Refusal(
                                f"the API token was revoked or expired while waiting for "
                                f"{approval_id}; the request stays pending (an operator may "
                                "cancel it)"
                            )
                    approval = await self.repo.get_approval(approval_id)
            except DATABASE_FAILURES as exc:
                if not failing:
                    log.warning("mcp: %s: the database failed; waiting on: %s", approval_id, exc)
                failing = True
                return None
            if failing:
                log.warning("mcp: %s: the database answers again", approval_id)
                failing = False
            return approval

        return read


def database_failure(exc: BaseException) -> Refusal | None:
    """A database failure as a tool error the client can act on, or None for anything else."""
    if not isinstance(exc, DATABASE_FAILURES):
        return None
    log.error("mcp: the database failed: %s", exc)
    return Refusal(
        "the database failed; call again (with the same idempotency_key, if you gave one: "
        "a request already stored is then found again)"
    )
