"""Everything the bot writes to Slack: progress, answers, approval cards and their edits.

A run's last message (its answer, or why it stopped) goes through its own outbox, written
with the run's end (:mod:`handlers.slack.answers`); the rest is here.

Cards are rendered from database rows and their location is stored on the approval, so any
replica can edit a card later. A failed post is logged with the approval or run it concerns
and never undoes database state: an approval whose card could not be posted is still listed
by /approvals.

Cards are an outbox: posting one is claimed in the database first (for ``CARD_CLAIM``), and
the sweeper posts the card of any pending approval that has none and no live claim (its
poster crashed, or Slack refused). A crash after Slack took the card and before its ``ts`` is
stored leaves a card we have no record of: the first click on it adopts it as the card; if
none comes within the claim, a second card is posted. Both act on the same approval, so
nothing runs twice, and a click on either edits it to show the decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.clock import utcnow
from bot.engine import RunOutcome
from bot.ops import logs
from handlers.blocks import (
    copy_blocks,
    escape,
    reach_blocks,
    render_batch_card,
    render_card,
    render_card_metadata,
    split_for_slack,
    waiting_text,
    working_blocks,
)
from handlers.slack.answers import Answers
from handlers.slack.failures import CHANNEL_REFUSALS, SLACK_FAILURES, slack_error, transient
from handlers.slack.holds import show_hold
from handlers.slack.progress import ProgressEdits
from handlers.slack.streams import Streams, close_stream, open_stream
from handlers.slack.workspaces import WorkspaceClients
from storage.models import Approval, Run
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
# Where a card is: (channel, message ts).
CardPlace = tuple[str, str]
# How long a poster holds its claim on posting a card; after that the sweeper may post it.
CARD_CLAIM = timedelta(minutes=1)
# The sweeper leaves cards this young to the worker that paused the run.
CARD_GRACE = timedelta(seconds=5)


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
        # Told of every approval whose card is posted or edited (the App Home refreshes).
        self.on_change: Callable[[Approval], None] | None = None
        # Told once a card was posted (or tried): its DM copies go out (handlers.slack.reach).
        self.on_card_posted: Callable[[Approval], None] | None = None
        # Told when Slack refuses a card's channel for good (not_in_channel, ...): True when
        # that settled the approval (a Workflow Builder step fails: handlers.flows.runs).
        self.on_card_refused: Callable[[Approval, str], Awaitable[bool]] | None = None
        # Adds to an approval card what other rows say (standing grants: handlers.flows.grants).
        self.decorate_card: (
            Callable[[Approval, list[dict[str, Any]]], Awaitable[list[dict[str, Any]]]] | None
        ) = None
        # Long tools' progress() on the run's progress message (the engine reports here).
        self.tool_progress = ProgressEdits(repo, self.clients)
        # Told where a run stands each time it is shown ("working", or an outcome's status):
        # the agent pane mirrors it (handlers.flows.assistant.run_state). Never raises.
        self.on_run_state: Callable[[Run, str, RunOutcome | None], Awaitable[None]] | None = None
        # Answers streamed as the model writes, a task per call (handlers.slack.streams);
        # its mode is the configuration's ``streaming`` (build_services sets it).
        self.streams = Streams(self.clients)
        self.tool_progress.divert = self.streams.progress  # a streamed call's task details

    async def card_content(self, approval: Approval) -> tuple[str, list[dict[str, Any]]]:
        """An approval's card as it stands: with what other rows add (grants, escalation)."""
        text, blocks = await self._render(approval)
        card_id = approval.batch_id or approval.id  # a batch's reach is its first row's
        return text, blocks + reach_blocks(approval, await self.repo.reach_of(card_id))

    async def card_metadata(self, approval: Approval) -> dict[str, Any]:
        """The card's message metadata (handlers.blocks.metadata), from all a batch's rows."""
        rows = await self.repo.batch_rows(approval.batch_id) if approval.batch_id else []
        return render_card_metadata(rows or [approval])

    async def _render(self, approval: Approval) -> tuple[str, list[dict[str, Any]]]:
        if approval.batch_id:
            # One card for the batch's calls (handlers.blocks.batches), from all its rows.
            rows = await self.repo.batch_rows(approval.batch_id)
            if rows:
                return render_batch_card(rows)
        text, blocks = render_card(approval)
        if self.decorate_card is not None:
            blocks = await self.decorate_card(approval, blocks)
        return text, blocks

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
                await self.post_card(approval.id)
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

    @logs.bound_to("approval_id")
    async def post_card(self, approval_id: str) -> None:
        """Post a pending approval's card once: claim it, post it, record where it is."""
        now = utcnow()
        approval = await self.repo.claim_card(approval_id, now=now, until=now + CARD_CLAIM)
        if approval is None:
            return  # posted, being posted elsewhere, or decided already
        if self.on_change is not None:
            self.on_change(approval)
        text, blocks = await self._render(approval)
        metadata = await self.card_metadata(approval)
        try:
            response = await (await self._client(approval.team_id)).chat_postMessage(
                channel=approval.channel,
                thread_ts=approval.thread_ts or None,
                text=text,
                blocks=blocks,
                metadata=metadata,
            )
        except SLACK_FAILURES as exc:
            refused = self.on_card_refused
            error = slack_error(exc)
            if error in CHANNEL_REFUSALS and refused and await refused(approval, error):
                return  # settled: a step failed, saying why
            log.error(
                "approval %s: could not post its card to %s (it is still pending and listed "
                "by /approvals; the sweeper tries again): %s",
                approval.id,
                approval.channel,
                exc,
            )
        else:
            await self.repo.set_card(approval.id, channel=response["channel"], ts=response["ts"])
        if self.on_card_posted is not None:
            self.on_card_posted(approval)

    async def post_missing_cards(self) -> int:
        """The outbox: post the cards no worker posted (the sweeper calls this)."""
        now = utcnow()
        posted = 0
        for approval_id in await self.repo.cards_to_post(now, created_before=now - CARD_GRACE):
            await self.post_card(approval_id)
            posted += 1
        return posted

    async def post_request_cards(self) -> int:
        """The outbox's requests from other systems (the HTTP API, ``approval-bot mcp``),
        without the grace: no worker of this process is about to post them."""
        posted = 0
        for approval_id in await self.repo.request_cards_to_post(utcnow()):
            await self.post_card(approval_id)
            posted += 1
        return posted

    @logs.bound_to("approval_id")
    async def refresh_card(self, approval_id: str, *, clicked: CardPlace | None = None) -> None:
        """Edit a card in place to show the approval as it is now (buttons gone once decided).

        ``clicked``: the message a click came from. When it is not the card on record (a
        second card, posted after a crash hid the first), it is edited too, so no card of a
        decided approval keeps live buttons once someone has clicked it.
        """
        read_at = utcnow()
        approval = await self.repo.get_approval(approval_id)
        if approval is None:
            return
        if self.on_change is not None:
            self.on_change(approval)
        # Two workers may edit one card at once (a decider showing "approved" on one replica,
        # the resumer showing "ran" on another), and the later chat.update wins whatever it
        # read. So every editor reads the approval again after its edit and edits once more
        # if it moved on meanwhile: the last edit then shows the last state.
        if approval.batch_id and approval.batch_id != approval.id:
            # A batch's card is its first row's: edit it once, from all the batch's rows.
            await self.refresh_card(approval.batch_id, clicked=clicked)
            return
        state = await self._state(approval)
        for _ in range(_CARD_EDIT_ROUNDS):
            edited = await self._edit_card(approval, clicked)
            latest_at = utcnow()
            latest = await self.repo.get_approval(approval_id)
            latest_state = await self._state(latest) if latest is not None else None
            if latest is None or latest_state is None or latest_state == state:
                if edited and (approval.min_approvals or 1) > 1:
                    # The votes read then are on the card: the sweeper need not edit it
                    # (a batch's card shows every call's votes).
                    for shown_id in await self._rows_on_card(approval):
                        await self.repo.card_edited(shown_id, before=read_at)
                return
            approval, read_at, state = latest, latest_at, latest_state

    async def _rows_on_card(self, approval: Approval) -> list[str]:
        if approval.batch_id:
            return [row.id for row in await self.repo.batch_rows(approval.batch_id)]
        return [approval.id]

    async def _state(self, approval: Approval) -> tuple[object, ...]:
        """What the card shows: of every row of a batch, or of the one approval."""
        if approval.batch_id:
            return tuple(_card_state(a) for a in await self.repo.batch_rows(approval.batch_id))
        return _card_state(approval)

    async def edit_cards_due(self) -> None:
        """The sweeper's part: edit the cards of votes whose own edit never came (their
        replica died between the vote's commit and the edit, or Slack failed it)."""
        for approval_id in await self.repo.card_edits_due(before=utcnow() - CARD_EDIT_GRACE):
            await self.refresh_card(approval_id)

    async def _edit_card(self, approval: Approval, clicked: CardPlace | None) -> bool:
        """Edit the card and its copies; False when the card on record could not be edited."""
        places = []
        if approval.card_ts and approval.card_channel:
            places.append((approval.card_channel, approval.card_ts))
        # Its DM copies (handlers.slack.reach), wherever they were posted from.
        copies = {(c.channel, c.ts) for c in await self.repo.approval_messages(approval.id)}
        places += sorted(copies - set(places))
        if clicked is not None and clicked not in places:
            places.append(clicked)
        if not places:
            return True
        text, blocks = await self.card_content(approval)
        metadata = await self.card_metadata(approval)

        async def edit(channel: str, ts: str) -> bool:
            shown = copy_blocks(approval) + blocks if (channel, ts) in copies else blocks
            try:
                client = await self._client(approval.team_id)
                await client.chat_update(
                    channel=channel, ts=ts, text=text, blocks=shown, metadata=metadata
                )
            except SLACK_FAILURES as exc:
                log.error("approval %s: could not update its card: %s", approval.id, exc)
                on_record = (channel, ts) == (approval.card_channel, approval.card_ts)
                # A card Slack refuses for good (deleted, archived) is not retried by sweeps.
                if on_record and transient(exc):
                    return False
            return True

        # The card first (a refusal of its edit is what the sweep retries), then its copies
        # at once: each is its own message, and edited one after another they were a Slack
        # round trip each before the run resumed.
        on_record = (approval.card_channel, approval.card_ts)
        own = [place for place in places if place == on_record or place not in copies]
        others = [place for place in places if place not in own]
        edited = [await edit(channel, ts) for channel, ts in own]
        edited += await asyncio.gather(*(edit(channel, ts) for channel, ts in others))
        return all(edited)

    async def ephemeral(
        self, *, channel: str, user: str, text: str, thread_ts: str | None = None, team: str = ""
    ) -> None:
        try:
            await (await self._client(team)).chat_postEphemeral(
                channel=channel, user=user, text=text, thread_ts=thread_ts
            )
        except SLACK_FAILURES as exc:
            log.error("could not tell %s in %s: %s", user, channel, exc)


# An approval moves through a handful of states, so a few rounds always reach the last one.
_CARD_EDIT_ROUNDS = 4
# A vote's own replica edits its card within a second or two; the sweeper waits this long
# before it edits one whose mark is still there (a second edit would be harmless anyway).
CARD_EDIT_GRACE = timedelta(seconds=10)


def _card_state(approval: Approval) -> tuple[object, ...]:
    """What a card shows of an approval: when this changes, the card must be edited."""
    return (
        approval.status,
        approval.decided_by,
        approval.reason,
        approval.result,
        approval.card_ts,
        tuple(approval.approvers),
        # Quorum progress: an edit of an earlier vote may land after a later vote's.
        tuple(approval.approved_by or ()),
    )


def _busy_text(run: Run) -> str:
    if run.status == "paused":
        return (
            ":raised_hand: I'm waiting for decisions on this thread's approvals; once they are "
            "decided I'll carry on. Use `/approvals all` to see them."
        )
    return ":hourglass_flowing_sand: I'm still working on this thread's last request."
