"""Block Kit as Slack checks it: the limits a message's or modal's blocks must respect.

Slack rejects over-long texts, too many blocks or elements and duplicate ids with
``invalid_blocks``; the double does too, so the bot is held to truncating, never failing.
Also the ``rich_text`` blocks a Slack client attaches to a message a person types.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from playground.slack_server.records import Json, _ApiError, _random_id

MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
MAX_MESSAGE_TEXT = 40_000
MENTION_RE = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


def _text_length(obj: Any) -> int:
    """Length of a text object's ``text`` (0 when absent)."""
    return len(obj.get("text", "")) if isinstance(obj, dict) else 0


def _element_problems(element: Json) -> list[str]:
    """Limits Slack enforces on a block element (the bot must truncate, not fail)."""
    problems = []
    if len(element.get("action_id", "")) > 255:
        problems.append("action_id must be at most 255 characters")
    if element.get("type") == "button":
        if len(element.get("value", "")) > 2000:
            problems.append("button value must be at most 2000 characters")
        if _text_length(element.get("text")) > 75:
            problems.append("button text must be at most 75 characters")
    if element.get("type") == "static_select":
        options = element.get("options")
        if not isinstance(options, list) or not 1 <= len(options) <= 100:
            problems.append("a static_select holds 1 to 100 options")
        else:
            for option in options:
                if not isinstance(option, dict) or _text_length(option.get("text")) > 75:
                    problems.append("option text must be at most 75 characters")
                elif len(option.get("value", "")) > 150:
                    problems.append("option value must be at most 150 characters")
        if _text_length(element.get("placeholder")) > 150:
            problems.append("placeholder text must be at most 150 characters")
    return problems


def _block_problems(block: Any) -> list[str]:
    """Limits Slack enforces on one block."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return ["every block must be an object with a type"]
    problems = []
    if len(block.get("block_id", "")) > 255:
        problems.append("block_id must be at most 255 characters")
    if block["type"] == "section" and _text_length(block.get("text")) > 3000:
        problems.append("section text must be at most 3000 characters")
    if block["type"] == "header" and _text_length(block.get("text")) > 150:
        problems.append("header text must be at most 150 characters")
    fields = block.get("fields", []) if block["type"] == "section" else []
    if not isinstance(fields, list) or len(fields) > 10:
        problems.append("section fields must be a list of at most 10 items")
    elif any(_text_length(f) > 2000 for f in fields):
        problems.append("each section field must be at most 2000 characters")
    context = block.get("elements", []) if block["type"] == "context" else []
    if not isinstance(context, list) or len(context) > 10:
        problems.append("a context block holds at most 10 elements")
    elif any(_text_length(e) > 3000 for e in context):
        problems.append("context text must be at most 3000 characters")
    elements = block.get("elements", []) if block["type"] == "actions" else []
    if len(elements) > 25:
        problems.append("an actions block holds at most 25 elements")
    action_ids = [e.get("action_id") for e in elements if isinstance(e, dict)]
    if len(action_ids) != len(set(action_ids)):
        problems.append("action_ids must be unique within a block")
    for element in [*elements, block.get("accessory")]:
        if isinstance(element, dict):
            problems += _element_problems(element)
    return problems


def _blocks_problems(blocks: Any, limit: int) -> list[str]:
    """Everything Slack would reject about a list of blocks (empty when valid)."""
    if not isinstance(blocks, list):
        return ["blocks must be a list"]
    problems = [f"no more than {limit} items allowed"] if len(blocks) > limit else []
    block_ids = [b.get("block_id") for b in blocks if isinstance(b, dict) and b.get("block_id")]
    if len(block_ids) != len(set(block_ids)):
        problems.append("block_id values must be unique")
    for block in blocks:
        problems += _block_problems(block)
    return problems


def _check_blocks(blocks: Any, limit: int = MAX_MESSAGE_BLOCKS) -> list[Json]:
    """Validated, defensively copied blocks with missing block_ids filled in like Slack does."""
    if isinstance(blocks, str):
        raise _ApiError("invalid_blocks_format")
    problems = _blocks_problems(blocks, limit)
    if problems:
        raise _ApiError("invalid_blocks", errors=problems)
    stored = copy.deepcopy(blocks)
    for block in stored:
        block.setdefault("block_id", _random_id("", 5))
    return stored


def _rich_text_blocks(text: str) -> list[Json]:
    """The rich_text block Slack clients attach to a typed message, mentions as user elements."""
    elements: list[Json] = []
    cursor = 0
    for match in MENTION_RE.finditer(text):
        if match.start() > cursor:
            elements.append({"type": "text", "text": text[cursor : match.start()]})
        elements.append({"type": "user", "user_id": match.group(1)})
        cursor = match.end()
    if cursor < len(text):
        elements.append({"type": "text", "text": text[cursor:]})
    section = {"type": "rich_text_section", "elements": elements}
    return [{"type": "rich_text", "block_id": _random_id("", 5), "elements": [section]}]
