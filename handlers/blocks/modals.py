"""The deny-reason form and the arguments modal of an approval card.

Deny opens a form (its reason is optional and goes to the agent); "Show all arguments" opens
a modal with every argument, split over as many sections as Slack needs, when the card had to
cut them short. Both are pure functions of the approval row; the deny form's metadata comes
back with the submission and is checked again there, as the click was.
"""

from __future__ import annotations

import json
from typing import Any

from handlers.blocks.cards import arguments_text
from handlers.blocks.edits import current_arguments
from handlers.blocks.forms import form_modal, text_input
from handlers.blocks.kit import SECTION_LIMIT, Block, escaped_pieces, mention, shown_name
from storage.models import Approval

DENY_MODAL = "approval_deny_reason"
REASON_BLOCK = "deny_reason"
REASON_INPUT = "reason"


def render_deny_modal(approval: Approval, metadata: dict[str, Any]) -> Block:
    ask = (
        f"Deny `{shown_name(approval.tool_name)}` asked by {mention(approval.requester)}? "
        "The agent will be told your reason."
    )
    return form_modal(
        DENY_MODAL,
        json.dumps(metadata),
        title="Deny this call",
        submit="Deny",
        blocks=[
            {"type": "section", "text": {"type": "mrkdwn", "text": ask}},
            text_input(
                REASON_BLOCK,
                REASON_INPUT,
                label="Reason",
                max_length=1000,
                optional=True,
                placeholder="Not during the freeze",
            ),
        ],
    )


def render_arguments_modal(approval: Approval) -> Block:
    """The whole of the arguments, split over sections (each at most 3000 characters)."""
    arguments = current_arguments(approval)
    pieces = escaped_pieces(arguments_text(arguments), SECTION_LIMIT - 6)  # ``` fences
    blocks: list[Block] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"```{piece}```"}}
        for piece in pieces[:99]
    ]
    if len(pieces) > 99:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": "Too long to show whole here; use "
                        f"`approval-bot runs show {approval.run_id} --json`.",
                    }
                ],
            }
        )
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Arguments"},
        "close": {"type": "plain_text", "text": "Close"},
        "blocks": blocks,
    }
