"""Questions, callback waits and retries as Slack shows them: pure rendering of stored rows,
checked against Slack's Block Kit limits (as our Slack-compatible server enforces them)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from handlers import blocks as pause_blocks
from handlers.blocks import render_approvals_page
from handlers.middleware import problem, request_ids
from playground.slack_server.blocks import MAX_VIEW_BLOCKS, _blocks_problems
from storage.models import Approval

NOW = datetime(2026, 11, 30, 12, 0)


def pause(kind: str, **fields: Any) -> Approval:
    values: dict[str, Any] = {
        "id": "01QUESTION",
        "run_id": "01RUN",
        "turn": 1,
        "tool_call_id": "tc_1",
        "tool_name": "ask_user",
        "arguments": {"question": "Restart which region?", "choices": ["eu", "us"]},
        "payload_hash": "0" * 64,
        "status": "pending",
        "requester": "U0REQUESTER",
        "team_id": "T0TEAM",
        "channel": "C0OPS",
        "thread_ts": "1.0",
        "approvers": [],
        "allow_self_approval": True,
        "on_expiry": "deny",
        "created_at": NOW,
        "expires_at": NOW + timedelta(minutes=30),
        "kind": kind,
    }
    values.update(fields)
    return Approval(**values)


def valid(blocks: list[dict[str, Any]], limit: int = 50) -> list[dict[str, Any]]:
    problems = _blocks_problems(blocks, limit)
    assert problems == [], problems
    return blocks


def as_text(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def elements(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_a_question_with_few_choices_gets_one_button_per_choice() -> None:
    text, blocks = pause_blocks.render_card(pause("question"))
    valid(blocks)
    assert "Restart which region?" in text
    buttons = elements(blocks)
    assert [b["text"]["text"] for b in buttons] == ["eu", "us"]
    assert [b["action_id"] for b in buttons] == ["question_choice:0", "question_choice:1"]
    # The buttons name the question and a choice's index, never the words of the answer.
    assert [pause_blocks.parse_choice_value(b["value"]) for b in buttons] == [
        ("01QUESTION", 0),
        ("01QUESTION", 1),
    ]
    assert "<@U0REQUESTER>" in as_text(blocks), "who may answer: the requester by default"


def test_more_than_five_choices_get_a_menu() -> None:
    choices = [f"region-{i}" for i in range(6)]
    _, blocks = pause_blocks.render_card(
        pause("question", arguments={"question": "Which?", "choices": choices})
    )
    valid(blocks)
    [menu] = elements(blocks)
    assert menu["type"] == "static_select" and menu["action_id"] == pause_blocks.SELECT
    assert [o["text"]["text"] for o in menu["options"]] == choices
    assert pause_blocks.parse_choice_value(menu["options"][5]["value"]) == ("01QUESTION", 5)


def test_a_question_without_choices_gets_an_answer_button_and_its_modal() -> None:
    question = pause("question", arguments={"question": "Why <!channel>?"})
    _, blocks = pause_blocks.render_card(question)
    valid(blocks)
    [button] = elements(blocks)
    assert button["action_id"] == pause_blocks.ANSWER and button["value"] == "01QUESTION"
    assert "Why &lt;!channel&gt;?" in as_text(blocks), "model text cannot ping the channel"
    modal = pause_blocks.render_answer_modal(question, {"approval_id": question.id})
    valid(modal["blocks"], MAX_VIEW_BLOCKS)
    assert modal["callback_id"] == pause_blocks.ANSWER_MODAL
    [field] = [b for b in modal["blocks"] if b["type"] == "input"]
    assert field["block_id"] == pause_blocks.ANSWER_BLOCK
    assert field["element"]["type"] == "plain_text_input"
    assert json.loads(modal["private_metadata"]) == {"approval_id": "01QUESTION"}


def test_huge_questions_and_choices_still_fit_slacks_limits() -> None:
    long = "&" * 5000
    many = [f"{i} {'x' * 200}" for i in range(150)]
    for arguments in (
        {"question": long, "choices": many},
        {"question": long, "choices": ["<@U0X>" * 40] * 3},
        {"question": long},
    ):
        question = pause(
            "question", arguments=arguments, approvers=[f"U{i:08}" for i in range(400)]
        )
        _, blocks = pause_blocks.render_card(question)
        valid(blocks)
        valid(pause_blocks.render_answer_modal(question, {})["blocks"], MAX_VIEW_BLOCKS)
        answered = pause("question", arguments=arguments, status="answered", result=long)
        valid(pause_blocks.render_card(answered)[1])


def test_an_answered_question_shows_who_answered_what_and_no_buttons() -> None:
    answered = pause(
        "question",
        status="answered",
        decided_by="U0REQUESTER",
        decided_at=NOW,
        result="eu <!here>",
    )
    _, blocks = pause_blocks.render_card(answered)
    valid(blocks)
    assert elements(blocks) == []
    shown = as_text(blocks)
    assert "<@U0REQUESTER> answered: eu &lt;!here&gt;" in shown


@pytest.mark.parametrize(
    ("on_expiry", "said"),
    [("deny", "the agent was told no answer came"), ("cancel", "the task stopped")],
)
def test_an_expired_question_says_what_happened(on_expiry: str, said: str) -> None:
    _, blocks = pause_blocks.render_card(
        pause("question", status="expired", on_expiry=on_expiry, decided_at=NOW)
    )
    valid(blocks)
    assert elements(blocks) == [] and said in as_text(blocks)


def test_a_callback_notice_waits_then_shows_the_outcome() -> None:
    waiting = pause(
        "callback",
        tool_name="start_deploy",
        arguments={"service": "shop"},
        reason="deploy of shop",
    )
    text, blocks = pause_blocks.render_card(waiting)
    valid(blocks)
    assert text == "Waiting for deploy of shop"
    assert "Waiting for deploy of shop…" in as_text(blocks)
    done = pause(
        "callback",
        tool_name="start_deploy",
        reason="deploy of shop",
        status="completed",
        decided_by="callback",
        decided_at=NOW,
        result='{"status": "ok"}' + "`" * 3000,
    )
    _, blocks = pause_blocks.render_card(done)
    valid(blocks)
    shown = as_text(blocks)
    assert "deploy of shop: reported back" in shown and '\\"status\\": \\"ok\\"' in shown
    _, blocks = pause_blocks.render_card(
        pause("callback", reason="deploy of shop", status="expired")
    )
    assert "no report by" in as_text(valid(blocks))


def test_a_retry_notice_says_when_and_why_then_that_it_ran() -> None:
    due = datetime(2026, 11, 30, 13, 0)
    waiting = pause("retry", tool_name="call_api", due_at=due, reason="rate limited <!channel>")
    _, blocks = pause_blocks.render_card(waiting)
    valid(blocks)
    shown = as_text(blocks)
    epoch = int(due.replace(tzinfo=UTC).timestamp())
    assert f"Retrying at <!date^{epoch}^" in shown and "Retry of `call_api`" in shown
    assert "rate limited &lt;!channel&gt;" in shown
    _, blocks = pause_blocks.render_card(
        pause("retry", tool_name="call_api", due_at=due, reason="x", status="due")
    )
    assert ":repeat: Retried <!date^" in as_text(valid(blocks))


def test_approvals_lists_questions_marked_with_their_choices_and_waits() -> None:
    rows = [
        pause("question", id="01Q"),
        pause("question", id="01FREE", arguments={"question": "Why?"}),
        pause("callback", id="01CB", tool_name="start_deploy", reason="deploy of shop"),
        pause("retry", id="01RT", tool_name="call_api", due_at=NOW, reason="rate limited"),
    ]
    _, blocks = render_approvals_page(
        rows, view="mine", page=0, total=4, page_size=10, now=NOW, permalinks={}
    )
    valid(blocks)
    shown = as_text(blocks)
    assert "*Question* for <@U0REQUESTER>: Restart which region?" in shown
    assert "Choices: eu · us" in shown
    assert "*Waiting* for deploy of shop" in shown and "*Retry* of `call_api`" in shown
    actions = [e["action_id"] for e in elements(blocks)]
    assert actions == ["question_choice:0", "question_choice:1", "question_answer"]


def test_waiting_text_names_every_kind_of_pause() -> None:
    assert pause_blocks.waiting_text([pause("question")]) == (
        ":raised_hand: Paused: 1 question needs an answer."
    )
    approval = pause("approval", tool_name="restart_service", arguments={})
    assert "1 call needs a decision" in pause_blocks.waiting_text([approval])


# -- payload shapes of the new actions -----------------------------------------------------


def _click(action: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": "U0X"},
        "trigger_id": "t",
        "response_url": "https://hooks.example/x",
        "actions": [action],
    }


@pytest.mark.parametrize(
    "action",
    [
        {"action_id": "question_choice:0", "value": "01Q"},
        {"action_id": "question_choice:0", "value": '{"id": "01Q", "choice": "0"}'},
        {"action_id": "question_choice:0", "value": '{"id": "01Q", "choice": true}'},
        {"action_id": "question_choice:0", "value": '{"id": 1, "choice": 0}'},
        {"action_id": "question_choice:0"},
        {"action_id": "question_select"},
        {"action_id": "question_select", "selected_option": "x"},
        {"action_id": "question_select", "selected_option": {"value": 3}},
        {"action_id": "question_select", "selected_option": {"value": "[]"}},
        {"action_id": "question_answer"},
        {"action_id": "question_choice:0", "value": "[" * 100_000},
        {"action_id": "question_select", "selected_option": {"value": "[" * 100_000}},
    ],
)
def test_malformed_question_actions_are_refused(action: dict[str, Any]) -> None:
    assert problem(_click(action)) is not None


def test_well_formed_question_actions_pass() -> None:
    value = pause_blocks.choice_value(pause("question"), 1)
    assert problem(_click({"action_id": "question_choice:1", "value": value})) is None
    selected = {"action_id": "question_select", "selected_option": {"value": value}}
    assert problem(_click(selected)) is None
    assert problem(_click({"action_id": "question_answer", "value": "01Q"})) is None


def test_a_question_click_logs_the_question_id_as_an_approval_click_does() -> None:
    """Log lines of a click carry the approval it is about (handlers/middleware/observe.py); a
    question's buttons and menu carry its id inside the choice's value."""
    value = pause_blocks.choice_value(pause("question"), 1)
    clicks = [
        {"action_id": "question_choice:1", "value": value},
        {"action_id": "question_select", "selected_option": {"value": value}},
        {"action_id": "question_answer", "value": "01QUESTION"},
    ]
    for action in clicks:
        assert request_ids(_click(action))["approval_id"] == "01QUESTION", action
    not_ours = {"action_id": "question_select", "selected_option": "x"}
    assert request_ids(_click(not_ours))["approval_id"] is None


@pytest.mark.parametrize(
    "values",
    [
        {"question_answer": []},
        {"question_answer": {"answer": "text"}},
        {"question_answer": {"answer": {"value": 5}}},
    ],
)
def test_malformed_answer_submissions_are_refused(values: Any) -> None:
    body = {
        "type": "view_submission",
        "user": {"id": "U0X"},
        "trigger_id": "t",
        "view": {
            "type": "modal",
            "callback_id": pause_blocks.ANSWER_MODAL,
            "state": {"values": values},
        },
    }
    assert problem(body) is not None
    body["view"]["state"] = {"values": {"question_answer": {"answer": {"value": "eu"}}}}
    assert problem(body) is None


@pytest.mark.parametrize(
    ("fields", "first"),
    [
        ({"status": "pending"}, "*Approval needed* for `restart_service`"),
        (
            {"status": "pending", "min_approvals": 2, "approved_by": ["U0APPROVER1"]},
            "*Approval needed* for `restart_service` · *1 of 2 approvals*",
        ),
        ({"status": "executed", "decided_by": "U0BO"}, "*Approved:* `restart_service`"),
        ({"status": "unknown", "decided_by": "U0BO"}, "*Approved:* `restart_service`"),
        ({"status": "denied", "decided_by": "U0BO"}, "*Denied:* `restart_service`"),
        ({"status": "expired"}, "*Expired:* `restart_service`"),
        ({"status": "cancelled", "result": "stopped"}, "*Cancelled:* `restart_service`"),
    ],
)
def test_a_cards_first_block_says_its_state_and_its_ids_are_a_context_line(
    fields: dict[str, Any], first: str
) -> None:
    """People scanning a channel see which cards are still open from their first line."""
    approval = pause(
        "approval",
        tool_name="restart_service",
        arguments={"service": "web"},
        approvers=["U0BO"],
        decided_at=NOW if fields.get("decided_by") else None,
        **fields,
    )
    text, blocks = pause_blocks.render_card(approval)
    valid(blocks)
    assert blocks[0]["text"]["text"] == first
    assert text.startswith(first.split("*")[1].rstrip(":"))  # the notification says it too
    assert blocks[-1]["type"] == "context" and "01QUESTION" in as_text(blocks[-1:])
    assert not [t for t in _texts(blocks[:-1]) if "01QUESTION" in t], "ids: the context line"


def _texts(node: Any) -> list[str]:
    """Every text a person reads in ``node`` (not block ids or button values)."""
    if isinstance(node, list):
        return [t for item in node for t in _texts(item)]
    if not isinstance(node, dict):
        return []
    found = [node["text"]] if isinstance(node.get("text"), str) else []
    return found + [t for k, v in node.items() if k not in ("value", "block_id") for t in _texts(v)]


def test_a_granted_call_says_it_ran_under_the_grant_and_an_edit_says_what_ran() -> None:
    granted = pause(
        "approval",
        tool_name="restart_service",
        arguments={"service": "web"},
        status="executed",
        decided_by="U0BO",
        decided_at=NOW,
        grant_id="grt_1",
        grant_until=NOW + timedelta(hours=1),
    )
    line = pause_blocks.outcome_text(granted)
    assert "ran under <@U0BO>'s standing grant (until <!date^" in line
    assert "Approved" not in line, "nobody clicked for it"
    edited = pause(
        "approval",
        tool_name="scale_service",
        arguments={"replicas": 40},
        status="executed",
        decided_by="U0BO",
        decided_at=NOW,
        edited_arguments={"replicas": 4},
        edited_by="U0BO",
        edited_at=NOW,
    )
    _, blocks = pause_blocks.render_history([edited], "C0OPS")
    shown = as_text(blocks)
    assert "replicas=4" in shown and "replicas 40 → 4, edited by <@U0BO>" in shown
