"""What a hostile Slack user can put in the values Slack sends back to us.

Button values, modal metadata and slash command text come back from Slack as we sent them,
unless someone crafts them: each bad one gets a clear answer, changes nothing and never a 5xx.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
from yarl import URL

from handlers import blocks
from storage.repository import Repository
from tests.conftest import make_config
from tests.handlers.test_slack_malformed import FORM_TYPE as FORM
from tests.handlers.test_slack_malformed import snapshot
from tests.support import ops_tools
from tests.support.slack_harness import CHANNEL, Harness, has_buttons, running_bot


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    async with running_bot(make_config(), repo) as harness:
        prompt = json.dumps(
            {"tool_calls": [{"name": "restart_service", "arguments": {"service": "db"}}]}
        )
        await harness.mention("U0REQUESTER", prompt)
        yield harness


@pytest.mark.parametrize("page", [10**30, 2**63, 2**62, -(2**63), 10**6])
async def test_a_tampered_page_number_gets_the_first_page(
    slack: Harness, page: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A page number past any real list (here: past the database's integers) is a bad value."""
    before = await snapshot(slack.repo)
    answers_before = len(slack.server.responses)
    value = json.dumps({"view": "approve", "page": page})
    with caplog.at_level(logging.WARNING):
        reply = await slack.server.click_raw(
            "U0APPROVER1", CHANNEL, blocks.PAGE, value, is_ephemeral=True
        )
        await slack.settle()
    assert reply.status == 200
    [answer] = slack.server.responses[answers_before:]
    assert "restart_service" in json.dumps(answer.body), "the first page, with the approval"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert await snapshot(slack.repo) == before


@pytest.mark.parametrize("call_id", ["c" * 128, "call\x00<!channel>\ud800", ""])
async def test_a_tool_call_id_crafted_by_the_model_is_gated_the_same(
    repo: Repository, call_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    ops_tools.EXECUTED.clear()
    async with running_bot(make_config(), repo) as slack:
        with caplog.at_level(logging.WARNING):
            await slack.mention("U0REQUESTER", restart_with_call_id(call_id))
            [card] = slack.cards()
            await slack.server.click("U0APPROVER1", card, blocks.APPROVE)
            await slack.settle()
        assert ops_tools.EXECUTED == [("restart_service", {"service": "db"})]
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_tool_call_id_too_long_to_store_stops_the_run_the_same_on_both_databases(
    repo: Repository,
) -> None:
    """PostgreSQL refused a 300-character id mid-transaction (a raw DBAPIError in the
    thread) where SQLite kept it: now both refuse it up front, with the same message."""
    ops_tools.EXECUTED.clear()
    async with running_bot(make_config(), repo) as slack:
        reply = await slack.mention("U0REQUESTER", restart_with_call_id("c" * 300))
        assert slack.cards() == []
        said = " ".join(m.text for m in slack.thread_of(reply))
        assert "tool call id is 300 characters long; at most 128 can be stored" in said
        assert "DBAPIError" not in said
    assert ops_tools.EXECUTED == []


def restart_with_call_id(call_id: str) -> str:
    call = {"name": "restart_service", "arguments": {"service": "db"}, "id": call_id}
    return json.dumps({"tool_calls": [call]})


SPOOF = {
    # Closes the card's code block, shows a fake outcome in bold, reopens it.
    "service": "web```\n*:white_check_mark: Approved by the security team*\n```",
    # Right-to-left override and a zero-width space: what is shown is not what runs.
    "target": "payments\u202e\u200bgnirts",
    "note": "line\u2028separator",
}


async def test_tool_arguments_cannot_restyle_the_card_or_hide_characters(repo: Repository) -> None:
    prompt = json.dumps({"tool_calls": [{"name": "restart_service", "arguments": SPOOF}]})
    async with running_bot(make_config(), repo) as slack:
        await slack.mention("U0REQUESTER", prompt)
        [card] = slack.cards()
        await slack.server.slash_command("U0APPROVER1", CHANNEL, text="")
        [listing] = [m for m in slack.server.ephemerals_for("U0APPROVER1") if m.blocks]
        [opened_args] = [
            block["text"]["text"]
            for block in card.blocks
            if block.get("block_id") == "approval_arguments"
        ]
        listed = " ".join(
            b["text"]["text"] for b in listing.blocks if "restart_service" in str(b.get("text"))
        )
        await slack.settle()
    shown = opened_args.removeprefix("```").removesuffix("```")
    assert "`" not in shown, "no backtick can close the code block early"
    assert listed.count("`") == 4, "only the code spans of the tool name and the arguments"
    for invisible in ("\u202e", "\u200b", "\u2028"):
        assert invisible not in opened_args and invisible not in listed
    # Shown as JSON escapes, so what is shown still reads back as exactly what will run.
    assert json.loads(shown) == SPOOF


async def test_a_deny_reason_of_ampersands_still_settles_the_card(repo: Repository) -> None:
    """1000 '&' fit the form, but escaped (5 characters each) they broke Slack's 3000-character
    section limit: the card kept its buttons although the call was denied."""
    prompt = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": "db"}}]}
    )
    async with running_bot(make_config(), repo) as slack:
        await slack.mention("U0REQUESTER", prompt)
        [card] = slack.cards()
        await slack.server.click("U0APPROVER1", card, blocks.DENY)
        await slack.settle()
        [opened] = slack.server.views.values()
        reason = {"type": "plain_text_input", "value": "&" * 1000}
        await slack.server.submit_view(
            "U0APPROVER1", opened.id, {blocks.REASON_BLOCK: {blocks.REASON_INPUT: reason}}
        )
        await slack.settle()
        [card] = slack.cards()
        assert not has_buttons(card)
        assert "Denied" in json.dumps(card.blocks)
        assert not [c for c in slack.server.calls_to("chat.update") if not c.ok]


