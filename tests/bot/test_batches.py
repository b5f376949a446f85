"""batch_threshold in the configuration, and which drafts of one response share a card."""

from __future__ import annotations

from datetime import datetime

import pytest

from bot.config import ConfigError, config_from_dict
from bot.engine.batches import batched
from storage.records import ApprovalDraft


def draft(i: int, tool: str = "restart", **keys: object) -> ApprovalDraft:
    values: dict[str, object] = {
        "id": f"apr_{i:02d}",
        "tool_call_id": f"call_{i}",
        "tool_name": tool,
        "arguments": {"n": i},
        "payload_hash": f"h{i}",
        "approvers": ["U1", "U2"],
        "allow_self_approval": False,
        "on_expiry": "deny",
        "expires_at": datetime(2026, 12, 2),
        **keys,
    }
    return ApprovalDraft(**values)  # type: ignore[arg-type]


def test_batch_threshold_defaults_to_3_per_tool_overrides_and_0_turns_it_off() -> None:
    tools = ["tests.support.ops_tools:restart_service", "tests.support.ops_tools:deploy"]
    config = config_from_dict(
        {
            "tools": tools,
            "batch_threshold": 4,
            "policies": {"restart_service": {"batch_threshold": 0}, "deploy": {}},
        }
    )
    assert config_from_dict({}).batch_threshold_for("x") == 3
    assert config.batch_threshold_for("restart_service") == 0
    assert config.batch_threshold_for("deploy") == 4


@pytest.mark.parametrize("bad", [-1, True, "3", 2.5])
def test_a_bad_batch_threshold_is_refused_at_start(bad: object) -> None:
    with pytest.raises(ConfigError, match="batch_threshold"):
        config_from_dict({"batch_threshold": bad})
    with pytest.raises(ConfigError, match="batch_threshold"):
        config_from_dict(
            {
                "tools": ["tests.support.ops_tools:deploy"],
                "policies": {"deploy": {"batch_threshold": bad}},
            }
        )


def test_only_calls_of_one_tool_under_the_same_approvers_and_quorum_share_a_card() -> None:
    drafts = [
        draft(0),
        draft(1, approvers=["U2", "U1"]),  # the same people, in another order
        draft(2),
        draft(3, min_approvals=2),  # more approvals: its own card
        draft(4, rule="policies.restart.rules[0]"),  # a rule chose its policy
        draft(5, tool="deploy"),
        draft(6, kind="question"),
    ]
    out = batched(drafts, lambda _tool: 3)
    assert [d.batch_id for d in out] == ["apr_00", "apr_00", "apr_00", None, None, None, None]
    assert [d.id for d in out] == [d.id for d in drafts]
    assert [d.batch_id for d in batched(drafts, lambda _tool: 4)] == [None] * 7
    assert [d.batch_id for d in batched(drafts, lambda _tool: 0)] == [None] * 7


def test_a_lone_call_is_a_batch_only_under_a_threshold_of_1() -> None:
    """The one-draft shortcut (the common pause) keeps what a threshold of 1 means."""
    assert [d.batch_id for d in batched([draft(0)], lambda _tool: 3)] == [None]
    assert [d.batch_id for d in batched([draft(0)], lambda _tool: 0)] == [None]
    assert [d.batch_id for d in batched([draft(0)], lambda _tool: 1)] == ["apr_00"]
    assert [d.batch_id for d in batched([draft(0, kind="question")], lambda _tool: 1)] == [None]
    assert batched([], lambda _tool: 1) == []
