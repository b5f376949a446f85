"""Block Kit for a recovery (``on_error = "ask"``): the card of a call that failed, or whose
outcome is unknown, with what a person may choose, its item on /approvals, its details modal.

A recovery is a row of the ``approvals`` table of kind ``recovery``; like every card, its card
is a pure function of the row (the same after a restart or on another replica). The error is
escaped and cut to 500 characters; "Show details" opens the whole of it. Buttons carry only
the row's id (``recovery_*`` action ids); what a click may do is checked again by the engine.
"""

from __future__ import annotations

from handlers.blocks.edits import current_arguments
from handlers.blocks.forms import form_modal, text_input
from handlers.blocks.kit import (
    OUTCOME_DETAIL_LIMIT,
    SECTION_LIMIT,
    Block,
    asked_by,
    button,
    confirm,
    escape,
    escaped_arguments,
    escaped_pieces,
    escaped_within,
    list_row,
    mention,
    mentions_within,
    pause_ids,
    shown_name,
    slack_date,
    truncated,
)
from storage.models import Approval

RECOVERY = "recovery"
RETRY_ACTION = "recovery_retry"
EDIT_ACTION = "recovery_edit"  # Edit, then retry (allow_edit): the edit-then-approve form
RETRY_UNKNOWN = "recovery_retry_unknown"  # "it may run twice", behind a confirm
SKIP_ACTION = "recovery_skip"
STOP_ACTION = "recovery_stop"
RESOLVE_ACTION = "recovery_resolve"  # outcome unknown: "it ran", with an optional note
DETAILS_ACTION = "recovery_details"
RESOLVE_MODAL = "recovery_resolve_note"
NOTE_BLOCK = "recovery_note"
NOTE_INPUT = "note"

ERROR_SHOWN = 500
CALL_LIMIT = 1000  # the call line, escaped: well within a section's 3000
FALLBACK_ERROR_LIMIT = 150
LIST_ERROR_LIMIT = 300


def error_of(approval: Approval) -> str:
    return approval.reason or "the tool failed"


def unknown(approval: Approval) -> bool:
    return approval.recovery_cause == "unknown"


def recovery_buttons(approval: Approval) -> list[Block]:
    """What a person may choose on a pending recovery."""
    if unknown(approval):
        retry = button(RETRY_UNKNOWN, "Retry: it may run twice", approval.id)
        retry["confirm"] = confirm(
            "Run it again?",
            f"`{shown_name(approval.tool_name)}` may already have run: retrying may run it twice.",
            "Retry",
            danger=True,
        )
        first = [button(RESOLVE_ACTION, "It ran: tell the model it succeeded", approval.id), retry]
    else:
        first = [button(RETRY_ACTION, "Retry", approval.id, "primary")]
        if approval.allow_edit:
            first.append(button(EDIT_ACTION, "Edit, then retry", approval.id))
    stop = button(STOP_ACTION, "Stop run", approval.id, "danger")
    stop["confirm"] = confirm("Stop the run?", "The run is cancelled.", "Stop run", danger=True)
    buttons = [*first, button(SKIP_ACTION, "Skip", approval.id), stop]
    if len(error_of(approval)) > ERROR_SHOWN:
        buttons.append(button(DETAILS_ACTION, "Show details", approval.id))
    return buttons


def call_text(approval: Approval) -> str:
    """The call as it would run again (an edited call's edited arguments)."""
    summary, _cut = escaped_arguments(current_arguments(approval), CALL_LIMIT)
    return f"*Call*: `{shown_name(approval.tool_name)}` `{summary}`"


def headline(approval: Approval) -> str:
    tool = shown_name(approval.tool_name)
    if unknown(approval):
        return f":grey_question: *Outcome unknown*: `{tool}` started but its result was lost."
    return f":boom: `{tool}` *failed* (attempt {approval.attempt or 1})."


