"""A hold asked for while a run works and not taken (the run ended before its next safe
point) ends with the run: it is not the conversation's next request's.

An operator's Pause or Stop of a working run waits for the drive's next safe point. A run
that ends first (its last model call answered) has nothing left to pause or stop. The hold's
row stayed: a new message in the thread continued the run with it, and its first safe point
paused, or stopped ("Stopped by ..."), a request nobody had asked to stop, days later maybe.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.clock import utcnow
from storage.repository import Repository
from storage.stores import runs


@pytest.mark.parametrize("one_statement", [True, False], ids=["one-statement", "full"])
@pytest.mark.parametrize("status", ["completed", "failed"])
@pytest.mark.parametrize("action", ["pause", "stop"])
async def test_a_hold_not_taken_before_the_run_ended_is_not_the_next_requests(
    repo: Repository,
    monkeypatch: pytest.MonkeyPatch,
    one_statement: bool,
    status: str,
    action: str,
) -> None:
    monkeypatch.setattr(runs, "ONE_STATEMENT", one_statement)
    now = utcnow()
    opening = {
        "conversation_key": "C1:1.0",
        "requester": "U0REQUESTER",
        "model_id": "scripted",
        "worker": "worker-a/t1",
        "lease_until": now + timedelta(minutes=5),
        "now": now,
        "channel": "C1",
        "thread_ts": "1.0",
    }
    run = await repo.open_run(
        run_id="run_first", new_messages=[{"role": "user", "content": "one"}], **opening
    )
    asked = await repo.request_hold(run.id, action=action, actor="U0OP", reason=None, now=now)
    assert asked.result == "requested"  # the drive stops at its next safe point...
    # ...but the run ends first.
    await repo.finish_run(run.id, worker="worker-a/t1", status=status, now=now, answer="done")
    assert await repo.hold_action(run.id) is None

    again = await repo.open_run(
        run_id="run_second", new_messages=[{"role": "user", "content": "two"}], **opening
    )
    assert again.id == run.id and again.status == "running"
    assert await repo.hold_action(again.id) is None
