"""Block Kit for the waits a tool can pause on: a callback from another system, a retry.

A wait is a row of the ``approvals`` table of kind ``callback`` or ``retry``. Its notice in the
thread says what it waits for ("Waiting for the deploy to finish…", "Retrying at 14:05: …") and
is edited in place with the outcome (reported back, given up, retried, cancelled): a pure
function of the row, as every card. Nobody clicks a wait; it settles by itself (a callback
arrives, the retry comes due) or by the command line.
"""

from __future__ import annotations

from handlers.blocks.kit import (
    OUTCOME_DETAIL_LIMIT,
    Block,
    asked_by,
    escaped_within,
    list_row,
    pause_ids,
    shown_name,
    slack_date,
)
from storage.models import Approval

CALLBACK = "callback"
RETRY = "retry"

BODY_SHOWN_LIMIT = 500  # a callback's body on its notice, in a code block
LIST_WAIT_LIMIT = 300


def notice_blocks(line: str, detail: str, ids: Block) -> list[Block]:
    """A wait's notice in the thread (for a callback, a sub-agent): where it stands, what it
    said (if anything), and the ids of the pause."""
    blocks: list[Block] = [
        {"type": "section", "block_id": "wait_summary", "text": {"type": "mrkdwn", "text": line}}
    ]
    if detail:
        text = {"type": "mrkdwn", "text": detail}
        blocks.append({"type": "section", "block_id": "wait_detail", "text": text})
    blocks.append(ids)
    return blocks


def wait_description(approval: Approval) -> str:
    """What a callback waits for (WaitForCallback's description), else the tool's name."""
    return approval.reason or approval.tool_name


def render_callback_notice(approval: Approval) -> tuple[str, list[Block]]:
    """ "Waiting for <description>…", edited in place with the outcome."""
    description = escaped_within(wait_description(approval), 1000)
    match approval.status:
        case "pending":
            line = f":hourglass_flowing_sand: Waiting for {description}…"
            detail = f"Gives up {slack_date(approval.expires_at)}"
        case "completed":
            when = slack_date(approval.decided_at) if approval.decided_at else ""
            line = f":white_check_mark: Waited for {description}: reported back {when}"
            detail = _shown_body(approval.result)
        case "expired":
            deadline = slack_date(approval.expires_at)
            stopped = "; the task stopped" if approval.on_expiry == "cancel" else ""
            line = f":hourglass: Waited for {description}: no report by {deadline}{stopped}"
            detail = ""
        case _:
            line = f":heavy_multiplication_x: Stopped waiting for {description}"
            detail = escaped_within(approval.result or "", OUTCOME_DETAIL_LIMIT)
    blocks = notice_blocks(line, detail, pause_ids("Wait", approval))
    text = f"Waiting for {escaped_within(wait_description(approval), 200)}"  # mrkdwn too
    return text, blocks


def _shown_body(body: str | None) -> str:
    if not body:
        return ""
    shown = escaped_within(body.replace("```", "'''"), BODY_SHOWN_LIMIT)
    return f"```{shown}```"


def retry_reason(approval: Approval) -> str:
    return approval.reason or "the tool asked to be retried later"


def render_retry_notice(approval: Approval) -> tuple[str, list[Block]]:
    """ "Retrying at <date>: <reason>", edited when the retry runs (or is cancelled)."""
    due = approval.due_at or approval.expires_at
    reason = escaped_within(retry_reason(approval), 1000)
    tool = shown_name(approval.tool_name)
    match approval.status:
        case "pending":
            line = f":repeat: Retrying at {slack_date(due)}: {reason}"
        case "due" | "executing" | "executed" | "unknown":
            # Due, then run again (at most once) by the drive that resumed the run.
            line = f":repeat: Retried {slack_date(due)} (it had said: {reason})"
        case _:
            detail = escaped_within(approval.result or "cancelled", OUTCOME_DETAIL_LIMIT)
            line = f":heavy_multiplication_x: Not retried: {detail}"
    blocks: list[Block] = [
        {"type": "section", "block_id": "wait_summary", "text": {"type": "mrkdwn", "text": line}},
        pause_ids(f"Retry of `{tool}`:", approval),
    ]
    fallback = due.strftime("%Y-%m-%d %H:%M UTC")
    return f"Retrying {shown_name(approval.tool_name)} at {fallback}", blocks


def wait_item(approval: Approval, age: str, link: str) -> list[Block]:
    """A callback wait or a retry on an /approvals page (or the Home)."""
    asked = f"{asked_by(approval)} {age} ago"
    if approval.kind == RETRY:
        due = approval.due_at or approval.expires_at
        line = (
            f":repeat: *Retry* of `{shown_name(approval.tool_name)}` at {slack_date(due)}: "
            f"{escaped_within(retry_reason(approval), LIST_WAIT_LIMIT)}"
        )
    else:
        line = (
            f":hourglass_flowing_sand: *Waiting* for "
            f"{escaped_within(wait_description(approval), LIST_WAIT_LIMIT)}"
            f" · gives up {slack_date(approval.expires_at)}"
        )
    return list_row(f"{line}\n{asked}{link}")
