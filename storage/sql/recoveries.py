"""The statements of recoveries: a person's choice after a call failed (``on_error = "ask"``).

Owns no state; a recovery is an ``approvals`` row of kind ``recovery`` (see
:mod:`storage.stores.recoveries`). Statuses: ``pending -> due`` (Retry; then ``due ->
executing -> executed`` as a retry runs, at most once: ``BEGIN_RETRY`` takes both kinds)
``| skipped`` (Skip) ``| resolved`` (outcome unknown: "it ran") ``| cancelled`` (Stop run)
``| expired`` (unanswered: the model reads the error). Portable between SQLite (3.35+) and
PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from storage.sql.columns import APPROVAL_COLUMNS

# What each choice makes of the row; Retry makes it due at once (its drive runs it).
RECOVERY_STATUSES = {"retry": "due", "skip": "skipped", "resolve": "resolved", "stop": "cancelled"}

RECOVER = (
    "UPDATE approvals SET status = :status, decided_by = :actor, decided_by_name = :actor_name, "
    "decided_at = :now, result = :note "
    "WHERE id = :id AND kind = 'recovery' AND status = 'pending' AND expires_at > :now "
    f"RETURNING {APPROVAL_COLUMNS.sql}"
)
# Edit, then retry: the edited arguments run (``payload_hash`` binds them), once, as a Retry;
# only while the row is unchanged since the form showed it (``shown_hash``).
EDIT_AND_RETRY = (
    "UPDATE approvals SET status = 'due', edited_arguments = :edited, edited_by = :actor, "
    "edited_at = :now, payload_hash = :payload_hash, decided_by = :actor, "
    "decided_by_name = :actor_name, decided_at = :now "
    "WHERE id = :id AND kind = 'recovery' AND status = 'pending' AND allow_edit = TRUE "
    "AND expires_at > :now AND payload_hash = :shown_hash "
    f"RETURNING {APPROVAL_COLUMNS.sql}"
)
