"""Where a click came from and which approval it names: the checks every click passes first.

A click (a card's button, an /approvals list's, a form's submission) names an approval by id;
it acts only on an approval of its own workspace and its own channel (a DM copy of the card
counts as the card), whatever the request claims. :class:`ClickPlace` is where Slack says the
click came from (the signed payload's container, never a value of ours), :class:`FormClick`
what a form button carries over to its form, and the texts here are the answers every click
can get when it is refused or the database does not answer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bot.policy import NotAllowed, ensure_may_see
from handlers.services import Services
from handlers.slack import CardPlace, GroupLookupFailed
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, time_limit

log = logging.getLogger(__name__)

# Sends an ephemeral answer to the person who clicked.
Tell = Callable[[str], Coroutine[Any, Any, None]]

NOT_HERE = ":no_entry: That approval does not belong to this workspace or channel."
LOOKUP_FAILED = ":warning: I couldn't look that approval up just now. Please try again."
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
    # A DM copy of its card (handlers.slack.reach) acts as the card: a click there is "here".
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


async def may_see_here(
    services: Services, approval: Approval, actor: str, place: ClickPlace, *, tell: Tell | None
) -> bool:
    """Whether ``actor`` may see ``approval``'s contents where the click came from (the rule
    for listing it, ``bot.policy.ensure_may_see``); when not and ``tell`` is given, the
    clicker is told why. ``approval`` passed :func:`approval_clicked_here` for this place.

    A click on the card or its DM copy is in its channel (``approval_clicked_here`` checked
    that); one from an ephemeral list is where the list was opened; from the App Home, nowhere.
    """
    channel = approval.channel if place.channel else place.list_channel
    groups: set[str] = set()
    try:
        # Only a user group can still let them: ask (cached) only then.
        if not (channel and channel == approval.channel) and actor not in (
            approval.requester,
            *approval.approvers,
        ):
            groups = await services.groups.groups_of(
                actor, approval.approvers, team=approval.team_id
            )
        ensure_may_see(approval, actor, groups, channel=channel)
    except GroupLookupFailed as exc:
        log.error("approval %s: whether %s may see it not checked (%s)", approval.id, actor, exc)
        if tell is not None:
            await tell(GROUPS_UNKNOWN)
        return False
    except NotAllowed as refused:
        if tell is not None:
            await tell(f":no_entry: {refused}")
        return False
    return True


# Raises NotAllowed unless the person (with these groups) may act: bot.policy's
# ensure_may_decide, or ensure_may_answer for a question.
EnsureMay = Callable[[Approval, str, set[str]], None]


@dataclass(frozen=True)
class FormClick:
    """A click on a form button, as handlers.listeners.interactions.form_click reads it."""

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
