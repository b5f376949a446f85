"""Checking a tool call's arguments against the tool's JSON schema before anyone is asked.

A call that cannot run (a value past the schema's ``maximum``, a missing required argument, a
string where a number goes) used to be drafted, shown on a card and approved, and only fail
when it ran: a human bothered for nothing. The gate asks this module first and, on an error,
answers the model with it instead of pausing, so the model can correct the call or say what
it needs.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

log = logging.getLogger(__name__)


def argument_error(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """The most relevant way ``arguments`` break ``schema``, in one line, or None."""
    if not schema:
        return None
    return schema_text_error(schema_text(schema), arguments)


def schema_text(schema: dict[str, Any]) -> str:
    """The text a schema's validator is cached under (:func:`schema_validator`)."""
    return json.dumps(schema, sort_keys=True)


def schema_text_error(text: str, arguments: dict[str, Any]) -> str | None:
    """:func:`argument_error` for a schema serialized once by :func:`schema_text` (a tool's,
    when the gate wraps it: serializing it per call took a third of the check's time)."""
    validator = schema_validator(text)
    if validator is None:
        return None
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{error.message} (at {where})" if where else error.message


@functools.lru_cache(maxsize=512)
def schema_validator(schema_text: str) -> Any | None:
    """A compiled validator per schema (jsonschema is imported on the first gated call, not
    at start-up); None for a schema jsonschema cannot use, which is then not checked."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    schema = json.loads(schema_text)
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        log.warning("a tool's input schema is not valid JSON Schema, not checked: %s", exc)
        return None
    return cls(schema)


# Deeper arguments are refused before an approval is drafted (no real tool needs them):
# hashing, storing and rendering them recurse, and ~900 levels exhaust Python's stack.
MAX_ARGUMENT_DEPTH = 100


def too_deep(value: Any, limit: int) -> bool:
    """Whether lists and objects in ``value`` nest more than ``limit`` deep (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
