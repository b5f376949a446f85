"""The declarative base of every table, and the one rule for times.

Owns no table: each aggregate's tables are in a module of their own (runs, approvals, events,
installations, grants, reach), all deriving from this :class:`Base`, and :mod:`storage.models`
imports them all so that ``Base.metadata`` (Alembic's target, the schema check) knows every
table. The base is apart so that those modules import it and never each other or the package.

Times are stored as naive UTC datetimes: SQLite has no time zone type and both databases then
compare them the same way.
"""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass
