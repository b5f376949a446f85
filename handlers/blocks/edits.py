"""Block Kit for edit-then-approve: the Edit button, the modal built from the tool's JSON
schema, and the card's note on an edit (the modal's form is read back in
:mod:`handlers.blocks.edit_submissions`).

Holds no state. One input per top-level argument: strings, numbers and booleans as
plain-text inputs (typed and checked here and against the schema), an enum as a menu of its
values, anything nested as JSON. Each input's hint says its limits (a number's range, a
text's length), which the schema check enforces on submission.
A schema without properties, or arguments the properties do not cover, get one JSON input
for the whole call. The tool's name is shown, never an input: an edit cannot change it.
"""

from __future__ import annotations

import json
from typing import Any

from bot.policy import changes_text
from handlers.blocks.forms import form_modal
from handlers.blocks.kit import (
    Block,
    button,
    escaped_within,
    mention,
    shown_name,
    slack_date,
)
from handlers.blocks.values import approve_value
from storage.models import Approval

EDIT = "approval_edit"
EDIT_MODAL = "approval_edit_modal"
FIELD_PREFIX = "edit_arg:"
WHOLE_BLOCK = "edit_arguments"
VALUE = "value"
# Slack: a modal holds 100 blocks, an input 3000 characters, an error 150 (our cut-off).
MAX_FIELDS = 95
INPUT_LIMIT = 3000
ERROR_LIMIT = 150
LABEL_LIMIT = 2000
HINT_LIMIT = 2000
SUBMIT = "Approve as edited"  # Slack: a submit button's text is at most 24 characters

Form = dict[str, dict[str, Any]]


def current_arguments(approval: Approval) -> dict[str, Any]:
    """What would run: the edited arguments once edited, else the proposed ones."""
    edited = getattr(approval, "edited_arguments", None)
    return edited if edited is not None else approval.arguments


def edit_button(approval: Approval) -> Block:
    return button(EDIT, "Edit, then approve", approval.id)


def editable(approval: Approval) -> bool:
    # A recovery (on_error = "ask") too: Edit, then retry.
    allowed = bool(getattr(approval, "allow_edit", False))
    return allowed and approval.kind in ("approval", "recovery")


# -- the modal ----------------------------------------------------------------------------


def _variants(schema: Any) -> list[dict[str, Any]]:
    """The non-null alternatives of a property schema (pydantic writes Optional as anyOf)."""
    if not isinstance(schema, dict):
        return []
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return [v for v in schema[key] if isinstance(v, dict) and v.get("type") != "null"]
    return [schema]


def field_kind(schema: Any) -> str:
    """How a property is typed in: string, integer, number, boolean, enum, or json."""
    variants = _variants(schema)
    if len(variants) != 1:
        return "json"
    variant = variants[0]
    enum = variant.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(e, str) for e in enum):
        return "enum"
    kind = variant.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    return kind if kind in ("string", "integer", "number", "boolean") else "json"


