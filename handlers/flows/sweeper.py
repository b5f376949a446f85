"""The sweeper: expires overdue approvals, takes over runs whose worker died, resumes paused
runs that nothing is waiting for, cancels runs paused by an operator longer than
``pause_ttl``, stops sub-agents whose parent ended without them, posts the cards and answers
a crash or Slack left unposted (the outboxes),
completes the Workflow Builder steps whose approval is settled,
forgets old Slack event ids. Every replica runs one; the
conditional UPDATEs make them cooperate. Beside it, :func:`run_card_outbox` reads the card
outbox's requests of other systems every second, for those another process (``approval-bot
mcp``) stores."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from datetime import timedelta

from bot.clock import utcnow
from bot.ops import metric_hooks as metrics
from handlers.flows.runs import after_expiry, announce_cancelled, carry_on, resume_and_publish
from handlers.services import Services

log = logging.getLogger(__name__)

EVENT_MEMORY = timedelta(days=2)  # Slack retries for minutes; two days is plenty


@metrics.times_sweeps
async def sweep_once(services: Services) -> bool:
    """One sweep; False when one of its outboxes failed (the others went on). Every run it
    moves on (a resume after an expiry, a run taken over, a stranded resume) runs a model:
    each is a task of its own, so one slow or failing run neither holds up the sweep nor
    drops the others (what the sweep claimed is committed)."""
    runner, background = services.runner, services.background
    for expiry in await runner.expire_due():
        background.spawn(after_expiry(services, expiry), name=f"expired {expiry.approval.id}")
    for run in await runner.take_over_stale_runs():
        background.spawn(carry_on(services, run), name=f"taken over {run.id}")
    for run_id in await runner.claim_stranded_runs():
        background.spawn(resume_and_publish(services, run_id), name=f"stranded {run_id}")
    for run_id in await runner.expire_holds():  # paused by an operator longer than pause_ttl
        background.spawn(announce_cancelled(services, run_id), name=f"pause_ttl {run_id}")
    for run_id in await runner.stop_orphans():  # sub-agents whose parent ended without them
        background.spawn(announce_cancelled(services, run_id), name=f"orphan {run_id}")
    # The outboxes, each on its own: one that fails sweep after sweep (a card it cannot
    # draw, a table it reads gone) must not keep the others from their work.
    publisher = services.publisher
    done = [
        await _outbox(services, "the card outbox", publisher.cards.post_missing_cards()),
        await _outbox(services, "the answer outbox", publisher.answers.post_due()),
        await _outbox(services, "the card edits due", publisher.cards.edit_cards_due()),
    ]
    if services.steps is not None:  # settled workflow steps (handlers.slack.steps)
        done.append(
            await _outbox(services, "the workflow steps due", services.steps.complete_due())
        )
    if services.reach is not None:  # DM copies, reminders, escalations (handlers.slack.reach)
        done.append(
            await _outbox(services, "the DM copies and reminders due", services.reach.due())
        )
    if services.home is not None:  # Homes another replica marked and left
        done.append(
            await _outbox(services, "the App Homes to publish", services.home.publish_dirty())
        )
    forgetting = services.repo.forget_events_before(utcnow() - EVENT_MEMORY)
    done.append(await _outbox(services, "forgetting old Slack events", forgetting))
    return all(done)


async def _outbox(services: Services, what: str, work: Awaitable[object]) -> bool:
    """One outbox's part of a sweep: its failure is logged (a database outage once, by the
    outage log) and the sweep goes on; False when it failed."""
    source = f"sweeper: {what}"
    outages = services.runner.outages
    try:
        await work
    except Exception as exc:
        if not outages.failed(source, exc):
            log.exception("sweep: %s failed; the rest of the sweep goes on", what)
        return False
    outages.succeeded(source)
    return True


CARD_POLL = 1.0  # seconds between looks at the card outbox alone


async def run_card_outbox(
    services: Services, stop: asyncio.Event, interval: float = CARD_POLL
) -> None:
    """The card outbox's requests from other systems, every ``interval`` seconds until
    ``stop`` is set: a request another process stored (``approval-bot mcp`` writes to the
    database and never to Slack) gets its card within about a second, not at the next sweep.
    A cheap indexed read when nothing waits; posts are claimed, so this, the API route's own
    post, the sweeper and other replicas never post one twice."""
    outages = services.runner.outages
    while not stop.is_set():
        try:
            await services.publisher.cards.post_request_cards()
        except Exception as exc:
            if not outages.failed("card outbox", exc):
                log.exception("posting missing cards failed; trying again in %.0fs", interval)
        else:
            outages.succeeded("card outbox")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


async def run_sweeper(
    services: Services, interval: float, stop: asyncio.Event | None = None
) -> None:
    """Sweep every ``interval`` seconds until ``stop`` is set; a sweep under way finishes."""
    stop = stop or asyncio.Event()
    outages = services.runner.outages  # a database outage: one line when it starts and ends
    while not stop.is_set():
        try:
            await sweep_once(services)
        except Exception as exc:
            if not outages.failed("sweeper", exc):
                log.exception("sweep failed; trying again in %.0fs", interval)
        else:
            outages.succeeded("sweeper")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
