"""Block Kit for the pauses that are not approvals: questions, callback waits, retries.

Every pause is a row of the ``approvals`` table with a ``kind``; :func:`render_card` renders a
row by its kind, so the card outbox, the edits after a click, an expiry or a resume, and
/approvals all go through one function. Like :mod:`handlers.blocks`, everything here is a pure
function of the row: a card looks the same after a restart or on another replica.

A question's buttons carry the question's id and the *index* of a choice, never its text: the
answer is read back from the stored choices, so a crafted request cannot put words in the
answerer's mouth (and ``Runner.answer`` checks the answer is one of the choices again).
"""

from __future__ import annotations

import json
from typing import Any

from bot.runner_waits import MAX_ANSWER_LENGTH
from handlers.blocks import (
    FIELD_LIMIT,
    OUTCOME_DETAIL_LIMIT,
    SECTION_LIMIT,
    Block,
    _button,
    escape,
    escaped_within,
    list_row,
    mention,
    mentions_within,
    render_approval_card,
    slack_date,
    truncated,
)
from handlers.form_blocks import form_modal, text_input
from storage.models import Approval

QUESTION = "question"
CALLBACK = "callback"
RETRY = "retry"

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
BODY_SHOWN_LIMIT = 500  # a callback's body on its notice, in a code block


def kind_of(approval: Approval) -> str:
    return approval.kind or "approval"


def render_card(approval: Approval) -> tuple[str, list[Block]]:
    """(notification text, blocks) of any pause, by its kind."""
    match kind_of(approval):
        case "question":
            return render_question_card(approval)
        case "callback":
            return render_callback_notice(approval)
        case "retry":
            return render_retry_notice(approval)
    return render_approval_card(approval)


# -- questions ---------------------------------------------------------------------------


def question_of(approval: Approval) -> str:
    question = (approval.arguments or {}).get("question")
    return question if isinstance(question, str) else str(question or "")


def choices_of(approval: Approval) -> list[str]:
    """The stored choices (ask_user's ``choices``); [] when the question is free text."""
    choices = (approval.arguments or {}).get("choices")
    if not isinstance(choices, list):
        return []
    return [c if isinstance(c, str) else json.dumps(c) for c in choices]


def choice_value(approval: Approval, index: int) -> str:
    return json.dumps({"id": approval.id, "choice": index}, separators=(",", ":"))


def parse_choice_value(value: Any) -> tuple[str, int] | None:
    """(question id, choice index) from a button's or option's value; None if not ours."""
    try:
        data = json.loads(value) if isinstance(value, str) else None
    except (ValueError, RecursionError):  # deep nesting raises RecursionError
        return None
    if not isinstance(data, dict):
        return None
    approval_id, index = data.get("id"), data.get("choice")
    if not isinstance(approval_id, str) or not isinstance(index, int) or isinstance(index, bool):
        return None
    if not 0 <= index < 10_000:
        return None
    return approval_id, index


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
        return [_button(ANSWER, "Answer", approval.id, "primary")]
    if len(choices) <= BUTTON_CHOICES:
        return [
            _button(f"{CHOICE}:{i}", _choice_label(c), choice_value(approval, i))
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
    return f"Question for {approval.requester}: {truncated(question_of(approval), 200)[0]}"


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
            blocks.append(_note(f"Only the first {SELECT_OPTIONS_LIMIT} choices are offered."))
    else:
        blocks.append(
            {
                "type": "section",
                "block_id": "question_outcome",
                "text": {"type": "mrkdwn", "text": question_outcome_text(approval)},
            }
        )
    blocks.append(_ids("Question", approval))
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


# -- waits: callbacks and retries --------------------------------------------------------


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
    blocks: list[Block] = [
        {"type": "section", "block_id": "wait_summary", "text": {"type": "mrkdwn", "text": line}}
    ]
    if detail:
        blocks.append(
            {
                "type": "section",
                "block_id": "wait_detail",
                "text": {"type": "mrkdwn", "text": detail},
            }
        )
    blocks.append(_ids("Wait", approval))
    text = f"Waiting for {truncated(wait_description(approval), 200)[0]}"
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
    tool = escape(approval.tool_name)
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
        _ids(f"Retry of `{tool}`:", approval),
    ]
    fallback = due.strftime("%Y-%m-%d %H:%M UTC")
    return f"Retrying {approval.tool_name} at {fallback}", blocks


def _ids(what: str, approval: Approval) -> Block:
    return {
        "type": "context",
        "block_id": "pause_ids",
        "elements": [
            {"type": "mrkdwn", "text": f"{what} `{approval.id}` · run `{approval.run_id}`"}
        ],
    }


def _note(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


# -- /approvals --------------------------------------------------------------------------


def list_item(approval: Approval, age: str, link: str) -> list[Block]:
    """A question or a wait on an /approvals page (approvals keep their own item)."""
    kind = kind_of(approval)
    asked = f"asked by {mention(approval.requester)} {age} ago"
    if kind == "question":
        question = escaped_within(question_of(approval), LIST_QUESTION_LIMIT)
        choices = choices_of(approval)
        offered = (
            "\nChoices: " + escaped_within(" · ".join(choices), LIST_QUESTION_LIMIT)
            if choices
            else ""
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
    if kind == "retry":
        due = approval.due_at or approval.expires_at
        line = (
            f":repeat: *Retry* of `{escape(approval.tool_name)}` at {slack_date(due)}: "
            f"{escaped_within(retry_reason(approval), LIST_QUESTION_LIMIT)}"
        )
    else:
        line = (
            f":hourglass_flowing_sand: *Waiting* for "
            f"{escaped_within(wait_description(approval), LIST_QUESTION_LIMIT)}"
            f" · gives up {slack_date(approval.expires_at)}"
        )
    return list_row(f"{line}\n{asked}{link}")


# -- the thread ----------------------------------------------------------------------------


def waiting_text(new_pauses: list[Approval]) -> str:
    """What a paused run says in its thread, above the cards and notices it posts."""
    kinds = [kind_of(a) for a in new_pauses]
    decisions, questions = kinds.count("approval"), kinds.count(QUESTION)
    waits = len(kinds) - decisions - questions
    if not kinds:
        return ":raised_hand: Still waiting for a decision."
    if decisions and not (questions or waits):
        # The sentence approvals always had.
        return (
            f":raised_hand: Waiting for a human: {decisions} call"
            f"{'s need' if decisions != 1 else ' needs'} a decision."
        )
    parts = []
    if decisions:
        parts.append(f"{decisions} call{'s need' if decisions != 1 else ' needs'} a decision")
    if questions:
        parts.append(f"{questions} question{'s need' if questions != 1 else ' needs'} an answer")
    if waits:
        parts.append(f"{waits} call{'s are' if waits != 1 else ' is'} waiting (see below)")
    return ":raised_hand: Paused: " + "; ".join(parts) + "."
