"""The Slack stand-in's text streaming, driven with slack_sdk's own client and chat stream
helper (issue 21 §1): Slack's chunk shapes, the recipient a channel stream needs, chunks
recorded in order, no append after the stop, and a workspace that refuses streaming."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from playground.slack_server import SlackServer

SECRET = "test-signing-secret"
CHANNEL = "C0OPS"


@pytest.fixture
async def server() -> AsyncIterator[SlackServer]:
    async with SlackServer(signing_secret=SECRET) as server:
        yield server


@pytest.fixture
def client(server: SlackServer) -> AsyncWebClient:
    return AsyncWebClient(token=server.bot_token, base_url=server.api_url)


async def _thread(server: SlackServer) -> str:
    return server.post_user_message("U0ANA", CHANNEL, "<@U0BOT> hi").ts


async def test_slack_sdks_chat_stream_helper_streams_in_order(
    server: SlackServer, client: AsyncWebClient
) -> None:
    thread_ts = await _thread(server)
    stream = await client.chat_stream(
        channel=CHANNEL,
        thread_ts=thread_ts,
        recipient_user_id="U0ANA",
        recipient_team_id=server.team_id,
        buffer_size=5,
    )
    await stream.append(markdown_text="Hello ")
    task = {"type": "task_update", "id": "t1", "title": "get_status", "status": "in_progress"}
    await stream.append(chunks=[task])
    await stream.append(markdown_text="world")
    await stream.stop(chunks=[{**task, "status": "complete", "output": "healthy"}])
    [message] = server.streams()
    assert message.thread_ts == thread_ts and message.stream_state == "stopped"
    assert message.text == "Hello world"
    assert [c["type"] for c in message.chunks] == [
        "markdown_text",
        "task_update",
        "markdown_text",
        "task_update",
    ]
    assert message.tasks == [{**task, "status": "complete", "output": "healthy"}]
    with pytest.raises(SlackApiError) as refused:
        await client.chat_appendStream(channel=CHANNEL, ts=message.ts, markdown_text="late")
    assert refused.value.response["error"] == "message_not_in_streaming_state"


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({}, "invalid_arguments"),  # a channel stream names its recipient
        (
            {
                "recipient_user_id": "U0ANA",
                "recipient_team_id": "T0001TEAM",
                "chunks": [{"type": "x"}],
            },
            "invalid_chunks",
        ),
        (
            {
                "recipient_user_id": "U0ANA",
                "recipient_team_id": "T0001TEAM",
                "chunks": [{"type": "task_update", "id": "t", "title": "x", "status": "done"}],
            },
            "invalid_chunks",
        ),
        (
            {
                "recipient_user_id": "U0ANA",
                "recipient_team_id": "T0001TEAM",
                "markdown_text": "x" * 12_001,
            },
            "msg_too_long",
        ),
    ],
)
async def test_start_stream_checks_slacks_shapes(
    server: SlackServer, client: AsyncWebClient, arguments: dict[str, object], error: str
) -> None:
    thread_ts = await _thread(server)
    with pytest.raises(SlackApiError) as refused:
        await client.chat_startStream(channel=CHANNEL, thread_ts=thread_ts, **arguments)  # type: ignore[arg-type]
    assert refused.value.response["error"] == error
    assert server.streams() == []


async def test_a_workspace_can_refuse_streaming(
    server: SlackServer, client: AsyncWebClient
) -> None:
    server.refuse_streaming(error="feature_not_enabled")
    with pytest.raises(SlackApiError) as refused:
        await client.chat_startStream(
            channel=CHANNEL,
            thread_ts=await _thread(server),
            recipient_user_id="U0ANA",
            recipient_team_id=server.team_id,
        )
    assert refused.value.response["error"] == "feature_not_enabled"
