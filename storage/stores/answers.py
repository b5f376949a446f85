"""Answers: the outbox of each run's last message in its thread (its answer, or why it
failed or was cancelled), so that it is posted until Slack takes it, by any replica, once.

Owns the ``run_answers`` rows. The transaction that ends a run writes its row
(:func:`store_answer`, called by :mod:`.runs` and :mod:`.transitions`), with the run's
progress message as it stands then; a poster claims a run's rows with one conditional UPDATE
(the rows it returns are that poster's alone until ``until``), posts them, and deletes each
once Slack took it, clearing the run's progress message in the same transaction. A poster
that died, or that Slack failed, lets its claim run out and the sweeper of any replica posts
the row again; the answer replaces the progress message with ``chat.update``, so posting it
twice still shows it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.records import AnswerToPost
from storage.sql.answers import (
    ANSWER_CHUNKS_POSTED,
    ANSWER_DONE_CLEARING_PROGRESS,
    ANSWER_RETRY_AT,
    ANSWERS_TO_POST,
    CLAIM_ANSWERS,
    DELETE_ANSWER,
    EXTEND_ANSWER_CLAIM,
    INSERT_ANSWER,
)
from storage.sql.runs import CLEAR_PROGRESS

WRITE, WRITE_ONE, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ_ONE


def store_answer(tx: Tx, run_id: str, status: str, text: str | None, now: datetime) -> None:
    """In the transaction that ends the run: its last message, to post (a run with a thread)."""
    tx.execute(INSERT_ANSWER, {"id": run_id, "status": status, "text": text, "now": now})


class AnswerStore:
    database: Database

    async def claim_answers(
        self, run_id: str, *, now: datetime, until: datetime
    ) -> list[AnswerToPost]:
        """Claim posting the run's unposted answers until ``until``, oldest turn first; [] when
        there are none, or another poster's claim (or a failed post's backoff) holds them."""

        def body(tx: Tx) -> list[AnswerToPost]:
            params = {"run_id": run_id, "now": now, "until": until}
            return sorted(
                (_answer_to_post(row) for row in tx.all(CLAIM_ANSWERS, params)),
                key=lambda answer: answer.turn,
            )

        return await self.database.run(body, WRITE_ONE)

    async def answers_to_post(
        self, now: datetime, *, created_before: datetime, limit: int = 100
    ) -> list[str]:
        """Runs with an answer nobody posted and no live claim on it (the sweeper's part)."""
        params = {"now": now, "created_before": created_before, "limit": limit}

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(ANSWERS_TO_POST, params)]

        return await self.database.run(body, READ_ONE)

    async def answer_chunks_posted(self, run_id: str, turn: int, chunks: int) -> None:
        """Slack took the first ``chunks`` pieces of a long answer: a retry posts the rest."""

        def body(tx: Tx) -> None:
            tx.execute(ANSWER_CHUNKS_POSTED, {"run_id": run_id, "turn": turn, "chunks": chunks})

        await self.database.run(body, WRITE_ONE)

    async def extend_answer_claim(self, run_id: str, *, held: datetime, until: datetime) -> bool:
        """The poster holding the claim that ends at ``held`` keeps it until ``until`` (its
        post is still in flight); False if that claim is no longer there."""

        def body(tx: Tx) -> bool:
            params = {"run_id": run_id, "held": held, "until": until}
            return tx.execute(EXTEND_ANSWER_CLAIM, params) > 0

        return await self.database.run(body, WRITE_ONE)

    async def retry_answer_at(self, run_id: str, turn: int, at: datetime) -> None:
        """Slack failed the post: nobody tries it again before ``at``."""

        def body(tx: Tx) -> None:
            tx.execute(ANSWER_RETRY_AT, {"run_id": run_id, "turn": turn, "retry_at": at})

        await self.database.run(body, WRITE_ONE)

    async def answer_done(self, run_id: str, turn: int, progress_ts: str | None) -> None:
        """The answer is in the thread (or given up): forget it, and the progress message it
        replaced (a newer one, of a later turn, stays)."""

        params = {"run_id": run_id, "turn": turn, "ts": progress_ts}
        if progress_ts and self.database.dialect == "postgresql":

            def one(tx: Tx) -> None:
                tx.execute(ANSWER_DONE_CLEARING_PROGRESS, params)

            await self.database.run(one, WRITE_ONE)
            return

        def body(tx: Tx) -> None:
            tx.execute(DELETE_ANSWER, params)
            if progress_ts:
                tx.execute(CLEAR_PROGRESS, {"id": run_id, "ts": progress_ts})

        await self.database.run(body, WRITE if progress_ts else WRITE_ONE)


def _answer_to_post(row: Sequence[Any]) -> AnswerToPost:
    """A claimed row of CLAIM_ANSWERS: the answer, and its run's thread."""
    team_id, channel, thread_ts = row[7:10]
    # An answer's row references its run (a foreign key): a claimed one always has its run.
    assert channel is not None, f"run {row[0]}'s answer outlived its run"
    return AnswerToPost(
        run_id=row[0],
        turn=row[1],
        status=row[2],
        text=row[3],
        progress_ts=row[4],
        chunks_posted=row[5],
        attempts=row[6],
        team_id=team_id,
        channel=channel,
        thread_ts=thread_ts,
    )
