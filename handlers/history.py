"""``/approvals history``: this channel's recent decisions, for the person who asked.

Ephemeral Block Kit, one item per settled approval (newest first): the tool and its
arguments cut short, who asked, and the outcome as its card shows it (who decided as a
mention, when as a Slack date token). Reads ``storage.home``'s ``channel_decisions``; owns no
state.
"""

from __future__ import annotations

from typing import Any

from handlers.blocks import (
    LIST_ARGUMENTS_LIMIT,
    escape,
    mention,
    outcome_text,
    shown_json,
    slack_date,
    truncated,
)
from storage.models import Approval

Block = dict[str, Any]
HISTORY_SIZE = 15


def render_history(approvals: list[Approval], channel: str) -> tuple[str, list[Block]]:
    """The fallback text and the blocks of a channel's recent decisions."""
    if not approvals:
        text = f"No approval has been decided in <#{channel}> yet."
        return text, [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    title = f"Recent decisions in <#{channel}>"
    blocks: list[Block] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*"}},
    ]
    for approval in approvals:
        summary, _ = truncated(
            ", ".join(
                f"{shown_json(k)[1:-1]}={shown_json(v)}" for k, v in approval.arguments.items()
            ),
            LIST_ARGUMENTS_LIMIT,
        )
        blocks += [
            {"type": "divider"},
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"`{escape(approval.tool_name)}` `{escape(summary)}`\n"
                    f"{outcome_text(approval)}",
                },
            },
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": f"asked by {mention(approval.requester)} "
                        f"{slack_date(approval.created_at)} · {approval.id}",
                    }
                ],
            },
        ]
    return f"{title}: {len(approvals)}", blocks
