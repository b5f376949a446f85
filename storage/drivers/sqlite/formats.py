"""How values are stored in SQLite: bound on the way in, converted on the way out.

Exactly as SQLAlchemy's SQLite types store them (``YYYY-MM-DD HH:MM:SS.ffffff`` text for
datetimes, ``json.dumps`` text for JSON, 0/1 for booleans), so the Alembic schema, existing
databases and ad-hoc tools all keep working; text goes through :mod:`storage.values` (NUL and
lone surrogates replaced), as on PostgreSQL. Owns no state. It imports no SQLAlchemy, so both
the repository's SQLite driver (:mod:`.connections`) and the read-only commands' fast path
(:mod:`storage.reads`) bind and read values through this one module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from storage.values import storable_text


def sqlite_datetime(value: datetime) -> str:
    """SQLAlchemy's SQLite DateTime storage format; text order is time order."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(" ", "microseconds")


# Parameter types sqlite3 binds as they are (bool is an int): nothing to convert.
_BOUND_AS_IS = frozenset((int, float, bool, bytes, type(None)))


def bound_params(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``params`` as bound: text through :func:`storable_text`, datetimes as SQLAlchemy stores
    them. Most values (ids, plain ASCII text, numbers) need nothing: they are checked inline
    rather than through a call each, on every statement of every transaction."""
    if not params:
        return {}
    converted = dict(params)
    for key, value in params.items():
        kind = value.__class__
        if kind is str:
            if value.isascii() and "\x00" not in value:
                continue
        elif kind in _BOUND_AS_IS:
            continue
        converted[key] = _sqlite_value(value)
    return converted


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, datetime):
        return sqlite_datetime(value)
    return value


# Stored value (never None) -> Python value, by column kind.
SQLITE_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "json": json.loads,
    "datetime": datetime.fromisoformat,
    "bool": bool,
}
