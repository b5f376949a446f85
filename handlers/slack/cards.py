"""Approval cards: posted once, edited in place, from any replica.

Cards are rendered from database rows and their location is stored on the approval, so any
replica can edit a card later. A failed post is logged with the approval it concerns and
never undoes database state: an approval whose card could not be posted is still listed by
/approvals.

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
from bot.ops import logs
from handlers.blocks import (
    copy_blocks,
    reach_blocks,
    render_batch_card,
    render_card,
    render_card_metadata,
)
from handlers.slack.failures import CHANNEL_REFUSALS, SLACK_FAILURES, slack_error, transient
from handlers.slack.workspaces import WorkspaceClients
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, Repository

log = logging.getLogger(__name__)

# Where a card is: (channel, message ts).
CardPlace = tuple[str, str]
# How long a poster holds its claim on posting a card; after that the sweeper may post it.
CARD_CLAIM = timedelta(minutes=1)
# The sweeper leaves cards this young to the worker that paused the run.
CARD_GRACE = timedelta(seconds=5)


class Cards:
    """The cards of one process, each posted and edited with the token of the workspace its
    approval belongs to (``clients``)."""

    def __init__(self, repo: Repository, clients: WorkspaceClients) -> None:
        self.repo = repo
        self.clients = clients
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

    async def _client(self, team_id: str) -> AsyncWebClient:
        """Raises NotInstalled (a SlackApiError) for a workspace that uninstalled the app."""
        return await self.clients.for_team(team_id)

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
            place = {"channel": response["channel"], "ts": response["ts"]}
            if not await self.repo.set_card(approval.id, **place):
                # Settled while it was being posted, by someone who had no card to edit then:
                # it shows the claimed (pending) row, buttons and all, until edited now.
                await self.refresh_card(approval.id)
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
    async def refresh_card(
        self,
        approval_id: str,
        *,
        clicked: CardPlace | None = None,
        stored: Approval | None = None,
        due: bool = False,
    ) -> bool:
        """Edit a card in place to show the approval as it is now (buttons gone once decided);
        False when Slack refused the edit for now.

        ``clicked``: the message a click came from. When it is not the card on record (a
        second card, posted after a crash hid the first), it is edited too, so no card of a
        decided approval keeps live buttons once someone has clicked it.

        ``stored``: the approval's row as the caller's own write just returned it (a
        decision), which saves reading it again on a click's path; the read after the edit
        still catches any later change. Not for a quorum's card, whose sweep marks are
        cleared by what was read when (``card_edited``): that one is always read here.

        ``due``: the sweeper's edit of a card marked due (:meth:`edit_cards_due`), whose mark
        the edit clears. An edit Slack refuses for now marks its card due.
        """
        read_at = utcnow()
        if stored is not None and stored.id == approval_id and (stored.min_approvals or 1) <= 1:
            approval: Approval | None = stored
        else:
            approval = await self.repo.get_approval(approval_id)
        if approval is None:
            return True
        if self.on_change is not None:
            self.on_change(approval)
        # Two workers may edit one card at once (a decider showing "approved" on one replica,
        # the resumer showing "ran" on another), and the later chat.update wins whatever it
        # read. So every editor reads the approval again after its edit and edits once more
        # if it moved on meanwhile: the last edit then shows the last state.
        if approval.batch_id and approval.batch_id != approval.id:
            # A batch's card is its first row's: edit it once, from all the batch's rows.
            return await self.refresh_card(approval.batch_id, clicked=clicked, due=due)
        state = await self._state(approval)
        for _ in range(_CARD_EDIT_ROUNDS):
            if not await self._edit_card(approval, clicked):
                # Slack refused it for now (an outage, 429s past the client's retries):
                # without a mark, a decided card kept its buttons until someone clicked.
                batch = approval.batch_id is not None
                await self.repo.card_edit_failed(approval.id, now=utcnow(), batch=batch)
                return False
            latest_at = utcnow()
            latest = await self.repo.get_approval(approval_id)
            latest_state = await self._state(latest) if latest is not None else None
            if latest is None or latest_state is None or latest_state == state:
                if due or (approval.min_approvals or 1) > 1:
                    # What was read then is on the card: the sweeper need not edit it
                    # (a batch's card shows every call's votes).
                    for shown_id in await self._rows_on_card(approval):
                        await self.repo.card_edited(shown_id, before=read_at)
                return True
            approval, read_at, state = latest, latest_at, latest_state
        return True

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
        replica died between the vote's commit and the edit, or Slack failed it), and of any
        other edit Slack failed). The first that Slack refuses again ends this sweep's edits:
        through an outage, the rest would each wait out the client's retries too, and hold
        up the sweeps that expire approvals and take over runs. So would a Slack that takes
        each edit only after a 429 or two (the client waits them out): the edits stop after
        ``CARD_EDITS_PER_SWEEP``, and the next sweep edits the rest.

        A card that cannot be edited for another reason (a row it cannot draw) is logged and
        its mark moved on, as a refusal's is: the oldest mark first, it would otherwise end
        every sweep's edits there, and no other card marked due would be edited again.

        Each mark is taken before its edit (``claim_card_edit`` moves it on to now), so two
        replicas sweeping at once edit a card once; one that dies mid-edit leaves the mark
        due again after the grace."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CARD_EDITS_PER_SWEEP.total_seconds()
        before = utcnow() - CARD_EDIT_GRACE
        for approval_id in await self.repo.card_edits_due(before=before):
            # Every replica's sweeper reads the same marks: one takes each.
            if not await self.repo.claim_card_edit(approval_id, before=before, now=utcnow()):
                continue
            try:
                edited = await self.refresh_card(approval_id, due=True)
            except DATABASE_FAILURES:
                raise  # the database's outage: the sweep's outage log says so
            except Exception:
                log.exception("approval %s: its card could not be edited", approval_id)
                await self.repo.card_edit_failed(approval_id, now=utcnow())
                edited = True
            if not edited or loop.time() >= deadline:
                return

    async def _edit_card(self, approval: Approval, clicked: CardPlace | None) -> bool:
        """Edit the card and its copies; False when Slack refused the card on record's edit,
        or a DM copy's, for now."""
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
                # A DM copy refused for now is (a sweep edits the card and every copy): it
                # kept its buttons on a decided approval for good.
                if (on_record or (channel, ts) in copies) and transient(exc):
                    return False
            return True

        # The card first, then its copies at once (a refusal for now of any of them is what
        # the sweep retries): each is its own message, and edited one after another they were
        # a Slack round trip each before the run resumed.
        on_record = (approval.card_channel, approval.card_ts)
        own = [place for place in places if place == on_record or place not in copies]
        others = [place for place in places if place not in own]
        edited = [await edit(channel, ts) for channel, ts in own]
        edited += await asyncio.gather(*(edit(channel, ts) for channel, ts in others))
        return all(edited)


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
        # The arguments it asks about (every edit binds them anew): two edits of a call that
        # stays pending (a quorum's) change nothing else above.
        approval.payload_hash,
        approval.min_approvals,
    )


# How long one sweep spends editing marked cards (``edit_cards_due``): a slow Slack (429s the
# client waits out and retries) must not hold up the sweeps that expire approvals and take
# over runs; the next sweep edits the rest.
CARD_EDITS_PER_SWEEP = timedelta(seconds=5)
