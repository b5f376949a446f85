"""Requests Slack would never send: unsigned, badly signed, or signed but malformed.

Unsigned or badly signed requests get 401 before the body is even decoded; signed malformed
ones get 2xx or 400 and change nothing; nothing gets a 5xx or a traceback.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handlers import blocks
from handlers import blocks as pause_blocks
from storage.repository import Mode, Repository, Tx
from tests.conftest import make_config
from tests.support.scripted_model import ScriptedModel
from tests.support.slack_harness import CHANNEL, Harness, running_bot

TABLES = ("runs", "approvals", "approval_approvers", "audit_events", "processed_events")
JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"
OUTSIDER = "U0OUTSIDER"
REQUESTER = "U0REQUESTER"


def ask(question: str, choices: list[str] | None = None) -> str:
    arguments: dict[str, Any] = {"question": question}
    if choices is not None:
        arguments["choices"] = choices
    return json.dumps({"tool_calls": [{"name": "ask_user", "arguments": arguments}]})


async def snapshot(repo: Repository) -> dict[str, list[Any]]:
    """Every row of every table: "nothing changed" means this is equal before and after."""

    def body(tx: Tx) -> dict[str, list[Any]]:
        return {t: [tuple(r) for r in tx.all(f"SELECT * FROM {t} ORDER BY 1")] for t in TABLES}

    return await repo.database.run(body, Mode.READ, inline=False)


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as harness:
        # One pending approval, so that a click that got through would change something.
        prompt = json.dumps(
            {"tool_calls": [{"name": "restart_service", "arguments": {"service": "db"}}]}
        )
        await harness.mention("U0REQUESTER", prompt)
        yield harness


async def post_unsigned(harness: Harness, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    assert harness.server.bot_url is not None
    async with (
        aiohttp.ClientSession() as session,
        session.post(harness.server.bot_url, data=body, headers=headers) as response,
    ):
        return response.status, await response.text()


UNSIGNED_BODIES = [
    (b"{bad", JSON_TYPE),
    (b"[1]", JSON_TYPE),
    (b'"s"', JSON_TYPE),
    (b"payload=%7Bbad", FORM_TYPE),
    (b"\xff\xfe{\x80", JSON_TYPE),
]


@pytest.mark.parametrize(("body", "content_type"), UNSIGNED_BODIES)
async def test_unsigned_requests_get_401_before_any_parsing(
    slack: Harness, repo: Repository, body: bytes, content_type: str
) -> None:
    before = await snapshot(repo)
    status, text = await post_unsigned(slack, body, {"Content-Type": content_type})
    assert status == 401 and "Traceback" not in text
    # A signature, but over nothing sensible, or with a timestamp that is not a number.
    forged = {"Content-Type": content_type, "X-Slack-Signature": "v0=00"}
    for timestamp in (str(int(time.time())), "soon", "١٢٣", "-1", ""):
        status, text = await post_unsigned(
            slack, body, {**forged, "X-Slack-Request-Timestamp": timestamp}
        )
        assert status == 401 and "Traceback" not in text
    await slack.settle()
    assert await snapshot(repo) == before


async def test_a_non_numeric_timestamp_is_refused_even_when_signed(slack: Harness) -> None:
    body = json.dumps(slack.server.mention_payload("U0REQUESTER", CHANNEL, "hi")).encode()
    reply = await slack.server.send_raw(body, JSON_TYPE, timestamp="soon")
    assert reply.status == 401


@pytest.mark.parametrize(("body", "content_type"), UNSIGNED_BODIES)
async def test_signed_garbage_gets_400(
    slack: Harness, repo: Repository, body: bytes, content_type: str
) -> None:
    before = await snapshot(repo)
    reply = await slack.server.send_raw(body, content_type)
    assert reply.status == 400 and "malformed request" in reply.body
    await slack.settle()
    assert await snapshot(repo) == before


def _malformed_payloads(server: Any, approval_id: str, view_id: str) -> dict[str, Any]:
    mention = server.mention_payload("U0REQUESTER", CHANNEL, "<@U0BOT> hi")
    event_as_string = {**mention, "event": "app_mention"}
    text_null = copy.deepcopy(mention)
    text_null["event"]["text"] = None
    actions_null = server.click_payload("U0APPROVER1", CHANNEL, blocks.APPROVE, approval_id)
    actions_null["actions"] = None
    submission = server.submission_payload("U0APPROVER1", view_id, {})
    metadata_number = copy.deepcopy(submission)
    metadata_number["view"]["private_metadata"] = 12
    values_list = copy.deepcopy(submission)
    values_list["view"]["state"] = {"values": [1]}
    no_user = server.command_fields("U0APPROVER1", CHANNEL)
    del no_user["user_id"]
    return {
        "event as a string": (json.dumps(event_as_string), JSON_TYPE),
        "text: null": (json.dumps(text_null), JSON_TYPE),
        "actions: null": (urlencode({"payload": json.dumps(actions_null)}), FORM_TYPE),
        "private_metadata a number": (
            urlencode({"payload": json.dumps(metadata_number)}),
            FORM_TYPE,
        ),
        "state.values a list": (urlencode({"payload": json.dumps(values_list)}), FORM_TYPE),
        "/approvals without user_id": (urlencode(no_user), FORM_TYPE),
    }


async def _open_deny_modal(slack: Harness) -> tuple[str, str]:
    [card] = slack.cards()
    [approval_id] = [e["value"] for _, e in card.buttons() if e["action_id"] == blocks.DENY]
    await slack.server.click("U0APPROVER1", card, blocks.DENY)
    [view_id] = list(slack.server.views)
    return approval_id, view_id


async def test_signed_malformed_payloads_get_400_and_change_nothing(
    slack: Harness, repo: Repository
) -> None:
    approval_id, view_id = await _open_deny_modal(slack)
    before = await snapshot(repo)
    for name, (body, content_type) in _malformed_payloads(
        slack.server, approval_id, view_id
    ).items():
        reply = await slack.server.send_raw(body.encode(), content_type)
        assert reply.status == 400, (name, reply.status, reply.body)
        assert "Traceback" not in reply.body
    # Well-formed, but with a private_metadata that is not ours: a clear refusal, no change.
    submission = slack.server.submission_payload("U0APPROVER1", view_id, {})
    submission["view"]["private_metadata"] = "{not json"
    reply = await slack.server.send_raw(
        urlencode({"payload": json.dumps(submission)}).encode(), FORM_TYPE
    )
    assert reply.status == 200
    await slack.settle()
    assert await snapshot(repo) == before
    assert len(ScriptedModel.seen) == 1, "only the fixture's own mention reached the model"


async def test_a_deny_form_whose_state_is_null_or_odd_is_answered_not_a_500(
    slack: Harness, repo: Repository
) -> None:
    """``view.state`` may be null and its values of any shape: the form's reason is then
    absent, and an outsider's submission still changes nothing (a 500 before)."""
    _approval_id, view_id = await _open_deny_modal(slack)
    before = await snapshot(repo)
    for state in (None, {"values": {"deny_reason": None}}, {"values": {"deny_reason": []}}):
        submission = slack.server.submission_payload("U0APPROVER1", view_id, {})
        submission["user"] = {**submission["user"], "id": OUTSIDER}
        submission["view"]["state"] = state
        reply = await slack.server.send_raw(
            urlencode({"payload": json.dumps(submission)}).encode(), FORM_TYPE
        )
        assert reply.status < 500, (state, reply.status, reply.body)
    await slack.settle()
    assert await snapshot(repo) == before


