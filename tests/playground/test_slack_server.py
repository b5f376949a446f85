"""The Slack double speaks Slack's wire format: checked with slack_sdk's own clients.

Every test drives the server with the real slack_sdk pieces the bot uses (AsyncWebClient,
the rate-limit retry handler, SignatureVerifier, the aiohttp SocketModeClient), so a drift
between this double and what slack_sdk expects from Slack fails here, not in the bot's tests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond, AsyncSay
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from playground.slack_server import Message, SlackServer

SECRET = "test-signing-secret"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "slack"  # real Slack request bodies
CARD_BLOCKS = [
    {"type": "section", "block_id": "approval_summary", "text": {"type": "mrkdwn", "text": "hi"}},
    {
        "type": "actions",
        "block_id": "approval:apr_0001",
        "elements": [
            {
                "type": "button",
                "action_id": "approval_approve",
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
                "value": "apr_0001",
            },
            {
                "type": "button",
                "action_id": "approval_deny",
                "style": "danger",
                "text": {"type": "plain_text", "text": "Deny"},
                "value": "apr_0001",
            },
        ],
    },
]


@dataclass
class Received:
    """One request the fake bot received."""

    headers: dict[str, str]
    body: bytes


@dataclass
class FakeBot:
    """A tiny aiohttp receiver standing in for the bot: records requests, answers ``reply``."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    reply: Callable[[Received], web.Response] = lambda _: web.Response(status=200)

    async def handle(self, request: web.Request) -> web.Response:
        got = Received(dict(request.headers), await request.read())
        self.received.append(got)
        return self.reply(got)

    def form_payload(self, index: int = -1) -> dict[str, Any]:
        return json.loads(dict(parse_qsl(self.received[index].body.decode()))["payload"])


def load_fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def key_shape(value: Any) -> Any:
    """Nested key structure of a JSON value (dicts only), to compare payload shapes."""
    if isinstance(value, dict):
        return {k: key_shape(v) for k, v in value.items()}
    return None


@pytest.fixture
async def server() -> AsyncIterator[SlackServer]:
    async with SlackServer(
        signing_secret=SECRET,
        users={"U0REQUESTER": "requester", "U0APPROVER1": "approver.one"},
        usergroups={"S0OPS": ["U0APPROVER1", "U0APPROVER2"]},
        channels={"C0OPS": "ops"},
    ) as slack:
        yield slack


@pytest.fixture
def client(server: SlackServer) -> AsyncWebClient:
    return AsyncWebClient(token=server.bot_token, base_url=server.api_url)


