"""Block Kit of the forms people fill in (deny, answer, edit): the modal around them and
their text field, built one way so the forms look and behave alike."""

from __future__ import annotations

from handlers.blocks.kit import Block


def form_modal(
    callback_id: str, metadata: str, *, title: str, submit: str, blocks: list[Block]
) -> Block:
    """A form (deny, answer, edit): ``metadata`` comes back with the submission."""
    return {
        "type": "modal",
        "callback_id": callback_id,
        "private_metadata": metadata,
        "title": {"type": "plain_text", "text": title},
        "submit": {"type": "plain_text", "text": submit},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": blocks,
    }


def text_input(
    block_id: str,
    action_id: str,
    *,
    label: str,
    max_length: int,
    optional: bool = False,
    placeholder: str | None = None,
) -> Block:
    """A form's one multi-line text field."""
    element: Block = {
        "type": "plain_text_input",
        "action_id": action_id,
        "multiline": True,
        "max_length": max_length,
    }
    if placeholder:
        element["placeholder"] = {"type": "plain_text", "text": placeholder}
    block: Block = {
        "type": "input",
        "block_id": block_id,
        "label": {"type": "plain_text", "text": label},
        "element": element,
    }
    if optional:
        block["optional"] = True
    return block
