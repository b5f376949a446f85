"""A run's last message in its thread: its answer, or why it failed or was cancelled.

The outbox (:mod:`storage.stores.answers`): the transaction that ends a run stores the
message to post with the progress message it replaces ("Working on it…", "Carrying on…").
The run's worker posts it at once; a worker killed before Slack took it, or one that Slack
failed (``internal_error``, a 5xx, a timeout), leaves it claimed for :data:`ANSWER_CLAIM`
(or ``run_lease`` if shorter) or until its backoff ends; then any replica's sweeper posts it.
Posting is claimed with one conditional UPDATE, so one poster at a time; the answer replaces
the progress message with ``chat.update``, which shows it once however many times it is sent,
so the thread ends with the answer once and no hourglass. Without a progress message on
record the answer is a new message, and the one window for a second copy is a kill between
Slack taking it and the row being deleted (as for cards); the parts of a long answer are
recorded as Slack takes each. While a Slack call of the answer is in flight (Slack slow to
reply, the client's retries) its poster extends its claim, so a slow Slack is not that window;
a call still unanswered after :data:`ANSWER_CALL_LIMIT` is given up and tried again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.clock import utcnow
from bot.ops import failpoint
from handlers.blocks import escape, split_for_slack
from handlers.slack.failures import SLACK_FAILURES, transient
from handlers.slack.workspaces import WorkspaceClients
from storage.repository import AnswerToPost, Repository

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long a poster holds its claim on a run's answer; after that another may post it (at
# most: ``serve`` uses ``run_lease`` when shorter, as a dead worker's run is taken over then).
ANSWER_CLAIM = timedelta(seconds=10)
# The sweeper leaves answers this young to the worker that ended the run.
ANSWER_GRACE = timedelta(seconds=5)
# A post Slack failed waits this long, doubling per attempt, at most ANSWER_RETRY_LONGEST.
ANSWER_RETRY_FIRST = timedelta(seconds=2)
ANSWER_RETRY_LONGEST = timedelta(minutes=5)
# One Slack call of an answer (the client's own retries and Retry-After waits included) is
# abandoned after this long, as a failure tried again later; while it is in flight its poster
# extends its claim every third of the claim, so no other replica posts the answer meanwhile.
ANSWER_CALL_LIMIT = timedelta(minutes=2)
# chat.update errors after which the answer is posted as a new message instead.
_NO_PROGRESS_MESSAGE = {"message_not_found", "cant_update_message", "edit_window_closed"}

NO_ANSWER = "(The agent finished without an answer.)"


def answer_text(answer: AnswerToPost) -> str:
    """What the thread reads, escaped (escaping first: it can make text several times longer
    than Slack's limit, and the text is split after)."""
    if answer.status == "completed":
        return escape(answer.text or NO_ANSWER)
    if answer.status == "cancelled":
        return f":octagonal_sign: Stopped: {escape(answer.text or 'cancelled')}"
    return f":x: {escape(answer.text or 'The run failed.')}"


def retry_delay(attempts: int) -> timedelta:
    return min(ANSWER_RETRY_FIRST * 2 ** max(attempts - 1, 0), ANSWER_RETRY_LONGEST)


class Answers:
    """Posts runs' last messages from the outbox, for the run's worker and the sweeper."""

    def __init__(
        self, repo: Repository, clients: WorkspaceClients, claim: timedelta = ANSWER_CLAIM
    ) -> None:
        self.repo = repo
        self.clients = clients
        self.claim = claim

    async def post(self, run_id: str) -> int:
        """Post the run's answers nobody posted yet, if no one else is posting them; how many
        are done (posted, or refused by Slack for good)."""
        now = utcnow()
        done = 0
        claim = _Claim(now + self.claim)
        for answer in await self.repo.claim_answers(run_id, now=now, until=claim.until):
            claim.answer = answer
            if not await self._post_one(answer, claim):
                break  # the later ones wait for it: a thread reads in order
            done += 1
        return done

    async def streamed(self, run_id: str) -> None:
        """The run's answer was streamed into its thread in full (handlers.slack.streams):
        done without posting it. A process that dies before this leaves it to the sweeper,
        which replaces the stream's message with it (shown once)."""
        now = utcnow()
        for answer in await self.repo.claim_answers(run_id, now=now, until=now + self.claim):
            if answer.status == "completed":
                await self.repo.answer_done(answer.run_id, answer.turn, answer.progress_ts)
            else:
                await self._post_one(answer)

    async def post_due(self) -> int:
        """The sweeper's part: answers whose poster died or whose post Slack failed."""
        now = utcnow()
        run_ids = await self.repo.answers_to_post(now, created_before=now - ANSWER_GRACE)
        return sum([await self.post(run_id) for run_id in run_ids])

    async def _post_one(self, answer: AnswerToPost, claim: _Claim | None = None) -> bool:
        """Post one answer; False if Slack failed it (it is tried again later)."""
        claim = claim or _Claim(utcnow() + self.claim, answer)
        chunks = split_for_slack(answer_text(answer))
        try:
            client = await self.clients.for_team(answer.team_id)
            for index in range(answer.chunks_posted, len(chunks)):
                failpoint("answer_posting")
                if index == 0 and answer.progress_ts:
                    await self._holding(claim, self._replace_progress(client, answer, chunks[0]))
                else:
                    await self._holding(
                        claim,
                        client.chat_postMessage(
                            channel=answer.channel, thread_ts=answer.thread_ts, text=chunks[index]
                        ),
                    )
                failpoint("answer_posted")
                if index + 1 < len(chunks):
                    await self.repo.answer_chunks_posted(answer.run_id, answer.turn, index + 1)
        except SLACK_FAILURES as exc:
            if transient(exc):
                retry_at = utcnow() + retry_delay(answer.attempts)
                log.error(
                    "run %s: could not post its answer to %s/%s (tried again at %s): %s",
                    answer.run_id,
                    answer.channel,
                    answer.thread_ts,
                    retry_at.isoformat(timespec="seconds"),
                    exc,
                )
                await self.repo.retry_answer_at(answer.run_id, answer.turn, retry_at)
                return False
            log.error(
                "run %s: Slack refused its answer in %s/%s for good; not tried again: %s",
                answer.run_id,
                answer.channel,
                answer.thread_ts,
                exc,
            )
            await self.repo.answer_done(answer.run_id, answer.turn, None)
            return True
        await self.repo.answer_done(answer.run_id, answer.turn, answer.progress_ts)
        return True

    async def _replace_progress(
        self, client: AsyncWebClient, answer: AnswerToPost, text: str
    ) -> None:
        assert answer.progress_ts is not None
        try:
            await client.chat_update(
                channel=answer.channel, ts=answer.progress_ts, text=text, blocks=[]
            )
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            if error not in _NO_PROGRESS_MESSAGE:
                raise
            # Someone deleted the progress message: the answer is a message of its own.
            await client.chat_postMessage(
                channel=answer.channel, thread_ts=answer.thread_ts, text=text
            )

    async def _holding(self, claim: _Claim, call: Awaitable[T]) -> T:
        """One Slack call, bounded by ANSWER_CALL_LIMIT, with the claim kept alive meanwhile:
        Slack slow to answer (or the client's retries) must not let another replica post the
        same answer while this one is still in flight."""
        keeper = asyncio.create_task(self._keep(claim))
        try:
            return await asyncio.wait_for(call, ANSWER_CALL_LIMIT.total_seconds())
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def _keep(self, claim: _Claim) -> None:
        answer = claim.answer
        assert answer is not None
        while True:
            await asyncio.sleep(self.claim.total_seconds() / 3)
            until = utcnow() + self.claim
            try:
                kept = await self.repo.extend_answer_claim(
                    answer.run_id, held=claim.until, until=until
                )
            except Exception as exc:  # the database away: the claim may run out, say so
                log.warning(
                    "run %s: could not extend the claim on its answer: %s", answer.run_id, exc
                )
                continue
            if not kept:
                log.warning("run %s: lost the claim on its answer while posting it", answer.run_id)
                return
            claim.until = until


class _Claim:
    """The claim a poster holds on a run's answers: until when (extended while posting)."""

    def __init__(self, until: datetime, answer: AnswerToPost | None = None) -> None:
        self.until = until
        self.answer = answer
