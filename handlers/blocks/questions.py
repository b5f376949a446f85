"""Block Kit for the agent's questions: the card with what answers it, the answer form, and
a question's item on /approvals.

A question is a row of the ``approvals`` table of kind ``question``; like every card, its card
is a pure function of the row, so it looks the same after a restart or on another replica.
Its buttons carry the question's id and the *index* of a choice, never its text
(:func:`handlers.blocks.values.choice_value`): the answer is read back from the stored choices,
so a crafted request cannot put words in the answerer's mouth (and ``Runner.answer`` checks the
answer is one of the choices again).
"""

from __future__ import annotations

import json
from typing import Any

from bot.policy import MAX_ANSWER_LENGTH
from handlers.blocks.forms import form_modal, text_input
from handlers.blocks.kit import (
    FIELD_LIMIT,
    OUTCOME_DETAIL_LIMIT,
    SECTION_LIMIT,
    Block,
    asked_by,
    button,
    context,
    escape,
    escaped_within,
    list_row,
    mention,
    mentions_within,
    pause_ids,
    slack_date,
    truncated,
)
from handlers.blocks.values import choice_value
from storage.models import Approval

QUESTION = "question"

# One action id per choice button (action ids are unique within a block): ``question_choice:2``.
CHOICE = "question_choice"
CHOICE_PATTERN = rf"^{CHOICE}:[0-9]+$"
SELECT = "question_select"
ANSWER = "question_answer"
ANSWER_MODAL = "question_answer_modal"
ANSWER_BLOCK = "question_answer"
ANSWER_INPUT = "answer"
# The form takes as much as Runner.answer accepts (Slack's own cap is 3000 too).
ANSWER_MAX_LENGTH = MAX_ANSWER_LENGTH

# Up to this many choices get a button each; more get a static_select menu.
BUTTON_CHOICES = 5
SELECT_OPTIONS_LIMIT = 100  # Slack's cap on a static_select's options
CHOICE_TEXT_LIMIT = 75  # a button's or an option's text
QUESTION_TEXT_LIMIT = SECTION_LIMIT - 10
LIST_QUESTION_LIMIT = 300
WHO_MAY_ANSWER = "Who may answer"


def question_of(approval: Approval) -> str:
    question = (approval.arguments or {}).get("question")
    return question if isinstance(question, str) else str(question or "")


def choices_of(approval: Approval) -> list[str]:
    """The stored choices (ask_user's ``choices``); [] when the question is free text."""
    choices = (approval.arguments or {}).get("choices")
    if not isinstance(choices, list):
        return []
    return [c if isinstance(c, str) else json.dumps(c) for c in choices]


def answerers_text(approval: Approval, limit: int = FIELD_LIMIT) -> str:
    """Who may answer: the answerers the policy names, else the requester alone."""
    people = list(approval.approvers or []) or [approval.requester]
    mentions = [mention(p) for p in people if p and p != "*"]
    if "*" in people:
        return "anyone"
    return mentions_within(mentions, limit)


def question_elements(approval: Approval) -> list[Block]:
    """What answers a pending question: a button per choice, a menu, or "Answer"."""
    choices = choices_of(approval)
    if not choices:
        return [button(ANSWER, "Answer", approval.id, "primary")]
    if len(choices) <= BUTTON_CHOICES:
        return [
            button(f"{CHOICE}:{i}", _choice_label(c), choice_value(approval, i))
            for i, c in enumerate(choices)
        ]
    return [
        {
            "type": "static_select",
            "action_id": SELECT,
            "placeholder": {"type": "plain_text", "text": "Choose an answer"},
            "options": [
                {
                    "text": {"type": "plain_text", "text": _choice_label(c)},
                    "value": choice_value(approval, i),
                }
                for i, c in enumerate(choices[:SELECT_OPTIONS_LIMIT])
            ],
        }
    ]


def _choice_label(choice: str) -> str:
    return truncated(" ".join(choice.split()) or "(empty)", CHOICE_TEXT_LIMIT)[0]


