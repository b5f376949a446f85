"""The answer outbox: a run's last message is stored with its end and claimed by one poster.

The row is written in the transaction that ends the run (with the progress message it
replaces), only for runs that have a Slack thread; concurrent claims give it to exactly one
poster; a claim or a failed post's backoff keeps the sweeper away until it runs out; once
posted, the row and the run's progress message are cleared together.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from storage.repository import Repository

NOW = datetime(2026, 12, 2, 10, 0, 0)


async def _finished(repo: Repository, run_id: str, *, channel: str = "C0OPS") -> None:
    await repo.open_run(
        run_id=run_id,
        conversation_key=f"T1:{channel}:{run_id}",
        requester="U0REQUESTER",
        model_id="echo",
        new_messages=[],
        worker="drive",
        lease_until=NOW + timedelta(minutes=5),
        now=NOW,
        team_id="T1",
        channel=channel,
        thread_ts="1.0" if channel else "",
    )
    await repo.set_progress(run_id, "2.0")
    await repo.finish_run(run_id, worker="drive", status="completed", answer="done", now=NOW)


async def test_the_end_stores_the_answer_and_one_of_two_claims_wins(repo: Repository) -> None:
    await _finished(repo, "run_A")
    later = NOW + timedelta(seconds=10)
    assert await repo.answers_to_post(later, created_before=later) == ["run_A"]

    claims = await asyncio.gather(
        *(
            repo.claim_answers("run_A", now=later, until=later + timedelta(seconds=10))
            for _ in range(2)
        )
    )
    won = [c for c in claims if c]
    assert len(won) == 1, claims
    (answer,) = won[0]
    assert (answer.status, answer.text, answer.progress_ts) == ("completed", "done", "2.0")
    assert (answer.channel, answer.thread_ts, answer.attempts) == ("C0OPS", "1.0", 1)
    # While claimed, neither the sweeper nor another poster takes it.
    assert await repo.answers_to_post(later, created_before=later) == []
    assert await repo.claim_answers("run_A", now=later, until=later) == []

    await repo.answer_done("run_A", answer.turn, answer.progress_ts)
    after = later + timedelta(minutes=1)
    assert await repo.answers_to_post(after, created_before=after) == []
    run = await repo.get_run("run_A")
    assert run is not None and run.progress_ts is None


async def test_a_lost_claim_or_a_failed_post_is_posted_again_later(repo: Repository) -> None:
    await _finished(repo, "run_B")
    t1 = NOW + timedelta(seconds=1)
    (_first,) = await repo.claim_answers("run_B", now=t1, until=t1 + timedelta(seconds=10))
    # The poster died: once its claim ran out, the answer is due again.
    t2 = t1 + timedelta(seconds=11)
    assert await repo.answers_to_post(t2, created_before=t2) == ["run_B"]
    (again,) = await repo.claim_answers("run_B", now=t2, until=t2 + timedelta(seconds=10))
    assert again.attempts == 2
    # Slack failed it: not before the backoff ends.
    await repo.retry_answer_at("run_B", again.turn, t2 + timedelta(seconds=30))
    t3 = t2 + timedelta(seconds=20)
    assert await repo.answers_to_post(t3, created_before=t3) == []
    t4 = t2 + timedelta(seconds=31)
    assert await repo.answers_to_post(t4, created_before=t4) == ["run_B"]


async def test_a_run_without_a_thread_stores_no_answer(repo: Repository) -> None:
    await _finished(repo, "run_C", channel="")
    later = NOW + timedelta(minutes=1)
    assert await repo.answers_to_post(later, created_before=later) == []
