"""The statements of edits (edit, then approve), and the edit columns of a new approval row.

Owns no state; the columns ``allow_edit``, ``edited_arguments``, ``edited_by`` and
``edited_at`` of ``approvals`` are :mod:`storage.stores.edits`'s. An edit is one conditional
UPDATE (pending, unexpired, editable) that re-binds ``payload_hash`` to the edited arguments.
Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from typing import Any

from storage.sql.columns import APPROVAL_COLUMNS
from storage.values import storable

EDIT = (
    "UPDATE approvals SET edited_arguments = :edited, edited_by = :actor, edited_at = :now, "
    "payload_hash = :payload_hash, approvers = :approvers, reason = :why, "
    "rule = :rule, rule_when = :rule_when, rule_error = :rule_error, "
    "min_approvals = :min_approvals, approved_by = :approved_by "
    "WHERE id = :id AND kind = 'approval' AND status = 'pending' AND allow_edit = TRUE "
    f"AND expires_at > :now RETURNING {APPROVAL_COLUMNS.sql}"
)
DELETE_APPROVERS = "DELETE FROM approval_approvers WHERE approval_id = :id"
# Quorum votes given for other arguments (storage.stores.votes): an edit that keeps the approval
# waiting has it voted on afresh.
DELETE_VOTES = "DELETE FROM approval_votes WHERE approval_id = :id AND vote = 'approve'"


def edit_columns(allow_edit: bool, edited: dict[str, Any] | None = None) -> dict[str, Any]:
    """The edit columns of a new approval row: editable per its policy, not edited yet
    (``edited``: a retry of an edited call, which runs those arguments again)."""
    return {
        "allow_edit": allow_edit,
        "edited_arguments": None if edited is None else storable(edited),
        "edited_by": None,
        "edited_at": None,
    }
