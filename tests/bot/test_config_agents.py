"""``[agents.NAME]``, ``delegate`` and ``max_delegation_depth`` (issue 20 section 1): checked
at start-up like every key, each problem named by its key path, all at once."""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import ConfigError, config_from_dict
from tests.conftest import BASE_CONFIG, make_config


def problems(**overrides: Any) -> list[str]:
    with pytest.raises(ConfigError) as error:
        config_from_dict({**BASE_CONFIG, **overrides})
    return error.value.problems


def test_agents_load_with_their_tools_and_defaults() -> None:
    config = make_config(
        agents={
            "researcher": {
                "description": "looks things up",
                "tools": ["tests.support.ops_tools:get_status"],
            },
            "writer": {
                "description": "writes",
                "model": "echo",
                "system_prompt": "You write.",
            },
        }
    )
    researcher, writer = config.agents["researcher"], config.agents["writer"]
    assert researcher.model == "scripted", "the top-level model by default"
    assert (
        "researcher" in researcher.system_prompt and "looks things up" in researcher.system_prompt
    )
    assert [t.name for t in researcher.tools] == ["get_status"]
    assert (writer.model, writer.system_prompt, writer.tools) == ("echo", "You write.", [])
    assert config.delegate is True and config.max_delegation_depth == 2
    assert make_config().agents == {}


def test_an_agents_tool_may_have_a_policy() -> None:
    config = make_config(
        agents={
            "cleaner": {
                "description": "cleans",
                "tools": ["tests.support.rule_tools:refund"],
            }
        },
        policies={**BASE_CONFIG["policies"], "refund": {"approvers": ["U0APPROVER1"]}},
    )
    assert config.policy_for("refund") is not None


def test_every_problem_of_agents_is_named() -> None:
    found = problems(
        agents={
            "Research Team": {"description": "x"},
            "researcher": {"tools": ["tests.support.ops_tools:nope"], "colour": "red"},
            "writer": {"description": " "},
        },
        delegate="yes",
        max_delegation_depth=0,
    )
    assert any(
        p.startswith("agents.Research Team: 'Research Team' is not an agent name") for p in found
    ), found
    assert "agents.researcher.description: is required" in found, found
    assert any(
        p.startswith("agents.researcher.colour: unknown key (known: description, model, ")
        for p in found
    ), found
    assert any(p.startswith("agents.researcher.tools: ") and "nope" in p for p in found), found
    assert any(p.startswith("agents.writer.description: ") for p in found), found
    assert any(p.startswith("delegate: ") for p in found), found
    assert any(p.startswith("max_delegation_depth: ") for p in found), found


def test_agents_must_be_a_table_of_tables() -> None:
    assert any(p.startswith("agents: ") for p in problems(agents=["researcher"]))
    assert any(p.startswith("agents.researcher: ") for p in problems(agents={"researcher": 1}))


def test_a_tool_named_delegate_is_refused_beside_agents() -> None:
    """Found by review: a configured tool named ``delegate`` silently replaced the built-in
    one for the main agent (which could then delegate to no agent) while the sub-agents kept
    the built-in one, gated by that tool's ``[policies.delegate]``."""
    agents = {"researcher": {"description": "looks things up"}}
    tools = [*BASE_CONFIG["tools"], "tests.support.named_delegate:delegate"]
    (problem,) = problems(tools=tools, agents=agents)
    assert problem.startswith("tools: a tool is named 'delegate'"), problem
    researcher = {**agents["researcher"], "tools": ["tests.support.named_delegate:delegate"]}
    (problem,) = problems(agents={"researcher": researcher})
    assert problem.startswith("tools: a tool is named 'delegate'"), problem
    # Without agents, or with delegate = false, the name is free.
    assert make_config(tools=tools).agents == {}
    assert make_config(tools=tools, agents=agents, delegate=False).delegate is False
