"""Pause, Resume and Stop clicked on a run's progress message (issue 19 §2), and what the
thread shows after.

Owns no state: the hold is ``Runner.pause_run``'s (:mod:`bot.engine.holds`). Who clicked is
checked there (the requester, an approver of one of the run's tools, ``admins``); the groups
among those are confirmed with Slack first, as for a decision. A refusal is an ephemeral
answer and changes nothing. A Resume that claims the run resumes it here, on this replica.
"""

from __future__ import annotations

import logging

from bot.policy import HoldRefused
from handlers.flows.clicks import GROUPS_UNKNOWN, Tell
from handlers.flows.runs import (
    after_the_decision,
    announce_cancelled,
    announce_cancelled_children,
    resume_and_publish,
)
from handlers.services import Services
from handlers.slack import GroupLookupFailed
from storage.repository import DATABASE_FAILURES, HoldOutcome, ReleaseOutcome

log = logging.getLogger(__name__)

HOLD_FAILED = ":warning: That did not go through (the database did not answer); try again."
RESUMED = ":arrow_forward: Carrying on after the pause…"


async def _groups(services: Services, actor: str, team: str) -> set[str]:
    allowed = services.runner.holds.allowed()
    if actor in allowed:
        return set()
    groups = await services.groups.groups_of(actor, allowed, team=team)
    return await services.groups.confirmed(actor, groups, team=team) if groups else set()


async def hold_from_slack(
    services: Services,
    *,
    run_id: str,
    actor: str,
    action: str,
    team: str,
    tell: Tell,
    reason: str | None = None,
) -> None:
    """``action``: ``pause``, ``resume`` or ``stop``, clicked by ``actor``; ``reason`` is
    audited with a stop (Slack's own Stop says "stopped in Slack by <@U…>")."""
    runner = services.runner
    released: ReleaseOutcome | None = None
    held: HoldOutcome | None = None
    # Only the recording is under "not recorded": once it is stored, what follows (the
    # resumed run above all) failing must not tell the clicker it did not go through.
    try:
        groups = await _groups(services, actor, team)
        if action == "resume":
            released = await runner.resume_run(run_id, actor=actor, actor_groups=groups)
        elif action == "stop":
            held = await runner.stop_run(run_id, actor=actor, actor_groups=groups, reason=reason)
        else:
            held = await runner.pause_run(run_id, actor=actor, actor_groups=groups)
    except HoldRefused as refused:
        await tell(f":no_entry: {refused}")
        return
    except GroupLookupFailed as exc:
        log.error("run %s: %s by %s not recorded (%s)", run_id, action, actor, exc)
        await tell(GROUPS_UNKNOWN)
        return
    except DATABASE_FAILURES as exc:
        log.error("run %s: %s by %s not recorded (%s)", run_id, action, actor, exc)
        await tell(HOLD_FAILED)
        return
    if released is not None:
        await _after_resume(services, run_id, released, tell)
    elif held is not None and action == "stop":
        await _after_stop(services, run_id, held, tell)
    elif held is not None:
        await _after_pause(services, held, tell)


async def _after_resume(
    services: Services, run_id: str, released: ReleaseOutcome, tell: Tell
) -> None:
    answer = tell(":arrow_forward: Resumed.")
    await after_the_decision(f"run {run_id}", ("the clicker's answer", answer))
    if released.claimed is not None:
        await resume_and_publish(services, run_id, RESUMED)
    elif released.run is not None:
        await services.publisher.show_hold(released.run)


async def _after_stop(services: Services, run_id: str, stopped: HoldOutcome, tell: Tell) -> None:
    # Sub-agents it cancelled now: their cards lose their buttons, their threads say so.
    # Each in turn (one thread), none failing keeping a parent's claimed resume back.
    subject = f"run {run_id}"
    children = announce_cancelled_children(services, stopped.children)
    await after_the_decision(subject, ("its children's news", children))
    if stopped.result != "cancelled":
        await tell(":octagonal_sign: Stopping at the next safe point.")
        return
    answer = tell(":octagonal_sign: Stopped.")
    await after_the_decision(subject, ("the clicker's answer", answer))
    news = announce_cancelled(services, run_id)
    await after_the_decision(subject, ("its thread's news", news))
    if stopped.parent_resume is not None:  # a sub-agent: its parent carries on
        await resume_and_publish(services, stopped.parent_resume)


async def _after_pause(services: Services, paused: HoldOutcome, tell: Tell) -> None:
    if paused.result == "already":
        await tell(":double_vertical_bar: This run is already paused.")
    elif paused.result == "held":
        await tell(":double_vertical_bar: Paused. Decisions made meanwhile still count.")
    else:
        await tell(":double_vertical_bar: Pausing at the next safe point.")
    if paused.run is not None:
        await services.publisher.show_hold(paused.run)


async def show_hold(services: Services, run_id: str) -> None:
    """Show a run's hold on its progress message (the CLI's pause and resume)."""
    run = await services.repo.get_run(run_id)
    if run is not None:
        await services.publisher.show_hold(run)
