"""A database a newer release has migrated (a revision this release's files do not know):
during a rolling deploy the replicas not yet replaced keep running on it, as the one-release
compatibility of migrations promises, instead of failing at start-up on Alembic's "Can't
locate revision"; and they leave its revision alone. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging

import pytest

from storage import migrate
from storage.repository import Repository

NEXT_RELEASE = "0099_next_release"


async def test_a_newer_schema_is_used_as_is(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    repo = await Repository.open(database_url)
    try:
        await repo.execute_sql("UPDATE alembic_version SET version_num = :v", {"v": NEXT_RELEASE})
    finally:
        await repo.close()

    with caplog.at_level(logging.WARNING):
        repo = await Repository.open(database_url)
    try:
        assert await repo.audit_trail() == []
        assert await migrate.current_revisions(repo.database) == frozenset({NEXT_RELEASE})
        assert any(NEXT_RELEASE in r.getMessage() for r in caplog.records)
    finally:
        await repo.close()
