"""What the approvers' reach adds to a card: where a DM copy was asked, and its escalation."""

from __future__ import annotations

from handlers.blocks.kit import Block, context, mention
from storage.models import Approval
from storage.records import ReachState


def reach_blocks(approval: Approval, state: ReachState | None) -> list[Block]:
    """ "Escalated to <@U…> after 20 minutes", once the approval was escalated."""
    if state is None or state.escalated_at is None or not state.escalate_to:
        return []
    after = (state.escalate_at or state.escalated_at) - approval.created_at
    minutes = max(1, round(after.total_seconds() / 60))
    who = ", ".join(mention(a) for a in state.escalate_to)
    unit = "minute" if minutes == 1 else "minutes"
    return [context(f":arrow_double_up: Escalated to {who} after {minutes} {unit}")]


def copy_blocks(approval: Approval) -> list[Block]:
    """The line a DM copy starts with: the card is asked for in a channel."""
    return [context(f"Asked in <#{approval.channel}>: a copy of the card, its buttons work here")]