@pytest.fixture
async def bot(server: SlackServer) -> AsyncIterator[FakeBot]:
    fake = FakeBot()
    app = web.Application()
    app.router.add_post("/slack/events", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    fake.url = server.bot_url = f"http://{host}:{port}/slack/events"
    yield fake
    await runner.cleanup()


async def post_card(client: AsyncWebClient, thread_ts: str | None = None) -> str:
    resp = await client.chat_postMessage(
        channel="C0OPS", text="Approval needed", blocks=CARD_BLOCKS, thread_ts=thread_ts
    )
    return str(resp["ts"])


# -- Web API ------------------------------------------------------------------------------------


async def test_post_update_ephemeral_permalink_round_trip(
    server: SlackServer, client: AsyncWebClient
) -> None:
    parent = server.post_user_message("U0REQUESTER", "C0OPS", "hello")
    posted = await client.chat_postMessage(
        channel="C0OPS", text="Approval needed", blocks=CARD_BLOCKS, thread_ts=parent.ts
    )
    assert posted["ok"] and posted["message"]["bot_id"] == server.bot_id
    assert posted["message"]["parent_user_id"] == "U0REQUESTER"
    card = server.message("C0OPS", posted["ts"])
    assert card is not None and card.blocks == CARD_BLOCKS and card.thread_ts == parent.ts

    await client.chat_update(channel="C0OPS", ts=card.ts, text="Approved by approver.one")
    assert card.text == "Approved by approver.one" and card.edited
    assert card.blocks == CARD_BLOCKS, "Slack keeps the old blocks when none are sent"
    await client.chat_update(channel="C0OPS", ts=card.ts, text="done", blocks=[])
    assert card.blocks == []

    eph = await client.chat_postEphemeral(channel="C0OPS", user="U0APPROVER1", text="psst")
    assert [m.ts for m in server.ephemerals_for("U0APPROVER1")] == [eph["message_ts"]]

    link = await client.chat_getPermalink(channel="C0OPS", message_ts=card.ts)
    ts_digits = card.ts.replace(".", "")
    assert link["permalink"].startswith(
        f"https://example-workspace.slack.com/archives/C0OPS/p{ts_digits}"
    )
    replies = await client.conversations_replies(channel="C0OPS", ts=parent.ts)
    assert [m["ts"] for m in replies["messages"]] == [parent.ts, card.ts]
    assert replies["messages"][0]["reply_count"] == 1
    assert [m.ts for m in server.thread("C0OPS", parent.ts)] == [parent.ts, card.ts]
    assert [c.method for c in server.calls] == [
        "chat.postMessage",
        "chat.update",
        "chat.update",
        "chat.postEphemeral",
        "chat.getPermalink",
        "conversations.replies",
    ]


async def test_ts_are_unique_and_increasing(server: SlackServer, client: AsyncWebClient) -> None:
    stamps = [await post_card(client) for _ in range(5)]
    assert stamps == sorted(stamps, key=lambda ts: tuple(map(int, ts.split("."))))
    assert len(set(stamps)) == 5 and all(len(ts.split(".")[1]) == 6 for ts in stamps)


async def test_form_encoded_json_arguments_are_decoded(
    server: SlackServer, client: AsyncWebClient
) -> None:
    await client.api_call(
        "chat.postMessage",
        data={"channel": "C0OPS", "text": "t", "blocks": json.dumps(CARD_BLOCKS)},
    )
    assert server.calls_to("chat.postMessage")[0].args["blocks"] == CARD_BLOCKS


async def test_errors_like_slack(server: SlackServer, client: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as err:
        await client.chat_update(channel="C0OPS", ts="1.000001", text="x")
    assert err.value.response["error"] == "message_not_found"
    with pytest.raises(SlackApiError) as err:
        await client.chat_postMessage(channel="C0OPS", text="x", blocks=[{"no": "type"}])
    assert err.value.response["error"] == "invalid_blocks"
    with pytest.raises(SlackApiError) as err:
        await AsyncWebClient(token="xoxb-wrong", base_url=server.api_url).auth_test()
    assert err.value.response["error"] == "invalid_auth"
    app_client = AsyncWebClient(token=server.app_token, base_url=server.api_url)
    with pytest.raises(SlackApiError) as err:
        await app_client.chat_postMessage(channel="C0OPS", text="x")
    assert err.value.response["error"] == "not_allowed_token_type"
    with pytest.raises(SlackApiError) as err:
        await client.apps_connections_open(app_token=server.bot_token)
    assert err.value.response["error"] == "not_allowed_token_type"


async def test_message_metadata_is_checked_and_kept_like_slack(
    server: SlackServer, client: AsyncWebClient
) -> None:
    good = {"event_type": "approval_requested", "event_payload": {"id": "a1", "n": 2}}
    posted = await client.chat_postMessage(channel="C0OPS", text="t", metadata=good)
    assert posted["message"]["metadata"] == good
    decided = {"event_type": "approval_decided", "event_payload": {"by": {"id": "U1"}}}
    await client.chat_update(channel="C0OPS", ts=posted["ts"], text="t2", metadata=decided)
    message = server.message("C0OPS", posted["ts"])
    assert message is not None and message.metadata == decided
    await client.chat_update(channel="C0OPS", ts=posted["ts"], text="t3")
    assert message.metadata == decided, "an update without metadata keeps it"
    for bad, error in (
        ("not json", "invalid_metadata_format"),
        ({"event_type": "has space", "event_payload": {}}, "invalid_metadata_schema"),
        (
            {"event_type": "x", "event_payload": {"deep": {"er": {"no": 1}}}},
            "invalid_metadata_schema",
        ),
        ({"event_type": "x"}, "invalid_metadata_schema"),
    ):
        with pytest.raises(SlackApiError) as err:
            await client.api_call(
                "chat.postMessage", json={"channel": "C0OPS", "text": "t", "metadata": bad}
            )
        assert err.value.response["error"] == error, bad


async def test_auth_users_and_usergroups(server: SlackServer, client: AsyncWebClient) -> None:
    auth = await client.auth_test()
    assert (auth["user_id"], auth["bot_id"], auth["team_id"]) == ("U0BOT", "B0BOT", "T0001TEAM")
    user = await client.users_info(user="U0APPROVER1")
    assert user["user"]["name"] == "approver.one"
    group = await client.usergroups_users_list(usergroup="S0OPS")
    assert group["users"] == ["U0APPROVER1", "U0APPROVER2"]
    with pytest.raises(SlackApiError) as err:
        await client.usergroups_users_list(usergroup="S0NOPE")
    assert err.value.response["error"] == "no_such_subteam"
    with pytest.raises(SlackApiError) as err:
        await client.users_info(user="U0NOBODY")
    assert err.value.response["error"] == "user_not_found"


async def test_unknown_method_is_reported_loudly(
    server: SlackServer, client: AsyncWebClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR), pytest.raises(SlackApiError) as err:
        await client.chat_scheduleMessage(channel="C0OPS", text="later", post_at=2_000_000_000)
    assert err.value.response["error"] == "unknown_method"
    assert [c.method for c in server.unknown_calls] == ["chat.scheduleMessage"]
    assert "UNKNOWN Web API method 'chat.scheduleMessage'" in caplog.text


async def test_rate_limit_then_retry_handler_succeeds(server: SlackServer) -> None:
    server.rate_limit("chat.postMessage", times=1, retry_after=1)
    plain = AsyncWebClient(token=server.bot_token, base_url=server.api_url)
    with pytest.raises(SlackApiError) as err:
        await plain.chat_postMessage(channel="C0OPS", text="x")
    assert err.value.response.status_code == 429
    assert err.value.response.headers["Retry-After"] == "1"

    server.rate_limit("chat.postMessage", times=1, retry_after=1)
    retrying = AsyncWebClient(
        token=server.bot_token,
        base_url=server.api_url,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)],
    )
    started = time.monotonic()
    resp = await retrying.chat_postMessage(channel="C0OPS", text="x")
    assert resp["ok"] and time.monotonic() - started >= 1
    assert [c.status for c in server.calls_to("chat.postMessage")] == [429, 429, 200]


