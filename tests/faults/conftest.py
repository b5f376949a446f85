"""Fixtures of the fault suite: a database of its own for each test's bot processes.

SQLite is a file in the test's folder; PostgreSQL a fresh database on the test server
(the processes cannot be told a schema), dropped afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from ulid import ULID

from playground.slack_server import SlackServer
from tests.conftest import POSTGRES_URL
from tests.faults.harness import Deployment
from tests.serve_process import SECRET


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def _admin() -> asyncpg.Connection:
    return await asyncpg.connect(_plain(POSTGRES_URL))


@contextlib.asynccontextmanager
async def fresh_postgres_database() -> AsyncIterator[str]:
    """A new database on the test server, dropped afterwards; its URL."""
    name = f"faults_{str(ULID()).lower()}"
    admin = await _admin()
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield (
            make_url(_plain(POSTGRES_URL)).set(database=name).render_as_string(hide_password=False)
        )
    finally:
        admin = await _admin()
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
async def postgres_database() -> AsyncIterator[str]:
    """PostgreSQL only; skipped (saying why) when no server is configured."""
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL variant: APPROVAL_BOT_TEST_POSTGRES_URL is not set")
    async with fresh_postgres_database() as url:
        yield url


@pytest.fixture
async def database_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """Each backend in turn (the ``backend`` fixture skips PostgreSQL when not configured)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'bot.db'}"
        return
    async with fresh_postgres_database() as url:
        yield url


@pytest.fixture
async def slack() -> AsyncIterator[SlackServer]:
    async with SlackServer(signing_secret=SECRET) as server:
        yield server


@pytest.fixture
async def deployment(
    slack: SlackServer, database_url: str, tmp_path: Path
) -> AsyncIterator[Deployment]:
    deployment = Deployment(slack, database_url, tmp_path)
    try:
        yield deployment
    finally:
        await deployment.close()
