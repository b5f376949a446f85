"""The sweeper: expires overdue approvals, takes over runs whose worker died, forgets old
Slack event ids. Every replica runs one; the conditional UPDATEs make them cooperate."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from bot.clock import utcnow
from handlers.decisions import after_expiry, refresh_settled_cards
from handlers.services import Services

log = logging.getLogger(__name__)

EVENT_MEMORY = timedelta(days=2)  # Slack retries for minutes; two days is plenty


async def sweep_once(services: Services) -> None:
    # Each expiry's resume runs a model: as a task of its own, one slow or failing resume
    # neither holds up nor drops the others (their expiry is already committed).
    for expiry in await services.runner.expire_due():
        services.background.spawn(
            after_expiry(services, expiry), name=f"expired {expiry.approval.id}"
        )
    for outcome in await services.runner.recover_stale_runs():
        await services.publisher.outcome(outcome)
        await refresh_settled_cards(services, outcome.run_id)
    await services.repo.forget_events_before(utcnow() - EVENT_MEMORY)


async def run_sweeper(services: Services, interval: float) -> None:
    while True:
        try:
            await sweep_once(services)
        except Exception:
            log.exception("sweep failed; trying again in %.0fs", interval)
        await asyncio.sleep(interval)
