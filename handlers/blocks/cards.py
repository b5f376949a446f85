"""The approval card: what a gated call asks, who may decide, its buttons, and its outcome.

A pure function of the approval row (with :mod:`handlers.blocks.edits`,
:mod:`handlers.blocks.rules` and :mod:`handlers.blocks.quorum` for what an edit, a rule and a
quorum add), so a card looks the same after a restart or on another replica, and an edited card
shows the state the row is in now: buttons while it is pending, the outcome once settled.
Button values carry only an approval id (Approve: and the fingerprint of the arguments it
showed, :mod:`handlers.blocks.values`); nothing on a card is trusted back.
"""

from __future__ import annotations

from typing import Any

from bot.engine.steps import ON_EXPIRY_WORKFLOW
from bot.policy import needs_quorum, progress
from bot.policy.what_ran import edit_text, grant_text, under_grant, was_edited
from handlers.blocks.edits import current_arguments, edit_button, edit_context, editable
from handlers.blocks.kit import (
    FIELD_LIMIT,
    OUTCOME_DETAIL_LIMIT,
    Block,
    asked_by,
    button,
    confirm,
    escape,
    escaped_within,
    mention,
    mentions_within,
    shown_json,
    shown_name,
    shown_text,
    slack_date,
)
from handlers.blocks.quorum import approved_by_text, progress_block
from handlers.blocks.rules import rule_block
from handlers.blocks.values import approve_value
from storage.models import Approval

APPROVE = "approval_approve"
DENY = "approval_deny"
SHOW_ARGUMENTS = "approval_show_arguments"

WHO_MAY_APPROVE = "Who may approve"
CARD_ARGUMENTS_LIMIT = 1200


def arguments_text(arguments: dict[str, Any]) -> str:
    return shown_json(arguments, indent=2, sort_keys=True)


def approvers_text(approval: Approval, limit: int = FIELD_LIMIT) -> str:
    """Who may approve, within ``limit`` characters: as many as fit, then "and N more".

    A policy may name hundreds of approvers; a card that lists them all would exceed Slack's
    field limit and could never be posted. Mentions are never cut in two.
    """
    if not approval.approvers:
        return "anyone but the requester" if not approval.allow_self_approval else "anyone"
    # The requester is named only when they may decide: with allow_self_approval, and never
    # towards a quorum (bot.policy.quorum), so "Who may approve" lists who can click.
    requester_may = approval.allow_self_approval and (approval.min_approvals or 1) <= 1
    named = [a for a in approval.approvers if requester_may or a != approval.requester]
    if not named:
        return "nobody but the requester, who may not approve their own call"
    return mentions_within([mention(a) for a in named], limit)


def decision_buttons(approval: Approval, *, with_arguments_button: bool) -> Block:
    approve = button(APPROVE, "Approve", approve_value(approval), "primary")
    approve["confirm"] = confirm(
        "Approve this call?",
        f"`{shown_name(approval.tool_name)}` will run with the arguments shown.",
        "Approve",
    )
    if approval.on_expiry == ON_EXPIRY_WORKFLOW:  # a Workflow Builder step
        approve["confirm"] = confirm(
            "Approve this request?", "The workflow carries on with your approval.", "Approve"
        )
    deny = button(DENY, "Deny", approval.id, "danger")
    deny["confirm"] = confirm(
        "Deny this call?", "You can give a reason on the next screen.", "Deny", danger=True
    )
    elements = [approve, deny]
    if editable(approval):
        elements.append(edit_button(approval))
    if with_arguments_button:
        elements.append(button(SHOW_ARGUMENTS, "Show all arguments", approval.id))
    return {"type": "actions", "block_id": f"approval:{approval.id}", "elements": elements}


def state_word(approval: Approval) -> str:
    """What a card's first line says it is: still open, or how it ended."""
    match approval.status:
        case "pending":
            return "Approval needed"
        case "approved" | "executing" | "executed" | "unknown":
            return "Approved"
        case "denied":
            return "Denied"
        case "expired":
            return "Expired"
        case "cancelled":
            return "Cancelled"
    return approval.status.capitalize()


def card_text(approval: Approval) -> str:
    """The notification text (and screen-reader text) of a card: its state first. The name
    is shown as on the card (a step's title is user text: no ``<!channel>``, no bidi)."""
    tool = shown_name(approval.tool_name)
    text = f"{state_word(approval)}: {tool} ({asked_by(approval)})"
    if approval.status == "pending" and needs_quorum(approval):
        text += f" · {progress(approval)}"
    return text


def card_title(approval: Approval) -> str:
    """The card's first line says its state, so people scanning a channel see which cards
    are still open: ``*Approval needed* for `x``` (a quorum's with ``· 1 of 2 approvals``),
    then ``*Approved:* `x```, ``*Denied:* …``, ``*Expired:* …``, ``*Cancelled:* …``."""
    tool = f"`{shown_name(approval.tool_name)}`"
    if approval.status == "pending":
        quorum = f" · *{progress(approval)}*" if needs_quorum(approval) else ""
        return f"*Approval needed* for {tool}{quorum}"
    return f"*{state_word(approval)}:* {tool}"


def _agent_line(approval: Approval) -> list[Block]:
    """A sub-agent's call (issue 20 section 1): "requested by agent researcher for @ana"."""
    if not getattr(approval, "agent", None):
        return []
    text = f":robot_face: {asked_by(approval)}"
    return [
        {
            "type": "context",
            "block_id": "agent_line",
            "elements": [{"type": "mrkdwn", "text": text}],
        }
    ]