@pytest.mark.parametrize("char", ["&", "<", "`", "\u202e"])
async def test_arguments_that_grow_when_escaped_still_get_a_card(
    repo: Repository, char: str
) -> None:
    """1200 characters of arguments were cut before escaping: 1200 '&' became 6000 and Slack
    refused the card, so nobody could ever click it."""
    prompt = json.dumps(
        {"tool_calls": [{"name": "restart_service", "arguments": {"service": char * 2000}}]}
    )
    async with running_bot(make_config(), repo) as slack:
        await slack.mention("U0REQUESTER", prompt)
        [card] = slack.cards()
        assert has_buttons(card)
        await slack.server.click("U0APPROVER1", card, blocks.SHOW_ARGUMENTS)
        await slack.settle()
        assert not [c for c in slack.server.calls if not c.ok]


def test_argument_pieces_and_cuts_never_split_an_escape() -> None:
    text = "a&<>" * 2000
    pieces = blocks.escaped_pieces(text, 2994)
    assert "".join(pieces) == blocks.escape(text)
    assert all(
        len(p) <= 2994 and not p.endswith(("&", "&a", "&am", "&amp", "&l", "&lt")) for p in pieces
    )
    cut = blocks.escaped_within(text, 1000)
    assert len(cut) <= 1000 and blocks.escape(text).startswith(cut.removesuffix("…"))


