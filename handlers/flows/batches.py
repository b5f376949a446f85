"""After the acknowledgement of a batch card's click: decide the batch, edit its card once,
tell the clicker, resume the run once.

The same checks as every click (:mod:`handlers.flows.clicks`: the card's workspace and
channel, or a DM copy of it; the clicker's user groups confirmed with Slack), then
``Runner.decide_batch``: one transaction decides every call the click names that is still
pending, and refuses a card that showed another set of calls (stale). Calls decided
meanwhile keep their decision; the card's rows say so.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from bot.engine import BatchDecision, StaleBatch
from bot.policy import DecisionRefused
from handlers.blocks import refusal_text, shown_name
from handlers.flows.clicks import GROUPS_UNKNOWN, ClickPlace, Tell, approval_clicked_here
from handlers.flows.quorum import VOTERS_UNKNOWN, VotersUnknown, voters_no_longer_allowed
from handlers.flows.runs import after_expiry, resume_and_publish
from handlers.flows.settle import DECISION_FAILED, after_the_decision
from handlers.services import Services
from handlers.slack import CardPlace, GroupLookupFailed
from storage.repository import DATABASE_FAILURES, time_limit

log = logging.getLogger(__name__)

NOT_A_BATCH = ":no_entry: That is not a batch of calls."


async def decide_batch_from_slack(
    services: Services,
    *,
    batch_id: str,
    actor: str,
    shown: str,
    approve: Collection[str] | None,
    deny: Collection[str] | None,
    reason: str | None,
    place: ClickPlace,
    tell: Tell,
    clicked: CardPlace | None = None,
) -> None:
    """Approve all (``approve=None, deny=()``), deny all (``approve=(), deny=None``), or
    the reviewer's choice (both lists of ids)."""
    try:
        with time_limit(services.decision_time_limit):
            lead = await approval_clicked_here(services, batch_id, place, tell=tell)
            if lead is None:
                return
            if lead.batch_id != lead.id:
                await tell(NOT_A_BATCH)
                return
            if clicked is not None and not lead.card_ts and clicked[0] == lead.channel:
                await services.repo.adopt_card(batch_id, channel=clicked[0], ts=clicked[1])
            groups: set[str] = set()
            if actor not in lead.approvers:
                groups = await services.groups.groups_of(actor, lead.approvers, team=lead.team_id)
            if groups:
                groups = await services.groups.confirmed(actor, groups, team=lead.team_id)
            name = None
            if services.people is not None:
                name = await services.people.name_of(actor, team=lead.team_id)
            removed: set[str] = set()
            if approve is None or approve:
                removed = await voters_no_longer_allowed(services, lead, actor, groups)
            decision = await services.runner.decide_batch(
                batch_id,
                actor=actor,
                approve=approve,
                deny=deny,
                reason=reason,
                shown=shown,
                actor_groups=groups,
                actor_name=name,
                not_allowed_voters=removed,
            )
    except DATABASE_FAILURES as exc:
        log.error("batch %s: decision by %s not recorded (%s)", batch_id, actor, exc)
        await tell(DECISION_FAILED)
        return
    except VotersUnknown as exc:
        log.error("batch %s: votes by %s not recorded (%s)", batch_id, actor, exc)
        await tell(VOTERS_UNKNOWN)
        return
    except GroupLookupFailed as exc:
        log.error("batch %s: decision by %s not recorded (%s)", batch_id, actor, exc)
        await tell(GROUPS_UNKNOWN)
        return
    except DecisionRefused as refused:
        await tell(f":no_entry: {refusal_text(refused)}")
        if isinstance(refused, StaleBatch):
            # The current card shows what there is to decide now.
            await services.publisher.cards.refresh_card(batch_id, clicked=clicked)
        return
    # The decisions are stored: neither failing may keep their resume from starting.
    await after_the_decision(
        f"batch {batch_id}",
        ("the card's edit", services.publisher.cards.refresh_card(batch_id, clicked=clicked)),
        ("the clicker's answer", tell(done_text(decision))),
    )
    if decision.resume_claimed:
        await resume_and_publish(services, lead.run_id)
    for expiry in decision.expiries:
        await after_expiry(services, expiry)


def done_text(decision: BatchDecision) -> str:
    """The clicker's answer: what this click decided, and what it left as it was."""
    by_id = {a.id: a for a in decision.approvals}
    tool = shown_name(decision.approvals[0].tool_name) if decision.approvals else "?"
    approved = sum(1 for i in decision.decided if by_id[i].status != "denied")
    denied = len(decision.decided) - approved
    parts = []
    if approved:
        parts.append(f"approved {approved}")
    if denied:
        parts.append(f"denied {denied}")
    if decision.voted:
        parts.append(f"voted on {len(decision.voted)} (they need more approvals)")
    said = ", ".join(parts) if parts else "decided nothing"
    text = f"You {said} of the `{tool}` calls."
    expired = len(decision.expiries)
    if len(decision.kept) > expired:
        text += (
            f" {len(decision.kept) - expired} had been decided already (or had your vote) and "
            "keep that decision; the card shows each."
        )
    if expired:
        text += f" {expired} had expired before your click."
    return text
