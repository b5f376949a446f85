"""``GET /readyz`` means the bot can do its work: its database can be written, not only read.

On SQLite the database file and its WAL are made immutable (``chattr +i``: the tests run as
root, which ``chmod`` does not stop); on PostgreSQL the bot's connections are read-only
(``default_transaction_read_only``). Either way the database still answers a ping, and
/readyz must say 503 with a one-line reason; writable again, 200. The failing probes are
logged once (``bot.ops.outage``), not once per probe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.ops.endpoints import serving_operations
from bot.ops.outage import OutageLog
from storage.repository import Repository
from tests.conftest import POSTGRES_URL, fresh_postgres_database


@contextlib.asynccontextmanager
async def served_readiness(repo: Repository, *more: Any) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    try:
        async with serving_operations(sock, repo, lambda: False, *more):
            yield f"http://127.0.0.1:{port}/readyz"
    finally:
        sock.close()


async def ready(url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


def chattr(flag: str, paths: list[Path]) -> None:
    subprocess.run(["chattr", flag, *map(str, paths)], check=True, capture_output=True)


@pytest.fixture
def immutable_files(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.write_text("x")
    works = shutil.which("chattr") is not None and (
        subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    )
    if works:
        chattr("-i", [probe])
        return
    if os.environ.get("CI") == "true":
        pytest.fail("CI must be able to make the SQLite files immutable (chattr +i)")
    pytest.skip("chattr +i is not available here (needs root on ext4/xfs/btrfs)")


async def test_sqlite_read_only_file_is_not_ready(tmp_path: Path, immutable_files: None) -> None:
    db = tmp_path / "bot.db"
    repo = await Repository.open(f"sqlite:///{db}")
    files = [db, Path(f"{db}-wal")]
    try:
        async with served_readiness(repo) as url:
            assert (await ready(url))[0] == 200
            chattr("+i", files)
            try:
                await repo.ping()  # reads still work: the database answers
                status, body = await ready(url)
                assert status == 503, body
                assert body["reason"].startswith("the database cannot be written"), body
                assert "\n" not in body["reason"]
            finally:
                chattr("-i", files)
            assert (await ready(url))[0] == 200
    finally:
        await repo.close()


@pytest.mark.postgres
async def test_postgres_read_only_is_not_ready() -> None:
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL variant: APPROVAL_BOT_TEST_POSTGRES_URL is not set")
    async with fresh_postgres_database() as url:
        writable = await Repository.open(url)
        read_only = await Repository.open(
            url,
            upgrade=False,
            connect_args={"server_settings": {"default_transaction_read_only": "on"}},
        )
        try:
            async with served_readiness(writable) as url_ok:
                assert (await ready(url_ok))[0] == 200
            async with served_readiness(read_only) as url_ro:
                await read_only.ping()
                status, body = await ready(url_ro)
                assert status == 503, body
                assert body["reason"].startswith("the database cannot be written"), body
        finally:
            await read_only.close()
            await writable.close()


async def test_probes_log_an_outage_once(
    tmp_path: Path, immutable_files: None, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "bot.db"
    repo = await Repository.open(f"sqlite:///{db}")
    files = [db, Path(f"{db}-wal")]
    now = [datetime(2026, 12, 2, 3, 0, 0)]
    outages = OutageLog(lambda: now[0])
    caplog.set_level(logging.DEBUG)
    try:
        async with served_readiness(repo, outages) as url:
            chattr("+i", files)
            try:
                for _ in range(4):
                    assert (await ready(url))[0] == 503
                    now[0] += timedelta(seconds=5)
            finally:
                chattr("-i", files)
            assert (await ready(url))[0] == 200
            assert (await ready(url))[0] == 200
    finally:
        await repo.close()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert lines == [
        "database unavailable since 2026-12-02 03:00:00 UTC (readiness check: "
        "OperationalError: (sqlite3.OperationalError) disk I/O error); retrying",
        "database available again (unavailable since 2026-12-02 03:00:00 UTC, 20 s)",
    ], lines
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