async def test_fail_injection(server: SlackServer, client: AsyncWebClient) -> None:
    server.fail("chat.update", error="internal_error", times=1)
    ts = await post_card(client)
    with pytest.raises(SlackApiError) as err:
        await client.chat_update(channel="C0OPS", ts=ts, text="x")
    assert err.value.response["error"] == "internal_error"
    assert (await client.chat_update(channel="C0OPS", ts=ts, text="x"))["ok"]


async def test_views_open_requires_a_fresh_trigger_id(
    server: SlackServer, client: AsyncWebClient
) -> None:
    view = {"type": "modal", "title": {"type": "plain_text", "text": "Deny"}, "blocks": []}
    for trigger_id, error in [
        (server.issue_trigger_id("U0APPROVER1", age=5), "expired_trigger_id"),
        ("1700000005123.0001.0123456789abcdef", "invalid_trigger_id"),
    ]:
        with pytest.raises(SlackApiError) as err:
            await client.views_open(trigger_id=trigger_id, view=view)
        assert err.value.response["error"] == error

    fresh = server.issue_trigger_id("U0APPROVER1")
    opened = await client.views_open(trigger_id=fresh, view=view)
    view_id = opened["view"]["id"]
    assert view_id.startswith("V") and server.views[view_id].user == "U0APPROVER1"
    with pytest.raises(SlackApiError) as err:
        await client.views_open(trigger_id=fresh, view=view)
    assert err.value.response["error"] == "exchanged_trigger_id"

    with pytest.raises(SlackApiError) as err:
        await client.views_update(view_id=view_id, view=view, hash="stale")
    assert err.value.response["error"] == "hash_conflict"
    updated = await client.views_update(view_id=view_id, view=view, hash=opened["view"]["hash"])
    assert updated["view"]["hash"] != opened["view"]["hash"]