# -- the property: any signed variation of any payload we accept ----------------------------

DELETE = object()
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document a mutation can hit."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += paths(child, (*prefix, index))
    return found


def mutate(document: Any, path: tuple[Any, ...], replacement: Any) -> None:
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    if replacement is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement


KINDS = (
    "app_mention",
    "subteam_members_changed",
    "subteam_updated",
    *(
        f"block_actions:{a}"
        for a in (blocks.APPROVE, blocks.DENY, blocks.SHOW_ARGUMENTS, blocks.PAGE)
    ),
    # A question's answers: a choice button, the menu, the Answer button and its form.
    "block_actions:question_choice:1",
    "block_actions:question_select",
    f"block_actions:{pause_blocks.ANSWER}",
    "view_submission",
    "view_submission:answer",
    "slash_command",
    "url_verification",
)


async def base_payload(slack: Harness, kind: str, approval_id: str, view_id: str) -> Any:
    """A payload of ``kind`` that, left as it is, would change nothing: clicks and commands
    by an outsider, a mention whose event id was already handled, a group change."""
    server = slack.server
    if kind == "app_mention":
        return copy.deepcopy(slack.first_mention)  # type: ignore[attr-defined]
    if kind == "subteam_members_changed":
        return server.members_changed_payload("S0ONCALL", ["U0NEW"], [])
    if kind == "subteam_updated":
        return server.group_updated_payload("S0ONCALL")
    if kind.startswith("block_actions:question_"):
        return await question_payload(slack, kind.partition(":")[2])
    if kind.startswith("block_actions:"):
        action_id = kind.partition(":")[2]
        value = json.dumps({"view": "all", "page": 0}) if action_id == blocks.PAGE else approval_id
        return server.click_payload(OUTSIDER, CHANNEL, action_id, value)
    if kind == "view_submission:answer":
        # The requester's answer form, submitted by an outsider: refused, nothing changes.
        typed = {"type": "plain_text_input", "value": "eu"}
        payload = server.submission_payload(
            REQUESTER, slack.answer_view_id, {pause_blocks.ANSWER_BLOCK: {"answer": typed}}
        )
        payload["user"] = {**payload["user"], "id": OUTSIDER}
        return payload
    if kind == "view_submission":
        payload = server.submission_payload("U0APPROVER1", view_id, {})
        payload["user"] = {**payload["user"], "id": OUTSIDER}
        return payload
    if kind == "slash_command":
        return server.command_fields(OUTSIDER, CHANNEL, "all")
    return {"token": "x", "challenge": "c4llenge", "type": "url_verification"}


