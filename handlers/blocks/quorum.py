"""Block Kit for quorum: how far an approval that needs several approvers has got.

Pure functions of the approval's row (``min_approvals``, ``approved_by``), as every card is.
"""

from __future__ import annotations

from typing import Any

from bot.policy import approvals_so_far, needs_quorum, progress
from storage.models import Approval

QUORUM_BLOCK = "approval_quorum"


def mentions(users: list[str]) -> str:
    return ", ".join(f"<@{user}>" for user in users)


def progress_text(approval: Approval) -> str | None:
    """``1 of 2 approvals: <@U1>``; None for an approval that needs one."""
    if not needs_quorum(approval):
        return None
    voters = approvals_so_far(approval)
    return f"{progress(approval)}: {mentions(voters)}" if voters else f"{progress(approval)} yet"


def progress_block(approval: Approval) -> dict[str, Any] | None:
    """The card's progress line, while it waits for more approvals."""
    text = progress_text(approval)
    if text is None:
        return None
    return {
        "type": "section",
        "block_id": QUORUM_BLOCK,
        "text": {"type": "mrkdwn", "text": f":busts_in_silhouette: *{text}*"},
    }


def approved_by_text(approval: Approval, decided_by: str) -> str:
    """Who approved a decided call: everyone who counted towards its quorum."""
    voters = approvals_so_far(approval)
    if needs_quorum(approval) and voters:
        return mentions(voters)
    return decided_by