# -- Signed requests to the bot -----------------------------------------------------------------


def assert_signed(server: SlackServer, got: Received) -> None:
    verifier = SignatureVerifier(SECRET)
    assert verifier.is_valid(
        got.body, got.headers["X-Slack-Request-Timestamp"], got.headers["X-Slack-Signature"]
    )


async def test_mention_is_signed_and_shaped_like_slack(
    server: SlackServer, bot: FakeBot, client: AsyncWebClient
) -> None:
    parent = server.post_user_message("U0REQUESTER", "C0OPS", "context")
    reply = await server.mention("U0REQUESTER", "C0OPS", "restart web", thread_ts=parent.ts)
    assert reply.status == 200 and reply.event_id and reply.event_id.startswith("Ev")
    got = bot.received[-1]
    assert_signed(server, got)
    assert got.headers["Content-Type"] == "application/json"
    payload = json.loads(got.body)
    assert key_shape(payload) == key_shape(json.loads(load_fixture("app_mention.json")))
    assert reply.message is not None and payload["event"]["ts"] == reply.message.ts
    assert payload["event"]["text"] == "<@U0BOT> restart web"
    assert payload["event"]["thread_ts"] == parent.ts

    await server.redeliver(reply.event_id, retry_num=1)
    again = bot.received[-1]
    assert again.body == got.body and again.headers["X-Slack-Retry-Num"] == "1"
    assert again.headers["X-Slack-Retry-Reason"] == "http_timeout"
    assert_signed(server, again)

    top = await server.mention("U0REQUESTER", "C0OPS", "<@U0BOT> hi")
    assert "thread_ts" not in top.sent["event"] and top.sent["event"]["text"] == "<@U0BOT> hi"


async def test_forged_and_stale_requests_do_not_verify(server: SlackServer, bot: FakeBot) -> None:
    verifier = SignatureVerifier(SECRET)
    await server.mention("U0REQUESTER", "C0OPS", "hi", signature="v0=" + "0" * 64)
    forged = bot.received[-1]
    assert not verifier.is_valid(
        forged.body,
        forged.headers["X-Slack-Request-Timestamp"],
        forged.headers["X-Slack-Signature"],
    )
    await server.mention("U0REQUESTER", "C0OPS", "hi", timestamp=int(time.time()) - 600)
    stale = bot.received[-1]
    assert verifier.is_valid_request(stale.body, stale.headers) is False
    signature = verifier.generate_signature(
        timestamp=stale.headers["X-Slack-Request-Timestamp"], body=stale.body
    )
    assert signature == stale.headers["X-Slack-Signature"], "correctly signed, only too old"


