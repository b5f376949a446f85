"""After the acknowledgement: decide, edit the card, resume the run, tell the thread.

Card buttons, /approvals buttons, the deny-reason modal and a question's answers all end
here, so they follow one set of rules and the same exactly-once path (``Runner.decide`` or
``Runner.answer`` and their conditional UPDATE).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot import logs
from bot.clock import utcnow
from bot.decisions import StaleCopy
from bot.failpoints import failpoint
from bot.quorum import AlreadyApproved, progress
from bot.runner import ApprovalExpired, Decision, DecisionRefused, NotAllowed, RunOutcome
from handlers.blocks import escape
from handlers.pause_blocks import CALLBACK, RETRY, choices_of, kind_of
from handlers.publish import RESUMING, RESUMING_ANSWERED, CardPlace
from handlers.quorum_voters import VOTERS_UNKNOWN, VotersUnknown, voters_no_longer_allowed
from handlers.services import GroupLookupFailed, Services
from handlers.slack_text import refusal_text
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, ExpiryOutcome, time_limit

log = logging.getLogger(__name__)

# Sends an ephemeral answer to the person who clicked.
Tell = Callable[[str], Awaitable[None]]


NOT_HERE = ":no_entry: That approval does not belong to this workspace or channel."
# The database failed or did not answer in time (a lock held elsewhere, an outage).
DECISION_FAILED = (
    ":warning: Your decision could not be recorded just now (the database did not answer in "
    "time). Please try again."
)
LOOKUP_FAILED = ":warning: I couldn't look that approval up just now. Please try again."
LIST_FAILED = ":warning: I couldn't read the approvals just now. Please try again."
# Slack could not tell us who is in an approver user group (out of reach, rate limited).
GROUPS_UNKNOWN = (
    ":warning: I couldn't reach Slack to check your user groups just now; nothing was "
    "decided. Please try again."
)


@dataclass(frozen=True)
class ClickPlace:
    """Where a click (or a deny form) came from.

    ``channel``: the card's channel; None for an ephemeral /approvals list, which lists
    approvals of several channels. ``list_channel``: the channel the list was opened in.
    """

    team: str
    channel: str | None
    list_channel: str | None = None


async def approval_clicked_here(
    services: Services, approval_id: str, place: ClickPlace, *, tell: Tell
) -> Approval | None:
    """The approval a click names, or None (and the clicker told) when it is not from here."""
    approval = await services.repo.get_approval(approval_id)
    # A DM copy of its card (handlers.reach) acts as the card: a click there is "here".
    if (
        approval is not None
        and place.channel
        and _elsewhere(approval, place)
        and await services.repo.is_copy_channel(approval.id, place.channel)
    ):
        place = ClickPlace(team=place.team, channel=approval.channel)
    if approval is None or _elsewhere(approval, place):
        await tell(NOT_HERE)
        return None
    return approval


async def clicked_approval(
    services: Services,
    approval_id: str,
    place: ClickPlace,
    *,
    tell: Tell,
    click: str,
    row: str = "approval",
) -> Approval | None:
    """``approval_clicked_here`` for a button Slack waits on, within the ack's time limit:
    None, and the clicker told, when it is not from here or the database did not answer.
    ``row`` and ``click`` name it in the log ("approval A1: deny click not looked up")."""
    try:
        with time_limit(services.ack_time_limit):
            return await approval_clicked_here(services, approval_id, place, tell=tell)
    except DATABASE_FAILURES as exc:
        log.error("%s %s: %s not looked up (%s)", row, approval_id, click, exc)
        await tell(LOOKUP_FAILED)
        return None


# Raises NotAllowed unless the person (with these groups) may act: bot.runner's
# ensure_may_decide, or ensure_may_answer for a question.
EnsureMay = Callable[[Approval, str, set[str]], None]


@dataclass(frozen=True)
class FormClick:
    """A click on a form button, as handlers.interactions.form_click reads it."""

    approval_id: str
    actor: str
    place: ClickPlace
    tell: Tell
    clicked: CardPlace | None  # the card message it was on (None from a list)
    refresh_list: Callable[[str], Awaitable[None]] | None  # the /approvals list it was on
    response_url: str

    def metadata(self) -> dict[str, str]:
        """What the form's submission needs of the click (its private_metadata, which Slack
        keeps server-side): the submission is checked against the channel, or the list's
        channel, again, as the click was."""
        return {
            "approval_id": self.approval_id,
            "channel": self.place.channel or "",
            "list_channel": self.place.list_channel or "",
            "team": self.place.team,
            "response_url": self.response_url,
            "card_ts": (self.clicked or ("", ""))[1],
        }


async def form_opening(
    services: Services,
    form_click: FormClick,
    *,
    click: str,
    ensure_may: EnsureMay,
    row: str = "approval",
) -> Approval | None:
    """The pending approval a form button (Deny, "Edit, then approve", Answer) may open its
    modal for, in the acknowledgement path (a trigger_id lives 3 seconds); else None, and
    the clicker told why. One no longer pending (or past its expiry) goes to the decision
    (or answer) path after Slack's answer, which says which and settles the card and the
    list (an expiry may resume the run, a model call); it records nothing for a settled one.
    ``click`` and ``row`` name it in the log ("question Q1: answer click by U1 ...").
    """
    approval_id, actor, tell = form_click.approval_id, form_click.actor, form_click.tell
    place = form_click.place
    approval = await clicked_approval(services, approval_id, place, tell=tell, click=click, row=row)
    if approval is None:
        return None
    if approval.status != "pending" or approval.expires_at <= utcnow():
        clicked, refresh_list = form_click.clicked, form_click.refresh_list
        settled = (
            answer_from_slack(
                services,
                approval_id=approval_id,
                actor=actor,
                place=place,
                tell=tell,
                clicked=clicked,
                refresh_list=refresh_list,
            )
            if approval.kind == "question"
            else decide_from_slack(
                services,
                approval_id=approval_id,
                actor=actor,
                approve=False,
                reason=None,
                place=place,
                tell=tell,
                clicked=clicked,
                refresh_list=refresh_list,
            )
        )
        services.background.spawn(settled, name=f"{click} {approval_id}")
        return None
    groups: set[str] = set()
    try:
        # Named by id: no group lookup (Slack may be rate limiting them), as when settling.
        if actor not in approval.approvers:
            groups = await services.groups.groups_of(
                actor, approval.approvers, team=approval.team_id
            )
        ensure_may(approval, actor, groups)
    except GroupLookupFailed as exc:
        log.error("%s %s: %s by %s not checked (%s)", row, approval_id, click, actor, exc)
        await tell(GROUPS_UNKNOWN)
        return None
    except NotAllowed as refused:
        await tell(f":no_entry: {refusal_text(refused)}")
        return None
    return approval


def _elsewhere(approval: Approval, place: ClickPlace) -> bool:
    """A click acts only on an approval of its own workspace and of its own channel.

    From an ephemeral list, an approval that names its approvers may be decided wherever the
    list was opened (they are listed everywhere), but one that names nobody only from a list
    opened in its own channel: anyone may decide it, so it stays where it was asked.
    """
    if approval.team_id and place.team and approval.team_id != place.team:
        return True
    if place.channel:
        return bool(approval.channel) and approval.channel != place.channel
    if approval.approvers:
        return False
    return not place.list_channel or approval.channel != place.list_channel


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
    ``refresh_list``: edits the /approvals list the click came from (handlers/list_refresh).
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
        )

    verb = "Approved" if approve else "Denied"
    await _settle_from_slack(
        services,
        approval_id=approval_id,
        actor=actor,
        place=place,
        tell=tell,
        clicked=clicked,
        settle=decide,
        done=lambda approval: (
            # An approval that needs more approvers: this Approve was a vote.
            f"You approved `{escape(approval.tool_name)}` ({approval.id}): {progress(approval)}."
            if approval.status == "pending"
            else f"{verb} `{escape(approval.tool_name)}` ({approval.id})."
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
            approval.id, actor=actor, actor_groups=groups, answer=text or ""
        )

    await _settle_from_slack(
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


async def _settle_from_slack(
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
    clicker, and resume the run when this settlement claimed it."""
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
        await tell(f":hourglass: {refusal_text(expired)}")
        if expired.expiry is not None:
            await after_expiry(services, expired.expiry)
        await services.publisher.refresh_card(approval_id, clicked=clicked)
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
            await services.publisher.refresh_card(approval_id, clicked=clicked)
            if refresh_list is not None:
                await refresh_list(approval_id)
        return
    failpoint("decision_stored")
    await services.publisher.refresh_card(approval_id, clicked=clicked)
    if refresh_list is not None:
        await refresh_list(approval_id)
    await tell(done(decision.approval))
    if decision.resume_claimed:
        await resume_and_publish(services, decision.approval.run_id, resuming)