@pytest.mark.parametrize("signature", [b"v0=\xff\xfe", b"v0=\xc3\xa9" + b"0" * 62])
async def test_a_signature_header_that_is_not_ascii_gets_401(
    slack: Harness, signature: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """hmac.compare_digest raises on non-ASCII strings: that was a 500 with a traceback."""
    assert slack.server.bot_url is not None
    url = URL(slack.server.bot_url)
    before = await snapshot(slack.repo)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    body = b"{}"
    writer.write(
        b"POST %s HTTP/1.1\r\nHost: bot\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nX-Slack-Request-Timestamp: %d\r\nX-Slack-Signature: %s\r\n"
        b"Connection: close\r\n\r\n%s"
        % (url.path.encode(), len(body), int(time.time()), signature, body)
    )
    with caplog.at_level(logging.ERROR):
        status_line = (await reader.read()).split(b"\r\n")[0]
    writer.close()
    assert status_line.split()[1] == b"401"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert await snapshot(slack.repo) == before


async def test_a_safe_call_sharing_a_gated_calls_id_stops_the_run_clearly(
    repo: Repository,
) -> None:
    """The safe call's result (id "call_0") passed for the gated call's (also "call_0"):
    after approval the gated call never ran, and its approval stayed "approved" for ever."""
    ops_tools.EXECUTED.clear()
    calls = [
        {"name": "restart_service", "arguments": {"service": "db"}, "id": "call_0"},
        {"name": "get_status", "arguments": {"service": "db"}, "id": "call_0"},
    ]
    async with running_bot(make_config(), repo) as slack:
        reply = await slack.mention("U0REQUESTER", json.dumps({"tool_calls": calls}))
        said = " ".join(m.text for m in slack.thread_of(reply))
        assert slack.cards() == [], "no approval that could never be carried out"
        listed = await slack.server.slash_command("U0REQUESTER", CHANNEL, text="mine")
    assert "gave two tool calls the same id 'call_0'" in said, said
    assert "None of your requests are waiting" in json.dumps(listed.json())
    assert ops_tools.EXECUTED == [("get_status", {"service": "db"})]


async def test_two_gated_calls_with_one_id_stop_the_run_with_a_clear_reason(
    repo: Repository,
) -> None:
    """A raw IntegrityError (a UNIQUE constraint) stopped the run; now the reason is clear."""
    ops_tools.EXECUTED.clear()
    calls = [
        {"name": "restart_service", "arguments": {"service": f"s{i}"}, "id": "call_0"}
        for i in range(2)
    ]
    async with running_bot(make_config(), repo) as slack:
        reply = await slack.mention("U0REQUESTER", json.dumps({"tool_calls": calls}))
        said = " ".join(m.text for m in slack.thread_of(reply))
    assert "gave two tool calls the same id 'call_0'" in said, said
    assert "IntegrityError" not in said
    assert ops_tools.EXECUTED == []


def test_a_run_stopped_by_a_database_error_says_one_line_not_its_sql() -> None:
    from sqlalchemy.exc import IntegrityError

    from bot.engine import describe_failure

    error = IntegrityError(
        "INSERT INTO approvals VALUES (:arguments)",
        {"arguments": "what the requester typed"},
        Exception("UNIQUE constraint failed"),
    )
    said = describe_failure(error, 10)
    assert said == (
        "Stopped by an error: IntegrityError: (builtins.Exception) UNIQUE constraint failed"
    )


async def test_a_deny_form_sent_back_naming_another_approval_decides_nothing(
    repo: Repository,
) -> None:
    """private_metadata comes back from Slack as we wrote it, unless someone forges it: the
    decision is still checked against the person and the approval it names."""
    ops_tools.EXECUTED.clear()
    calls = [
        {"name": "restart_service", "arguments": {"service": "db"}},
        {"name": "broken_tool", "arguments": {"service": "db"}},  # only U0APPROVER1 decides
    ]
    async with running_bot(make_config(), repo) as slack:
        await slack.mention("U0REQUESTER", json.dumps({"tool_calls": calls}))
        restart, broken = slack.cards()
        await slack.server.click("U0APPROVER2", restart, blocks.DENY)
        await slack.settle()
        [opened] = slack.server.views.values()
        payload = slack.server.submission_payload(
            "U0APPROVER2",
            opened.id,
            {blocks.REASON_BLOCK: {blocks.REASON_INPUT: {"type": "plain_text_input"}}},
        )
        before = await snapshot(slack.repo)
        [broken_id] = re.findall(r"apr_[0-9A-Z]+", json.dumps(broken.blocks))[:1]
        for metadata in (
            {"approval_id": broken_id, "channel": "", "team": "", "response_url": ""},
            {"approval_id": broken_id, "channel": CHANNEL, "team": "T0OTHER"},
            {"approval_id": broken_id},
        ):
            payload["view"]["private_metadata"] = json.dumps(metadata)
            reply = await slack.server.send_raw(
                urlencode({"payload": json.dumps(payload)}).encode(), FORM
            )
            assert reply.status == 200
            await slack.settle()
        assert await snapshot(slack.repo) == before
        assert ops_tools.EXECUTED == []
