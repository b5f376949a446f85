"""Fixtures of the fault suite: our Slack server and a deployment of bot processes on a
database of their own (``database_url``, from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from playground.slack_server import SlackServer
from tests.faults.harness import Deployment
from tests.support.serve_process import SECRET


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


@pytest.fixture
async def replicas(
    slack: SlackServer, postgres_database: str, tmp_path: Path
) -> AsyncIterator[Deployment]:
    """Bot processes on one PostgreSQL database of their own (``postgres_database``), as
    replicas run. No process dies in the tests that use it: a long lease keeps a busy
    machine from handing runs over."""
    deployment = Deployment(slack, postgres_database, tmp_path, run_lease="30s")
    try:
        yield deployment
    finally:
        await deployment.close()
