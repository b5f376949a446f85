"""The columns of the tables whose whole rows are read and written, declared plainly.

Owns no state: it says what a whole row of ``runs``, ``approvals``, ``audit_events`` and
``grants`` is. Every statement that reads or writes a whole row names its columns from here,
in the order :mod:`storage.models` declares them, with the kinds of value that are converted
on the way out (JSON text, datetimes, booleans: SQLite returns text and integers for them,
PostgreSQL's driver Python values already). Declared rather than derived from the SQLAlchemy
models so that the SQL layer, and the read-only commands' path built on it
(:mod:`storage.reads`), import no SQLAlchemy; tests/storage/test_sql_columns.py checks that they
match the models' tables exactly, names, order and kinds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from storage.values import json_text

JSON, DATETIME, BOOL = "json", "datetime", "bool"


class Columns:
    """One table's columns: their names in order, as SQL, and the kinds to convert."""

    __slots__ = ("_json", "kinds", "names", "sql", "table")

    def __init__(
        self,
        table: str,
        names: Iterable[str],
        *,
        json: Iterable[str] = (),
        datetime: Iterable[str] = (),
        bool: Iterable[str] = (),
    ) -> None:
        self.table = table
        self.names: tuple[str, ...] = tuple(names)
        # The column list of a SELECT, RETURNING or INSERT.
        self.sql = ", ".join(self.names)
        declared = {
            **dict.fromkeys(json, JSON),
            **dict.fromkeys(datetime, DATETIME),
            **dict.fromkeys(bool, BOOL),
        }
        unknown = set(declared) - set(self.names)
        if unknown:
            raise ValueError(f"{table} has no columns {sorted(unknown)}")
        # The columns whose stored values are converted, in column order, and how.
        self.kinds = {name: declared[name] for name in self.names if name in declared}
        self._json = tuple(name for name, kind in self.kinds.items() if kind == JSON)

    def qualified(self, alias: str) -> str:
        """The column list with each name prefixed (``a.id, a.at, …``), for a join."""
        return ", ".join(f"{alias}.{name}" for name in self.names)

    def insert_sql(self, suffix: str = "") -> str:
        """``INSERT`` of one whole row, its parameters named after the columns."""
        placeholders = ", ".join(f":{name}" for name in self.names)
        return f"INSERT INTO {self.table} ({self.sql}) VALUES ({placeholders}){suffix}"

    def params(self, values: dict[str, Any]) -> dict[str, Any]:
        """Statement parameters for a row: JSON columns serialized, and a column ``values``
        does not name NULL (a new nullable column needs no edit of every INSERT's values)."""
        return {
            **dict.fromkeys(self.names),
            **values,
            **{name: json_text(values[name]) for name in self._json},
        }


RUN_COLUMNS = Columns(
    "runs",
    (
        "id",
        "conversation_key",
        "team_id",
        "channel",
        "thread_ts",
        "requester",
        "status",
        "model_id",
        "history",
        "turn",
        "answer",
        "error",
        "lease_owner",
        "lease_expires_at",
        "created_at",
        "updated_at",
        "progress_ts",
        "agent",
        "parent_run_id",
        "parent_approval_id",
    ),
    json=("history",),
    datetime=("lease_expires_at", "created_at", "updated_at"),
)

APPROVAL_COLUMNS = Columns(
    "approvals",
    (
        "id",
        "run_id",
        "turn",
        "tool_call_id",
        "tool_name",
        "arguments",
        "payload_hash",
        "status",
        "requester",
        "team_id",
        "channel",
        "thread_ts",
        "approvers",
        "allow_self_approval",
        "on_expiry",
        "created_at",
        "expires_at",
        "decided_by",
        "decided_by_name",
        "decided_at",
        "reason",
        "result",
        "executed_at",
        "card_channel",
        "card_ts",
        "card_claimed_until",
        "kind",
        "token_hash",
        "due_at",
        "rule",
        "rule_when",
        "rule_error",
        "min_approvals",
        "approved_by",
        "allow_edit",
        "edited_arguments",
        "edited_by",
        "edited_at",
        "grant_id",
        "grant_until",
        "batch_id",
        "attempt",
        "recovery_of",
        "recovery_cause",
        "why",
        "agent",
    ),
    json=("arguments", "approvers", "approved_by", "edited_arguments"),
    datetime=(
        "created_at",
        "expires_at",
        "decided_at",
        "executed_at",
        "card_claimed_until",
        "due_at",
        "edited_at",
        "grant_until",
    ),
    bool=("allow_self_approval", "allow_edit"),
)

AUDIT_COLUMNS = Columns(
    "audit_events",
    ("id", "at", "run_id", "approval_id", "event", "actor", "detail"),
    json=("detail",),
    datetime=("at",),
)

GRANT_COLUMNS = Columns(
    "grants",
    (
        "id",
        "team_id",
        "channel",
        "thread_ts",
        "tool_name",
        "payload_scope",
        "grantor",
        "grantor_groups",
        "approval_id",
        "run_id",
        "created_at",
        "expires_at",
        "revoked_at",
        "revoked_by",
        "last_used_at",
        "expiry_noticed_at",
    ),
    json=("grantor_groups",),
    datetime=("created_at", "expires_at", "revoked_at", "last_used_at", "expiry_noticed_at"),
)

# Operators' holds on runs (storage.sql.holds).
HOLD_COLUMNS = Columns(
    "run_holds",
    ("run_id", "action", "requested_by", "reason", "requested_at"),
    datetime=("requested_at",),
)
