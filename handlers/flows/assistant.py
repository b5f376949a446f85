"""The agent pane: the run's state mirrored in Slack, the three suggested prompts answered, and
Slack's own Stop.

A message in the pane (a DM with the app: the Messages tab of the Agent experience, or an
Assistant thread) is a request like a mention (:func:`handlers.listeners.mentions.start_request`
stores and drives it: same runs, policies and audit). What differs is only what the pane
shows, and that follows the run wherever it is driven (first drive, a resume after a click,
the sweeper's take-over): the publisher tells :func:`run_state` each time it shows where a run
stands, and for a run whose thread is in a DM this sets

- the thread's status: "is working on “…”…" while it works, "is running restart_service(…)…"
  as each call starts (:func:`pane_events`, from the drives' task events; one update at a
  time per thread, so none lands after the next state's), "is waiting for approval from Bo"
  while it waits, cleared when it answers (``assistant.threads.setStatus``; Slack removes it
  after two minutes without a message, and may when the app posts: it is set after posting);
- the agent session's status (``agents.sessions.setStatus``): ``processing`` while it works
  (Slack shows its Stop button then), ``suspended`` while it waits or an operator holds it,
  ``active`` once it answered, failed or stopped;
- under each new card, "Waiting for @bo" with a link to the card: its copy in
  ``assistant_cards_channel`` when that is set (one of the card's copies, sent and retried
  with the DM copies by :mod:`handlers.slack.reach`, so clicks there count and decisions
  edit it), else the card in the thread.

Slack's Stop (``agent_session_stopped``) stops the run as the progress message's Stop does
(``Runner.stop_run``, the requester, an approver or an admin): a waiting run is cancelled now,
a working one at its next safe point, audited "stopped in Slack by <@U…>".
Nothing here is stored: the pane's state is the run's.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, time
from typing import Any

from bot.clock import utcnow
from bot.engine import RunOutcome
from bot.gate.stream_events import EventListener, RunEvent
from handlers.blocks.assistant import (
    APPROVED_LISTED,
    APPROVED_TODAY,
    GREETING,
    MY_REQUESTS,
    UNSEEN_CARD,
    approved_today_text,
    running_status,
    title_of,
    waiting_line,
    waiting_status,
    working_status,
)
from handlers.flows.holds import hold_from_slack
from handlers.flows.lists import LIST_FAILED, approvals_page
from handlers.services import Services
from handlers.slack import GroupLookupFailed
from handlers.slack.assistant import ACTIVE, PROCESSING, SUSPENDED, PaneCalls
from storage.models import Approval, Run
from storage.repository import DATABASE_FAILURES

log = logging.getLogger(__name__)
# A suggested prompt left unanswered (said so in the pane) rather than failing the event.
PROMPT_FAILURES: tuple[type[BaseException], ...] = (GroupLookupFailed, *DATABASE_FAILURES)

# Kinds of pause a person decides: they get the waiting line and the channel copy.
DECIDED_BY_PEOPLE = ("approval", "recovery")
# How long the "waiting for" line waits for the cards channel's copy (sent in the background
# with the DM copies) before it links to the card in the thread instead: 2 s at most.
COPY_WAIT_ROUNDS, COPY_WAIT_STEP = 20, 0.1


def in_pane(channel: str) -> bool:
    """A DM with the app (Slack's DM channel ids start with D): the pane's threads are there,
    and no mention can start a run in one, so a run there came from the pane."""
    return channel.startswith("D")


def request_of(run: Run) -> str:
    """The person's latest request in the run's history (llm's stored messages)."""
    for message in reversed(run.history or []):
        if isinstance(message, dict) and message.get("role") == "user":
            for part in message.get("parts") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    return str(part["text"])
    return ""


async def greet(services: Services, team: str, channel: str, thread_ts: str | None) -> None:
    """The pane opened: the suggested prompts (and, in an Assistant thread, the greeting;
    the Messages tab opens often, so there the prompts' title greets instead)."""
    pane = services.pane
    if pane is None:
        return
    if thread_ts:
        await pane.say(team, channel, thread_ts, GREETING)
    await pane.suggest_prompts(team, channel, thread_ts)


async def answer_prompt(
    services: Services, prompt: str, *, team: str, user: str, channel: str, thread_ts: str
) -> None:
    """One of the suggested prompts, answered from what /approvals and the App Home read."""
    pane = services.pane
    if pane is None:
        return
    try:
        if prompt == APPROVED_TODAY:
            since = datetime.combine(utcnow().date(), time())
            rows = await services.repo.approved_by(
                team_id=team, user=user, since=since, limit=APPROVED_LISTED + 80
            )
            await pane.say(team, channel, thread_ts, approved_today_text(rows))
            return
        # The workspace's domain, as /approvals' command carries it: links to its cards.
        domain = await pane.domain(team)
        command = {"user_id": user, "team_id": team, "team_domain": domain, "channel_id": channel}
        view = "mine" if prompt == MY_REQUESTS else "approve"
        text, blocks = await approvals_page(services, command, view, 0)
    except PROMPT_FAILURES as exc:
        log.error("pane prompt %r for %s not answered: %s", prompt, user, exc)
        await pane.say(team, channel, thread_ts, LIST_FAILED)
        return
    await pane.post_blocks(team, channel, thread_ts, text, blocks)


async def run_state(services: Services, run: Run, state: str, outcome: RunOutcome | None) -> None:
    """Where a pane run stands, shown in the pane (``state``: ``working`` or an outcome's
    status). Never raises: the pane is best effort."""
    pane = services.pane
    if pane is None or not in_pane(run.channel) or not run.thread_ts:
        return
    if run.parent_run_id is not None:
        # A sub-agent's run (issue 20 section 1): the pane's title, status and session are
        # its parent's, which waits for it; the child's messages and cards are in the thread.
        return
    try:
        async with pane.lock(run.channel, run.thread_ts):
            await _run_state(services, pane, run, state, outcome)
    except Exception as exc:  # the pane never costs a run its answer
        log.error("run %s: the pane's %s status not shown: %s", run.id, state, exc)
    if state in ("completed", "failed", "cancelled"):
        pane.forget(run.channel, run.thread_ts)


async def _run_state(
    services: Services, pane: PaneCalls, run: Run, state: str, outcome: RunOutcome | None
) -> None:
    team, channel, ts = run.team_id, run.channel, run.thread_ts
    if state == "working":
        pane.threads[run.id] = (team, channel, ts)  # each call's status (pane_events)
    else:
        pane.threads.pop(run.id, None)
    if state == "working":
        request = request_of(run)
        await pane.set_title(team, channel, ts, title_of(request))  # the same on a resume
        await pane.set_status(team, channel, ts, working_status(request))
        await pane.session(
            team, channel, ts, PROCESSING, title=title_of(request), initiator=run.requester
        )
    elif state == "paused":
        waiting_on: list[str] = []
        for new in outcome.new_approvals if outcome else []:
            approval = await services.repo.get_approval(new.id) or new
            if approval.kind not in DECIDED_BY_PEOPLE:
                continue
            if approval.batch_id not in (None, approval.id):
                continue  # a batch has one card (its first row's): one line for it
            link = await _copy_to_cards_channel(services, pane, approval)
            if link is None and approval.card_channel and approval.card_ts:
                link = await pane.permalink(team, approval.card_channel, approval.card_ts)
            await pane.say(team, channel, ts, waiting_line(approval, link))
            if not approval.approvers and not services.config.assistant_cards_channel:
                await pane.say(team, channel, ts, UNSEEN_CARD)
            waiting_on += [a for a in approval.approvers if a not in waiting_on]
        names = [await _name(services, team, who) for who in waiting_on]
        # After the lines: a post may clear a thread's status in Slack's clients.
        await pane.set_status(team, channel, ts, waiting_status(names))
        await pane.session(team, channel, ts, SUSPENDED)
    elif state == "held":
        await pane.set_status(team, channel, ts, "")
        await pane.session(team, channel, ts, SUSPENDED)
    elif state in ("completed", "failed", "cancelled"):
        await pane.set_status(team, channel, ts, "")
        await pane.session(team, channel, ts, ACTIVE)


def pane_events(services: Services, then: EventListener | None) -> EventListener:
    """The drives' events, passed on to ``then`` (the streams); a pane run's tool call
    starting also sets its thread's status ("is running restart_service(service="pay")…").
    Called on the event loop: it only spawns the call."""

    def on_event(event: RunEvent) -> None:
        if then is not None:
            then(event)
        pane = services.pane
        thread = pane.threads.get(event.run_id) if pane is not None else None
        if pane is None or thread is None:
            return
        if event.kind == "task" and event.status == "in_progress":
            services.background.spawn(
                _call_status(pane, event.run_id, thread, running_status(event.title)),
                name=f"pane status {event.run_id}",
            )

    return on_event


async def _call_status(
    pane: PaneCalls, run_id: str, thread: tuple[str, str, str], status: str
) -> None:
    """A call's status, unless the run moved on meanwhile (waiting, answered)."""
    team, channel, ts = thread
    async with pane.lock(channel, ts):
        if pane.threads.get(run_id) == thread:
            await pane.set_status(team, channel, ts, status)


async def _name(services: Services, team: str, who: str) -> str:
    if who.startswith("S") or services.people is None:
        return who
    return await services.people.name_of(who, team=team) or who


async def _copy_to_cards_channel(
    services: Services, pane: PaneCalls, approval: Approval
) -> str | None:
    """The card's copy in ``assistant_cards_channel`` (posted once; a copy like the DM ones:
    clicks there count and every edit of the card edits it); its permalink, or None."""
    cards = services.config.assistant_cards_channel
    if not cards:
        return None
    if services.reach is not None:
        # The copy is one of the card's copies (handlers.slack.reach): sent under their
        # claim, so once whoever sends them first, and retried by the sweeper if it fails.
        await services.reach.send_copies(approval.id)
    # Another sender may hold the claim (the card's own, just posted): wait a little for it,
    # only while someone holds it (a copy Slack refused or that is due later is not waited for).
    for _ in range(COPY_WAIT_ROUNDS):
        copies = {c.recipient: c for c in await services.repo.approval_messages(approval.id)}
        if (copy := copies.get(cards)) is not None:
            return await pane.permalink(approval.team_id, cards, copy.ts)
        if not await services.repo.dms_claim_held(approval.id, now=utcnow()):
            return None
        await asyncio.sleep(COPY_WAIT_STEP)
    return None  # the link goes to the card in the thread; the copy comes later


async def stop_from_slack(services: Services, event: dict[str, Any], team: str) -> None:
    """Slack's Stop on an agent session: stop the thread's run, as the progress message's Stop
    does; a thread with no run (or a run already over) only gets its session made active."""
    channel, thread_ts, user = event["channel"], event.get("thread_ts") or "", event["user"]
    pane = services.pane

    async def tell(text: str) -> None:
        if pane is not None:
            await pane.say(team, channel, thread_ts or None, text)

    run = await services.repo.run_of_conversation(f"{team}:{channel}:{thread_ts}")
    if run is None or run.status in ("completed", "failed", "cancelled"):
        log.info("agent_session_stopped in %s/%s: no run to stop", channel, thread_ts)
        if pane is not None and thread_ts:
            await pane.session(team, channel, thread_ts, ACTIVE)
        return
    await hold_from_slack(
        services,
        run_id=run.id,
        actor=user,
        action="stop",
        team=team,
        tell=tell,
        reason=f"stopped in Slack by <@{user}>",
    )
