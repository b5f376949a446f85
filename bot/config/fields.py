"""The typed fields of the configuration file: durations, counts, ports, ids, URLs, CEL
conditions, each with its check and its JSON Schema.

Values keep the file's own syntax (``"45s"``, ``"30m"``, ``"2h"``, ``"1d"``); a check returns
the value in its Python form or fails with a sentence for the person who wrote the file.
:mod:`bot.config.models` declares the sections with these fields.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    PlainValidator,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from bot.policy.policy import APPROVAL_CHOICES, ON_EXPIRY_CHOICES
from bot.policy.recovery import ON_ERROR_CHOICES
from bot.policy.rules import Condition, RuleSyntaxError, compile_condition
from storage.urls import check_database_url

_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")


_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


DURATION_PATTERN = r"^\s*0*[1-9][0-9]*\s*[smhd]\s*$"


# The longest duration anything takes (an expiry, a lease, a grant, a step's timeout): a
# year. Longer ones are mistakes, and past about 2.7 million years (or 10,000 from now) the
# arithmetic overflows, which was an HTTP 500 for a step and a traceback for a config file.
LONGEST_DURATION = timedelta(days=365)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_problem(value: Any, longest: timedelta = LONGEST_DURATION) -> timedelta | str:
    """``"30m"`` -> 30 minutes; anything else, or anything longer than ``longest`` (a year
    by default), -> what is wrong with it."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match and int(match.group(1)) > 0:
            seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            if seconds > longest.total_seconds():
                return f"{value!r} is too long; the longest is {_days(longest)}"
            return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    return (
        f"{value!r} is not a duration; write a positive number and a unit, "
        'like "45s", "30m", "2h" or "1d"'
    )


def _days(duration: timedelta) -> str:
    days = duration.total_seconds() / 86400
    return f'{days:g} days ("{days:g}d")' if days >= 1 else f'"{int(duration.total_seconds())}s"'


def check_public_url(value: Any) -> str:
    """An http(s) base URL, without a trailing slash; ValueError says what is wrong."""
    if not isinstance(value, str) or not re.match(r"^https?://[^\s/]+(/\S*)?$", value.strip()):
        raise ValueError(
            f"{value!r} is not an http(s) URL like https://bot.example.com (where the "
            "outside world reaches this bot's port)"
        )
    return value.strip().rstrip("/")


def _fail(message: str) -> PydanticCustomError:
    return PydanticCustomError("config", message)


def _duration(value: Any) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    parsed = duration_problem(value)
    if isinstance(parsed, str):
        raise _fail(parsed)
    return parsed


