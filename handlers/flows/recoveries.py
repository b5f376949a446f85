"""After the acknowledgement of a recovery click: choose, edit the card, resume or stop.

A recovery (``on_error = "ask"``) is settled on the same path as a decision
(:func:`handlers.flows.settle.settle_from_slack`): where the click came from, who clicked
(groups confirmed with Slack), the one conditional UPDATE that claims it
(``Runner.recover``), the card's edit, the clicker's answer, and the run's resume when this
choice claimed it. Stop run cancels the run: its thread says who stopped it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bot.policy import Decision
from handlers.blocks import shown_name
from handlers.flows.clicks import ClickPlace, Tell
from handlers.flows.runs import announce_cancelled
from handlers.flows.settle import settle_from_slack
from handlers.services import Services
from handlers.slack import CardPlace
from storage.models import Approval

DONE = {
    "retry": "You chose Retry: `{tool}` runs again.",
    "skip": "You chose Skip: the model is told `{tool}` was skipped.",
    "resolve": "The model is told `{tool}` ran and succeeded.",
    "stop": "You stopped the run.",
}


async def recover_from_slack(
    services: Services,
    *,
    approval_id: str,
    actor: str,
    choice: str,
    place: ClickPlace,
    tell: Tell,
    clicked: CardPlace | None = None,
    note: str | None = None,
    refresh_list: Callable[[str], Awaitable[None]] | None = None,
) -> None:
    """Settle a recovery row with ``choice`` (retry, skip, resolve, stop), exactly once."""

    async def recover(approval: Approval, groups: set[str]) -> Decision:
        name = None
        if services.people is not None:
            name = await services.people.name_of(actor, team=approval.team_id)
        return await services.runner.recover(
            approval.id,
            actor=actor,
            choice=choice,
            actor_groups=groups,
            actor_name=name,
            note=note,
        )

    def done(approval: Approval) -> str:
        return DONE[choice].format(tool=shown_name(approval.tool_name))

    await settle_from_slack(
        services,
        approval_id=approval_id,
        actor=actor,
        place=place,
        tell=tell,
        clicked=clicked,
        settle=recover,
        done=done,
        refresh_list=refresh_list,
    )
    if choice == "stop":
        approval = await services.repo.get_approval(approval_id)
        if approval is not None and approval.status == "cancelled" and approval.decided_by == actor:
            await announce_cancelled(services, approval.run_id)