async def test_click_builds_block_actions_from_the_real_card(
    server: SlackServer, bot: FakeBot, client: AsyncWebClient
) -> None:
    parent = server.post_user_message("U0REQUESTER", "C0OPS", "restart")
    card = server.message("C0OPS", await post_card(client, thread_ts=parent.ts))
    assert card is not None
    reply = await server.click("U0APPROVER1", card, "approval_approve")
    got = bot.received[-1]
    assert_signed(server, got)
    assert got.headers["Content-Type"] == "application/x-www-form-urlencoded"
    payload = bot.form_payload()
    fixture = json.loads(load_fixture("block_actions.json"))
    assert key_shape(payload) == key_shape(fixture)
    same = ["action_id", "block_id", "value", "style", "type"]
    assert {k: payload["actions"][0][k] for k in same} == {
        k: fixture["actions"][0][k] for k in same
    }
    assert payload["container"]["thread_ts"] == parent.ts
    assert reply.trigger_id == payload["trigger_id"]
    assert reply.response_url == payload["response_url"]

    with pytest.raises(LookupError):
        await server.click("U0APPROVER1", card, "approval_cancel")
    await client.chat_update(channel="C0OPS", ts=card.ts, text="Approved", blocks=[])
    with pytest.raises(LookupError):
        await server.click("U0APPROVER1", card, "approval_approve")
    # A screen not yet updated still shows the button: Slack delivers that click.
    await server.click_as_seen("U0APPROVER1", card, "approval_approve")
    assert bot.form_payload()["actions"][0]["action_id"] == "approval_approve"
    with pytest.raises(LookupError):
        await server.click_as_seen("U0APPROVER1", card, "approval_cancel")  # never shown
    await server.click_raw("U0APPROVER1", "C0OPS", "approval_approve", "apr_forged")
    assert bot.form_payload()["actions"][0]["value"] == "apr_forged"


MENU = {
    "type": "static_select",
    "action_id": "question_select",
    "placeholder": {"type": "plain_text", "text": "Choose an answer"},
    "options": [
        {"text": {"type": "plain_text", "text": f"region-{i}"}, "value": f"v{i}"} for i in range(7)
    ],
}


async def test_select_picks_an_option_of_a_real_menu(
    server: SlackServer, bot: FakeBot, client: AsyncWebClient
) -> None:
    posted = await client.chat_postMessage(
        channel="C0OPS",
        text="Which?",
        blocks=[{"type": "actions", "block_id": "question:q1", "elements": [MENU]}],
    )
    menu = server.message("C0OPS", str(posted["ts"]))
    assert menu is not None
    reply = await server.select("U0REQUESTER", menu, "question_select", "region-5")
    assert_signed(server, bot.received[-1])
    [action] = bot.form_payload()["actions"]
    assert action["type"] == "static_select" and action["block_id"] == "question:q1"
    assert action["selected_option"] == MENU["options"][5]
    assert reply.response_url == bot.form_payload()["response_url"]
    with pytest.raises(LookupError):
        await server.select("U0REQUESTER", menu, "question_select", "region-9")
    with pytest.raises(ValueError):
        await server.click("U0REQUESTER", menu, "question_select")  # a menu is not a button


@pytest.mark.parametrize(
    "menu",
    [
        {**MENU, "options": []},
        {**MENU, "options": MENU["options"] * 15},
        {**MENU, "options": [{"text": {"type": "plain_text", "text": "x" * 76}, "value": "v"}]},
        {**MENU, "options": [{"text": {"type": "plain_text", "text": "x"}, "value": "v" * 151}]},
    ],
)
async def test_menus_slack_would_refuse_are_refused(
    client: AsyncWebClient, menu: dict[str, Any]
) -> None:
    with pytest.raises(SlackApiError) as err:
        await client.chat_postMessage(
            channel="C0OPS", text="Which?", blocks=[{"type": "actions", "elements": [menu]}]
        )
    assert err.value.response["error"] == "invalid_blocks"


async def test_response_url_follows_slack_rules(
    server: SlackServer, bot: FakeBot, client: AsyncWebClient
) -> None:
    resp = await client.chat_postEphemeral(
        channel="C0OPS", user="U0APPROVER1", text="pick", blocks=CARD_BLOCKS
    )
    eph = server.message("C0OPS", resp["message_ts"])
    assert eph is not None
    with pytest.raises(PermissionError):
        await server.click("U0OTHER", eph, "approval_deny")
    reply = await server.click("U0APPROVER1", eph, "approval_deny")
    payload = bot.form_payload()
    assert payload["container"]["is_ephemeral"] is True and "message" not in payload
    assert reply.response_url is not None

    async with aiohttp.ClientSession() as http:

        async def respond(body: dict[str, Any]) -> int:
            async with http.post(str(reply.response_url), json=body) as r:
                return r.status

        assert await respond({"text": "Denied", "replace_original": True}) == 200
        assert eph.text == "Denied" and eph.blocks == []
        assert await respond({"text": "only you"}) == 200
        assert server.ephemerals_for("U0APPROVER1")[-1].text == "only you"
        assert await respond({"text": "everyone", "response_type": "in_channel"}) == 200
        assert server.messages[-1].text == "everyone" and not server.messages[-1].is_ephemeral
        assert await respond({"delete_original": True}) == 200
        assert server.message("C0OPS", eph.ts) is None
        assert await respond({"text": "fifth"}) == 200
        assert await respond({"text": "sixth"}) == 404
    assert server.responses[-1].error == "used_up" and len(server.responses) == 6


