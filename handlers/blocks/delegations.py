"""Block Kit for sub-agents (issue 20 section 1): a delegation's notice in the thread and the
child's first message (its cards name the agent: ``kit.asked_by``).

A delegation is a row of the ``approvals`` table of kind ``delegation``: the parent's
``delegate(agent, task)`` call waiting for its child run. Nobody clicks it; the child's end
settles it. Pure functions of rows, as every card.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers.blocks.kit import (
    OUTCOME_DETAIL_LIMIT,
    Block,
    escaped_within,
    list_row,
    mention,
    pause_ids,
    slack_date,
)
from handlers.blocks.waits import notice_blocks
from storage.models import Approval

DELEGATION = "delegation"
TASK_SHOWN_LIMIT = 1000


def _task(approval: Approval) -> str:
    return escaped_within(str(approval.arguments.get("task", "")), TASK_SHOWN_LIMIT)


def render_delegation_notice(approval: Approval) -> tuple[str, list[Block]]:
    """ "🤖 Waiting for researcher: <task>", edited in place with the child's outcome."""
    agent = escaped_within(str(approval.arguments.get("agent", "")), 64)
    task = _task(approval)
    match approval.status:
        case "pending":
            line = f":robot_face: Waiting for *{agent}*: {task}"
            detail = ""
        case "completed":
            when = slack_date(approval.decided_at) if approval.decided_at else ""
            how = {"completed": "answered", "failed": "failed", "cancelled": "stopped"}
            line = f":robot_face: *{agent}* {how.get(approval.reason or '', 'ended')} {when}"
            detail = escaped_within(approval.result or "", OUTCOME_DETAIL_LIMIT)
        case _:
            line = f":heavy_multiplication_x: Stopped waiting for *{agent}*"
            detail = escaped_within(approval.result or "", OUTCOME_DETAIL_LIMIT)
    blocks = notice_blocks(line, detail, pause_ids("Delegation", approval))
    return f"Waiting for {agent}", blocks


def delegation_item(approval: Approval, age: str, link: str) -> list[Block]:
    """A delegation on an /approvals page (or the Home): which agent works on what, for whom."""
    agent = escaped_within(str(approval.arguments.get("agent", "")), 64)
    line = f":robot_face: *{agent}* is working on: {_task(approval)}"
    asked = f"delegated for {mention(approval.requester)} {age} ago"
    return list_row(f"{line}\n{asked}{link}")


def child_intro(agent: str, task: str, tools: Sequence[str]) -> str:
    """A child run's first message: "🤖 researcher is working on: <task>" and its tools."""
    shown = escaped_within(task, TASK_SHOWN_LIMIT)
    listed = ", ".join(f"`{escaped_within(t, 64)}`" for t in tools) or "none"
    return f"🤖 {escaped_within(agent, 64)} is working on: {shown}\nTools it may use: {listed}"
