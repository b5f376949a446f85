"""What a request from Slack must look like before bolt and our listeners see it.

Bolt and our listeners index into payloads (``body["actions"][0]["action_id"]``,
``event["text"]``) as Slack documents them. A signed payload of another shape (a bug in a
proxy, a replayed fixture, a hand-made request) would raise in the middle of a listener and
become a 500. Checking the shape once, up front, for exactly the payloads this bot accepts
turns all of those into a 400 that says what is wrong, before anything is stored.

``problem(body)`` returns None for a payload the bot can handle, else a short reason. HTTP
requests are checked as they are decoded (:mod:`handlers.middleware.incoming`);
:func:`refuse_malformed`, a bolt middleware, checks Socket Mode's payloads, which skip that.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from slack_bolt.async_app import AsyncBoltContext
from slack_bolt.response import BoltResponse

from handlers.blocks import (
    ANSWER,
    ANSWER_BLOCK,
    ANSWER_INPUT,
    ANSWER_MODAL,
    CHOICE_PATTERN,
    SELECT,
    parse_choice_value,
)

log = logging.getLogger(__name__)

# In the context of a request whose payload was already checked as it was decoded: the
# middleware does not check it twice.
SHAPE_CHECKED = "approval_bot_payload_checked"

# Field kinds: a required string, an optional string (absent or null), a required object …
STR, OPT_STR, OBJ, OPT_OBJ, OPT_BOOL = "str", "str?", "obj", "obj?", "bool?"

# Bolt reads these from every payload to build its context (team, user, enterprise, …).
ENVELOPE: dict[str, str] = {
    "team_id": OPT_STR,
    "api_app_id": OPT_STR,
    "enterprise_id": OPT_STR,
    "user_id": OPT_STR,
    "channel_id": OPT_STR,
}

EVENT_CALLBACK = {"event": OBJ, "event_id": STR, "team_id": OPT_STR}
APP_MENTION = {
    "type": STR,
    "text": STR,
    "user": STR,
    "channel": STR,
    "ts": STR,
    "thread_ts": OPT_STR,
    "team": OPT_STR,
}
OTHER_EVENT = {
    "user": OPT_STR,
    "channel": OPT_STR,
    "bot_id": OPT_STR,
    "subtype": OPT_STR,
    "thread_ts": OPT_STR,
    "message": OPT_OBJ,
    "previous_message": OPT_OBJ,
}
# The agent pane's events (handlers.listeners.assistant) read these.
MESSAGE = {**OTHER_EVENT, "text": OPT_STR, "ts": OPT_STR, "channel_type": OPT_STR}
APP_HOME_OPENED = {"user": STR, "channel": OPT_STR, "tab": OPT_STR}
ASSISTANT_THREAD = {"assistant_thread": OBJ}
THREAD = {"channel_id": STR, "thread_ts": STR, "user_id": OPT_STR}
AGENT_SESSION_STOPPED = {"channel": STR, "user": STR, "thread_ts": OPT_STR}
SUBTEAM_MEMBERS_CHANGED = {"type": STR, "subteam_id": STR}
# A Workflow Builder step run (a custom step, handlers.listeners.steps): bolt reads the
# function's callback_id, the execution id, its inputs and its token.
FUNCTION_EXECUTED = {
    "type": STR,
    "function": OBJ,
    "inputs": OBJ,
    "function_execution_id": STR,
    "workflow_execution_id": OPT_STR,
    "event_ts": OPT_STR,
    "bot_access_token": OPT_STR,
}
FUNCTION = {"callback_id": STR, "id": OPT_STR}
SUBTEAM_UPDATED = {"type": STR, "subteam": OBJ}
INTERACTIVE = {
    "user": OBJ,
    "team": OPT_OBJ,
    "trigger_id": STR,
    "container": OPT_OBJ,
    "channel": OPT_OBJ,
    "enterprise": OPT_OBJ,
    "is_enterprise_install": OPT_BOOL,
}
BLOCK_ACTIONS = {**INTERACTIVE, "response_url": STR}
HOME_ACTIONS = {**INTERACTIVE, "view": OBJ}
ACTION = {"action_id": STR, "block_id": OPT_STR, "value": OPT_STR, "type": OPT_STR}
VIEW_SUBMISSION = {**INTERACTIVE, "view": OBJ}
# Bolt reads view.type to tell workflow steps from modals.
VIEW = {
    "type": STR,
    "callback_id": STR,
    "private_metadata": OPT_STR,
    "state": OPT_OBJ,
    "id": OPT_STR,
}
SLASH_COMMAND = {
    "command": STR,
    "text": STR,
    "user_id": STR,
    "channel_id": STR,
    "team_id": STR,
    "response_url": STR,
    "trigger_id": STR,
}
REFERENCE = {"id": STR}  # user, team, channel objects
OPTIONAL_REFERENCE = {"id": OPT_STR}
CONTAINER = {"channel_id": OPT_STR, "is_ephemeral": OPT_BOOL, "message_ts": OPT_STR}


async def refuse_malformed(
    body: dict[str, Any], context: AsyncBoltContext, next: Callable[[], Awaitable[None]]
) -> Any:
    """Socket Mode payloads skip :func:`handlers.middleware.parsed_request`'s checks: the
    same rules here."""
    if context.get(SHAPE_CHECKED):
        return await next()
    bad = problem(body)
    if bad:
        log.warning("refused a payload: %s", bad)
        return BoltResponse(status=400, body=f"malformed request: {bad}")
    return await next()


def problem(body: Any) -> str | None:
    """None when the bot can handle ``body``; otherwise why not, for a 400."""
    if not isinstance(body, dict):
        return "the payload is not a JSON object"
    if "ssl_check" in body:
        return None  # Slack's certificate check: bolt answers it
    if "command" in body:
        return _fields(body, SLASH_COMMAND, "command")
    bad = _fields(body, ENVELOPE, "payload")
    if bad:
        return bad
    kind = body.get("type")
    if kind == "url_verification":
        return _fields(body, {"challenge": STR}, "url_verification")
    if kind == "event_callback":
        return _event_problem(body)
    if kind == "block_actions":
        return _actions_problem(body)
    if kind == "view_submission":
        return _view_problem(body)
    return f"unsupported payload type {str(kind)[:40]!r}"


def _event_problem(body: dict[str, Any]) -> str | None:
    bad = _fields(body, EVENT_CALLBACK, "event_callback")
    if bad:
        return bad
    event = body["event"]
    kind = event.get("type")
    if not isinstance(kind, str):
        return "event.type must be a string"
    if kind == "app_mention":
        return _fields(event, APP_MENTION, "event")
    if kind == "subteam_members_changed":
        return _fields(event, SUBTEAM_MEMBERS_CHANGED, "event")
    if kind == "function_executed":
        return _fields(event, FUNCTION_EXECUTED, "event") or _fields(
            event["function"], FUNCTION, "event.function"
        )
    if kind == "subteam_updated":
        return _fields(event, SUBTEAM_UPDATED, "event") or _fields(
            event["subteam"], REFERENCE, "event.subteam"
        )
    if kind == "message":
        return _fields(event, MESSAGE, "event")
    if kind == "app_home_opened":
        return _fields(event, APP_HOME_OPENED, "event")
    if kind == "assistant_thread_started":
        return _fields(event, ASSISTANT_THREAD, "event") or _fields(
            event["assistant_thread"], THREAD, "event.assistant_thread"
        )
    if kind == "agent_session_stopped":
        return _fields(event, AGENT_SESSION_STOPPED, "event")
    # Any other event: bolt's matchers call .get() on these nested objects.
    return _fields(event, OTHER_EVENT, "event")


def _interactive_problem(body: dict[str, Any], spec: dict[str, str]) -> str | None:
    return (
        _fields(body, spec, body.get("type", "payload"))
        or _fields(body["user"], REFERENCE, "user")
        or _fields(body.get("team") or {}, OPTIONAL_REFERENCE, "team")
        or _fields(body.get("channel") or {}, OPTIONAL_REFERENCE, "channel")
        or _fields(body.get("container") or {}, CONTAINER, "container")
    )


def _actions_problem(body: dict[str, Any]) -> str | None:
    container = body.get("container")
    on_home = isinstance(container, dict) and container.get("type") == "view"
    # A click on a view (the App Home) comes with the view and no response URL.
    bad = _interactive_problem(body, HOME_ACTIONS if on_home else BLOCK_ACTIONS)
    if bad:
        return bad
    actions = body.get("actions")
    if not isinstance(actions, list) or not actions:
        return "actions must be a non-empty list"
    for action in actions:
        if not isinstance(action, dict):
            return "each action must be an object"
        bad = _fields(action, ACTION, "action") or _question_action_problem(action)
        if bad:
            return bad
    return None


CHOICE_ACTION = re.compile(CHOICE_PATTERN)
SELECTED_OPTION = {"value": STR}


def _question_action_problem(action: dict[str, Any]) -> str | None:
    """A question's answers carry the question's id and a choice's index (see blocks.values)."""
    action_id = action["action_id"]
    if action_id == SELECT:
        option = action.get("selected_option")
        if not isinstance(option, dict):
            return "action.selected_option must be a JSON object"
        bad = _fields(option, SELECTED_OPTION, "action.selected_option")
        if bad:
            return bad
        value = option["value"]
    elif CHOICE_ACTION.match(action_id):
        value = action.get("value")
    elif action_id == ANSWER:
        return None if isinstance(action.get("value"), str) else "action.value is missing"
    else:
        return None
    if parse_choice_value(value) is None:
        return "the action's value is not a choice of a question"
    return None


