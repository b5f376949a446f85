"""An edited approval's call as the gate runs it: the edited arguments, under the call's own
name and id, and only for the very call whose arguments the edit replaced.

The edit itself is checked in :mod:`bot.policy.edits` and stored by ``storage.stores.edits``;
what the model reads about it is in :mod:`bot.gate.texts`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import llm

from storage.hashes import canonical_json
from storage.records import ApprovalDraft
from storage.values import storable


class EditedCallFailed(Exception):
    """An edited call's tool raised; the message says what the person changed first."""


def carry_edit(draft: ApprovalDraft, row: Any) -> ApprovalDraft:
    """The row of a pause an edited call took (a retry): what was proposed and what runs."""
    edited = getattr(row, "edited_arguments", None)
    if edited is None:
        return draft
    return dataclasses.replace(draft, arguments=dict(row.arguments), edited_arguments=edited)


def proposed_here(tool_name: str, tool_call: llm.ToolCall, row: Any) -> bool:
    """Whether an edited row's proposed call is this one (an unedited row's hash says so):
    an edit answers only the call it was made for."""
    if getattr(row, "edited_arguments", None) is None:
        return True
    return tool_name == row.tool_name and canonical_json(
        storable(dict(tool_call.arguments))
    ) == canonical_json(row.arguments)


def edited_call(tool_call: llm.ToolCall, approval: Any) -> llm.ToolCall:
    """The call to run for ``approval``: the edited arguments under the same name and id."""
    edited = getattr(approval, "edited_arguments", None)
    if edited is None:
        return tool_call
    return llm.ToolCall(
        name=tool_call.name, arguments=dict(edited), tool_call_id=tool_call.tool_call_id
    )
