"""The batch card: many calls of one tool from one model response, on one card.

A pure function of the batch's rows (``approvals.batch_id``), like every card: a row per call
(its arguments on one line, escaped; up to ``BATCH_ROWS_SHOWN``, then "and N more" with a
"Review all" modal), and while calls wait, **Approve all N**, **Deny all** and **Review each**
(a modal with a checkbox per call). Each row shows its own outcome once settled, so a call
decided meanwhile (elsewhere, or by another click) says so. Buttons carry the batch's id and
the fingerprint of the set the card showed (``storage.records.batch_fingerprint``); nothing
else on the card is trusted back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from handlers.blocks.cards import approvers_text, outcome_text, why_block
from handlers.blocks.edits import current_arguments
from handlers.blocks.forms import form_modal, text_input
from handlers.blocks.kit import (
    FIELD_LIMIT,
    SECTION_LIMIT,
    Block,
    button,
    confirm,
    escaped_within,
    mention,
    shown_json,
    shown_name,
    slack_date,
)
from storage.hashes import FINGERPRINT_LENGTH, batch_fingerprint
from storage.models import Approval

BATCH_APPROVE_ALL = "batch_approve_all"
BATCH_DENY_ALL = "batch_deny_all"
BATCH_REVIEW = "batch_review"
BATCH_REVIEW_ALL = "batch_review_all"
BATCH_REVIEW_MODAL = "batch_review_modal"
BATCH_REASON_BLOCK = "batch_reason"
BATCH_REASON_INPUT = "reason"
BATCH_CHECK_BLOCK = "batch_calls"
BATCH_CHECK_INPUT = "calls"

BATCH_ROWS_SHOWN = 20  # rows on the card; the rest behind "Review all"
ROW_ARGUMENTS_LIMIT = 140  # one line of arguments on the card
OPTION_TEXT_LIMIT = 75  # a checkbox option's text (Slack's limit)
CHECKBOXES_PER_BLOCK = 10  # Slack's limit of options per checkboxes element
ROWS_PER_SECTION = 10
LIST_ROWS = 5  # calls shown in a list's item (/approvals, the App Home)
LIST_ROW_LIMIT = 80


def batch_value(rows: Sequence[Approval]) -> str:
    """A batch button's value: the batch's id and the fingerprint of the set shown."""
    return f"{rows[0].batch_id}:{batch_fingerprint(rows)}"


def parse_batch_value(value: object) -> tuple[str, str]:
    """(batch id, fingerprint shown); anything malformed keeps a fingerprint no batch has."""
    text = value if isinstance(value, str) else ""
    batch_id, _, shown = text.partition(":")
    return batch_id, shown if len(shown) == FINGERPRINT_LENGTH else "-" * FINGERPRINT_LENGTH


def one_line(approval: Approval, limit: int = ROW_ARGUMENTS_LIMIT) -> str:
    """A call's arguments on one line (compact JSON), escaped and cut to ``limit``."""
    text = shown_json(current_arguments(approval), sort_keys=True, separators=(", ", ": "))
    return escaped_within(text, limit)


def _plain_line(approval: Approval, limit: int) -> str:
    """For plain_text (a checkbox): no escaping needed, cut to ``limit`` characters."""
    text = shown_json(current_arguments(approval), sort_keys=True, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row_text(index: int, approval: Approval) -> str:
    line = f"`{index}.` `{one_line(approval)}`"
    if approval.status != "pending":
        line += f"\n      {outcome_text(approval)}"
    elif (approval.min_approvals or 1) > 1 and approval.approved_by:
        line += f" · {len(approval.approved_by)} of {approval.min_approvals} approvals"
    return line


def _row_sections(rows: Sequence[Approval], start: int = 1) -> list[Block]:
    sections = []
    for offset in range(0, len(rows), ROWS_PER_SECTION):
        chunk = rows[offset : offset + ROWS_PER_SECTION]
        text = "\n".join(_row_text(start + offset + i, a) for i, a in enumerate(chunk))
        sections.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": text[:SECTION_LIMIT]}}
        )
    return sections


