"""What follows a run's turn: drive or resume it, answer in its thread, settle its cards.

A mention's run is driven after Slack got its 200; a run whose last pause settled is resumed
by the worker that claimed the resume (a click, an expiry, a callback, a due retry), and one
whose worker died is carried on by the sweeper's. Each then tells its thread where the run
stands (``Publisher.outcome``: the answer, the next cards, a failure) and edits the cards its
approvals left behind (ran, cancelled, outcome unknown), so no card keeps live buttons on a
call that moved on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from datetime import datetime

from bot.engine import RunOutcome
from bot.engine.steps import ON_EXPIRY_WORKFLOW
from bot.ops import logs
from handlers.blocks import (
    CALLBACK,
    DELEGATION,
    RETRY,
    granted_call_note,
    kind_of,
    ruled_call_note,
)
from handlers.flows.delegations import announce_child
from handlers.services import Services
from handlers.slack import RESUMING, RESUMING_EXPIRED
from storage.models import Approval, Run
from storage.repository import DATABASE_FAILURES, ExpiryOutcome

log = logging.getLogger(__name__)


@logs.bound_to("run")
async def drive_request(services: Services, run: Run) -> None:
    """Drive a stored request and answer in its thread (after Slack got its 200)."""
    await announce_child(services, run)  # a sub-agent's run says who works on what
    progress = await services.publisher.run_progress(run)
    since = services.runner.clock()
    outcome = await services.runner.drive(run)
    await services.publisher.outcome(outcome, progress_ts=progress)
    await note_unasked_calls(services, run.id, since)
    if outcome.status in ("failed", "cancelled"):
        await refresh_settled_cards(services, run.id)  # the approvals it left are cancelled
    await follow_delegations(services, outcome)


async def follow_delegations(services: Services, outcome: RunOutcome) -> None:
    """Sub-agents (issue 20 section 1): drive each child run a pause started, each as a
    tracked task of its own (they work concurrently); and resume the parent whose resume this
    child's end claimed. A crash before either leaves the child to the sweeper's take-over
    (its lease runs out) and the parent to its claim's (the same), never to nobody."""
    for child in outcome.children:
        services.background.spawn(drive_request(services, child), name=f"sub-agent {child.id}")
    if outcome.parent_resume is not None:
        run = outcome.run
        parent = outcome.parent_resume
        if run is not None and run.parent_approval_id is not None:
            edit = services.publisher.cards.refresh_card(run.parent_approval_id)  # "answered"
            await after_the_decision(f"run {run.id}", ("its parent's card edit", edit))
        await resume_and_publish(services, parent)


@logs.bound_to("run_id")
async def resume_and_publish(
    services: Services, run_id: str, resuming: str = RESUMING
) -> RunOutcome | None:
    """Resume a run this worker claimed, tell its thread (``resuming`` meanwhile), and
    settle its cards. None when there is no such run, or the database failed on the way:
    one line in the outage log, not a traceback; the claim's lease runs out and a sweeper
    takes the run over."""
    try:
        return await _resume_and_publish(services, run_id, resuming)
    except DATABASE_FAILURES as exc:
        _outage(services, f"resuming run {run_id}", exc)
        return None


async def _resume_and_publish(services: Services, run_id: str, resuming: str) -> RunOutcome | None:
    run = await services.repo.get_run(run_id)
    if run is None:
        return None
    progress = await services.publisher.run_progress(run, resuming)
    since = services.runner.clock()
    outcome = await services.runner.resume(run_id)
    await services.publisher.outcome(outcome, progress_ts=progress)
    await note_unasked_calls(services, run_id, since)
    await refresh_settled_cards(services, run_id)
    await follow_delegations(services, outcome)
    return outcome


async def refresh_settled_cards(services: Services, run_id: str) -> None:
    """Cards whose approval moved on while the run executed (ran, cancelled, unknown), and
    the notices of waits that settled without a click (a callback came, a retry ran). A
    database outage costs the edit (the outage's one line in the log), never a traceback."""
    try:
        await _refresh_settled_cards(services, run_id)
    except DATABASE_FAILURES as exc:
        _outage(services, f"editing the cards of run {run_id}", exc)


def _outage(services: Services, source: str, exc: BaseException) -> None:
    """A one-off step the database failed: the process's outage log says so once."""
    outages = services.runner.outages
    if not outages.failed(source, exc):
        log.error("%s failed: %s", source, exc)
        return
    outages.forget(source)  # not tried again: it holds no outage open


async def _refresh_settled_cards(services: Services, run_id: str) -> None:
    cards = set()  # a batch's calls share one card: edited once
    for approval in await services.repo.approvals_for_run(run_id):
        if not approval.card_ts:
            continue
        if approval.status in ("executed", "cancelled", "unknown") or (
            kind_of(approval) in (CALLBACK, RETRY, DELEGATION) and approval.status != "pending"
        ):
            cards.add(approval.batch_id or approval.id)
    for card in sorted(cards):
        await services.publisher.cards.refresh_card(card)


async def after_the_decision(subject: str, *work: tuple[str, Awaitable[object]]) -> None:
    """Do each ``(what, awaitable)`` at once, after a decision was stored (an approval's, an
    expiry, an operator's Resume or Stop): none failing (the database or Slack out of reach
    a moment) may keep the resume it claimed from starting, else the run waits out its lease,
    so each failure is logged, the database's in a line, anything else with its traceback;
    a cancellation still ends the work."""
    outcomes = await asyncio.gather(*(awaitable for _, awaitable in work), return_exceptions=True)
    for (what, _), failure in zip(work, outcomes, strict=True):
        if isinstance(failure, asyncio.CancelledError):
            raise failure
        if isinstance(failure, DATABASE_FAILURES):
            log.error("%s: %s failed (%s)", subject, what, failure)
        elif isinstance(failure, BaseException):
            log.error("%s: %s failed", subject, what, exc_info=failure)


