"""``/approvals history``: this channel's recent decisions, for the person who asked.

Ephemeral Block Kit, one item per settled approval (newest first): the tool and the
arguments it ran with cut short (an approver's edit, once edited), who asked, and the
outcome as its card shows it (who decided as a mention, when as a Slack date token), with
what an edit changed or the standing grant it ran under. Reads ``storage.stores.home``'s
``channel_decisions``; owns no state.
"""

from __future__ import annotations

from handlers.blocks.cards import ran_text
from handlers.blocks.edits import current_arguments
from handlers.blocks.kit import Block, asked_by, escaped_arguments, shown_name, slack_date
from storage.models import Approval

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
        summary, _ = escaped_arguments(current_arguments(approval))  # what ran
        blocks += [
            {"type": "divider"},
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"`{shown_name(approval.tool_name)}` `{summary}`\n{ran_text(approval)}",
                },
            },
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": f"{asked_by(approval)} "
                        f"{slack_date(approval.created_at)} · `{approval.id}`",
                    }
                ],
            },
        ]
    return f"{title}: {len(approvals)}", blocks