def _view_problem(body: dict[str, Any]) -> str | None:
    bad = _interactive_problem(body, VIEW_SUBMISSION)
    if bad:
        return bad
    view = body["view"]
    bad = _fields(view, VIEW, "view")
    if bad:
        return bad
    state = view.get("state") or {}
    if not isinstance(state.get("values", {}), dict):
        return "view.state.values must be an object"
    if view["callback_id"] == ANSWER_MODAL:
        return _answer_view_problem(state.get("values") or {})
    return None


def _answer_view_problem(values: dict[str, Any]) -> str | None:
    """The answer form's one input: a text value (absent or null when left empty)."""
    block = values.get(ANSWER_BLOCK)
    if block is None:
        return None
    if not isinstance(block, dict):
        return f"view.state.values.{ANSWER_BLOCK} must be an object"
    element = block.get(ANSWER_INPUT)
    if element is None:
        return None
    if not isinstance(element, dict):
        return "the answer input must be an object"
    return _fields(element, {"value": OPT_STR}, "the answer input")


def _fields(obj: Mapping[str, Any], spec: Mapping[str, str], where: str) -> str | None:
    for name, kind in spec.items():
        value = obj.get(name)
        if value is None:
            if not kind.endswith("?"):
                return f"{where}.{name} is missing"
            continue
        expected = {"str": str, "obj": dict, "bool": bool}[kind.rstrip("?")]
        if not isinstance(value, expected):
            return f"{where}.{name} must be a {_NAMES[expected]}"
    return None


_NAMES = {str: "string", dict: "JSON object", bool: "boolean"}