def render_recovery_card(approval: Approval) -> tuple[str, list[Block]]:
    """The call, the error, the attempt and the choices; once chosen, who chose what."""
    shown, _cut = truncated(error_of(approval), ERROR_SHOWN)
    error = escape(shown.replace("```", "'''"))
    blocks: list[Block] = [
        {
            "type": "section",
            "block_id": "recovery_summary",
            "text": {"type": "mrkdwn", "text": headline(approval)},
        },
        {
            "type": "section",
            "block_id": "recovery_call",
            "text": {"type": "mrkdwn", "text": call_text(approval)},
        },
        {
            "type": "section",
            "block_id": "recovery_error",
            "text": {"type": "mrkdwn", "text": f"```{error}```"},
        },
    ]
    if approval.status == "pending":
        people = [mention(p) for p in approval.approvers or [] if p and p != "*"]
        who = "anyone" if "*" in (approval.approvers or []) else mentions_within(people, 1000)
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": f"Who decides: {who or 'anyone'} · the model is given the "
                        f"error {slack_date(approval.expires_at)} if nobody does",
                    }
                ],
            }
        )
        blocks.append(
            {
                "type": "actions",
                "block_id": f"recovery:{approval.id}",
                "elements": recovery_buttons(approval),
            }
        )
    else:
        blocks.append(
            {
                "type": "section",
                "block_id": "recovery_outcome",
                "text": {"type": "mrkdwn", "text": recovery_outcome_text(approval)},
            }
        )
    blocks.append(pause_ids("Recovery", approval))
    # The notification text is mrkdwn too: a tool's error must not @channel or link anyone.
    fallback = escaped_within(error_of(approval), FALLBACK_ERROR_LIMIT)
    return f"{shown_name(approval.tool_name)} failed: {fallback}", blocks


def recovery_outcome_text(approval: Approval) -> str:
    """One line on a chosen recovery: who chose what, or that nobody did."""
    who = mention(approval.decided_by) if approval.decided_by else "someone"
    match approval.status:
        case "due" | "executing":
            return f":repeat: {who} chose *Retry*: running it again."
        case "executed" | "unknown":
            return f":repeat: {who} chose *Retry*: it ran again."
        case "skipped":
            return f":fast_forward: {who} chose *Skip*: the model was told."
        case "resolved":
            note = escaped_within(approval.result or "", OUTCOME_DETAIL_LIMIT)
            said = f" ({note})" if note else ""
            return f":white_check_mark: {who} said *it ran*{said}: the model was told."
        case "cancelled":
            if approval.decided_by:
                return f":octagonal_sign: {who} *stopped the run*."
            detail = escaped_within(approval.reason or "cancelled", OUTCOME_DETAIL_LIMIT)
            return f":heavy_multiplication_x: *Cancelled*: {detail}"
        case "expired":
            return (
                f":hourglass: Nobody chose by {slack_date(approval.expires_at)}: "
                "the model was given the error."
            )
    return f"*{escape(approval.status)}*"


def render_details_modal(approval: Approval) -> Block:
    """The whole error, split over as many sections as Slack needs."""
    pieces = escaped_pieces(error_of(approval), SECTION_LIMIT - 10)
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "The error"},
        "close": {"type": "plain_text", "text": "Close"},
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": piece}} for piece in pieces
        ][:50],
    }


def render_resolve_modal(approval: Approval, metadata: str) -> Block:
    """ "It ran": an optional note for the model."""
    return form_modal(
        RESOLVE_MODAL,
        metadata,
        title="It ran",
        submit="Tell the model",
        blocks=[
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"Tell the model `{shown_name(approval.tool_name)}` ran and succeeded.",
                },
            },
            text_input(NOTE_BLOCK, NOTE_INPUT, label="Note", max_length=2000, optional=True),
        ],
    )


def recovery_item(approval: Approval, age: str, link: str) -> list[Block]:
    """A recovery on an /approvals page (or the Home), with its choices."""
    error = escaped_within(error_of(approval), LIST_ERROR_LIMIT)
    return list_row(
        f"{headline(approval)}\n{error}\n{asked_by(approval)} {age} ago"
        f" · until {slack_date(approval.expires_at)}{link}",
        {
            "type": "actions",
            "block_id": f"recovery:{approval.id}",
            "elements": recovery_buttons(approval),
        }
        if approval.status == "pending"
        else {
            "type": "section",
            "text": {"type": "mrkdwn", "text": recovery_outcome_text(approval)},
        },
    )