async def test_slash_command_form_and_ack_message(server: SlackServer, bot: FakeBot) -> None:
    bot.reply = lambda _: web.json_response({"text": "Nothing is waiting"})
    reply = await server.slash_command("U0APPROVER1", "C0OPS", text="list")
    got = bot.received[-1]
    assert_signed(server, got)
    fields = parse_qsl(got.body.decode())
    expected = parse_qsl(load_fixture("slash_command.txt").strip())
    assert [k for k, _ in fields] == [k for k, _ in expected]
    assert dict(fields)["user_name"] == "approver.one" and dict(fields)["channel_name"] == "ops"
    assert reply.trigger_id == dict(fields)["trigger_id"]
    assert server.ephemerals_for("U0APPROVER1")[-1].text == "Nothing is waiting"


async def test_submit_view_applies_the_ack(
    server: SlackServer, bot: FakeBot, client: AsyncWebClient
) -> None:
    reason = {
        "type": "input",
        "block_id": "reason",
        "label": {"type": "plain_text", "text": "Why?"},
        "element": {"type": "plain_text_input", "action_id": "reason_input"},
    }
    view = {
        "type": "modal",
        "callback_id": "deny_reason",
        "private_metadata": "apr_0001",
        "title": {"type": "plain_text", "text": "Deny"},
        "submit": {"type": "plain_text", "text": "Deny"},
        "blocks": [reason],
    }
    card = server.message("C0OPS", await post_card(client))
    assert card is not None
    click = await server.click("U0APPROVER1", card, "approval_deny")
    opened = await client.views_open(trigger_id=str(click.trigger_id), view=view)
    view_id = opened["view"]["id"]
    values = {"reason": {"reason_input": {"type": "plain_text_input", "value": ""}}}

    errors = {"response_action": "errors", "errors": {"reason": "Say why"}}
    bot.reply = lambda _: web.json_response(errors)
    reply = await server.submit_view("U0APPROVER1", view_id, values)
    payload = bot.form_payload()
    assert payload["type"] == "view_submission" and payload["view"]["id"] == view_id
    assert payload["view"]["private_metadata"] == "apr_0001"
    assert payload["view"]["state"]["values"] == values
    assert reply.json() == errors and not server.views[view_id].closed

    bot.reply = lambda _: web.Response(status=200)
    await server.submit_view("U0APPROVER1", view_id, values)
    assert server.views[view_id].closed
    with pytest.raises(LookupError):
        await server.submit_view("U0APPROVER1", view_id, values)


# -- Socket Mode --------------------------------------------------------------------------------


