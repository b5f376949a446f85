"""Which requests are answered before bolt dispatches them (handlers.middleware.observe):
only a block_actions whose every action is Approve, whatever else a signed body holds."""

from __future__ import annotations

from typing import Any

import pytest

from handlers.blocks import APPROVE, DENY
from handlers.middleware import answered_before_dispatch

APPROVE_ACTION = {"action_id": APPROVE, "value": "apr_1"}


@pytest.mark.parametrize(
    ("body", "early"),
    [
        ({"type": "block_actions", "actions": [APPROVE_ACTION]}, True),
        ({"type": "block_actions", "actions": [APPROVE_ACTION, APPROVE_ACTION]}, True),
        ({"type": "block_actions", "actions": [APPROVE_ACTION, {"action_id": DENY}]}, False),
        ({"type": "block_actions", "actions": []}, False),
        ({"type": "block_actions", "actions": None}, False),
        ({"type": "block_actions"}, False),
        ({"type": "block_actions", "actions": APPROVE}, False),  # a string: its characters
        ({"type": "block_actions", "actions": {APPROVE: APPROVE_ACTION}}, False),
        ({"type": "block_actions", "actions": [APPROVE]}, False),
        ({"type": "block_actions", "actions": 7}, False),
        ({"type": "view_submission", "actions": [APPROVE_ACTION]}, False),
        ({"type": "event_callback", "event": {"type": "app_mention"}}, False),
    ],
)
def test_only_a_list_of_approve_actions_is_answered_early(
    body: dict[str, Any], early: bool
) -> None:
    assert answered_before_dispatch(body) is early