def question_cards(slack: Harness) -> dict[str, Any]:
    """The pending question cards of the fixture: by what answers them."""
    cards = {}
    for message in slack.server.messages:
        if message.is_ephemeral:  # an /approvals list an earlier example asked for
            continue
        for _, element in message.buttons():
            if str(element.get("action_id", "")).startswith("question_"):
                cards[element["action_id"]] = message
    return cards


async def question_payload(slack: Harness, action_id: str) -> Any:
    """An outsider's answer to one of the fixture's questions, as Slack would send it."""
    card = question_cards(slack)[action_id]
    server = slack.server
    if action_id == pause_blocks.SELECT:
        return server._prepare_select(OUTSIDER, card, action_id, "r4")[0]
    return server._prepare_click(OUTSIDER, card, action_id, None)[0]


def encode(kind: str, payload: Any) -> tuple[bytes, str]:
    if kind == "slash_command":
        fields = payload if isinstance(payload, dict) else {"payload": json.dumps(payload)}
        return urlencode({str(k): str(v) for k, v in fields.items()}).encode(), FORM_TYPE
    if kind.startswith(("block_actions", "view_submission")):
        return urlencode({"payload": json.dumps(payload)}).encode(), FORM_TYPE
    return json.dumps(payload).encode(), JSON_TYPE


@st.composite
def variations(draw: st.DrawFn) -> tuple[str, list[tuple[int, Any]]]:
    kind = draw(st.sampled_from(KINDS))
    # Path choices are indexes into paths(base), resolved once the base exists.
    changes = draw(
        st.lists(
            st.tuples(st.integers(min_value=0, max_value=10_000), json_values | st.just(DELETE)),
            min_size=1,
            max_size=3,
        )
    )
    return kind, changes


@pytest.fixture
async def prepared(slack: Harness, repo: Repository) -> AsyncIterator[tuple[Harness, str, str]]:
    first = await slack.server.mention("U0REQUESTER", CHANNEL, "<@U0BOT> once")
    await slack.settle()
    slack.first_mention = first.sent  # type: ignore[attr-defined]
    approval_id, view_id = await _open_deny_modal(slack)
    # Three questions, one for each way of answering, and the requester's open answer form.
    await slack.mention(REQUESTER, ask("Which region?", ["eu", "us"]))
    await slack.mention(REQUESTER, ask("Which one?", [f"r{i}" for i in range(7)]))
    await slack.mention(REQUESTER, ask("Why?"))
    free_text = question_cards(slack)[pause_blocks.ANSWER]
    await slack.server.click(REQUESTER, free_text, pause_blocks.ANSWER)
    [answer_view] = [v for v in slack.server.views.values() if v.user == REQUESTER]
    slack.answer_view_id = answer_view.id  # type: ignore[attr-defined]
    yield slack, approval_id, view_id


