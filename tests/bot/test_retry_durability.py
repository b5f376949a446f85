"""A retry's ``executing`` record is committed durably before the tool runs again, as an
approved call's is (tests/storage/test_durability.py): if a power cut lost it after the tool ran, a
recovered bot would find the retry ``due`` and run it a second time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from freezegun import freeze_time

from bot.engine import Runner
from tests.bot.test_engine import calls, executed, request
from tests.conftest import BASE_CONFIG, Database, make_config
from tests.storage.test_durability import commit_level, level_elsewhere, open_repo
from tests.support import pause_tools


@pytest.fixture(autouse=True)
def _pipeline() -> Iterator[None]:
    pause_tools.reset()
    yield
    pause_tools.reset()


async def test_the_retry_commits_its_start_durably(database: Database, backend: str) -> None:
    repo = await open_repo(database, True, synchronous_commit="off")
    before = await level_elsewhere(repo)
    seen: list[str] = []
    repo.inside_begin_execution = lambda tx: seen.append(commit_level(tx))
    config = make_config(tools=[*BASE_CONFIG["tools"], "tests.support.pause_tools:rate_limited"])
    runner = Runner(repo, config, worker_id="durability")
    with freeze_time("2026-11-30 10:00:00") as clock:
        paused = await runner.start(request(calls(("rate_limited", {"service": "api"}))))
        assert paused.status == "paused" and seen == []
        clock.tick(timedelta(minutes=5))
        assert await runner.due_retries() == [paused.run_id]
        done = await runner.resume(paused.run_id)
    assert done.status == "completed" and len(executed("rate_limited")) == 2
    assert seen == [{"sqlite": "FULL", "postgres": "on"}[backend]]
    assert await level_elsewhere(repo) == before
