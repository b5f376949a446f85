"""The App Home's view: what waits for you, your requests, recent decisions near you.

A pure function of the rows the Home lists (read by :mod:`handlers.slack.home`, which publishes
it): what waits for the person's decision is listed as /approvals lists it, with the same
buttons (same action ids, same decision path); their own requests and recent decisions are
one line each. A click's answer, which a list would give ephemerally, shows at the top as a
notice, since a Home has no channel and no response URL.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from handlers.blocks.cards import approvers_text, ran_text
from handlers.blocks.edits import current_arguments
from handlers.blocks.kit import (
    SECTION_LIMIT,
    Block,
    context,
    escaped_arguments,
    mention,
    shown_name,
    slack_date,
)
from handlers.blocks.lists import list_item
from storage.models import Approval


def home_view(
    *,
    now: datetime,
    waiting: list[Approval],
    waiting_total: int,
    mine: list[Approval],
    mine_total: int,
    decided: list[Approval],
    batches: dict[str, list[Approval]] | None = None,
    notice: str | None = None,
    warning: str | None = None,
) -> dict[str, Any]:
    """The Home: ``notice`` and ``warning`` first, then its three lists, each counted past
    what it shows."""
    view: list[Block] = []
    for line in (notice, warning):
        if line:
            view.append(context(line))
    view.append(_header("Waiting for you"))
    if not waiting:
        view.append(context("Nothing is waiting for your decision. :tada:"))
    for approval in waiting:
        view.extend(list_item(approval, now, None, (batches or {}).get(approval.batch_id or "")))
    view.extend(_more(waiting_total, len(waiting), "`/approvals`"))
    view.append(_header("Your requests"))
    if not mine:
        view.append(context("None of your requests are waiting for a decision."))
    for approval in mine:
        view.append(_section(_request_line(approval)))
    view.extend(_more(mine_total, len(mine), "`/approvals mine`"))
    view.append(_header("Recent decisions in your channels"))
    if not decided:
        view.append(context("No decisions yet."))
    for approval in decided:
        view.append(_section(_decision_line(approval)))
    return {"type": "home", "blocks": view}


def _summary(approval: Approval) -> str:
    shown, _ = escaped_arguments(current_arguments(approval))  # an edit's, once edited
    return f"`{shown_name(approval.tool_name)}` `{shown}`"


def _request_line(approval: Approval) -> str:
    return (
        f"{_summary(approval)} in <#{approval.channel}>\n"
        f"waiting for {approvers_text(approval, 1000)}"
        f" · expires {slack_date(approval.expires_at)}"
    )


def _decision_line(approval: Approval) -> str:
    return (
        f"{_summary(approval)} in <#{approval.channel}>, asked by "
        f"{mention(approval.requester)}\n{ran_text(approval)}"
    )


def _header(text: str) -> Block:
    return {"type": "header", "text": {"type": "plain_text", "text": text}}


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:SECTION_LIMIT]}}


def _more(total: int, shown: int, where: str) -> list[Block]:
    return [context(f"… and {total - shown} more: see {where}")] if total > shown else []
