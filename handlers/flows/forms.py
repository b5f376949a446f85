"""Opening a form (Deny's reason, "Edit, then approve", a question's Answer) on a click.

In the acknowledgement path: Slack's ``trigger_id`` lives 3 seconds, so the modal opens now or
never, after a bounded look-up that refuses people who may not act before they type anything.
A click on an approval no longer pending goes to the decision (or answer) path instead, after
Slack's answer, which says which and settles the card and the list.
"""

from __future__ import annotations

import logging

from bot.clock import utcnow
from bot.policy import NotAllowed
from handlers.blocks import refusal_text
from handlers.flows.clicks import GROUPS_UNKNOWN, EnsureMay, FormClick, clicked_approval
from handlers.flows.recoveries import recover_from_slack
from handlers.flows.settle import answer_from_slack, decide_from_slack
from handlers.services import Services
from handlers.slack import GroupLookupFailed
from storage.models import Approval

log = logging.getLogger(__name__)


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
            # A recovery no longer pending (or past its time): the choice path says why.
            else recover_from_slack(
                services,
                approval_id=approval_id,
                actor=actor,
                choice="retry",
                place=place,
                tell=tell,
                clicked=clicked,
                refresh_list=refresh_list,
            )
            if approval.kind == "recovery"
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
