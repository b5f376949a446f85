"""A gated call whose arguments do not fit its tool's schema is refused before anyone is asked:
the model reads why and no approval is drafted (on SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

import llm
import pytest

from bot.config import config_from_dict
from bot.engine import Request, Runner
from bot.policy import argument_error
from storage.repository import Repository
from tests.conftest import BASE_CONFIG
from tests.support import ops_tools
from tests.support.scripted_model import ScriptedModel, calls


def _scale(service: str, replicas: int) -> str:
    ops_tools.EXECUTED.append(("scale", {"service": service, "replicas": replicas}))
    return f"scaled {service} to {replicas}"


SCALE = llm.Tool(
    name="scale",
    description="Change how many replicas of a service run.",
    input_schema={
        "type": "object",
        "properties": {
            "service": {"type": "string"},
            "replicas": {"type": "integer", "minimum": 0, "maximum": 50},
        },
        "required": ["service", "replicas"],
    },
    implementation=_scale,
)


def tool_outputs(run_history: list[dict[str, Any]]) -> list[str]:
    return [
        part["output"]
        for message in run_history
        if message["role"] == "tool"
        for part in message["parts"]
    ]


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"service": "checkout", "replicas": 100000}, "100000 is greater than the maximum of 50"),
        ({"service": "checkout"}, "'replicas' is a required property"),
        ({"service": "checkout", "replicas": "many"}, "'many' is not of type 'integer'"),
    ],
)
async def test_a_call_that_cannot_run_is_refused_before_approval(
    repo: Repository, arguments: dict[str, Any], why: str
) -> None:
    config = config_from_dict(
        {**BASE_CONFIG, "policies": {"scale": {"approvers": ["U0APPROVER1"]}}},
        extra_tools=[SCALE],
    )
    runner = Runner(repo, config, worker_id="w")
    outcome = await runner.start(
        Request(text=calls(("scale", arguments)), requester="U0REQUESTER", conversation_key="k")
    )
    assert outcome.status == "completed" and outcome.new_approvals == []
    assert await repo.approvals_for_run(outcome.run_id) == []
    run = await repo.get_run(outcome.run_id)
    assert run is not None
    [output] = tool_outputs(run.history)
    assert why in output and "no approval was asked for" in output
    assert not [c for c in ops_tools.EXECUTED if c[0] == "scale"]
    # The model read the refusal (the scripted model echoes tool results in its answer).
    assert any(why in json.dumps(m) for m in ScriptedModel.seen[-1])


def test_arguments_that_fit_pass_and_an_empty_schema_checks_nothing() -> None:
    schema = SCALE.input_schema
    assert argument_error(schema, {"service": "checkout", "replicas": 3}) is None
    assert argument_error({}, {"anything": 1}) is None
    assert argument_error(schema, {"service": "x", "replicas": 51}) == (
        "51 is greater than the maximum of 50 (at replicas)"
    )
