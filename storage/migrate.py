"""Schema migrations (Alembic), run by `approval-bot db upgrade` and at every start."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.db import Database

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def _upgrade(connection: Connection) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


async def upgrade(target: Database | AsyncEngine) -> None:
    """Bring the schema to the newest revision; a no-op when it is already there.

    ``target`` is the repository's :class:`~storage.db.Database` (SQLite migrates on its writer
    thread, over a SQLAlchemy connection that takes the write lock up front) or an async engine.
    """
    if isinstance(target, AsyncEngine):
        async with target.begin() as conn:
            await conn.run_sync(_upgrade)
        return
    await target.run_with_connection(_upgrade)