def edit_fields(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any] | None:
    """The properties to give an input each, or None: one JSON input for the whole call."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or not properties or len(properties) > MAX_FIELDS:
        return None
    if any(name not in properties for name in arguments):
        return None
    if any(len(FIELD_PREFIX + str(name)) > 255 for name in properties):
        return None
    return properties


def _initial(kind: str, value: Any) -> str:
    if kind in ("string", "enum") and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return "true" if value else "false"
    if kind == "json":
        return json.dumps(value, indent=2, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


# Slack: a static_select holds at most 100 options of at most 75 characters each.
MAX_OPTIONS = 100
OPTION_LIMIT = 75


def _number(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return str(int(value)) if float(value).is_integer() else str(value)


def _limits(kind: str, variant: dict[str, Any]) -> str:
    """ "From 0 to 50.", "At least 1.", "Up to 64 characters." — what the schema allows."""
    if kind in ("integer", "number"):
        low, high = _number(variant.get("minimum")), _number(variant.get("maximum"))
        above, below = (
            _number(variant.get("exclusiveMinimum")),
            _number(variant.get("exclusiveMaximum")),
        )
        parts = []
        if low is not None and high is not None:
            return f"From {low} to {high}."
        if low is not None:
            parts.append(f"at least {low}")
        if above is not None:
            parts.append(f"more than {above}")
        if high is not None:
            parts.append(f"at most {high}")
        if below is not None:
            parts.append(f"less than {below}")
        return (" and ".join(parts).capitalize() + ".") if parts else ""
    if kind == "string":
        shortest, longest = variant.get("minLength"), variant.get("maxLength")
        if isinstance(shortest, int) and isinstance(longest, int):
            return f"{shortest} to {longest} characters."
        if isinstance(longest, int):
            return f"Up to {longest} characters."
        if isinstance(shortest, int) and shortest > 0:
            return f"At least {shortest} characters."
    return ""


def _hint(kind: str, schema: dict[str, Any]) -> str:
    variant = (_variants(schema) or [{}])[0]
    description = schema.get("description") or variant.get("description") or ""
    typed = {
        "string": "",
        "integer": "A whole number.",
        "number": "A number.",
        "boolean": "true or false.",
        "enum": "" if _menu(variant) else "One of: " + ", ".join(map(str, _enum(variant))) + ".",
        "json": "JSON.",
    }[kind]
    parts = (description, typed, _limits(kind, variant))
    return " ".join(p for p in parts if p)[:HINT_LIMIT]


def _enum(variant: dict[str, Any]) -> list[str]:
    return [str(e) for e in variant.get("enum") or []]


def _menu(variant: dict[str, Any]) -> bool:
    """An enum Slack can show as a menu (else a text input checked against it)."""
    values = _enum(variant)
    return 0 < len(values) <= MAX_OPTIONS and all(0 < len(v) <= OPTION_LIMIT for v in values)


def _option(value: str) -> Block:
    return {"text": {"type": "plain_text", "text": value}, "value": value}


def _input(
    block_id: str,
    label: str,
    kind: str,
    value: Any,
    *,
    present: bool,
    optional: bool,
    schema: dict[str, Any] | None = None,
) -> Block:
    variant = (_variants(schema or {}) or [{}])[0]
    element: Block = {
        "type": "plain_text_input",
        "action_id": VALUE,
        "multiline": kind == "json",
    }
    if kind == "enum" and _menu(variant):
        element = {
            "type": "static_select",
            "action_id": VALUE,
            "placeholder": {"type": "plain_text", "text": "Choose one"},
            "options": [_option(v) for v in _enum(variant)],
        }
        if present and isinstance(value, str) and value in _enum(variant):
            element["initial_option"] = _option(value)
    elif present:
        initial = _initial(kind, value)
        if len(initial) <= INPUT_LIMIT:
            element["initial_value"] = initial
    return {
        "type": "input",
        "block_id": block_id,
        # Slack marks the others "(optional)"; the schema check says what is missing anyway.
        "optional": optional,
        "label": {"type": "plain_text", "text": label[:LABEL_LIMIT] or "arguments"},
        "element": element,
    }


def render_edit_modal(approval: Approval, schema: dict[str, Any]) -> Block:
    """The edit form, prefilled with the arguments to approve (an earlier edit's, if any).

    ``private_metadata`` is the approval id and the fingerprint of the arguments shown (as
    an Approve button's value): a submission after someone else's edit is refused rather
    than applied over arguments its author never saw. The submission reads everything else
    (the tool, its schema, who may decide) from the database again.
    """
    arguments = current_arguments(approval)
    retry = approval.kind == "recovery"
    then = "run it again with these arguments" if retry else "approve it with these arguments"
    intro = (
        f"Edit the arguments of `{shown_name(approval.tool_name)}`, asked by "
        f"{mention(approval.requester)}, then *{then}*. The tool "
        "cannot be changed. The agent will be told what you changed."
    )
    blocks: list[Block] = [{"type": "section", "text": {"type": "mrkdwn", "text": intro}}]
    fields = edit_fields(schema, arguments)
    if fields is None:
        blocks.append(
            _input(WHOLE_BLOCK, "Arguments (JSON)", "json", arguments, present=True, optional=False)
        )
    else:
        required = set(schema.get("required") or [])
        for name, prop in fields.items():
            kind = field_kind(prop)
            block = _input(
                FIELD_PREFIX + name,
                name,
                kind,
                arguments.get(name),
                present=name in arguments,
                optional=name not in required,
                schema=prop if isinstance(prop, dict) else {},
            )
            if hint := _hint(kind, prop if isinstance(prop, dict) else {}):
                block["hint"] = {"type": "plain_text", "text": hint}
            blocks.append(block)
    return form_modal(
        EDIT_MODAL,
        approve_value(approval),
        title="Edit, then retry" if retry else "Edit, then approve",
        submit="Retry" if retry else SUBMIT,
        blocks=blocks,
    )


# -- the card ----------------------------------------------------------------------------


def edit_context(approval: Approval) -> Block | None:
    """The card's line on an edit: who changed what (and, while it still waits, why the
    edited call asks for more approvers)."""
    edited = getattr(approval, "edited_arguments", None)
    if edited is None:
        return None
    when = slack_date(approval.edited_at) if approval.edited_at else ""
    what = escaped_within(changes_text(approval.arguments, edited), 2000)
    text = f":pencil2: Edited by {mention(approval.edited_by or '')} {when}: {what}"
    if approval.status == "pending" and approval.reason:
        text += f"\n:lock: Still waiting: {escaped_within(approval.reason, 500)}."
    return {
        "type": "context",
        "block_id": "approval_edit",
        "elements": [{"type": "mrkdwn", "text": text}],
    }
