"""The configuration file's typed form: pydantic models, their checks and their JSON Schema.

Every key is declared once here, with the type, default and check that the file's users see
(``approval-bot config schema`` prints the JSON Schema editors complete and check with).
Values keep the file's own syntax: durations are ``"45s"``, ``"30m"``, ``"2h"``, ``"1d"``;
conditions are CEL (checked by ``bot.rules``). Unknown keys are errors. Validation collects
every problem in the file, each named by its key path (``policies.refund.rules[0].when``),
for ``bot.config`` to report at once. Owns no state.
"""

from __future__ import annotations

import re
import types
import typing
from datetime import timedelta
from typing import Annotated, Any, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bot.policy import APPROVAL_CHOICES, ON_EXPIRY_CHOICES
from bot.rules import Condition, RuleSyntaxError, compile_condition
from storage.urls import check_database_url

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///approval-bot.db"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_SYSTEM_PROMPT = (
    "You are an operations assistant working in a Slack thread. Use the tools you are given. "
    "Some tools need a human's approval before they run; if a call is denied or expires, "
    "say so plainly and do not try to get around it."
)
ASK_USER = "ask_user"

_DURATION = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
DURATION_PATTERN = r"^\s*0*[1-9][0-9]*\s*[smhd]\s*$"


def duration_problem(value: Any) -> timedelta | str:
    """``"30m"`` -> 30 minutes; anything else -> what is wrong with it."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match and int(match.group(1)) > 0:
            return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    return (
        f"{value!r} is not a duration; write a positive number and a unit, "
        'like "45s", "30m", "2h" or "1d"'
    )


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


# -- value types: each its check (with the message users read) and its JSON Schema -----------


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


def _port(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
        raise _fail(f"{value!r} must be a TCP port (1-65535)")
    return value


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _fail("must be a non-empty string")
    return value


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


def _choice(choices: tuple[str, ...]) -> Any:
    spelled = " or ".join(f'"{c}"' for c in choices)
    if len(choices) > 2:
        spelled = ", ".join(f'"{c}"' for c in choices[:-1]) + f' or "{choices[-1]}"'

    def check(value: Any) -> str | None:
        if value is None:
            return None
        if value not in choices:
            raise _fail(f"{value!r} must be {spelled}")
        return value

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
Port = _typed(int | None, _port, {"type": "integer", "minimum": 1, "maximum": 65535})
Text = _typed(str, _text, {"type": "string", "minLength": 1, "pattern": r"\S"})
OptionalText = _typed(str | None, _text, {"type": "string", "minLength": 1, "pattern": r"\S"})
Flag = _typed(bool, _flag, {"type": "boolean"})
Ids = _typed(list[str], _ids, IDS_SCHEMA)
OptionalIds = _typed(list[str] | None, _ids, IDS_SCHEMA)
ToolRefs = _typed(
    list[str],
    _tool_refs,
    {"type": "array", "items": {"type": "string"}, "description": '"pkg.module:name"'},
)
Approval = _typed(str, _choice(APPROVAL_CHOICES), {"enum": list(APPROVAL_CHOICES)})
OptionalApproval = _typed(str | None, _choice(APPROVAL_CHOICES), {"enum": list(APPROVAL_CHOICES)})
OnExpiry = _typed(str, _choice(ON_EXPIRY_CHOICES), {"enum": list(ON_EXPIRY_CHOICES)})
OptionalOnExpiry = _typed(str | None, _choice(ON_EXPIRY_CHOICES), {"enum": list(ON_EXPIRY_CHOICES)})
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


# -- the sections ----------------------------------------------------------------------------


class Section(BaseModel):
    """A table of the file: unknown keys are errors; defaults are checked like values."""

    model_config = ConfigDict(
        extra="forbid", arbitrary_types_allowed=True, validate_default=True, frozen=True
    )


class RuleSection(Section):
    """One ``[[policies.<tool>.rules]]``: its condition, and the keys it overrides."""

    when: When
    approval: OptionalApproval = None
    approvers: OptionalIds = None
    min_approvals: OptionalCount = None
    ttl: OptionalDuration = None
    on_expiry: OptionalOnExpiry = None
    message: OptionalText = None


class ToolPolicySection(Section):
    """``[policies.<tool name>]``: who approves its calls, and its rules on arguments."""

    model_config = ConfigDict(
        json_schema_extra={
            "dependentRequired": {
                "escalate_after": ["escalate_to"],
                "escalate_to": ["escalate_after"],
            }
        }
    )

    approval: Approval = "required"
    approvers: Ids = Field(default_factory=list)
    allow_self_approval: Flag = False
    ttl: OptionalDuration = Field(None, description="Default: approval_ttl.")
    on_expiry: OnExpiry = "deny"
    message: OptionalText = Field(None, description='What the model reads on approval = "deny".')
    rules: list[RuleSection] = Field(default_factory=list)
    min_approvals: Count = 1
    allow_edit: Flag = False
    grant_max: OptionalDuration = None
    remind_after: OptionalDuration = None
    escalate_after: OptionalDuration = Field(None, description="Needs escalate_to.")
    escalate_to: Ids = Field(default_factory=list, description="Needs escalate_after.")

    @model_validator(mode="after")
    def _escalation_is_whole(self) -> ToolPolicySection:
        # One escalation: when, and whom it adds as approvers; either alone means nothing.
        if self.escalate_after is not None and not self.escalate_to:
            raise _key_problem(
                "escalate_after", "needs escalate_to, the people or groups to add as approvers"
            )
        if self.escalate_to and self.escalate_after is None:
            raise _key_problem("escalate_to", "needs escalate_after, when to add them")
        return self

    @model_validator(mode="after")
    def _quorum_can_be_reached(self) -> ToolPolicySection:
        # Users only (a user group's size is Slack's to know): no more approvals than the
        # people named, counting those escalate_to adds later.
        problem = _unreachable(self.approvers, self.escalate_to, self.min_approvals)
        if problem:
            raise _key_problem("min_approvals", problem)
        return self

    def unreachable_rule_quorums(self) -> list[str]:
        """``rules[i].min_approvals: why`` for each rule whose calls can never get their
        quorum (its own or the tool's approvers, and min_approvals). Warned about, not
        refused: such calls only ever expire, and the issue's own example has one."""
        found = []
        for index, rule in enumerate(self.rules):
            if (rule.approval or self.approval) != "required":
                continue  # nobody approves its calls
            approvers = self.approvers if rule.approvers is None else rule.approvers
            needed = self.min_approvals if rule.min_approvals is None else rule.min_approvals
            problem = _unreachable(approvers, self.escalate_to, needed)
            if problem:
                found.append(f"rules[{index}].min_approvals: {problem}")
        return found


def _unreachable(approvers: list[str], escalate_to: list[str], needed: int) -> str | None:
    named = {*approvers, *escalate_to} if approvers else set()
    if named and not any(a.startswith("S") for a in named) and needed > len(named):
        return f"{needed} distinct approvals can never be given by the {len(named)} approvers named"
    return None


def _key_problem(key: str, message: str) -> PydanticCustomError:
    """A problem a section's check finds with one of its keys (named in the path)."""
    return PydanticCustomError("config_key", message, {"key": key})


class AskUserSection(Section):
    """``[policies.ask_user]``: who may answer the built-in ask_user tool's questions."""

    answerers: Ids = Field(default_factory=list)
    ttl: OptionalDuration = None
    on_expiry: OnExpiry = "deny"


class Policies(Section):
    """``[policies]``: a section per tool, and ``ask_user`` for the built-in tool."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, ToolPolicySection] = Field(init=False)  # type: ignore[assignment]

    ask_user: AskUserSection | None = None

    def tools(self) -> dict[str, ToolPolicySection]:
        return dict(self.__pydantic_extra__ or {})


class ToolPolicies(Policies):
    """``[policies]`` when a configured tool is itself named ask_user: its section is a
    tool's like any other."""

    ask_user: ToolPolicySection | None = None  # type: ignore[assignment]

    def tools(self) -> dict[str, ToolPolicySection]:
        extra = super().tools()
        return {**extra, ASK_USER: self.ask_user} if self.ask_user is not None else extra


class Settings(Section):
    """The whole file (``approval-bot.toml``); every key is optional."""

    model_config = ConfigDict(title="approval-bot configuration")

    model: Text = DEFAULT_MODEL
    system_prompt: Text = DEFAULT_SYSTEM_PROMPT
    tools: ToolRefs = Field(default_factory=list)
    approval_ttl: Duration = "30m"
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL
    chain_limit: Count = 10
    max_approvals_per_turn: Count = 10
    run_lease: Duration = "5m"
    sweep_interval: Duration = "30s"
    shutdown_grace: Duration = "25s"
    metrics_port: Port = None
    policies: Policies = Field(default_factory=Policies)
    ask_user: Flag = True
    public_url: PublicUrl = None
    max_retry_wait: Duration = "1d"
    max_retry_attempts: Count = 5
    approver_dm_limit: Count = 25


class SettingsWithAskUserTool(Settings):
    policies: ToolPolicies = Field(default_factory=ToolPolicies)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the file (TOML read as JSON), for editors."""
    schema = _without_null_defaults(Settings.model_json_schema())
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _without_null_defaults(value: Any) -> Any:
    """A key left out of the file has no value to suggest; ``"default": null`` would offer
    editors a value the key does not take."""
    if isinstance(value, dict):
        return {
            k: _without_null_defaults(v)
            for k, v in value.items()
            if not (k == "default" and v is None)
        }
    if isinstance(value, list):
        return [_without_null_defaults(v) for v in value]
    return value


# -- errors, each named by its key path ---------------------------------------------------------


def validation_problems(error: ValidationError, model: type[BaseModel]) -> list[str]:
    """One line per problem: ``key.path: what is wrong``."""
    problems = []
    for item in error.errors():
        loc = item["loc"]
        kind = item["type"]
        if kind == "extra_forbidden":
            known = ", ".join(sorted(_section_at(model, loc[:-1]).model_fields))
            if len(loc) == 1:
                problems.append(f"unknown key {loc[0]!r} (known: {known})")
            else:
                problems.append(f"{key_path(loc)}: unknown key (known: {known})")
            continue
        if kind == "config_key":
            problems.append(f"{key_path((*loc, item['ctx']['key']))}: {item['msg']}")
            continue
        if kind == "missing":
            message = "is required"
        elif kind in ("model_type", "dict_type", "model_attributes_type"):
            message = "must be a table"
            if loc == ("policies",):
                message = "must be a table of [policies.<tool name>] sections"
        elif kind == "list_type":
            message = "must be a list of tables ([[...]] sections)"
        else:
            message = item["msg"]
        problems.append(f"{key_path(loc)}: {message}")
    return problems


def key_path(loc: tuple[Any, ...]) -> str:
    """``("policies", "refund", "rules", 0, "when")`` -> ``policies.refund.rules[0].when``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _section_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The section class that validated the table at ``loc``."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            current = _unwrap(current)
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            # Not a field: a tool's section in [policies].
            current = field.annotation if field is not None else ToolPolicySection
        current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else model


def _unwrap(kind: Any) -> Any:
    """``list[X]``, ``X | None``, ``Annotated[X, …]`` -> ``X``."""
    while True:
        origin = typing.get_origin(kind)
        if origin is Annotated:
            kind = typing.get_args(kind)[0]
        elif origin in (Union, types.UnionType):
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        elif origin is list:
            kind = typing.get_args(kind)[0]
        else:
            return kind