def pending_of(rows: Sequence[Approval]) -> list[Approval]:
    return [row for row in rows if row.status == "pending"]


def batch_text(rows: Sequence[Approval]) -> str:
    lead = rows[0]
    tool = shown_name(lead.tool_name)
    return f"Approval needed: {len(rows)} {tool} calls (asked by {lead.requester})"


def render_batch_card(rows: Sequence[Approval]) -> tuple[str, list[Block]]:
    """The card of a batch: every call's row and outcome, and the buttons while any waits."""
    lead = next((row for row in rows if row.id == row.batch_id), rows[0])
    waiting = pending_of(rows)
    tool = shown_name(lead.tool_name)
    quorum = (
        f" (each needs {lead.min_approvals} approvals)" if (lead.min_approvals or 1) > 1 else ""
    )
    blocks: list[Block] = [
        {
            "type": "section",
            "block_id": "batch_summary",
            "text": {
                "type": "mrkdwn",
                "text": f"*Approval needed* for {len(rows)} calls of `{tool}`{quorum}",
            },
        },
        *_row_sections(rows[:BATCH_ROWS_SHOWN]),
    ]
    if (why := why_block(lead)) is not None:
        blocks.insert(1, why)
    if len(rows) > BATCH_ROWS_SHOWN:
        blocks.append(
            {
                "type": "section",
                "block_id": "batch_more",
                "text": {"type": "mrkdwn", "text": f"and {len(rows) - BATCH_ROWS_SHOWN} more"},
                "accessory": button(BATCH_REVIEW_ALL, "Review all", batch_value(rows)),
            }
        )
    label = "Who may approve"
    blocks.append(
        {
            "type": "section",
            "block_id": "batch_people",
            "fields": [
                {"type": "mrkdwn", "text": f"*Asked by*\n{mention(lead.requester)}"},
                {
                    "type": "mrkdwn",
                    "text": f"*{label}*\n{approvers_text(lead, FIELD_LIMIT - len(label) - 3)}",
                },
                {"type": "mrkdwn", "text": f"*Expires*\n{slack_date(lead.expires_at)}"},
            ],
        }
    )
    if waiting:
        blocks.append(_buttons(rows, waiting))
    else:
        blocks.append(
            {
                "type": "section",
                "block_id": "batch_outcome",
                "text": {"type": "mrkdwn", "text": _summary(rows)},
            }
        )
    blocks.append(
        {
            "type": "context",
            "block_id": "batch_ids",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": f"Batch `{lead.batch_id}` · {len(rows)} calls · run `{lead.run_id}`",
                }
            ],
        }
    )
    return batch_text(rows), blocks


def _buttons(rows: Sequence[Approval], waiting: Sequence[Approval]) -> Block:
    value = batch_value(rows)
    tool = shown_name(rows[0].tool_name)
    count = len(waiting)
    approve = button(BATCH_APPROVE_ALL, f"Approve all {count}", value, "primary")
    approve["confirm"] = confirm(
        f"Approve all {count}?",
        f"The {count} `{tool}` calls still waiting will run with the arguments shown.",
        "Approve all",
    )
    deny = button(BATCH_DENY_ALL, "Deny all", value, "danger")
    deny["confirm"] = confirm(
        f"Deny all {count}?",
        f"None of the {count} calls still waiting will run.",
        "Deny all",
        danger=True,
    )
    review = button(BATCH_REVIEW, "Review each", value)
    return {
        "type": "actions",
        "block_id": f"batch:{rows[0].batch_id}",
        "elements": [approve, deny, review],
    }


