"""A finished call's result waits out a database outage only while the run's lease holds.

``bot.gate.recording`` against a real SQLite database made immutable (``chattr +i``: these
tests run as root, which ``chmod`` does not stop), with the turn's clock and lease passed in.
The end-to-end proofs with real ``serve`` processes are in
``tests/faults/test_database_outage.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from bot.clock import utcnow
from bot.gate.recording import record_result
from bot.gate.turn import TurnContext
from bot.ops.outage import OutageLog
from storage.repository import Repository

OWNER = "worker-a/0001"


def chattr(flag: str, paths: list[Path]) -> None:
    subprocess.run(["chattr", flag, *map(str, paths)], check=True, capture_output=True)


@pytest.fixture
async def repo(tmp_path: Path) -> AsyncIterator[Repository]:
    probe = tmp_path / "probe"
    probe.write_text("x")
    works = shutil.which("chattr") is not None and (
        subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    )
    if not works:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must be able to make the SQLite files immutable (chattr +i)")
        pytest.skip("chattr +i is not available here (needs root on ext4/xfs/btrfs)")
    chattr("-i", [probe])
    repo = await Repository.open(f"sqlite:///{tmp_path / 'bot.db'}")
    now = utcnow()
    common = {"team_id": "T1", "channel": "C1", "thread_ts": "1.0", "requester": "U0REQ"}
    await repo.insert_rows_for_benchmark(
        runs=[
            {
                **common,
                "id": "run_1",
                "conversation_key": "c1",
                "status": "running",
                "model_id": "echo",
                "history": [],
                "turn": 1,
                "lease_owner": OWNER,
                "lease_expires_at": now + timedelta(minutes=5),
                "created_at": now,
                "updated_at": now,
            }
        ],
        approvals=[
            {
                **common,
                "id": "apr_1",
                "run_id": "run_1",
                "turn": 1,
                "tool_call_id": "tc",
                "tool_name": "deploy",
                "arguments": {},
                "payload_hash": "0" * 64,
                "status": "executing",
                "approvers": [],
                "allow_self_approval": False,
                "on_expiry": "deny",
                "created_at": now,
                "expires_at": now + timedelta(hours=1),
            }
        ],
    )
    yield repo
    await repo.close()


def turn_for(repo: Repository, lease_seconds: float) -> TurnContext:
    return TurnContext(
        run_id="run_1",
        requester="U0REQ",
        repo=repo,
        clock=utcnow,
        owner=OWNER,
        lease_until=lambda: utcnow() + timedelta(minutes=5),
        lease_expires_at=utcnow() + timedelta(seconds=lease_seconds),
        outages=OutageLog(),
    )


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    files = [path / "bot.db", path / "bot.db-wal"]
    chattr("+i", files)
    try:
        yield
    finally:
        chattr("-i", files)


async def test_the_result_is_recorded_when_the_database_comes_back(
    repo: Repository, tmp_path: Path
) -> None:
    turn = turn_for(repo, lease_seconds=60)
    with read_only(tmp_path):
        recording = asyncio.create_task(record_result(turn, "apr_1", "done", failed=False))
        await asyncio.sleep(1.5)  # several attempts fail meanwhile
        assert not recording.done()
        assert turn.outages.ongoing
    assert await asyncio.wait_for(recording, 30) is True
    approval = await repo.get_approval("apr_1")
    assert approval is not None and (approval.status, approval.result) == ("executed", "done")
    trail = [e.event for e in await repo.audit_trail(approval_id="apr_1")]
    assert trail.count("execution_finished") == 1, trail
    assert not turn.outages.ongoing
    assert turn.lease_expires_at is not None and turn.lease_expires_at > utcnow()


async def test_the_wait_outlives_the_lease_and_the_record_says_late(
    repo: Repository, tmp_path: Path
) -> None:
    turn = turn_for(repo, lease_seconds=0.5)
    with read_only(tmp_path):
        recording = asyncio.create_task(record_result(turn, "apr_1", "done", failed=False))
        await asyncio.sleep(2)  # the lease ran out meanwhile: still waiting
        assert not recording.done()
    assert await asyncio.wait_for(recording, 30) is True  # nobody took the run: still ours
    approval = await repo.get_approval("apr_1")
    assert approval is not None and (approval.status, approval.result) == ("executed", "done")
    (finished,) = [
        e.detail or {}
        for e in await repo.audit_trail(approval_id="apr_1")
        if e.event == "execution_finished"
    ]
    assert finished.get("recorded_late") is True, finished


async def test_a_late_result_overrides_the_takers_unknown(repo: Repository) -> None:
    """Another replica took the run over and said "unknown": the call ran, with this result."""
    now = utcnow()
    assert await repo.mark_outcome_unknown("apr_1", now=now)
    turn = turn_for(repo, lease_seconds=60)
    turn.owner = "worker-a/0002"  # this drive's lease went to the taker (OWNER)
    assert await record_result(turn, "apr_1", "done", failed=False) is False  # not ours
    approval = await repo.get_approval("apr_1")
    assert approval is not None and (approval.status, approval.result) == ("executed", "done")
    (finished,) = [
        e.detail or {}
        for e in await repo.audit_trail(approval_id="apr_1")
        if e.event == "execution_finished"
    ]
    assert finished.get("after_outcome_unknown") is True, finished
    assert finished.get("recorded_late") is True, finished


async def test_a_shutdown_cancels_the_wait_and_says_so(
    repo: Repository, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    turn = turn_for(repo, lease_seconds=60)
    caplog.set_level(logging.ERROR)
    with read_only(tmp_path):
        recording = asyncio.create_task(record_result(turn, "apr_1", "done", failed=False))
        await asyncio.sleep(0.5)
        recording.cancel()  # the shutdown grace is up (BackgroundTasks.cancel_all)
        with pytest.raises(asyncio.CancelledError):
            await recording
    assert any("stopped waiting to record" in r.getMessage() for r in caplog.records)


async def test_a_retry_finds_its_own_committed_result(repo: Repository) -> None:
    """The connection was lost during COMMIT: the first attempt committed unheard."""
    now = utcnow()
    assert await repo.record_execution("apr_1", result="done", failed=False, now=now)
    again = await repo.record_execution(
        "apr_1",
        result="done",
        failed=False,
        now=now,
        again=True,
        owner=OWNER,
        lease_until=now + timedelta(minutes=5),
    )
    assert again is True
    trail = [e.event for e in await repo.audit_trail(approval_id="apr_1")]
    assert trail.count("execution_finished") == 1, trail
