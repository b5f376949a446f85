"""Webhooks: each API request's outcome POSTed to its ``webhook_url``, at least once, from an
outbox in the database (storage.stores.api), by whichever replica gets there first.

A request is due once its approval is settled (a click, an expiry or a cancel, on any
replica); every replica polls for due ones every ``POLL`` seconds, and a deliverer claims one
with a conditional UPDATE, so two replicas never POST it at the same time, and the claim
outlives the POST (``TIMEOUT``). A 2xx is recorded as delivered. Anything else (a non-2xx, a
refused connection, a timeout) is tried again after ``RETRY_FIRST``, doubling per attempt up
to ``RETRY_LONGEST``, until ``GIVE_UP_AFTER`` has passed since the first attempt. A kill
after the POST and before its record sends it again: the body and ``X-Approval-Bot-Delivery``
carry the same stable ``delivery_id``, for the receiver to drop the copy.

Each POST is signed: ``X-Approval-Bot-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "."
+ body)>``, with the token's webhook secret (its UTF-8 text) as the key and the
``X-Approval-Bot-Timestamp`` header's Unix seconds. The secret is never logged; the URL is
(it is the operator's, not a credential, though its query string is left out).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import aiohttp

from bot.clock import utcnow
from bot.engine.requests import request_view
from bot.ops import failpoint
from storage.repository import Repository

log = logging.getLogger(__name__)

POLL = 1.0  # seconds between looks for due webhooks (each replica)
TIMEOUT = 10.0  # one POST
CLAIM = timedelta(seconds=30)  # outlives the POST
RETRY_FIRST = timedelta(seconds=30)
RETRY_LONGEST = timedelta(hours=1)
GIVE_UP_AFTER = timedelta(hours=24)
USER_AGENT = "approval-bot-webhooks/1"
PARALLEL = 4  # a few: the database pool is shared with the clicks being decided


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    material = timestamp.encode() + b"." + body
    return "v1=" + hmac.new(secret.encode("utf-8"), material, hashlib.sha256).hexdigest()


def retry_delay(attempts: int) -> timedelta:
    """After the ``attempts``-th failed attempt: 30 s, 1 min, 2 min … at most 1 h."""
    return min(RETRY_FIRST * 2 ** max(attempts - 1, 0), RETRY_LONGEST)


def _shown(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


class WebhookDeliveries:
    """Delivers due webhooks; every replica runs :func:`run_webhooks` over one."""

    def __init__(
        self,
        repo: Repository,
        session: aiohttp.ClientSession,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.repo = repo
        self.session = session
        self.clock = clock

    async def deliver_due(self) -> int:
        """Every due webhook, ``PARALLEL`` at a time (one slow receiver holds up no other)."""
        gate = asyncio.Semaphore(PARALLEL)

        async def one(approval_id: str) -> bool:
            async with gate:
                return await self.deliver(approval_id)

        await self.repo.end_settled_api_runs(self.clock())  # runs list: only waiting ones
        due = await self.repo.webhooks_due(self.clock())
        return sum(await asyncio.gather(*(one(approval_id) for approval_id in due)))

    async def deliver(self, approval_id: str) -> bool:
        """Claim the request's webhook and POST it; True once its delivery is recorded."""
        now = self.clock()
        claimed = await self.repo.claim_webhook(approval_id, now=now, until=now + CLAIM)
        if claimed is None:
            return False  # not due, delivered already, or another deliverer has it
        token_id, url, delivery_id, attempts, first_attempt_at = claimed
        approval = await self.repo.get_approval(approval_id)
        token = await self.repo.api_token(token_id)
        assert approval is not None and token is not None
        body = json.dumps(
            request_view(approval, delivery_id=delivery_id), separators=(",", ":")
        ).encode()
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "X-Approval-Bot-Timestamp": timestamp,
            "X-Approval-Bot-Signature": sign(token.webhook_secret, timestamp, body),
            "X-Approval-Bot-Delivery": delivery_id,
        }
        failpoint("webhook_sending")
        problem: str | None = None
        try:
            async with self.session.post(
                url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=TIMEOUT)
            ) as response:
                await response.read()
                if not 200 <= response.status < 300:
                    problem = f"HTTP {response.status}"
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            problem = f"{type(exc).__name__}: {exc}"[:200]
        if problem is None:
            failpoint("webhook_sent")
            await self.repo.webhook_delivered(approval_id, self.clock())
            log.info("webhook %s for %s delivered to %s", delivery_id, approval_id, _shown(url))
            return True
        now = self.clock()
        if now - first_attempt_at >= GIVE_UP_AFTER:
            await self.repo.webhook_gave_up(approval_id, now, problem)
            log.error(
                "webhook %s for %s: gave up after %d attempts in 24 h (%s); "
                "`approval-bot webhooks retry %s` sends it again",
                delivery_id,
                approval_id,
                attempts,
                problem,
                delivery_id,
            )
            return False
        retry_at = now + retry_delay(attempts)
        await self.repo.webhook_retry_at(approval_id, retry_at, problem)
        log.warning(
            "webhook %s for %s to %s failed (%s); trying again at %s",
            delivery_id,
            approval_id,
            _shown(url),
            problem,
            retry_at.isoformat(timespec="seconds"),
        )
        return False


async def run_webhooks(
    deliveries: WebhookDeliveries, stop: asyncio.Event, interval: float = POLL
) -> None:
    """Deliver due webhooks every ``interval`` seconds until ``stop`` is set."""
    quiet = False
    while not stop.is_set():
        try:
            await deliveries.deliver_due()
        except Exception as exc:
            if not quiet:  # a database outage: said once, not every second
                log.error("webhook deliveries failed; trying again: %s", exc)
            quiet = True
        else:
            quiet = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
