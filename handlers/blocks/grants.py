"""Block Kit for standing grants: the card's "Approve, and allow …" menus, the thread's
standing grants on later cards, and the ``/approvals grants`` list with Revoke buttons.

Pure functions of rows and the policy's ``grant_max``, like every card. A menu option
carries the approval id, a number of seconds and the fingerprint of the arguments shown
(as Approve's: :func:`handlers.blocks.values.grant_value`), a Revoke button the grant id:
nothing else is trusted back, and both are checked again when they arrive (bot.policy.grants).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bot.policy import duration_text
from handlers.blocks.kit import Block, button, confirm, escape, mention, shown_name, slack_date
from handlers.blocks.values import grant_value
from storage.models import Approval, Grant

GRANT = "approval_grant"  # approve, and allow the tool in this thread (any arguments)
GRANT_SAME = "approval_grant_same_arguments"  # … only with the same arguments
REVOKE = "grant_revoke"
GRANTS_BLOCK = "standing_grants"
PLACEHOLDER_LIMIT = 150
SHOWN_GRANTS = 5  # on a card; more are counted


def grant_menus(approval: Approval, durations: list[timedelta]) -> list[Block]:
    """Two static_select menus: approve and allow the tool here (any arguments, or these)."""
    tool = approval.tool_name
    options = [
        {
            "text": {"type": "plain_text", "text": f"for {duration_text(d)}"},
            "value": grant_value(approval, d),
        }
        for d in durations
    ]

    def menu(action_id: str, placeholder: str, scope: str) -> Block:
        return {
            "type": "static_select",
            "action_id": action_id,
            "placeholder": {"type": "plain_text", "text": _cut(placeholder, PLACEHOLDER_LIMIT)},
            "options": options,
            "confirm": confirm(
                "Approve and allow?",
                f"`{escape(tool)}` will run with the arguments shown, and later calls of it "
                f"in this thread{scope} will run without asking until the time you picked.",
                "Approve and allow",
            ),
        }

    return [
        menu(GRANT, f"Approve, and allow {tool} in this thread…", ""),
        menu(
            GRANT_SAME,
            f"Approve, and allow {tool} with these same arguments…",
            " with these same arguments",
        ),
    ]


def standing_grants_block(grants: list[Grant]) -> Block | None:
    """The thread's live grants, one line each, for the cards of that thread."""
    if not grants:
        return None
    lines = [grant_line(g) for g in grants[:SHOWN_GRANTS]]
    if len(grants) > SHOWN_GRANTS:
        lines.append(f"and {len(grants) - SHOWN_GRANTS} more (`/approvals grants`)")
    return {
        "type": "context",
        "block_id": GRANTS_BLOCK,
        "elements": [{"type": "mrkdwn", "text": "\n".join(lines)}],
    }


def grant_line(grant: Grant) -> str:
    scope = " (these arguments only)" if grant.payload_scope else ""
    return (
        f":unlock: Standing grant: `{shown_name(grant.tool_name)}`{scope} allowed here until "
        f"{slack_date(grant.expires_at)} by {mention(grant.grantor)}"
    )


def decorate_card(
    approval: Approval, blocks: list[Block], *, durations: list[timedelta], grants: list[Grant]
) -> list[Block]:
    """An approval card with the grant menus (pending, grants allowed) and the thread's
    standing grants (before the ids line)."""
    blocks = list(blocks)
    if durations and approval.status == "pending":
        for index, block in enumerate(blocks):
            if (
                block.get("type") == "actions"
                and block.get("block_id") == f"approval:{approval.id}"
            ):
                elements = [*block["elements"], *grant_menus(approval, durations)]
                blocks[index] = {**block, "elements": elements}
    shown = standing_grants_block(grants)
    if shown is not None:
        at = next(
            (i for i, b in enumerate(blocks) if b.get("block_id") == "approval_ids"), len(blocks)
        )
        blocks.insert(at, shown)
    return blocks


def render_grants_page(
    grants: list[Grant], *, now: datetime, notice: str | None = None
) -> tuple[str, list[Block]]:
    """``/approvals grants``: this channel's live grants, each with a Revoke button."""
    title = "Standing grants in this channel"
    head: list[Block] = []
    if notice:
        head.append({"type": "section", "text": {"type": "mrkdwn", "text": notice}})
    if not grants:
        empty = "No tool is allowed without asking in this channel just now."
        return empty, [
            *head,
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*\n{empty}"}},
        ]
    blocks: list[Block] = [
        *head,
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}* ({len(grants)})"}},
    ]
    for grant in grants[:20]:
        scope = "only with the same arguments" if grant.payload_scope else "any arguments"
        revoke = button(REVOKE, "Revoke", grant.id, "danger")
        revoke["confirm"] = confirm(
            "Revoke this grant?",
            f"Later `{shown_name(grant.tool_name)}` calls in its thread will ask again.",
            "Revoke",
            danger=True,
        )
        blocks += [
            {"type": "divider"},
            {
                "type": "section",
                "block_id": f"grant:{grant.id}",
                "text": {
                    "type": "mrkdwn",
                    "text": f"`{shown_name(grant.tool_name)}` ({scope}) in thread "
                    f"`{escape(grant.thread_ts)}`, until {slack_date(grant.expires_at)}, "
                    f"granted by {mention(grant.grantor)}",
                },
                "accessory": revoke,
            },
        ]
    return f"{title}: {len(grants)}", blocks


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