def batch_item(rows: Sequence[Approval], asked: str) -> list[Block]:
    """A batch in a list (/approvals, the App Home): one item, its count, its buttons."""
    waiting = pending_of(rows)
    lead = rows[0]
    listed = "\n".join(f"`{one_line(a, LIST_ROW_LIMIT)}`" for a in waiting[:LIST_ROWS])
    if len(waiting) > LIST_ROWS:
        listed += f"\nand {len(waiting) - LIST_ROWS} more"
    text = (
        f"`{shown_name(lead.tool_name)}` · {len(waiting)} of {len(rows)} calls waiting "
        f"(one batch)\n{listed}\n{asked} · expires {slack_date(lead.expires_at)}"
    )
    below: list[Block] = [_buttons(rows, waiting)] if waiting else []
    return [
        {"type": "divider"},
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        *below,
    ]


def _summary(rows: Sequence[Approval]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        key = "approved" if row.status in ("approved", "executing", "executed") else row.status
        counts[key] = counts.get(key, 0) + 1
    parts = [f"{n} {status}" for status, n in counts.items()]
    return ":ballot_box_with_check: All decided: " + ", ".join(parts)


def render_batch_review_modal(rows: Sequence[Approval], metadata: dict[str, Any]) -> Block:
    """Review each: a checkbox per call still waiting (all checked); submitting approves the
    checked ones and denies the rest, with one reason."""
    waiting = pending_of(rows)
    numbered = [(rows.index(a) + 1, a) for a in waiting]
    blocks: list[Block] = [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"Check the `{shown_name(rows[0].tool_name)}` calls to approve; the "
                "unchecked ones are denied.",
            },
        }
    ]
    for offset in range(0, len(numbered), CHECKBOXES_PER_BLOCK):
        chunk = numbered[offset : offset + CHECKBOXES_PER_BLOCK]
        options = [
            {
                "text": {
                    "type": "plain_text",
                    "text": f"{i}. {_plain_line(a, OPTION_TEXT_LIMIT - len(f'{i}. '))}",
                },
                "value": a.id,
            }
            for i, a in chunk
        ]
        blocks.append(
            {
                "type": "input",
                "block_id": f"{BATCH_CHECK_BLOCK}:{offset // CHECKBOXES_PER_BLOCK}",
                "optional": True,
                "label": {"type": "plain_text", "text": f"Approve ({chunk[0][0]}–{chunk[-1][0]})"},
                "element": {
                    "type": "checkboxes",
                    "action_id": BATCH_CHECK_INPUT,
                    "options": options,
                    "initial_options": options,
                },
            }
        )
    blocks.append(
        text_input(
            BATCH_REASON_BLOCK,
            BATCH_REASON_INPUT,
            label="Reason for the denied ones",
            max_length=1000,
            optional=True,
        )
    )
    return form_modal(
        BATCH_REVIEW_MODAL,
        json.dumps(metadata),
        title="Review each call",
        submit="Decide",
        blocks=blocks[:100],
    )


def checked_calls(view: dict[str, Any]) -> list[str]:
    """The ids checked in a submitted review modal (anything else in the payload ignored)."""
    values = (view.get("state") or {}).get("values") or {}
    checked: list[str] = []
    if not isinstance(values, dict):
        return checked
    for block_id, inputs in values.items():
        if not (isinstance(block_id, str) and block_id.startswith(BATCH_CHECK_BLOCK + ":")):
            continue
        field = inputs.get(BATCH_CHECK_INPUT) if isinstance(inputs, dict) else None
        options = field.get("selected_options") if isinstance(field, dict) else None
        for option in options if isinstance(options, list) else []:
            value = option.get("value") if isinstance(option, dict) else None
            if isinstance(value, str):
                checked.append(value)
    return checked


def render_batch_all_modal(rows: Sequence[Approval]) -> Block:
    """Review all: every call of the batch and its state (read-only)."""
    blocks = _row_sections(rows)[:100]
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": f"{len(rows)} calls"[:24]},
        "close": {"type": "plain_text", "text": "Close"},
        "blocks": blocks,
    }