def render_approval_card(approval: Approval) -> tuple[str, list[Block]]:
    """The card of a pending approval, or of a decided one (buttons gone, outcome shown)."""
    text = arguments_text(current_arguments(approval))
    shown = escaped_within(text, CARD_ARGUMENTS_LIMIT)
    cut = len(shown) < len(escape(text))
    blocks: list[Block] = [
        {
            "type": "section",
            "block_id": "approval_summary",
            "text": {
                "type": "mrkdwn",
                "text": card_title(approval),
            },
        },
        *_agent_line(approval),
        {
            "type": "section",
            "block_id": "approval_arguments",
            "text": {"type": "mrkdwn", "text": f"```{shown}```"},
        },
        {
            "type": "section",
            "block_id": "approval_people",
            "fields": [
                {"type": "mrkdwn", "text": f"*Asked by*\n{mention(approval.requester)}"},
                {
                    "type": "mrkdwn",
                    "text": f"*{WHO_MAY_APPROVE}*\n"
                    f"{approvers_text(approval, FIELD_LIMIT - len(WHO_MAY_APPROVE) - 3)}",
                },
                {"type": "mrkdwn", "text": f"*Expires*\n{slack_date(approval.expires_at)}"},
                {"type": "mrkdwn", "text": f"*If it expires*\n{_on_expiry_text(approval)}"},
            ],
        },
    ]
    if (why := why_block(approval)) is not None:
        blocks.insert(1, why)
    if (rule := rule_block(approval)) is not None:
        blocks.insert(1, rule)
    if (edited := edit_context(approval)) is not None:
        blocks.append(edited)
    if approval.status == "pending":
        quorum = progress_block(approval)
        if quorum is not None:
            blocks.append(quorum)
        blocks.append(decision_buttons(approval, with_arguments_button=cut))
    else:
        blocks.append(
            {
                "type": "section",
                "block_id": "approval_outcome",
                "text": {"type": "mrkdwn", "text": outcome_text(approval)},
            }
        )
        if cut:
            blocks.append(
                {
                    "type": "actions",
                    "block_id": f"arguments:{approval.id}",
                    "elements": [button(SHOW_ARGUMENTS, "Show all arguments", approval.id)],
                }
            )
    blocks.append(
        {
            "type": "context",
            "block_id": "approval_ids",
            "elements": [
                {"type": "mrkdwn", "text": f"Approval `{approval.id}` · run `{approval.run_id}`"}
            ],
        }
    )
    return card_text(approval), blocks


def why_block(approval: Approval) -> Block | None:
    """ "Why": what the model wrote with the call (stored cut to 300 characters), escaped and
    its hidden characters (a right-to-left override) shown as ``\\uXXXX`` like arguments, as
    context for the approver; none when it wrote nothing. The model's words, not a fact."""
    if not approval.why:
        return None
    why = shown_text(approval.why)
    return {
        "type": "section",
        "block_id": "approval_why",
        "text": {"type": "mrkdwn", "text": f"*Why* (the agent's words)\n{why}"},
    }


def _on_expiry_text(approval: Approval) -> str:
    if approval.on_expiry == "cancel":
        return "the task stops"
    if approval.on_expiry == ON_EXPIRY_WORKFLOW:
        return "the workflow carries on with *expired*"
    return "treated as denied"


def ran_text(approval: Approval) -> str:
    """A decided call in a list (``/approvals history``, the App Home): its outcome, and
    what ran when an approver edited it ("replicas 40 → 4, edited by @bo")."""
    text = outcome_text(approval)
    if was_edited(approval):
        # The changes are the model's and the editor's text (escaped); the editor a mention.
        changes = escaped_within(edit_text(approval, "") or "", OUTCOME_DETAIL_LIMIT)
        text += f"\n:pencil2: {changes}{mention(approval.edited_by or '')}"
    return text


def outcome_text(approval: Approval) -> str:
    """One line on a decided card."""
    when = slack_date(approval.decided_at) if approval.decided_at else ""
    who = mention(approval.decided_by) if approval.decided_by else "nobody"
    if under_grant(approval):
        until = slack_date(approval.grant_until) if approval.grant_until else "its end"
        allowed = grant_text(who, until)  # nobody clicked for this call: never "approved by"
        match approval.status:
            case "executed":
                return f":unlock: {allowed} {when} · ran"
            case "unknown":
                return f":warning: {allowed} {when} · outcome unknown (not re-run)"
            case "cancelled":
                detail = escaped_within(approval.result or "cancelled", OUTCOME_DETAIL_LIMIT)
                return f":heavy_multiplication_x: *Cancelled* ({allowed}): {detail}"
            case _:
                return f":unlock: {allowed} {when}"
    if approval.status in ("approved", "executing", "executed", "unknown"):
        who = approved_by_text(approval, who)
    match approval.status:
        case "approved" | "executing":
            return f":white_check_mark: *Approved* by {who} {when}"
        case "executed":
            return f":white_check_mark: *Approved* by {who} {when} · ran"
        case "unknown":
            return f":warning: *Approved* by {who} {when} · outcome unknown (not re-run)"
        case "denied":
            reason = (
                f": {escaped_within(approval.reason, OUTCOME_DETAIL_LIMIT)}"
                if approval.reason
                else ""
            )
            return f":no_entry: *Denied* by {who} {when}{reason}"
        case "expired":
            return f":hourglass: *Expired* {slack_date(approval.expires_at)} with no decision"
        case "cancelled":
            detail = escaped_within(
                approval.result or approval.reason or "cancelled", OUTCOME_DETAIL_LIMIT
            )
            return f":heavy_multiplication_x: *Cancelled*: {detail}"
    return f"*{approval.status}*"
