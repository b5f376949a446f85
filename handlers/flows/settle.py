"""After the acknowledgement: decide, edit the card, resume the run, tell the thread.

Card buttons, /approvals buttons, the deny-reason modal and a question's answers all end
here, so they follow one set of rules and the same exactly-once path (``Runner.decide`` or
``Runner.answer`` and their conditional UPDATE). :func:`settle_from_slack` is that path: where
the click came from (:mod:`handlers.flows.clicks`), who clicked (groups confirmed with Slack),
the one conditional UPDATE that claims it, the card's edit, the clicker's answer, and the
resume of the run when this settlement claimed it (:mod:`handlers.flows.runs`). A decision, an
answer, an edit (:mod:`handlers.flows.edits`) and an approve-and-grant
(:mod:`handlers.flows.grants`) differ only in what they settle and what they answer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bot.clock import utcnow
from bot.ops import failpoint
from bot.policy import (
    AlreadyApproved,
    ApprovalExpired,
    Decision,
    DecisionRefused,
    StaleCopy,
    progress,
)
from handlers.blocks import choices_of, escape, refusal_text, shown_name
from handlers.flows.clicks import (
    GROUPS_UNKNOWN,
    ClickPlace,
    Tell,
    approval_clicked_here,
    may_see_here,
)
from handlers.flows.quorum import VOTERS_UNKNOWN, VotersUnknown, voters_no_longer_allowed
from handlers.flows.runs import after_expiry, after_the_decision, resume_and_publish
from handlers.services import Services
from handlers.slack import RESUMING, RESUMING_ANSWERED, CardPlace, GroupLookupFailed
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, time_limit

log = logging.getLogger(__name__)

# The database failed or did not answer in time (a lock held elsewhere, an outage).
DECISION_FAILED = (
    ":warning: Your decision could not be recorded just now (the database did not answer in "
    "time). Please try again."
)


async def decide_from_slack(
    services: Services,
    *,
    approval_id: str,
    actor: str,
    approve: bool,
    reason: str | None,
    place: ClickPlace,
    tell: Tell,
    clicked: CardPlace | None = None,
    refresh_list: Callable[[str], Awaitable[None]] | None = None,
    shown: str | None = None,
) -> None:
    """``clicked``: the card message the click came from (None from lists and modals
    that do not know it); it is adopted as the card when none is on record, and settled.
    ``refresh_list``: edits the /approvals list the click came from (handlers.flows.lists).
    ``shown``: what the clicked Approve button's copy showed (``Runner.decide``)."""

    async def decide(approval: Approval, groups: set[str]) -> Decision:
        # Looked up now (cached), stored with the decision: the model reads who decided by
        # name, after a restart too, and the engine never asks Slack.
        name = None
        if services.people is not None:
            name = await services.people.name_of(actor, team=approval.team_id)
        removed = set()
        if approve:
            removed = await voters_no_longer_allowed(services, approval, actor, groups)
        return await services.runner.decide(
            approval.id,
            actor=actor,
            approve=approve,
            reason=reason,
            actor_groups=groups,
            actor_name=name,
            shown=shown,
            not_allowed_voters=removed,
            read=approval,  # approval_clicked_here's: Runner.decide says when it serves
        )

    verb = "Approved" if approve else "Denied"
    await settle_from_slack(
        services,
        approval_id=approval_id,
        actor=actor,
        place=place,
        tell=tell,
        clicked=clicked,
        settle=decide,
        done=lambda approval: (
            # An approval that needs more approvers: this Approve was a vote.
            f"You approved `{shown_name(approval.tool_name)}` ({approval.id}): "
            f"{progress(approval)}."
            if approval.status == "pending"
            else f"{verb} `{shown_name(approval.tool_name)}` ({approval.id})."
        ),
        refresh_list=refresh_list,
    )


async def answer_from_slack(
    services: Services,
    *,
    approval_id: str,
    actor: str,
    answer: str | None = None,
    choice: int | None = None,
    place: ClickPlace,
    tell: Tell,
    clicked: CardPlace | None = None,
    refresh_list: Callable[[str], Awaitable[None]] | None = None,
) -> None:
    """Answer a question: the typed ``answer``, or the stored choice at index ``choice``
    (a button carries the index, never the text, so the words are always the question's).
    Neither: a click on a question found answered or expired, which only needs the
    refusal that says so (and, for an expiry, the run moved on)."""

    async def answer_it(approval: Approval, groups: set[str]) -> Decision:
        text = answer
        if answer is None and choice is None:
            if approval.status == "pending" and approval.expires_at > utcnow():
                raise DecisionRefused("This question is still open: click Answer again.")
            # Not answerable (settled, or past its expiry: the conditional UPDATE checks
            # both), so this placeholder is never stored; Runner.answer says why it failed.
            text = choices_of(approval)[0] if choices_of(approval) else "(no answer)"
        if choice is not None:
            choices = choices_of(approval)
            if not 0 <= choice < len(choices):
                raise NotAChoice("That is not one of this question's choices.", approval)
            text = choices[choice]
        return await services.runner.answer(
            approval.id, actor=actor, actor_groups=groups, answer=text or "", read=approval
        )

    await settle_from_slack(
        services,
        approval_id=approval_id,
        actor=actor,
        place=place,
        tell=tell,
        clicked=clicked,
        settle=answer_it,
        done=lambda approval: f"You answered: {escape(approval.result or '')}",
        resuming=RESUMING_ANSWERED,
        refresh_list=refresh_list,
    )


