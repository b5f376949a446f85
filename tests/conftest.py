"""Shared fixtures: a real database per test (SQLite, and PostgreSQL when configured).

Tests marked ``postgres`` (or using the ``repo`` fixture) run once per backend. PostgreSQL runs
when ``APPROVAL_BOT_TEST_POSTGRES_URL`` is set (CI sets it); otherwise those variants are
skipped with that reason. Each PostgreSQL test gets its own schema, dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from ulid import ULID

os.environ.setdefault("LLM_USER_PATH", tempfile.mkdtemp(prefix="approval-bot-llm-"))
# The CEL parser cache (bot.policy.cel_parser) goes under XDG_CACHE_HOME: the tests, and the bots
# they start, keep theirs in a folder of their own, never the user's ~/.cache.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="approval-bot-cache-")

from bot.config import Config, config_from_dict
from bot.engine import Runner
from bot.llm_setup import prepare_llm, register_model
from storage.repository import Repository
from tests.support import ops_tools
from tests.support.scripted_model import ScriptedModel

POSTGRES_URL = os.environ.get("APPROVAL_BOT_TEST_POSTGRES_URL", "")
FIXTURES = Path(__file__).parent / "fixtures" / "slack"

prepare_llm()
register_model(ScriptedModel())


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phase",
        choices=("all", "parallel", "serial"),
        default="all",
        help="scripts/test: 'parallel' leaves out the tests marked serial, 'serial' runs only them",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The fault tests each run bot processes against short leases and sweeps: at most two at
    # a time (two xdist groups, alternating; scripts/test: --dist loadgroup), as six at once
    # starved one another of CPU. Collection order is the same on every worker.
    faults = [item for item in items if "faults" in item.path.parts]
    for index, item in enumerate(faults):
        item.add_marker(pytest.mark.xdist_group(f"faults{index % 2}"))
    # Chosen here rather than with -m so that a -m or -k given to scripts/test still applies.
    phase = config.getoption("--phase")
    if phase == "all":
        return
    want_serial = phase == "serial"
    keep, dropped = [], []
    for item in items:
        is_serial = item.get_closest_marker("serial") is not None
        (keep if is_serial == want_serial else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str:
    if POSTGRES_URL:
        return f"PostgreSQL tests: on ({POSTGRES_URL})"
    return "PostgreSQL tests: skipped (set APPROVAL_BOT_TEST_POSTGRES_URL to run them)"


@pytest.fixture(autouse=True)
def _clean_records() -> None:
    ops_tools.EXECUTED.clear()
    ScriptedModel.seen.clear()
    ScriptedModel.hold = None


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres" and not POSTGRES_URL:
        pytest.skip("PostgreSQL variant: APPROVAL_BOT_TEST_POSTGRES_URL is not set")
    return request.param


class Database:
    """A fresh, migrated database for one test; ``open()`` gives independent connections."""

    def __init__(self, url: str, engine_kwargs: dict[str, Any]) -> None:
        self.url = url
        self.engine_kwargs = engine_kwargs
        self._repos: list[Repository] = []

    async def open(self) -> Repository:
        repo = await Repository.open(self.url, **self.engine_kwargs)
        self._repos.append(repo)
        return repo

    async def close(self) -> None:
        for repo in self._repos:
            await repo.close()


@pytest.fixture
async def database(backend: str, tmp_path: Path) -> AsyncIterator[Database]:
    if backend == "sqlite":
        db = Database(f"sqlite+aiosqlite:///{tmp_path / 'bot.db'}", {})
        yield db
        await db.close()
        return
    async with postgres_schema() as db:
        yield db


@contextlib.asynccontextmanager
async def postgres_schema() -> AsyncIterator[Database]:
    """A fresh schema of the test database, dropped afterwards (the ``database`` fixture's
    PostgreSQL; a test that compares two runs of one scenario opens a second)."""
    schema = f"t_{str(ULID()).lower()}"
    plain_url = POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://")
    admin = await asyncpg.connect(plain_url)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    db = Database(POSTGRES_URL, {"connect_args": {"server_settings": {"search_path": schema}}})
    try:
        yield db
    finally:
        await db.close()
        await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()


@pytest.fixture
async def repo(database: Database) -> Repository:
    return await database.open()


BASE_CONFIG: dict[str, Any] = {
    "model": "scripted",
    # The tests written before streamed answers (issue 21 §1) assert the edited progress
    # message: they keep it; the streaming tests turn it on.
    "streaming": "off",
    "tools": [
        "tests.support.ops_tools:get_status",
        "tests.support.ops_tools:restart_service",
        "tests.support.ops_tools:deploy",
        "tests.support.ops_tools:broken_tool",
    ],
    "policies": {
        "restart_service": {"approvers": ["U0APPROVER1", "U0APPROVER2"], "ttl": "15m"},
        "deploy": {"approvers": ["U0APPROVER1", "U0APPROVER2"], "on_expiry": "cancel"},
        "broken_tool": {"approvers": ["U0APPROVER1"]},
    },
}


def make_config(**overrides: Any) -> Config:
    data = {**BASE_CONFIG, **overrides}
    return config_from_dict(data)


@pytest.fixture
def config() -> Config:
    return make_config()


@pytest.fixture
def make_runner(repo: Repository, config: Config) -> Callable[..., Runner]:
    def build(**kwargs: Any) -> Runner:
        return Runner(kwargs.pop("repo", repo), kwargs.pop("config", config), **kwargs)

    return build


@pytest.fixture
def runner(make_runner: Callable[..., Runner]) -> Runner:
    return make_runner(worker_id="worker-a")


# -- whole databases, for processes that open one by URL -----------------------------


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def _admin() -> asyncpg.Connection:
    return await asyncpg.connect(_plain(POSTGRES_URL))


@contextlib.asynccontextmanager
async def fresh_postgres_database() -> AsyncIterator[str]:
    """A new database on the test server, dropped afterwards; its URL."""
    name = f"t_{str(ULID()).lower()}"
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
    """An empty database of each backend in turn, openable by URL alone (bot processes and
    the CLI cannot be told a schema); PostgreSQL's is a new database, dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'bot.db'}"
        return
    async with fresh_postgres_database() as url:
        yield url