def question_text(approval: Approval) -> str:
    # The notification text is mrkdwn too: the model's question must not ping or link anyone.
    return f"Question for {approval.requester}: {escaped_within(question_of(approval), 200)}"


def render_question_card(approval: Approval) -> tuple[str, list[Block]]:
    """A question from the agent, with what answers it; once settled, who answered what."""
    blocks: list[Block] = [
        {
            "type": "section",
            "block_id": "question_summary",
            "text": {
                "type": "mrkdwn",
                "text": f":question: *The agent asks* {mention(approval.requester)}:",
            },
        },
        {
            "type": "section",
            "block_id": "question_text",
            "text": {
                "type": "mrkdwn",
                "text": escaped_within(question_of(approval), QUESTION_TEXT_LIMIT),
            },
        },
    ]
    choices = choices_of(approval)
    if approval.status == "pending":
        blocks.append(
            {
                "type": "section",
                "block_id": "question_people",
                "fields": [
                    {
                        "type": "mrkdwn",
                        "text": f"*{WHO_MAY_ANSWER}*\n"
                        f"{answerers_text(approval, FIELD_LIMIT - len(WHO_MAY_ANSWER) - 3)}",
                    },
                    {"type": "mrkdwn", "text": f"*Expires*\n{slack_date(approval.expires_at)}"},
                ],
            }
        )
        blocks.append(
            {
                "type": "actions",
                "block_id": f"question:{approval.id}",
                "elements": question_elements(approval),
            }
        )
        if len(choices) > SELECT_OPTIONS_LIMIT:
            blocks.append(context(f"Only the first {SELECT_OPTIONS_LIMIT} choices are offered."))
    else:
        blocks.append(
            {
                "type": "section",
                "block_id": "question_outcome",
                "text": {"type": "mrkdwn", "text": question_outcome_text(approval)},
            }
        )
    blocks.append(pause_ids("Question", approval))
    return question_text(approval), blocks


def question_outcome_text(approval: Approval) -> str:
    """One line on a settled question: who answered what, or why nobody did."""
    match approval.status:
        case "answered":
            who = mention(approval.decided_by) if approval.decided_by else "someone"
            answer = escaped_within(approval.result or "", OUTCOME_DETAIL_LIMIT)
            return f":speech_balloon: {who} answered: {answer}"
        case "expired":
            told = (
                "the task stopped"
                if approval.on_expiry == "cancel"
                else "the agent was told no answer came"
            )
            return f":hourglass: *Expired* {slack_date(approval.expires_at)} with no answer; {told}"
        case "cancelled":
            detail = escaped_within(
                approval.reason or approval.result or "cancelled", OUTCOME_DETAIL_LIMIT
            )
            return f":heavy_multiplication_x: *Cancelled*: {detail}"
    return f"*{escape(approval.status)}*"


def render_answer_modal(approval: Approval, metadata: dict[str, Any]) -> Block:
    """The free-text answer form; ``metadata`` comes back with the submission."""
    question = escaped_within(question_of(approval), QUESTION_TEXT_LIMIT)
    return form_modal(
        ANSWER_MODAL,
        json.dumps(metadata),
        title="Answer the agent",
        submit="Answer",
        blocks=[
            {"type": "section", "text": {"type": "mrkdwn", "text": question}},
            text_input(
                ANSWER_BLOCK, ANSWER_INPUT, label="Your answer", max_length=ANSWER_MAX_LENGTH
            ),
        ],
    )


def question_item(approval: Approval, age: str, link: str) -> list[Block]:
    """A question on an /approvals page (or the Home), with what answers it."""
    asked = f"{asked_by(approval)} {age} ago"
    question = escaped_within(question_of(approval), LIST_QUESTION_LIMIT)
    choices = choices_of(approval)
    offered = (
        "\nChoices: " + escaped_within(" · ".join(choices), LIST_QUESTION_LIMIT) if choices else ""
    )
    return list_row(
        f":question: *Question* for {mention(approval.requester)}: "
        f"{question}{offered}\n{asked} · expires {slack_date(approval.expires_at)}{link}",
        {
            "type": "actions",
            "block_id": f"question:{approval.id}",
            "elements": question_elements(approval),
        },
    )
