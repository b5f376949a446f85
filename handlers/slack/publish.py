"""Everything the bot writes to a run's thread: progress, the waiting message, notes; what
a run's outcome shows, and the cards it posts (through :mod:`handlers.slack.cards`).

A run's last message (its answer, or why it stopped) goes through its own outbox, written
with the run's end (:mod:`handlers.slack.answers`); a streamed answer is
:mod:`handlers.slack.streams`'. A failed post is logged with the run it concerns and never
undoes database state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.engine import RunOutcome
from bot.ops import logs
from handlers.blocks import (
    escape,
    split_for_slack,
    waiting_text,
    working_blocks,
)
from handlers.slack.answers import Answers
from handlers.slack.cards import Cards
from handlers.slack.failures import SLACK_FAILURES
from handlers.slack.holds import show_hold
from handlers.slack.progress import ProgressEdits
from handlers.slack.streams import Streams, close_stream, open_stream
from handlers.slack.workspaces import WorkspaceClients
from storage.models import Run
from storage.repository import Repository

log = logging.getLogger(__name__)

WORKING = ":hourglass_flowing_sand: Working on it…"
RESUMING = ":hourglass_flowing_sand: Carrying on after the decision…"
RESUMING_ANSWERED = ":hourglass_flowing_sand: Carrying on with the answer…"
# Worded by what resumed the run: a callback, a retry coming due, an expiry.
RESUMING_CALLBACK = ":hourglass_flowing_sand: Carrying on after the callback…"
RESUMING_RETRY = ":hourglass_flowing_sand: Carrying on with the retry…"
RESUMING_EXPIRED = ":hourglass_flowing_sand: Carrying on after the expiry…"
NO_LONGER_WAITING = ":white_check_mark: No longer waiting: carrying on below."


class Publisher:
    """``clients`` gives each workspace's client: a run or approval is published with the
    token of the workspace it belongs to (its ``team_id``)."""

    def __init__(
        self, client: AsyncWebClient, repo: Repository, clients: WorkspaceClients | None = None
    ) -> None:
        self.client = client
        self.repo = repo
        self.clients = clients or WorkspaceClients(client)
        # Runs' last messages, from the outbox their end wrote (handlers.slack.answers).
        self.answers = Answers(repo, self.clients)
        # Approval cards: posted once through their outbox, edited in place (handlers.slack.cards).
        self.cards = Cards(repo, self.clients)
        # Long tools' progress() on the run's progress message (the engine reports here).
        self.tool_progress = ProgressEdits(repo, self.clients)
        # Told where a run stands each time it is shown ("working", or an outcome's status):
        # the agent pane mirrors it (handlers.flows.assistant.run_state). Never raises.
        self.on_run_state: Callable[[Run, str, RunOutcome | None], Awaitable[None]] | None = None
        # Answers streamed as the model writes, a task per call (handlers.slack.streams);
        # its mode is the configuration's ``streaming`` (build_services sets it).
        self.streams = Streams(self.clients)
        self.tool_progress.divert = self.streams.progress  # a streamed call's task details

    async def _client(self, team_id: str) -> AsyncWebClient:
        """Raises NotInstalled (a SlackApiError) for a workspace that uninstalled the app."""
        return await self.clients.for_team(team_id)

    async def progress(
        self,
        channel: str,
        thread_ts: str,
        text: str = WORKING,
        *,
        team: str = "",
        blocks: list[dict[str, Any]] | None = None,
    ) -> str | None:
        """A message that the outcome will replace; None if Slack would not take it."""
        try:
            response = await (await self._client(team)).chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=text, blocks=blocks
            )
        except SLACK_FAILURES as exc:
            log.error("could not post progress in %s/%s: %s", channel, thread_ts, exc)
            return None
        return response.get("ts")

    async def run_progress(self, run: Run, text: str = WORKING) -> str | None:
        """The run's progress message, stored on the run so that whoever publishes its
        outcome replaces it (another replica too, after this one died). A progress message
        still on record (its worker died before an outcome replaced it) is reused.

        ``run`` must be freshly read (or just opened, which clears the record)."""
        ts = await self._run_progress(run, text)
        await self._tell_state(run, "working", None)  # after it: a post may clear a status
        return ts

    async def _tell_state(self, run: Run, state: str, outcome: RunOutcome | None) -> None:
        if self.on_run_state is not None:
            await self.on_run_state(run, state, outcome)

    async def _run_progress(self, run: Run, text: str) -> str | None:
        stored = run.progress_ts
        waiting: asyncio.Task[None] | None = None
        if stored is not None and run.status in ("paused", "resuming"):
            # The pause's waiting message: it says the wait is over, and the resume posts
            # below the cards, where its answer is read. Its edit goes out beside the new
            # message's post (one Slack round trip less before the run resumes); the record
            # is cleared after the edit and before the new message is stored, as before.
            waiting = asyncio.create_task(self._no_longer_waiting(run, stored))
            stored = None
        try:
            return await self._post_progress(run, text, stored, waiting)
        finally:
            if waiting is not None:
                await waiting

    async def _no_longer_waiting(self, run: Run, stored: str) -> None:
        try:
            client = await self._client(run.team_id)
            await client.chat_update(
                channel=run.channel, ts=stored, text=NO_LONGER_WAITING, blocks=[]
            )
        except SLACK_FAILURES as exc:
            log.error("run %s: could not update its waiting message: %s", run.id, exc)
        await self.repo.clear_progress(run.id, stored)

    async def _post_progress(
        self, run: Run, text: str, stored: str | None, waiting: asyncio.Task[None] | None
    ) -> str | None:
        # While the run works its progress message carries Pause and Stop (issue 19 §2).
        buttons = working_blocks(text, run.id)
        if self.streams.wanted(run.team_id):
            if waiting is not None:
                await waiting  # a stream is stored as it starts: the record cleared first
            streamed = await open_stream(self.streams, self.repo, run, stored, buttons)
            if streamed is not None:
                return streamed
            stored = None  # said "interrupted", if there was one: a new message follows
        if stored is not None:
            try:
                client = await self._client(run.team_id)
                await client.chat_update(channel=run.channel, ts=stored, text=text, blocks=buttons)
                return stored
            except SLACK_FAILURES as exc:
                log.error("run %s: could not update its progress message: %s", run.id, exc)
        ts = await self.progress(run.channel, run.thread_ts, text, team=run.team_id, blocks=buttons)
        if waiting is not None:
            await waiting
        if ts is not None:
            await self.repo.set_progress(run.id, ts)
        return ts

    async def _stored_progress(self, run: Run) -> str | None:
        current = await self.repo.get_run(run.id)
        return current.progress_ts if current is not None else None

    @logs.bound_to("outcome")
    async def outcome(self, outcome: RunOutcome, *, progress_ts: str | None = None) -> None:
        """Tell the thread where the run stands; post a card for each new approval."""
        run = outcome.run
        if run is None or not run.channel:
            return
        await self.tool_progress.settle(run.id)  # no progress edit after this
        if progress_ts is None and outcome.status in ("completed", "paused", "failed", "cancelled"):
            # A run taken over (or resumed) elsewhere: the progress message its first worker
            # posted is on record. A busy answer is about another request: it posts anew.
            progress_ts = await self._stored_progress(run)
        progress_ts = await close_stream(
            self.streams, self.repo, self.answers, outcome, progress_ts
        )
        if outcome.status in ("completed", "failed", "cancelled"):
            # Stored with the run's end, with the progress message it replaces: the outbox
            # posts it (again, from any replica, if this post is lost; handlers.slack.answers).
            await self.answers.post(run.id)
        elif outcome.status == "paused":
            waiting = waiting_text(outcome.new_approvals)
            # The waiting message becomes the run's progress message, so it never outlives
            # the wait: the resume marks it done (see run_progress); a cancel replaces it.
            # Pause and Stop on it too: a run waiting on people can be paused (issue 19 §2).
            await self._say(
                run,
                waiting,
                progress_ts,
                escape_text=False,
                waiting=True,
                blocks=working_blocks(waiting, run.id),
            )
            for approval in outcome.new_approvals:
                await self.cards.post_card(approval.id)
        elif outcome.status == "held":
            await self.show_hold(run)
        elif outcome.status == "busy":
            await self._say(run, _busy_text(run), progress_ts, escape_text=False)
        if outcome.status != "busy":
            await self._tell_state(run, outcome.status, outcome)

    async def note(self, run: Run, text: str) -> None:
        """A line in the run's thread (mrkdwn, escaped by the caller): how a call that asked
        nobody was allowed (a standing grant, a rule). Best effort, as progress is."""
        if not run.channel:
            return
        try:
            client = await self._client(run.team_id)
            await client.chat_postMessage(channel=run.channel, thread_ts=run.thread_ts, text=text)
        except SLACK_FAILURES as exc:
            log.error("run %s: could not post a note to its thread: %s", run.id, exc)

    async def run_cancelled(self, run: Run) -> None:
        """A cancelled run's "Stopped: …", stored with the cancel (the answer outbox)."""
        await self.answers.post(run.id)
        await self._tell_state(run, "cancelled", None)

    async def show_hold(self, run: Run) -> None:
        """Where an operator's hold stands, on the run's progress message (issue 19 §2).
        Not over a stream this process writes: the stream ends at the safe point and the
        hold's message follows it (handlers.slack.streams.close_stream)."""
        if self.streams.live(run.id):
            return
        await show_hold(self.repo, self._client, run)

    async def _say(
        self,
        run: Run,
        text: str,
        progress_ts: str | None,
        *,
        escape_text: bool = True,
        waiting: bool = False,
        blocks: list[dict[str, Any]] | None = None,
    ) -> None:
        """Replace the progress message (or post) with ``text``. ``waiting``: a pause's
        waiting message, which stays the run's progress message for its resume to mark done,
        unless the run was decided and resumed before it was shown (then it says so now)."""
        # Escape first: escaping can make text several times longer than Slack's limit.
        chunks = split_for_slack(escape(text) if escape_text else text)
        try:
            client = await self._client(run.team_id)
            first, rest = chunks[0], chunks[1:]
            # ``blocks`` (the text and its buttons) only for a message that fits in one.
            shown = blocks if blocks is not None and not rest else None
            shown_ts = progress_ts
            if progress_ts:
                await client.chat_update(
                    channel=run.channel, ts=progress_ts, text=first, blocks=shown or []
                )
            else:
                posted = await client.chat_postMessage(
                    channel=run.channel, thread_ts=run.thread_ts, text=first, blocks=shown
                )
                shown_ts = posted.get("ts")
            if waiting and shown_ts and not await self.repo.set_waiting_progress(run.id, shown_ts):
                await client.chat_update(
                    channel=run.channel, ts=shown_ts, text=NO_LONGER_WAITING, blocks=[]
                )
            for chunk in rest:
                await client.chat_postMessage(
                    channel=run.channel, thread_ts=run.thread_ts, text=chunk
                )
        except SLACK_FAILURES as exc:
            log.error(
                "run %s: could not post to %s/%s: %s", run.id, run.channel, run.thread_ts, exc
            )
            return
        if progress_ts and not waiting:
            await self.repo.clear_progress(run.id, progress_ts)

    async def ephemeral(
        self, *, channel: str, user: str, text: str, thread_ts: str | None = None, team: str = ""
    ) -> None:
        try:
            await (await self._client(team)).chat_postEphemeral(
                channel=channel, user=user, text=text, thread_ts=thread_ts
            )
        except SLACK_FAILURES as exc:
            log.error("could not tell %s in %s: %s", user, channel, exc)


def _busy_text(run: Run) -> str:
    if run.status == "paused":
        return (
            ":raised_hand: I'm waiting for decisions on this thread's approvals; once they are "
            "decided I'll carry on. Use `/approvals all` to see them."
        )
    return ":hourglass_flowing_sand: I'm still working on this thread's last request."