def _count(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _fail(f"{value!r} must be a whole number of at least 1")
    return value


def _threshold(value: Any) -> int | None:
    """A count where 0 turns the feature off (``batch_threshold``)."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail(f"{value!r} must be a whole number of at least 0 (0 turns it off)")
    return value


def _port(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
        raise _fail(f"{value!r} must be a TCP port (1-65535)")
    return value


MCP_SERVER_NAME_PATTERN = r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$"


def _mcp_server_name(value: Any) -> str:
    # Its tools are NAME__tool: a "__" (or a "_" at either end) in NAME would blur the split.
    if (
        not isinstance(value, str)
        or not re.match(MCP_SERVER_NAME_PATTERN, value)
        or len(value) > 32
    ):
        raise _fail(
            f"{value!r} is not a server name: letters, digits, '-' and single '_' inside, "
            "at most 32 characters (its tools are named NAME__tool)"
        )
    return value


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _fail("must be a non-empty string")
    return value


def _channel(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[CG][A-Z0-9]{2,}", value.strip()):
        raise _fail('must be a Slack channel id, like "C0APPROVALS"')
    return value.strip()


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail("must be true or false")
    return value


def _ids(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(a, str) and a.strip() for a in value):
        raise _fail("must be a list of Slack user or user-group ids")
    return [a.strip() for a in value]


def _tool_refs(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
        raise _fail('must be a list of import references like "pkg.module:name"')
    return list(value)


SLASH_COMMAND_PATTERN = r"^/[a-z0-9_-]{1,31}$"


def _slash_command(value: Any) -> str:
    if not isinstance(value, str) or not re.match(SLASH_COMMAND_PATTERN, value):
        raise _fail(
            f"{value!r} is not a slash command: a / then up to 31 lowercase letters, digits, "
            '- or _, like "/approvals" (the same name as the command in manifest.yml)'
        )
    return value


def _choice(choices: tuple[str, ...]) -> Any:
    spelled = " or ".join(f'"{c}"' for c in choices)
    if len(choices) > 2:
        spelled = ", ".join(f'"{c}"' for c in choices[:-1]) + f' or "{choices[-1]}"'

    def check(value: Any) -> str | None:
        if value is None:
            return None
        if value not in choices:
            raise _fail(f"{value!r} must be {spelled}")
        return str(value)

    return check


def _database_url(value: Any) -> str:
    text = _text(value)
    try:
        check_database_url(text or "")
    except ValueError as exc:
        raise _fail(str(exc)) from None
    return text or ""


def _public_url(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return check_public_url(value)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _condition(value: Any) -> Condition:
    if not isinstance(value, str):
        raise _fail("must be a CEL expression in a string, like 'args.env == \"prod\"'")
    try:
        return compile_condition(value)
    except RuleSyntaxError as exc:
        raise _fail(str(exc)) from None


def _typed(kind: Any, check: Any, schema: dict[str, Any]) -> Any:
    return Annotated[kind, PlainValidator(check), WithJsonSchema(schema)]


DURATION_SCHEMA = {
    "type": "string",
    "pattern": DURATION_PATTERN,
    "description": 'A positive number and a unit: "45s", "30m", "2h" or "1d".',
}


IDS_SCHEMA = {
    "type": "array",
    "items": {"type": "string", "pattern": r"\S"},
    "description": "Slack user ids (U…) and user-group ids (S…).",
}


Duration = _typed(timedelta, _duration, DURATION_SCHEMA)


OptionalDuration = _typed(timedelta | None, _duration, DURATION_SCHEMA)


Count = _typed(int, _count, {"type": "integer", "minimum": 1})


OptionalCount = _typed(int | None, _count, {"type": "integer", "minimum": 1})


Threshold = _typed(int, _threshold, {"type": "integer", "minimum": 0})


OptionalThreshold = _typed(int | None, _threshold, {"type": "integer", "minimum": 0})


Port = _typed(int | None, _port, {"type": "integer", "minimum": 1, "maximum": 65535})


McpServerName = _typed(
    str, _mcp_server_name, {"type": "string", "pattern": MCP_SERVER_NAME_PATTERN, "maxLength": 32}
)


AGENT_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"


def _agent_name(value: Any) -> str:
    # Shown in the thread ("🤖 researcher is working on: …") and given to delegate(agent=…).
    if not isinstance(value, str) or not re.match(AGENT_NAME_PATTERN, value):
        raise _fail(
            f"{value!r} is not an agent name: a lowercase letter, then lowercase letters, "
            "digits, '-' or '_', at most 32 characters"
        )
    return value


AgentName = _typed(
    str, _agent_name, {"type": "string", "pattern": AGENT_NAME_PATTERN, "maxLength": 32}
)


Text = _typed(str, _text, {"type": "string", "minLength": 1, "pattern": r"\S"})


OptionalText = _typed(str | None, _text, {"type": "string", "minLength": 1, "pattern": r"\S"})


Flag = _typed(bool, _flag, {"type": "boolean"})


OptionalChannel = _typed(str | None, _channel, {"type": "string", "pattern": "^[CG][A-Z0-9]{2,}$"})


Ids = _typed(list[str], _ids, IDS_SCHEMA)


OptionalIds = _typed(list[str] | None, _ids, IDS_SCHEMA)


ToolRefs = _typed(
    list[str],
    _tool_refs,
    {"type": "array", "items": {"type": "string"}, "description": '"pkg.module:name"'},
)


SlashCommand = _typed(
    str,
    _slash_command,
    {
        "type": "string",
        "pattern": SLASH_COMMAND_PATTERN,
        "description": "The slash command's name, as manifest.yml declares it.",
    },
)


Approval = _typed(str, _choice(APPROVAL_CHOICES), {"enum": list(APPROVAL_CHOICES)})


OptionalApproval = _typed(str | None, _choice(APPROVAL_CHOICES), {"enum": list(APPROVAL_CHOICES)})


OnExpiry = _typed(str, _choice(ON_EXPIRY_CHOICES), {"enum": list(ON_EXPIRY_CHOICES)})


OptionalOnExpiry = _typed(str | None, _choice(ON_EXPIRY_CHOICES), {"enum": list(ON_EXPIRY_CHOICES)})


OnError = _typed(str, _choice(ON_ERROR_CHOICES), {"enum": list(ON_ERROR_CHOICES)})


# How a run's answer reaches its thread (handlers.slack.streams): Slack's text streaming
# where it is accepted ("auto"), always ("on"), or the edited progress message ("off").
STREAMING_CHOICES = ("auto", "on", "off")
Streaming = _typed(str, _choice(STREAMING_CHOICES), {"enum": list(STREAMING_CHOICES)})

OptionalOnError = _typed(str | None, _choice(ON_ERROR_CHOICES), {"enum": list(ON_ERROR_CHOICES)})


DatabaseUrl = _typed(str, _database_url, {"type": "string", "minLength": 1})


PublicUrl = _typed(str | None, _public_url, {"type": "string", "pattern": r"^https?://[^\s/]+"})


When = _typed(
    Condition,
    _condition,
    {
        "type": "string",
        "minLength": 1,
        "description": "A CEL condition over args, requester and channel.",
    },
)
