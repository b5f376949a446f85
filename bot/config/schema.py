"""The configuration's JSON Schema for editors, and pydantic's errors as one line per problem.

``approval-bot config schema`` prints :func:`json_schema` (Taplo and VS Code complete and check
the file with it). :func:`validation_problems` turns a ``ValidationError`` into sentences that
name the key as the file spells it (``policies.restart_service.ttl``), so a broken file fails
at start-up with every problem listed, never with a traceback.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Union

from pydantic import (
    BaseModel,
    ValidationError,
)

from bot.config.models import Settings, ToolPolicySection


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
        if part == "[key]":  # pydantic's mark of a table's key (the key itself is named)
            continue
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
        if typing.get_origin(current) is dict:  # a table of sections: [agents.<name>]
            current = _unwrap(typing.get_args(current)[1])
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
