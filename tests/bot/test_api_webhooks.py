"""The API's webhook outbox against a receiver that fails: retries back off from 30 s,
doubling to at most 1 h, and stop 24 h after the first attempt; ``webhooks retry`` sends a
given-up one again. The clock is passed in; the receiver is a real HTTP server.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime, timedelta

import aiohttp

from bot.api import WebhookDeliveries, hash_token, new_token
from bot.api.webhooks import retry_delay
from bot.config import Config
from bot.engine import Runner
from bot.engine.requests import create_request, read_approval, request_view
from storage.repository import Repository
from tests.support.api_support import Receiver

START = datetime(2026, 12, 2, 6, 0, 0)


def test_the_backoff_doubles_from_30_seconds_to_an_hour() -> None:
    delays = [retry_delay(attempt).total_seconds() for attempt in range(1, 10)]
    assert delays == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]


async def test_a_failing_receiver_is_retried_then_given_up_after_24_hours(
    repo: Repository, config: Config, runner: Runner
) -> None:
    token_id, token, secret = new_token()
    await repo.create_api_token(
        id=token_id,
        name="ci",
        token_hash=hash_token(token),
        webhook_secret=secret,
        channels=["C0OPS"],
        team_id="",
        requester="U0BOT",
        expires_at=None,
        now=START,
    )
    stored = await repo.api_token_by_hash(hash_token(token))
    assert stored is not None
    now = [START]
    async with Receiver() as receiver, aiohttp.ClientSession() as session:
        receiver.fail = 10_000
        asked = read_approval(
            {
                "channel": "C0OPS",
                "action": "Restart",
                "approvers": ["U0ANA"],
                "webhook_url": receiver.url,
            }
        )
        created = await create_request(repo, config, stored, asked)
        deliveries = WebhookDeliveries(repo, session, clock=lambda: now[0])
        assert await deliveries.deliver_due() == 0  # pending: nothing is due
        await runner.decide(created.approval_id, actor="U0ANA", approve=True)
        attempts_at = []
        for _ in range(40):
            due = await repo.webhooks_due(now[0])
            if due:
                attempts_at.append(now[0])
                assert await deliveries.deliver(created.approval_id) is False
            row = await repo.api_request(created.approval_id)
            assert row is not None
            if row.gave_up_at is not None:
                break
            assert row.claimed_until is not None and row.last_error == "HTTP 500"
            now[0] = row.claimed_until + timedelta(seconds=1)
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(attempts_at)]
        assert gaps[:4] == [31, 61, 121, 241] and max(gaps) == 3601
        assert attempts_at[-1] - attempts_at[0] >= timedelta(hours=24)
        assert attempts_at[-2] - attempts_at[0] < timedelta(hours=24)
        assert await repo.webhooks_due(now[0] + timedelta(days=1)) == []  # given up
        # An operator's retry: delivered at once to a receiver that works again.
        receiver.fail = 0
        row = await repo.api_request(created.approval_id)
        assert row is not None
        assert await repo.retry_webhook(row.delivery_id) == 1
        assert await deliveries.deliver_due() == 1
        [delivery] = receiver.deliveries
        assert delivery.signed_with(secret) and delivery.json["status"] == "approved"
        assert delivery.json["delivery_id"] == row.delivery_id
        assert await deliveries.deliver_due() == 0  # delivered: never again


async def test_an_expired_request_is_reported_expired_with_nobody_deciding(
    repo: Repository, config: Config, runner: Runner
) -> None:
    token_id, token, secret = new_token()
    await repo.create_api_token(
        id=token_id,
        name="ci",
        token_hash=hash_token(token),
        webhook_secret=secret,
        channels=["C0OPS"],
        team_id="",
        requester="U0BOT",
        expires_at=None,
        now=START,
    )
    stored = await repo.api_token_by_hash(hash_token(token))
    assert stored is not None
    async with Receiver() as receiver, aiohttp.ClientSession() as session:
        body = {
            "channel": "C0OPS",
            "action": "Restart",
            "ttl": 1,
            "on_expiry": "cancel",
            "webhook_url": receiver.url,
        }
        created = await create_request(repo, config, stored, read_approval(body))
        await asyncio.sleep(1.2)
        [expiry] = await runner.expire_due()
        assert expiry.approval.id == created.approval_id and not expiry.resume_claimed
        approval = await repo.get_approval(created.approval_id)
        assert approval is not None
        view = request_view(approval)
        assert view["status"] == "expired" and view["decided_by"] is None
        assert view["on_expiry"] == "cancel"
        assert await WebhookDeliveries(repo, session).deliver_due() == 1
        run = await repo.get_run(approval.run_id)
        assert run is not None and run.status == "completed"  # no longer listed as waiting
        [delivery] = receiver.deliveries
        assert delivery.json["status"] == "expired" and delivery.signed_with(secret)
