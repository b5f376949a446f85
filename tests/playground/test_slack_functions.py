"""The Slack double's custom steps: a ``function_executed`` that bolt's own function listener
takes, and ``functions.completeSuccess`` / ``completeError`` with Slack's rules (one
completion per execution, outputs checked against the function's definition, the
execution's token valid while it runs), checked with slack_sdk's and bolt's own pieces."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.context.complete.async_complete import AsyncComplete
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from playground.slack_server import SlackServer

SECRET = "test-signing-secret"
FUNCTIONS = {
    "greet": {
        "title": "Greet",
        "description": "Says hello",
        "input_parameters": {"user": {"type": "slack#/types/user_id", "is_required": True}},
        "output_parameters": {
            "greeting": {"type": "string", "is_required": True, "enum": ["hello", "hi"]},
            "by": {"type": "slack#/types/user_id", "is_required": False},
        },
    }
}


@pytest.fixture
async def server() -> AsyncIterator[SlackServer]:
    async with SlackServer(signing_secret=SECRET) as slack:
        slack.define_functions(FUNCTIONS)
        yield slack


def client(server: SlackServer, token: str) -> AsyncWebClient:
    return AsyncWebClient(token=token, base_url=server.api_url)


async def test_bolts_function_listener_takes_the_event_and_completes_with_its_token(
    server: SlackServer,
) -> None:
    app = AsyncApp(
        client=client(server, server.bot_token),
        signing_secret=SECRET,
        process_before_response=True,
    )
    seen: dict[str, Any] = {}

    @app.function("greet")
    async def greet(inputs: dict[str, Any], complete: AsyncComplete, context: AsyncBoltContext):
        seen["inputs"] = inputs
        seen["token"] = context.function_bot_access_token
        await complete(outputs={"greeting": "hello", "by": inputs["user"]})

    execution, payload = server.function_executed_payload("greet", {"user": "U0ANA"})
    body = json.dumps(payload)
    timestamp = str(int(time.time()))
    headers = {
        "content-type": ["application/json"],
        "x-slack-request-timestamp": [timestamp],
        "x-slack-signature": [server.sign(body, timestamp)],
    }
    response = await app.async_dispatch(AsyncBoltRequest(body=body, headers=headers))
    assert response.status == 200
    assert seen == {"inputs": {"user": "U0ANA"}, "token": execution.token}
    assert execution.state == "completed"
    assert execution.outputs == {"greeting": "hello", "by": "U0ANA"}
    [call] = server.calls_to("functions.completeSuccess")
    assert call.token == execution.token
    event = payload["event"]
    assert event["function"]["input_parameters"] == [
        {"name": "user", "type": "slack#/types/user_id", "is_required": True}
    ]
    assert {"function_execution_id", "workflow_execution_id", "bot_access_token"} <= set(event)


async def test_an_execution_completes_once_and_its_token_ends_with_it(
    server: SlackServer,
) -> None:
    execution, _ = server.function_executed_payload("greet", {"user": "U0ANA"})
    own = client(server, execution.token)
    await own.functions_completeSuccess(
        function_execution_id=execution.id, outputs={"greeting": "hi"}
    )
    with pytest.raises(SlackApiError) as again:
        await client(server, server.bot_token).functions_completeError(
            function_execution_id=execution.id, error="too late"
        )
    assert again.value.response["error"] == "execution_not_in_running_state"
    with pytest.raises(SlackApiError) as expired:
        await own.functions_completeSuccess(
            function_execution_id=execution.id, outputs={"greeting": "hi"}
        )
    assert expired.value.response["error"] == "invalid_auth"
    assert execution.completions == [
        {"method": "functions.completeSuccess", "outputs": {"greeting": "hi"}}
    ]


@pytest.mark.parametrize(
    ("outputs", "error"),
    [
        ({}, "greeting: required output parameter missing"),
        ({"greeting": "hey"}, "greeting must be one of ['hello', 'hi']"),
        ({"greeting": "hi", "by": "ana"}, "by must be a user id"),
        ({"greeting": "hi", "mood": "good"}, "mood: unknown output parameter"),
    ],
)
async def test_outputs_that_do_not_match_the_definition_are_refused(
    server: SlackServer, outputs: dict[str, Any], error: str
) -> None:
    execution, _ = server.function_executed_payload("greet", {"user": "U0ANA"})
    with pytest.raises(SlackApiError) as refused:
        await client(server, execution.token).functions_completeSuccess(
            function_execution_id=execution.id, outputs=outputs
        )
    assert refused.value.response["error"] == "parameter_validation_failed"
    assert error in refused.value.response["errors"]
    assert execution.state == "running"


async def test_unknown_executions_and_missing_arguments_get_slacks_errors(
    server: SlackServer,
) -> None:
    bot = client(server, server.bot_token)
    with pytest.raises(SlackApiError) as unknown:
        await bot.functions_completeSuccess(function_execution_id="Fx0NONE", outputs={})
    assert unknown.value.response["error"] == "function_execution_not_found"
    execution, _ = server.function_executed_payload("greet", {"user": "U0ANA"})
    with pytest.raises(SlackApiError) as missing:
        await bot.functions_completeError(function_execution_id=execution.id, error="")
    assert missing.value.response["error"] == "invalid_arguments"
