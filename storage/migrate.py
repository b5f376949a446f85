"""Schema migrations (Alembic), run by `approval-bot db upgrade` and at every start.

A database already at the newest revision is recognised with one ``SELECT`` of
``alembic_version`` against the revisions of the files under ``migrations/versions``, without
importing Alembic (~0.15 s, most of a read-only command's start-up); anything else (no
table, an older revision, several heads) goes through Alembic as before. A revision the
files do not know is a newer release's (a rolling deploy migrated ahead of this replica): the
schema is used as is, since every migration keeps working for the release before it.
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, cast

from storage.drivers.protocol import Mode

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncEngine

    from storage.drivers.protocol import Database, Tx

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# The revisions a database is at (storage.reads reads them too, before it reads anything).
CURRENT_REVISIONS = "SELECT version_num FROM alembic_version"
_REVISION = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*(.+?)\s*$", re.MULTILINE)


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def _upgrade(connection: Connection) -> None:
    from alembic import command

    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


@functools.cache
def head_revisions() -> frozenset[str]:
    """The revisions no other revision names as its ``down_revision``."""
    revisions, parents = _revisions()
    return revisions - parents


@functools.cache
def _revisions() -> tuple[frozenset[str], frozenset[str]]:
    """Every revision, and every one named as a ``down_revision``, read from the files (a
    plain string literal, a tuple of them, or None, as Alembic writes them)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        found: dict[str, str] = {m.group(1): m.group(2) for m in _REVISION.finditer(text)}
        if "revision" not in found:
            continue
        revisions.update(re.findall(r"[\"']([^\"']+)[\"']", found["revision"]))
        parents.update(re.findall(r"[\"']([^\"']+)[\"']", found.get("down_revision", "")))
    return frozenset(revisions), frozenset(parents)


async def current_revisions(database: Database) -> frozenset[str] | None:
    """The database's revisions; None when it has no ``alembic_version`` table yet."""

    def body(tx: Tx) -> frozenset[str]:
        return frozenset(str(row[0]) for row in tx.all(CURRENT_REVISIONS))

    try:
        return await database.run(body, Mode.READ_ONE)
    except Exception as exc:
        if "alembic_version" in str(exc):  # no table yet: a new database, Alembic makes it
            return None
        raise  # out of reach, refused: said once, by Repository.open


async def _needs_upgrade(database: Database) -> bool:
    current = await current_revisions(database)
    if current is None:
        return True
    heads = head_revisions()
    if heads and current == heads:
        return False
    unknown = current - _revisions()[0]
    if unknown:
        log.warning(
            "the database's schema is at %s, which this release does not know (it knows up "
            "to %s): a newer release migrated it; running on it as is, without migrating",
            ", ".join(sorted(unknown)),
            ", ".join(sorted(heads)),
        )
        return False
    return True


async def upgrade(target: Database | AsyncEngine) -> None:
    """Bring the schema to the newest revision; a no-op when it is already there.

    ``target`` is the repository's :class:`~storage.drivers.Database` (SQLite migrates on its writer
    thread, over a SQLAlchemy connection that takes the write lock up front) or an async engine.
    """
    if hasattr(target, "sync_engine"):  # an AsyncEngine (SQLAlchemy is not imported here)
        engine = cast("AsyncEngine", target)
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade)
        return
    if not await _needs_upgrade(target):
        return
    await target.run_with_connection(_upgrade)
