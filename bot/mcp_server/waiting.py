"""Waiting for a person, from a process that does not talk to Slack: the MCP server's tools.

The decision is made elsewhere (a click on the card, handled by a running ``approval-bot
serve`` on the same database), so the wait reads the approval's row until its status is no
longer ``pending``, as the HTTP API's long-poll (``GET …?wait=N``) does, but for as long as
the request lives and with a backoff: the first reads come quickly (a decision made while the
card was being read is seen at once), later ones every ``POLL_MOST`` seconds, which a
primary-key read makes cheap. While it waits it tells the client how long it has waited and
what it is waiting for (the card still to be posted, then the decision), every
``PROGRESS_EVERY`` seconds and whenever that changes: MCP progress notifications, which also
keep clients that time out idle calls from giving up.

A request past its expiry that no ``serve`` has expired (none is running on this database)
ends the wait after ``EXPIRY_GRACE``: the caller is told so rather than kept waiting for
ever. An HTTP client whose connection is gone (it crashed, or cut the call off without
``notifications/cancelled``) ends the wait too (:class:`ClientGone`): the SDK keeps a call
running after its client left, and a wait nobody reads would poll until the request is
settled, one more for each call cut off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from storage.models import Approval

POLL_FIRST = 0.2  # seconds before the second read
POLL_GROWTH = 1.5
POLL_MOST = 1.0  # a decision is seen within this long (one primary-key read a second)
PROGRESS_EVERY = 5.0  # seconds between progress notifications that say nothing new
EXPIRY_GRACE = timedelta(minutes=2)  # a running serve's sweeper expires it well within this

Read = Callable[[str], Awaitable[Approval | None]]
Gone = Callable[[], Awaitable[bool]]  # whether the caller's connection is closed
# (seconds waited, the request's whole lifetime in seconds, what it waits for)
Progress = Callable[[float, float | None, str], Awaitable[None]]


class ClientGone(Exception):
    """The caller's connection closed while it waited: nobody reads the answer."""


def waiting_for(approval: Approval) -> str:
    """What the wait is waiting for, in a sentence the client can show."""
    what = "an answer" if approval.kind == "question" else "a decision"
    where = approval.channel or "Slack"
    if not approval.card_ts:
        return (
            f"waiting for `approval-bot serve` to post the card in {where} "
            f"({approval.id}); then for {what}"
        )
    return f"waiting for {what} on the card in {where} ({approval.id})"


def overdue(approval: Approval, now: datetime) -> bool:
    """Pending well past its expiry: no running ``serve`` has expired it."""
    return approval.status == "pending" and now > approval.expires_at + EXPIRY_GRACE


async def wait_until_settled(
    read: Read,
    approval: Approval,
    progress: Progress,
    *,
    clock: Callable[[], datetime],
    at_most: float | None = None,
    gone: Gone | None = None,
) -> Approval:
    """The approval once it is no longer pending (or once :func:`overdue`, or after
    ``at_most`` seconds, still pending); ClientGone once ``gone`` says so."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = None if at_most is None else started + at_most
    lifetime = (approval.expires_at - approval.created_at).total_seconds()
    told, told_at, last = "", -PROGRESS_EVERY, -1.0
    delay = POLL_FIRST
    current = approval
    while current.status == "pending" and not overdue(current, clock()):
        message = waiting_for(current)
        waited = loop.time() - started
        if message != told or waited - told_at >= PROGRESS_EVERY:
            last = max(round(waited, 1), last + 0.1)  # MCP: progress only increases
            await progress(last, lifetime, message)
            told, told_at = message, waited
        if deadline is not None and loop.time() + delay > deadline:
            await asyncio.sleep(max(deadline - loop.time(), 0))
            return await read(approval.id) or current
        await asyncio.sleep(delay)
        if gone is not None and await gone():
            raise ClientGone(approval.id)
        delay = min(delay * POLL_GROWTH, POLL_MOST)
        current = await read(approval.id) or current
    return current
