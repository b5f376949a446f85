"""The ``executing`` record is committed durably before the tool runs, on both databases.

A commit that a power cut or an OS crash can lose is a problem for exactly one record: if the
lost commit is ``approved -> executing``, a recovered bot finds the call ``approved`` and runs
it a second time. SQLite runs WAL with ``synchronous = NORMAL`` (a commit is durable at the
next checkpoint), so ``begin_execution`` raises its connection to ``FULL`` for its own commit;
PostgreSQL may be set to ``synchronous_commit = off`` by the server, a database or a role, so
``begin_execution`` turns that back on for its own transaction.

The level is read from inside the very transaction that commits ``executing``, driven by the
runner and the gate as in production, through the repository's ``inside_begin_execution``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from bot.engine import Runner
from storage.drivers import pg_commits
from storage.drivers.sqlite import connections as sqlite
from storage.repository import Mode, Repository, Tx
from tests.bot.test_engine import calls, executed, request
from tests.conftest import Database, make_config
from tests.support.slack_harness import running_bot

SQLITE_LEVELS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def commit_level(tx: Tx) -> str:
    """The durability the connection would commit this transaction with, as the DB says it."""
    if tx.dialect == "sqlite":
        row = tx.one("PRAGMA synchronous")
        assert row is not None
        return SQLITE_LEVELS[int(row[0])]
    row = tx.one("SHOW synchronous_commit")
    assert row is not None
    return str(row[0])


async def open_repo(database: Database, inline: bool, **server_settings: str) -> Repository:
    """A repository on the test database; on PostgreSQL, with these session settings (as a
    server, database or role could set them)."""
    kwargs: dict[str, Any] = dict(database.engine_kwargs)
    if database.url.startswith("postgresql"):
        connect_args = dict(kwargs.get("connect_args", {}))
        connect_args["server_settings"] = {
            **connect_args.get("server_settings", {}),
            **server_settings,
        }
        kwargs["connect_args"] = connect_args
    repo = await Repository.open(database.url, sqlite_inline=inline, **kwargs)
    database._repos.append(repo)
    return repo


async def approve_and_resume(repo: Repository, threads: list[str] | None = None) -> list[str]:
    """Pause on a gated call, approve it, resume it; the commit level seen by ``executing``
    (and in ``threads``, the thread that committed it)."""
    seen: list[str] = []

    def inside(tx: Tx) -> None:
        seen.append(commit_level(tx))
        if threads is not None:
            threads.append(threading.current_thread().name)

    repo.inside_begin_execution = inside
    runner = Runner(repo, make_config(), worker_id="durability")
    paused = await runner.start(request(calls(("restart_service", {"service": "web"}))))
    assert paused.status == "paused"
    decision = await runner.decide(paused.new_approvals[0].id, actor="U0APPROVER1", approve=True)
    assert decision.resume_claimed
    done = await runner.resume(paused.run_id)
    assert done.status == "completed", done.error
    assert executed("restart_service") == [{"service": "web"}]
    return seen


async def level_elsewhere(repo: Repository) -> str:
    """The level of an ordinary transaction on the same repository, after the cycle."""

    def body(tx: Tx) -> str:
        return commit_level(tx)

    return await repo.database.run(body, Mode.WRITE)


def test_sqlite_settings() -> None:
    """Ordinary commits stay NORMAL (cheap); the executing record's commit is FULL."""
    assert sqlite.SQLITE_SYNCHRONOUS == "NORMAL"
    assert sqlite.SQLITE_DURABLE_SYNCHRONOUS == "FULL"


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "threaded"])
async def test_the_executing_record_commits_durably(
    database: Database, backend: str, inline: bool
) -> None:
    # PostgreSQL: the session says commits may be asynchronous (a power cut can lose them).
    repo = await open_repo(database, inline, synchronous_commit="off")
    before = await level_elsewhere(repo)
    assert before == {"sqlite": "NORMAL", "postgres": "off"}[backend]

    seen = await approve_and_resume(repo)

    assert seen == [{"sqlite": "FULL", "postgres": "on"}[backend]]
    # Only that transaction: the connection's other commits keep the configured level.
    assert await level_elsewhere(repo) == before


# Each of these is about one database's setting, so it runs on that database alone (the
# ``backend`` fixture takes this single value instead of both): no skipped variant in CI.
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_stronger_postgres_setting_is_kept(database: Database) -> None:
    """``remote_apply`` (a synchronous standby applies it first) is not lowered to ``on``."""
    repo = await open_repo(database, True, synchronous_commit="remote_apply")
    assert await approve_and_resume(repo) == ["remote_apply"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_sqlite_full_everywhere_stays_full(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``SQLITE_SYNCHRONOUS = FULL`` every commit is FULL, the executing one included."""
    monkeypatch.setattr(sqlite, "SQLITE_SYNCHRONOUS", "FULL")
    repo = await open_repo(database, True)
    assert await approve_and_resume(repo) == ["FULL"]
    assert await level_elsewhere(repo) == "FULL"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("on_loop", [True, False], ids=["on the loop", "on the writer thread"])
async def test_where_the_executing_commit_fsyncs(database: Database, on_loop: bool) -> None:
    """On the event loop's thread unless the application says not now (``serve``: while
    Slack is being answered), then on the writer thread: at ``FULL`` either way."""
    repo = await open_repo(database, True)
    asked: list[bool] = []

    def now_ok() -> bool:
        asked.append(on_loop)
        return on_loop

    repo.fsync_on_loop_when(now_ok)
    threads: list[str] = []

    assert await approve_and_resume(repo, threads) == ["FULL"]

    assert asked == [on_loop]
    on_loop_thread = threads == [threading.main_thread().name]
    assert on_loop_thread == on_loop, threads
    assert await level_elsewhere(repo) == "NORMAL"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_serve_fsyncs_on_the_loop_only_between_answers(database: Database) -> None:
    """The bot asks its acknowledgements first: while a request is being answered (or one was
    a moment ago) the executing record's fsync goes to the writer thread."""
    repo = await open_repo(database, True)
    async with running_bot(make_config(), repo) as slack:
        background = slack.bot.services.background
        background.fsync_quiet = 0.05
        await asyncio.sleep(0.06)
        assert repo.database.durable_inline()  # type: ignore[attr-defined]
        with background.acknowledging():
            assert not repo.database.durable_inline()  # type: ignore[attr-defined]
    assert repo.database.durable_inline()  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_postgres_ordinary_commits_are_asynchronous(database: Database) -> None:
    """On a server at the default ``on``, ordinary commits are asynchronous (as SQLite's are
    NORMAL: at-most-once does not need them on disk), the executing one is not."""
    repo = await open_repo(database, True)
    assert await level_elsewhere(repo) == "off"
    assert await approve_and_resume(repo) == ["on"]
    assert await level_elsewhere(repo) == "off"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_postgres_server_setting_everywhere_when_asked(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POSTGRES_SYNCHRONOUS_COMMIT = None``: every commit at the server's own setting."""
    monkeypatch.setattr(pg_commits, "POSTGRES_SYNCHRONOUS_COMMIT", None)
    repo = await open_repo(database, True)
    assert await level_elsewhere(repo) == "on"
    assert await approve_and_resume(repo) == ["on"]
