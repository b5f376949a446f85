"""Slack-side hooks for logs and metrics on requests: which workspace, channel and approval a
request is about (for log lines), and how long its acknowledgement took. Nothing here changes
what a listener does. (The Web API client's own counters: :mod:`handlers.slack.instrument`.)"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bot.ops import logs
from bot.ops import metric_hooks as metrics
from handlers.blocks import (
    ANSWER,
    APPROVE,
    CHOICE_PATTERN,
    DENY,
    SELECT,
    SHOW_ARGUMENTS,
    parse_approve_value,
    parse_choice_value,
)

# Actions whose value is the approval's (or question's) id.
APPROVAL_ACTIONS = (APPROVE, DENY, SHOW_ARGUMENTS, ANSWER)
# In a bolt request's context: the request was answered before bolt dispatched it
# (:func:`answered_before_dispatch`), so its acknowledgement was timed there.
ANSWERED_EARLY = "approval_bot_answered_early"


def answered_before_dispatch(body: dict[str, Any]) -> bool:
    """Whether Slack's answer to this request is an empty 200 whatever its listener does, and
    nothing the listener does belongs before that answer, so it can be written before bolt
    dispatches the request.

    An Approve click: its listener acknowledges with nothing and hands the decision to
    background work (the clicker is answered through ``response_url``), and it is the click
    that comes in bursts. Not a button that opens a form (Deny, "Show all arguments": the form
    opens in the acknowledgement path, while the click's ``trigger_id`` is fresh), a slash
    command or a form's submission (their answer carries what the listener says), nor an
    event (answered 503 when it cannot be stored, so that Slack delivers it again).
    """
    if body.get("type") != "block_actions":
        return False
    actions = body.get("actions")
    return (
        isinstance(actions, list)
        and bool(actions)
        and all(
            isinstance(action, dict) and action.get("action_id") == APPROVE for action in actions
        )
    )


def observe_answered(body: dict[str, Any], started: float) -> None:
    """The acknowledgement latency of a request answered before dispatch."""
    metrics.observe_ack(request_kind(body), time.monotonic() - started)


def request_kind(body: dict[str, Any]) -> str:
    """event, block_actions, view_submission, command, ... (a bounded label)."""
    if "command" in body:
        return "command"
    kind = body.get("type")
    if kind == "event_callback":
        return "event"
    return kind if isinstance(kind, str) and kind.isidentifier() and len(kind) < 40 else "other"


def request_ids(body: dict[str, Any]) -> dict[str, str | None]:
    """The workspace, channel and approval a Slack payload is about, where it says."""
    team = body.get("team_id") or (body.get("team") or {}).get("id")
    raw_event = body.get("event")
    event: dict[str, Any] = raw_event if isinstance(raw_event, dict) else {}
    channel = (
        body.get("channel_id")
        or event.get("channel")
        or (body.get("channel") or {}).get("id")
        or (body.get("container") or {}).get("channel_id")
    )
    approval = None
    for action in body.get("actions") or []:
        if isinstance(action, dict):
            approval = _approval_of(action) or approval
    return {
        "workspace": team if isinstance(team, str) else None,
        "channel": channel if isinstance(channel, str) else None,
        "approval_id": approval if isinstance(approval, str) else None,
    }


def _approval_of(action: dict[str, Any]) -> str | None:
    """The approval (or question) an action is about: its value, or, for a question's
    choice button or menu, the id inside the choice's value."""
    action_id = action.get("action_id")
    if action_id == APPROVE:
        return parse_approve_value(action.get("value"))[0] or None
    if action_id in APPROVAL_ACTIONS:
        value = action.get("value")
        return value if isinstance(value, str) else None
    if action_id == SELECT:
        option = action.get("selected_option")
        value = option.get("value") if isinstance(option, dict) else None
    elif isinstance(action_id, str) and re.match(CHOICE_PATTERN, action_id):
        value = action.get("value")
    else:
        return None
    choice = parse_choice_value(value)
    return choice[0] if choice else None


async def observe_request(
    body: dict[str, Any], context: dict[str, Any], next: Callable[[], Awaitable[Any]]
) -> Any:
    """Bolt middleware: the ids go on every log line of the request (and of the tasks it
    starts), and the time until bolt answers Slack is the acknowledgement latency (with
    ``process_before_response`` bolt answers when the listeners return; a request answered
    before dispatch was timed when its answer was written)."""
    started = time.monotonic()
    token = logs.bind(**request_ids(body))
    try:
        return await next()
    finally:
        if not context.get(ANSWERED_EARLY):
            metrics.observe_ack(request_kind(body), time.monotonic() - started)
        logs.unbind(token)
