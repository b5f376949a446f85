"""Reading a submitted edit modal back into a call's arguments, and its errors into its blocks.

Holds no state. The fields are those the modal was built from (:mod:`handlers.blocks.edits`,
from the approval and the tool's schema), never what the submission claims, so a crafted form
can add no argument the modal did not show. Each value is typed as its field says; what
cannot be read is an error for the person in the modal, next to its input, and the schema
check (``bot.policy``) then judges what could.
"""

from __future__ import annotations

import json
import math
from typing import Any

from handlers.blocks.edits import (
    ERROR_LIMIT,
    FIELD_PREFIX,
    VALUE,
    WHOLE_BLOCK,
    Form,
    current_arguments,
    edit_fields,
    field_kind,
)
from storage.models import Approval


def _typed(form: Form, block_id: str) -> str | None:
    """The text of one input ("" and None alike: left empty); None when not sent."""
    state = form.get(block_id)
    value = state.get(VALUE) if isinstance(state, dict) else None
    if not isinstance(value, dict):
        return None
    text = value.get("value")
    if text is None and isinstance(value.get("selected_option"), dict):
        text = value["selected_option"].get("value")
    return text if isinstance(text, str) and text.strip() else None


def _not_a_number(word: str) -> Any:
    raise ValueError(f"{word} is not a JSON number; use a finite number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:20]} is too large; use a finite number")
    return number


def _parse(kind: str, text: str) -> Any:
    """A typed value from its text; ValueError with a message for people."""
    stripped = text.strip()
    if kind in ("string", "enum"):
        return text
    if kind == "integer":
        try:
            return int(stripped)
        except ValueError:
            raise ValueError("Enter a whole number, like 10.") from None
    if kind == "number":
        try:
            number = float(stripped)
        except ValueError:
            raise ValueError("Enter a number, like 2.5.") from None
        if not math.isfinite(number):
            raise ValueError("Enter a finite number.")
        return int(number) if number.is_integer() and "." not in stripped else number
    if kind == "boolean":
        if stripped.lower() in ("true", "yes"):
            return True
        if stripped.lower() in ("false", "no"):
            return False
        raise ValueError("Enter true or false.")
    try:
        # JSON has no NaN or Infinity (and reads 1e400 as infinity): they would be stored,
        # and run, as the strings "NaN" and "Infinity" (storage.values), not as typed.
        return json.loads(stripped, parse_constant=_not_a_number, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"Not valid JSON: {exc}"[:ERROR_LIMIT]) from None


def read_form(
    approval: Approval, schema: dict[str, Any], form: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments a submitted edit form holds, and errors keyed by block_id.

    Built over the same fields as the modal (from the approval and schema, not from what
    the submission claims), so a crafted form can add no argument the modal did not show.
    """
    form = form if isinstance(form, dict) else {}
    arguments = current_arguments(approval)
    fields = edit_fields(schema, arguments)
    errors: dict[str, str] = {}
    if fields is None:
        text = _typed(form, WHOLE_BLOCK)
        if text is None:
            return {}, {WHOLE_BLOCK: "Enter the arguments as a JSON object."}
        try:
            value = _parse("json", text)
        except ValueError as exc:
            return {}, {WHOLE_BLOCK: str(exc)}
        if not isinstance(value, dict):
            return {}, {WHOLE_BLOCK: "The arguments must be a JSON object: {…}."}
        return value, {}
    edited: dict[str, Any] = {}
    for name, prop in fields.items():
        text = _typed(form, FIELD_PREFIX + name)
        if text is None:
            continue  # left empty: not passed (the schema says whether it must be)
        try:
            edited[name] = _parse(field_kind(prop), text)
        except ValueError as exc:
            errors[FIELD_PREFIX + name] = str(exc)[:ERROR_LIMIT]
    return edited, errors


def errors_by_block(
    approval: Approval, schema: dict[str, Any], errors: dict[str, str]
) -> dict[str, str]:
    """Schema errors (by argument name, "" for the whole) keyed by the modal's block_ids."""
    arguments = current_arguments(approval)
    fields = edit_fields(schema, arguments)
    blocks: dict[str, str] = {}
    for name, message in errors.items():
        if fields is not None and name in fields:
            block = FIELD_PREFIX + name
        elif fields is not None:
            block = FIELD_PREFIX + next(iter(fields))
        else:
            block = WHOLE_BLOCK
        own = block == FIELD_PREFIX + name or fields is None or not name
        text = message if own else f"{name}: {message}"
        blocks.setdefault(block, text[:ERROR_LIMIT])
    return blocks
