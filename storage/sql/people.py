"""The statements of ``people``: the display name Slack last gave for each user id.

Owns no state; the rows are :mod:`storage.stores.people`'s. Portable between SQLite (3.35+)
and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

REMEMBER_NAME = (
    "INSERT INTO people (user_id, name, updated_at) VALUES (:user_id, :name, :now) "
    "ON CONFLICT (user_id) DO UPDATE SET name = excluded.name, updated_at = excluded.updated_at"
)


def names_sql(user_ids: Collection[str]) -> tuple[str, dict[str, Any]]:
    """The names of ``user_ids`` (one parameter each: both databases take the list)."""
    params = {f"u{i}": user for i, user in enumerate(sorted(set(user_ids)))}
    marks = ", ".join(f":{name}" for name in params) or "NULL"
    return f"SELECT user_id, name FROM people WHERE user_id IN ({marks})", params