async def after_expiry(services: Services, expiry: ExpiryOutcome) -> None:
    """An approval expired: show it on its card and move its run on per ``on_expiry``."""
    subject = f"approval {expiry.approval.id}"
    edit = services.publisher.cards.refresh_card(expiry.approval.id)
    await after_the_decision(subject, ("the card's edit", edit))
    if services.steps is not None:  # a Workflow Builder step completes with ``expired``
        completion = services.steps.complete_approval(expiry.approval.id)
        await after_the_decision(subject, ("the step's completion", completion))
    if expiry.resume_claimed:
        await resume_and_publish(services, expiry.approval.run_id, RESUMING_EXPIRED)
    elif expiry.run_cancelled:
        await announce_cancelled(services, expiry.approval.run_id)


async def announce_cancelled(services: Services, run_id: str) -> None:
    """Tell a cancelled run's thread why, and take the buttons off its cancelled cards."""
    run = await services.repo.get_run(run_id)
    if run is None:
        return
    await services.publisher.run_cancelled(run)
    cards = {
        approval.batch_id or approval.id
        for approval in await services.repo.approvals_for_run(run.id)
        if approval.status == "cancelled" and approval.card_ts
    }
    for card in sorted(cards):
        await services.publisher.cards.refresh_card(card)
    if services.steps is not None:  # a Workflow Builder step's run: its step fails
        for approval in await services.repo.approvals_for_run(run.id):
            if approval.status == "cancelled":
                await services.steps.complete_approval(approval.id)


async def announce_cancelled_children(services: Services, run_ids: Sequence[str]) -> None:
    """:func:`announce_cancelled` for the sub-agents' runs a parent's Stop or cancel ended now
    (each in a transaction of its own, which told no thread); those still working stop at
    their next safe point and tell their thread then."""
    for run_id in run_ids:
        run = await services.repo.get_run(run_id)
        if run is not None and run.status == "cancelled":
            await announce_cancelled(services, run_id)


async def step_card_refused(services: Services, approval: Approval, error: str) -> bool:
    """A Workflow Builder step's card that Slack will not post in its channel (the bot is not
    in it, or it is gone): the step fails now, saying so, rather than waiting unseen until its
    timeout. Its run is cancelled (:func:`announce_cancelled` completes it with
    ``completeError``). False for any other approval: its card stays in the outbox."""
    if approval.on_expiry != ON_EXPIRY_WORKFLOW:
        return False
    channel = f"<#{approval.channel}>"
    reason = (
        f"the app is not in {channel}: invite the bot to {channel} and run the workflow again"
        if error == "not_in_channel"
        else f"Slack cannot post in {channel} ({error}): check the step's channel"
    )
    log.warning("workflow step approval %s: %s", approval.id, reason)
    if await services.repo.cancel_run(
        approval.run_id, reason=reason, actor="slack", now=services.runner.clock()
    ):
        await announce_cancelled(services, approval.run_id)
    return True


async def carry_on(services: Services, run: Run) -> None:
    """Drive a run taken over from a dead worker; tell its thread and settle its cards."""
    since = services.runner.clock()
    if services.publisher.streams.wanted(run.team_id):
        # The answer streams anew; what the dead worker streamed says it was interrupted.
        await services.publisher.run_progress(run)
    outcome = await services.runner.carry_on(run)
    await services.publisher.outcome(outcome)
    await note_unasked_calls(services, outcome.run_id, since)
    await refresh_settled_cards(services, outcome.run_id)
    await follow_delegations(services, outcome)


async def note_unasked_calls(services: Services, run_id: str, since: datetime) -> None:
    """Tell the thread how the calls of this drive that asked nobody were allowed: under a
    standing grant ("ran under @bo's standing grant (until …)"), or by a rule ("no approval
    needed: rule 1 of scale_service (…)"), so the thread shows every call that ran and who
    or what let it. Best effort, as the progress message is: a database that cannot be read
    now costs the note (one log line), never the run; the records keep saying it."""
    try:
        await _note_unasked_calls(services, run_id, since)
    except DATABASE_FAILURES as exc:
        _outage(services, f"noting how the calls of run {run_id} were allowed", exc)


async def _note_unasked_calls(services: Services, run_id: str, since: datetime) -> None:
    run = await services.repo.get_run(run_id)
    if run is None or not run.channel:
        return
    lines = [
        granted_call_note(approval)
        for approval in await services.repo.approvals_for_run(run_id)
        if approval.grant_id is not None and approval.created_at >= since
    ]
    # Only rules let a call run unasked with an audit row to read (a tool's own "never"
    # is an ungated tool, which says nothing either): no rules, nothing to read.
    ruled = any(policy.rules for policy in services.config.policies.values())
    for event in await services.repo.audit_trail(run_id=run_id) if ruled else []:
        detail = event.detail or {}
        if (
            event.event == "rule_matched"
            and event.at >= since
            and detail.get("approval") == "never"
        ):
            lines.append(
                ruled_call_note(detail.get("tool", ""), detail.get("rule", ""), detail.get("when"))
            )
    if lines:
        await services.publisher.note(run, "\n".join(lines))