async def test_socket_mode_round_trip(server: SlackServer) -> None:
    received: list[SocketModeRequest] = []

    async def ack(client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        received.append(req)
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    sm = SocketModeClient(
        app_token=server.app_token,
        web_client=AsyncWebClient(base_url=server.api_url),
        auto_reconnect_enabled=False,
    )
    sm.socket_mode_request_listeners.append(ack)
    try:
        await sm.connect()
        await server.wait_socket_connected(timeout=2)
        reply = await server.socket_mention("U0REQUESTER", "C0OPS", "hi")
        assert reply.ack == {"envelope_id": reply.envelope_id}
        assert received[0].type == "events_api" and received[0].retry_attempt == 0
        assert reply.message is not None
        assert received[0].payload["event"]["ts"] == reply.message.ts
        assert received[0].payload["event_id"] == reply.event_id

        await server.socket_disconnect()
        for _ in range(100):
            if server.socket_connects == 2:
                break
            await asyncio.sleep(0.02)
        again = await server.socket_mention("U0REQUESTER", "C0OPS", "again")
        assert again.ack == {"envelope_id": again.envelope_id}
    finally:
        await sm.close()


def test_message_buttons_lists_clickable_elements() -> None:
    card = Message(channel="C", ts="1.000001", user="U0BOT", blocks=CARD_BLOCKS)
    assert [e["action_id"] for _, e in card.buttons()] == ["approval_approve", "approval_deny"]


# -- The real consumer: slack_bolt, over HTTP and Socket Mode -----------------------------------


async def wait_until(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def bolt_app(server: SlackServer) -> AsyncApp:
    """A minimal bolt app: answers mentions in the thread, edits cards, lists on a command."""
    app = AsyncApp(
        client=AsyncWebClient(token=server.bot_token, base_url=server.api_url),
        signing_secret=SECRET,
    )

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: AsyncSay) -> None:
        await say(text="on it", blocks=CARD_BLOCKS, thread_ts=event.get("thread_ts", event["ts"]))

    @app.action("approval_approve")
    async def on_approve(ack: AsyncAck, respond: AsyncRespond, body: dict[str, Any]) -> None:
        await ack()
        await respond(text=f"Approved by <@{body['user']['id']}>", replace_original=True)

    @app.command("/approvals")
    async def on_command(ack: AsyncAck) -> None:
        await ack(text="Nothing is waiting")

    return app


async def test_bolt_over_http(server: SlackServer) -> None:
    runner = web.AppRunner(bolt_app(server).web_app(path="/slack/events"))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    server.bot_url = f"http://{host}:{port}/slack/events"
    try:
        mention = await server.mention("U0REQUESTER", "C0OPS", "restart web")
        assert mention.status == 200 and mention.message is not None
        thread = mention.message.ts
        await wait_until(lambda: len(server.thread("C0OPS", thread)) == 2)
        card = server.thread("C0OPS", thread)[1]
        assert card.blocks == CARD_BLOCKS and card.bot_id == server.bot_id

        click = await server.click("U0APPROVER1", card, "approval_approve")
        assert click.status == 200 and click.elapsed < 3
        await wait_until(lambda: card.text == "Approved by <@U0APPROVER1>")
        assert card.blocks == [], "respond(replace_original) replaces the whole message"

        command = await server.slash_command("U0APPROVER1", "C0OPS")
        # bolt answers ack(text=...) as text/plain, and Slack shows it as the message text
        assert command.body == "Nothing is waiting"
        assert server.ephemerals_for("U0APPROVER1")[-1].text == "Nothing is waiting"

        forged = await server.mention("U0REQUESTER", "C0OPS", "x", signature="v0=" + "0" * 64)
        stale = await server.mention("U0REQUESTER", "C0OPS", "x", timestamp=int(time.time()) - 600)
        assert (forged.status, stale.status) == (401, 401)
        assert server.unknown_calls == []
    finally:
        await runner.cleanup()


async def test_bolt_over_socket_mode(server: SlackServer) -> None:
    handler = AsyncSocketModeHandler(bolt_app(server), app_token=server.app_token)
    await handler.connect_async()
    try:
        await server.wait_socket_connected(timeout=2)
        mention = await server.socket_mention("U0REQUESTER", "C0OPS", "restart web")
        assert mention.ack == {"envelope_id": mention.envelope_id}
        assert mention.message is not None
        await wait_until(lambda: len(server.thread("C0OPS", mention.message.ts)) == 2)

        command = await server.socket_slash_command("U0APPROVER1", "C0OPS")
        assert command.payload == {"text": "Nothing is waiting"}
        assert server.ephemerals_for("U0APPROVER1")[-1].text == "Nothing is waiting"
    finally:
        await handler.close_async()
