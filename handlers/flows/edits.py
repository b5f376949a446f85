"""Edit, then approve, after the acknowledgement: record the edit and approve it.

The edit modal's submission was read and checked against the tool's schema in the
acknowledgement path (:mod:`handlers.listeners.edits`); here it takes the path every decision
takes (:func:`handlers.flows.settle.settle_from_slack`), by ``Runner.edit_and_approve``, which
checks everything again and keeps the edit pending when it needs stricter approvers.
"""

from __future__ import annotations

from typing import Any

from bot.policy import Decision, changes_text
from handlers.blocks import escape, shown_name
from handlers.flows.clicks import ClickPlace
from handlers.flows.settle import settle_from_slack
from handlers.services import Services
from storage.hashes import shows_current
from storage.models import Approval


async def edit_from_slack(
    services: Services,
    approval: Approval,
    *,
    actor: str,
    arguments: dict[str, Any],
    team: str,
    shown: str | None = None,
) -> None:
    """Record the edit and approve it (or keep it pending for stricter approvers), then
    settle the card and resume the run, exactly as an Approve click does."""

    async def tell(text: str) -> None:
        await services.publisher.ephemeral(
            channel=approval.channel,
            user=actor,
            text=text,
            team=team or approval.team_id,
            thread_ts=approval.thread_ts or None,
        )

    async def edit(current: Approval, groups: set[str]) -> Decision:
        # Stored with the decision, as an Approve click's: the model reads who by name.
        name = None
        if services.people is not None:
            name = await services.people.name_of(actor, team=current.team_id)
        if current.kind == "recovery":  # Edit, then retry (on_error = "ask")
            return await services.runner.edit_and_retry(
                current.id,
                actor=actor,
                arguments=arguments,
                actor_groups=groups,
                actor_name=name,
                shown=shown_hash(current, shown),
            )
        return await services.runner.edit_and_approve(
            current.id,
            actor=actor,
            arguments=arguments,
            actor_groups=groups,
            actor_name=name,
            shown=shown,
        )

    def done(edited: Approval) -> str:
        what = escape(changes_text(edited.arguments, edited.edited_arguments or {}))
        if edited.kind == "recovery":
            tool = shown_name(edited.tool_name)
            return f"Retrying `{tool}` with your edits: {what} ({edited.id})."
        if edited.status == "pending":
            return (
                f":lock: Your edit of `{shown_name(edited.tool_name)}` ({what}) is saved, but it "
                f"was not approved: {escape(edited.reason or 'it needs other approvers')}. "
                "The card asks them now."
            )
        return f"Approved `{shown_name(edited.tool_name)}` with your edits: {what} ({edited.id})."

    await settle_from_slack(
        services,
        approval_id=approval.id,
        actor=actor,
        # The approval's own channel: the modal carries nothing but its id.
        place=ClickPlace(team=team, channel=approval.channel or None),
        tell=tell,
        clicked=None,
        settle=edit,
        done=done,
    )


def shown_hash(approval: Approval, shown: str | None) -> str | None:
    """The payload hash the edit form showed, when its fingerprint still matches the row
    (``storage.records.shows_current``); None: as read now (an id-only value)."""
    if shown is None or shows_current(approval, shown):
        return None if shown is None else approval.payload_hash
    return "stale"  # matches no row: refused as edited meanwhile