QUESTION_KINDS = [k for k in KINDS if "question_" in k or k == "view_submission:answer"]


async def test_outsiders_answers_change_nothing_and_malformed_ones_get_400(
    prepared: tuple[Harness, str, str], repo: Repository
) -> None:
    """The property's starting points for questions, checked as they are: well formed, an
    outsider's, refused politely; and answers whose values are not ours: 400."""
    slack, approval_id, view_id = prepared
    before = await snapshot(repo)
    seen = len(ScriptedModel.seen)
    for kind in QUESTION_KINDS:
        payload = await base_payload(slack, kind, approval_id, view_id)
        reply = await slack.server.send_raw(*encode(kind, payload))
        assert reply.status == 200, (kind, reply.status, reply.body)
    await slack.settle()
    refusals = [t for t in slack.ephemeral_texts(OUTSIDER) if "can answer" in t]
    assert len(refusals) == len(QUESTION_KINDS), slack.ephemeral_texts(OUTSIDER)
    choice = await base_payload(slack, "block_actions:question_choice:1", approval_id, view_id)
    choice["actions"][0]["value"] = json.dumps({"id": approval_id, "choice": "us"})
    menu = await base_payload(slack, "block_actions:question_select", approval_id, view_id)
    menu["actions"][0]["selected_option"] = {"value": 7}
    typed = await base_payload(slack, "view_submission:answer", approval_id, view_id)
    typed["view"]["state"]["values"][pause_blocks.ANSWER_BLOCK]["answer"] = "eu"
    for kind, payload in (
        ("block_actions", choice),
        ("block_actions", menu),
        ("view_submission", typed),
    ):
        reply = await slack.server.send_raw(*encode(kind, payload))
        assert reply.status == 400 and "malformed request" in reply.body, reply.body
    await slack.settle()
    assert await snapshot(repo) == before
    assert len(ScriptedModel.seen) == seen


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(variation=variations())
async def test_no_signed_payload_gets_a_5xx_or_changes_anything(
    prepared: tuple[Harness, str, str], repo: Repository, variation: Any
) -> None:
    slack, approval_id, view_id = prepared
    kind, changes = variation
    payload = await base_payload(slack, kind, approval_id, view_id)
    for index, replacement in changes:
        places = paths(payload)
        if kind == "app_mention":  # a new event id would be a new, valid request
            places = [p for p in places if p != ("event_id",)]
        if not places:
            break
        path = places[index % len(places)]
        if kind == "slash_command" and replacement is not DELETE:
            replacement = json.dumps(replacement)  # form fields are strings
        mutate(payload, path, replacement if replacement is DELETE else copy.deepcopy(replacement))
    before = await snapshot(repo)
    seen = len(ScriptedModel.seen)
    body, content_type = encode(kind, payload)
    reply = await slack.server.send_raw(body, content_type)
    assert reply.status < 500, (kind, changes, reply.status, reply.body)
    await slack.settle()
    assert await snapshot(repo) == before, (kind, changes)
    assert len(ScriptedModel.seen) == seen


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()))
async def test_any_signed_body_gets_an_answer_below_500(
    slack: Harness, repo: Repository, body: bytes
) -> None:
    before = await snapshot(repo)
    for content_type in (JSON_TYPE, FORM_TYPE):
        reply = await slack.server.send_raw(body, content_type)
        assert reply.status < 500, (body, reply.status, reply.body)
    await slack.settle()
    assert await snapshot(repo) == before


async def test_deeply_nested_private_metadata_is_refused_not_a_500(
    slack: Harness, repo: Repository
) -> None:
    """json.loads raises RecursionError, not ValueError, on deep nesting: a value sent back
    by Slack (private_metadata, a button's value) of thousands of brackets was a 500."""
    _approval_id, view_id = await _open_deny_modal(slack)
    before = await snapshot(repo)
    submission = slack.server.submission_payload("U0APPROVER1", view_id, {})
    submission["view"]["private_metadata"] = "[" * 5000
    reply = await slack.server.send_raw(
        urlencode({"payload": json.dumps(submission)}).encode(), FORM_TYPE
    )
    assert reply.status == 200, (reply.status, reply.body)
    await slack.settle()
    assert await snapshot(repo) == before