class NotAChoice(DecisionRefused):
    """A click that names no stored choice: a crafted or stale request."""


async def settle_from_slack(
    services: Services,
    *,
    approval_id: str,
    actor: str,
    place: ClickPlace,
    tell: Tell,
    clicked: CardPlace | None,
    settle: Callable[[Approval, set[str]], Awaitable[Decision]],
    done: Callable[[Approval], str],
    resuming: str = RESUMING,
    refresh_list: Callable[[str], Awaitable[None]] | None = None,
) -> None:
    """The one path of every click or form that settles a pause (a decision, an answer):
    check where it came from, who clicked, settle it exactly once, edit the card, tell the
    clicker, and resume the run when this settlement claimed it.

    Slack already has its acknowledgement, an empty one: nothing the person sees changes
    until the settlement is stored. The card is edited only after it (from the stored row),
    so a process killed in between leaves the card as it was, buttons and all, and the
    clicker hears nothing: they click again (docs/reliability.md).
    """
    failpoint("click_acknowledged")
    try:
        # Slack has its answer; the clicker waits for ours, so not for ever.
        with time_limit(services.decision_time_limit):
            approval = await approval_clicked_here(services, approval_id, place, tell=tell)
            if approval is None:
                return
            if clicked is not None and not approval.card_ts and clicked[0] == approval.channel:
                await services.repo.adopt_card(approval_id, channel=clicked[0], ts=clicked[1])
            team = approval.team_id
            groups: set[str] = set()
            # Named by id: no group lookup needed (Slack may be rate limiting them).
            if actor not in approval.approvers:
                groups = await services.groups.groups_of(actor, approval.approvers, team=team)
            if groups:
                # Only a group lets them decide, by a cached answer: ask Slack again.
                groups = await services.groups.confirmed(actor, groups, team=team)
            decision = await settle(approval, groups)
    except DATABASE_FAILURES as exc:
        log.error("approval %s: decision by %s not recorded (%s)", approval_id, actor, exc)
        await tell(DECISION_FAILED)
        return
    except VotersUnknown as exc:
        log.error("approval %s: vote by %s not recorded (%s)", approval_id, actor, exc)
        await tell(VOTERS_UNKNOWN)
        return
    except GroupLookupFailed as exc:
        log.error("approval %s: decision by %s not recorded (%s)", approval_id, actor, exc)
        await tell(GROUPS_UNKNOWN)
        return
    except ApprovalExpired as expired:
        answer = tell(f":hourglass: {refusal_text(expired)}")
        if expired.expiry is None:
            await answer
        else:
            # This click stored the expiry, which may have claimed the run's resume: the
            # answer failing must not leave the run to its lease.
            subject = f"approval {approval_id}"
            await after_the_decision(subject, ("the clicker's answer", answer))
            await after_expiry(services, expired.expiry)
        await services.publisher.cards.refresh_card(approval_id, clicked=clicked)
        if refresh_list is not None:
            await refresh_list(approval_id)
        return
    except DecisionRefused as refused:
        await tell(f":no_entry: {refusal_text(refused)}")
        # A repeated Approve (quorum) is often someone seeing no change: the edit of their
        # first vote was lost (its replica died, Slack was out of reach), so show it now.
        # A stale copy: the current card (and the list it came from) shows what to approve.
        repeated = isinstance(refused, AlreadyApproved | StaleCopy)
        if refused.approval is not None and (refused.approval.status != "pending" or repeated):
            await services.publisher.cards.refresh_card(approval_id, clicked=clicked)
            # The list keeps the item in its place with its outcome: never one the clicker
            # may not see (a refused click can name any approval of the workspace).
            if refresh_list is not None and await may_see_here(
                services, refused.approval, actor, place, tell=None
            ):
                await refresh_list(approval_id)
        return
    failpoint("decision_stored")

    async def show() -> None:
        cards = services.publisher.cards
        await cards.refresh_card(approval_id, clicked=clicked, stored=decision.approval)
        if refresh_list is not None:
            await refresh_list(approval_id)

    # The card's edit and the clicker's answer at once, both from the stored decision: one
    # Slack round trip less before the run resumes (docs/benchmarks.md, a click's time).
    # The card is edited again as the run moves on; a step's completion is an outbox.
    subject = f"approval {approval_id}"
    answer = tell(done(decision.approval))
    await after_the_decision(subject, ("the card's edit", show()), ("the clicker's answer", answer))
    if services.steps is not None and decision.approval.status != "pending":
        # A Workflow Builder step's approval: its step completes now (the outbox retries).
        completion = services.steps.complete_approval(approval_id)
        await after_the_decision(subject, ("the step's completion", completion))
    if decision.resume_claimed:
        await resume_and_publish(services, decision.approval.run_id, resuming)
    if services.people is not None:
        # Who asked, by name (stored: the command line and the exports never ask Slack);
        # looked up as the decider was, once the work is done so that it delays nobody.
        asked = decision.approval
        await services.people.name_of(asked.requester, team=asked.team_id)
