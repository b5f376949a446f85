"""The edit form says each field's limits in its hint, and an enum is a menu of its values
(read back like a typed value), so an approver sees what fits before submitting."""

from __future__ import annotations

from typing import Any

from handlers.blocks import edits as edit_blocks
from handlers.blocks.edit_submissions import read_form
from playground.demo import scale_service
from playground.slack_server.blocks import MAX_VIEW_BLOCKS, _blocks_problems


class _Approval:
    def __init__(self, arguments: dict[str, Any]) -> None:
        self.id = "apr_1"
        self.kind = "approval"
        self.tool_name = "scale_service"
        self.requester = "U0REQ"
        self.arguments = arguments
        self.edited_arguments = None
        self.payload_hash = "ab" * 32


def _inputs(modal: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        b["block_id"].removeprefix(edit_blocks.FIELD_PREFIX): b
        for b in modal["blocks"]
        if b["type"] == "input"
    }


def test_the_demos_scale_form_gives_the_range_and_a_menu_for_env() -> None:
    approval: Any = _Approval({"service": "web", "replicas": 40})
    modal = edit_blocks.render_edit_modal(approval, scale_service.input_schema)
    assert _blocks_problems(modal["blocks"], MAX_VIEW_BLOCKS) == []
    fields = _inputs(modal)
    assert fields["replicas"]["hint"]["text"] == "A whole number. From 0 to 50."
    env = fields["env"]["element"]
    assert env["type"] == "static_select"
    assert [o["value"] for o in env["options"]] == ["prod", "staging"]
    assert "initial_option" not in env  # not among the call's arguments: left unchosen
    assert "hint" not in fields["env"]  # the menu shows the values; no "One of: …"

    chosen = {
        "edit_arg:service": {"value": {"type": "plain_text_input", "value": "web"}},
        "edit_arg:replicas": {"value": {"type": "plain_text_input", "value": "4"}},
        "edit_arg:env": {
            "value": {
                "type": "static_select",
                "selected_option": {
                    "text": {"type": "plain_text", "text": "staging"},
                    "value": "staging",
                },
            }
        },
    }
    arguments, errors = read_form(approval, scale_service.input_schema, chosen)
    assert errors == {}
    assert arguments == {"service": "web", "replicas": 4, "env": "staging"}


def test_a_chosen_value_is_the_menus_initial_option() -> None:
    approval: Any = _Approval({"service": "web", "replicas": 4, "env": "prod"})
    env = _inputs(edit_blocks.render_edit_modal(approval, scale_service.input_schema))["env"]
    assert env["element"]["initial_option"]["value"] == "prod"


def test_hints_say_each_kind_of_limit() -> None:
    schema = {
        "type": "object",
        "properties": {
            "low": {"type": "integer", "minimum": 1},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1.5},
            "name": {"type": "string", "maxLength": 64, "description": "The new name."},
            "code": {"type": "string", "minLength": 2, "maxLength": 8},
            "many": {"type": "string", "enum": [f"v{i}" for i in range(101)]},
        },
    }
    fields = _inputs(edit_blocks.render_edit_modal(_Approval({}), schema))
    assert fields["low"]["hint"]["text"] == "A whole number. At least 1."
    assert fields["ratio"]["hint"]["text"] == "A number. More than 0 and at most 1.5."
    assert fields["name"]["hint"]["text"] == "The new name. Up to 64 characters."
    assert fields["code"]["hint"]["text"] == "2 to 8 characters."
    # Over Slack's 100 options: typed, and the hint lists the values.
    assert fields["many"]["element"]["type"] == "plain_text_input"
    assert fields["many"]["hint"]["text"].startswith("One of: v0, v1")
