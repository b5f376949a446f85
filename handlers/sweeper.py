"""The sweeper: expires overdue approvals, takes over runs whose worker died, resumes paused
runs that nothing is waiting for, forgets old Slack event ids. Every replica runs one; the
conditional UPDATEs make them cooperate."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from bot import metric_hooks as metrics
from bot.clock import utcnow
from handlers.decisions import after_expiry, refresh_settled_cards, resume_and_publish
from handlers.services import Services
from storage.models import Run

log = logging.getLogger(__name__)

EVENT_MEMORY = timedelta(days=2)  # Slack retries for minutes; two days is plenty


@metrics.times_sweeps
async def sweep_once(services: Services) -> None:
    """One sweep. Every run it moves on (a resume after an expiry, a run taken over, a
    stranded resume) runs a model: each is a task of its own, so one slow or failing run
    neither holds up the sweep nor drops the others (what the sweep claimed is committed)."""
    runner, background = services.runner, services.background
    for expiry in await runner.expire_due():
        background.spawn(after_expiry(services, expiry), name=f"expired {expiry.approval.id}")
    for run in await runner.take_over_stale_runs():
        background.spawn(carry_on(services, run), name=f"taken over {run.id}")
    for run_id in await runner.claim_stranded_runs():
        background.spawn(resume_and_publish(services, run_id), name=f"stranded {run_id}")
    await services.publisher.post_missing_cards()  # the card outbox (see handlers.publish)
    await services.publisher.edit_cards_due()  # quorum votes whose card edit was lost
    if services.reach is not None:
        await services.reach.due()  # DM copies, reminders, escalations (handlers.reach)
    if services.home is not None:
        await services.home.publish_dirty()  # Homes another replica marked and left
    await services.repo.forget_events_before(utcnow() - EVENT_MEMORY)


async def carry_on(services: Services, run: Run) -> None:
    """Drive a run taken over from a dead worker; tell its thread and settle its cards."""
    outcome = await services.runner.carry_on(run)
    await services.publisher.outcome(outcome)
    await refresh_settled_cards(services, outcome.run_id)


async def run_sweeper(
    services: Services, interval: float, stop: asyncio.Event | None = None
) -> None:
    """Sweep every ``interval`` seconds until ``stop`` is set; a sweep under way finishes."""
    stop = stop or asyncio.Event()
    while not stop.is_set():
        try:
            await sweep_once(services)
        except Exception:
            log.exception("sweep failed; trying again in %.0fs", interval)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