@logs.bound_to("run_id")
async def resume_and_publish(
    services: Services, run_id: str, resuming: str = RESUMING
) -> RunOutcome | None:
    """Resume a run this worker claimed, tell its thread (``resuming`` meanwhile), and
    settle its cards."""
    run = await services.repo.get_run(run_id)
    if run is None:
        return None
    progress = await services.publisher.run_progress(run, resuming)
    outcome = await services.runner.resume(run_id)
    await services.publisher.outcome(outcome, progress_ts=progress)
    await refresh_settled_cards(services, run_id)
    return outcome


async def refresh_settled_cards(services: Services, run_id: str) -> None:
    """Cards whose approval moved on while the run executed (ran, cancelled, unknown), and
    the notices of waits that settled without a click (a callback came, a retry ran)."""
    for approval in await services.repo.approvals_for_run(run_id):
        if not approval.card_ts:
            continue
        if approval.status in ("executed", "cancelled", "unknown") or (
            kind_of(approval) in (CALLBACK, RETRY) and approval.status != "pending"
        ):
            await services.publisher.refresh_card(approval.id)


async def after_expiry(services: Services, expiry: ExpiryOutcome) -> None:
    """An approval expired: show it on its card and move its run on per ``on_expiry``."""
    await services.publisher.refresh_card(expiry.approval.id)
    if expiry.resume_claimed:
        await resume_and_publish(services, expiry.approval.run_id)
    elif expiry.run_cancelled:
        await announce_cancelled(services, expiry.approval.run_id)


async def announce_cancelled(services: Services, run_id: str) -> None:
    """Tell a cancelled run's thread why, and take the buttons off its cancelled cards."""
    run = await services.repo.get_run(run_id)
    if run is None:
        return
    await services.publisher.run_cancelled(run, run.error or "cancelled")
    for approval in await services.repo.approvals_for_run(run.id):
        if approval.status == "cancelled" and approval.card_ts:
            await services.publisher.refresh_card(approval.id)
