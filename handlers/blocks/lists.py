"""/approvals pages: what waits for a person, a page at a time, with the cards' own buttons.

A page is a pure function of the rows listed: each item is an approval (its arguments cut
short, its Approve / Deny buttons) or a question or a wait as :mod:`handlers.blocks.questions`
and :mod:`handlers.blocks.waits` list them. The items' buttons name the list's view and page in
their block_id (:func:`handlers.blocks.values.list_block_id`), so a decision made from an
ephemeral list can edit that list in place (``handlers.flows.lists``), the decided item kept
where it stood with its outcome. The App Home lists the same items.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from handlers.blocks.batches import batch_item
from handlers.blocks.cards import decision_buttons, outcome_text
from handlers.blocks.delegations import DELEGATION, delegation_item
from handlers.blocks.edits import current_arguments
from handlers.blocks.kit import (
    Block,
    asked_by,
    button,
    escaped_arguments,
    list_row,
    shown_name,
    slack_date,
)
from handlers.blocks.pauses import kind_of
from handlers.blocks.questions import QUESTION, question_item
from handlers.blocks.quorum import progress_text
from handlers.blocks.recoveries import RECOVERY, recovery_item
from handlers.blocks.rules import rule_text
from handlers.blocks.values import list_block_id
from handlers.blocks.waits import wait_item
from storage.models import Approval

PAGE = "approvals_page"


def render_approvals_page(
    approvals: list[Approval],
    *,
    view: str,
    page: int,
    total: int,
    page_size: int,
    count_limit: int | None = None,
    now: datetime,
    permalinks: dict[str, str],
    settled: Approval | None = None,
    batches: dict[str, list[Approval]] | None = None,
) -> tuple[str, list[Block]]:
    """One page of /approvals: each item with its buttons; a clear empty state.

    ``settled``: an approval just decided from this list, kept in its place with its outcome
    instead of its buttons (the list is edited in place after a decision: handlers.flows.lists)."""
    titles = {
        "approve": "Waiting for your decision",
        "mine": "Your requests that are waiting",
        "all": "Everything waiting in this channel",
    }
    title = titles[view]
    kept = _with_settled(approvals, settled)
    if total == 0 and kept:
        return f"{title}: 0", [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"*{title}*\nNothing else is waiting."},
            },
            *_list_items(kept, view, page, now, permalinks, batches or {}),
            _help_context(),
        ]
    if total == 0:
        empty = {
            "approve": "Nothing is waiting for your decision. :tada:",
            "mine": "None of your requests are waiting for a decision.",
            "all": "Nothing is waiting for a decision in this channel.",
        }[view]
        return empty, [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*\n{empty}"}},
            _help_context(),
        ]
    shown_total = (
        f"{count_limit:,}+" if count_limit is not None and total > count_limit else f"{total:,}"
    )
    first = page * page_size + 1
    last = page * page_size + len(approvals)
    blocks: list[Block] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"*{title}* ({first}–{last} of {shown_total})"},
        }
    ]
    blocks.extend(_list_items(kept, view, page, now, permalinks, batches or {}))
    navigation = []
    if page > 0:
        navigation.append(button(PAGE, "Newer", json.dumps({"view": view, "page": page - 1})))
    if last < total:
        navigation.append(button(PAGE, "Older", json.dumps({"view": view, "page": page + 1})))
    if navigation:
        blocks.append({"type": "actions", "block_id": "approvals_pages", "elements": navigation})
    blocks.append(_help_context())
    return f"{title}: {total}", blocks


def _with_settled(approvals: list[Approval], settled: Approval | None) -> list[Approval]:
    """The page's items with ``settled`` where it stood (newest first, as listed)."""
    if settled is None or settled.kind not in (None, "approval"):
        return approvals  # questions and waits are listed only while pending
    if any(a.id == settled.id for a in approvals):
        return approvals
    key = (settled.created_at, settled.id)
    index = next((i for i, a in enumerate(approvals) if (a.created_at, a.id) < key), None)
    return (
        [*approvals[:index], settled, *approvals[index:]]
        if index is not None
        else [
            *approvals,
            settled,
        ]
    )


def _list_items(
    approvals: list[Approval],
    view: str,
    page: int,
    now: datetime,
    permalinks: dict[str, str],
    batches: dict[str, list[Approval]],
) -> list[Block]:
    """Items of an /approvals page; their buttons' block_id names the list (view and page),
    the one thing a click on an ephemeral message tells us about it."""
    items: list[Block] = []
    for approval in approvals:
        batch = batches.get(approval.batch_id or "")
        for block in list_item(approval, now, permalinks.get(approval.id), batch):
            if block.get("type") == "actions" and block.get("block_id"):
                block = {**block, "block_id": list_block_id(view, page, block["block_id"])}
            items.append(block)
    return items


def list_item(
    approval: Approval, now: datetime, permalink: str | None, batch: list[Approval] | None = None
) -> list[Block]:
    """An approval in a list (/approvals, the App Home): arguments cut short, buttons.
    Questions and waits are listed as their modules render them; a batch (``batch``: all
    its rows) as one item with its count and the batch card's buttons."""
    link = f" · <{permalink}|card>" if permalink else ""
    if batch:
        age = _age(now - approval.created_at)
        return batch_item(batch, f"{asked_by(approval)} {age} ago{link}")
    if approval.kind not in (None, "approval"):
        age = _age(now - approval.created_at)
        if kind_of(approval) == QUESTION:
            return question_item(approval, age, link)
        if kind_of(approval) == RECOVERY:
            return recovery_item(approval, age, link)
        if kind_of(approval) == DELEGATION:
            return delegation_item(approval, age, link)
        return wait_item(approval, age, link)
    summary, cut = escaped_arguments(current_arguments(approval))
    return list_row(
        f"`{shown_name(approval.tool_name)}` `{summary}`\n"
        f"{asked_by(approval)} {_age(now - approval.created_at)} ago"
        f" · expires {slack_date(approval.expires_at)}{link}{_progress(approval)}"
        + (f"\n{rule}" if (rule := rule_text(approval)) else ""),
        # Nobody approves arguments they could not read: offer the whole of them.
        decision_buttons(approval, with_arguments_button=cut)
        if approval.status == "pending"
        else {"type": "section", "text": {"type": "mrkdwn", "text": outcome_text(approval)}},
    )


def _progress(approval: Approval) -> str:
    text = progress_text(approval)
    return f"\n:busts_in_silhouette: {text}" if text else ""


def _age(delta: Any) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _help_context() -> Block:
    return {
        "type": "context",
        "elements": [
            {
                "type": "mrkdwn",
                "text": "`/approvals` yours to decide · `/approvals mine` your requests · "
                "`/approvals all` this channel · `/approvals help`",
            }
        ],
    }


HELP_TEXT = (
    "*/approvals* lists calls waiting for a human decision.\n"
    "• `/approvals` — what you may approve\n"
    "• `/approvals mine` — what you asked for\n"
    "• `/approvals all` — everything pending in this channel\n"
    "• `/approvals grants` — tools allowed without asking in this channel's threads\n"
    "• `/approvals history` — recent decisions in this channel\n"
    "• `/approvals help` — this message\n"
    "Each item has the same buttons as its card: Approve / Deny, or a question's answers. "
    "Calls waiting on another system or for a retry are listed too."
)
