"""Reach the approvers: a DM copy of each new card to every named approver, one reminder,
one escalation. Slack calls only; what was sent and what is due lives in the database
(:mod:`storage.stores.reach`), so any replica edits every copy and nothing is sent twice.

- DM copies: once a card is posted (in the background: never in the acknowledgement path nor
  before the channel card), the sender claims the approval's copies, expands user groups
  (``usergroups.users.list``, at most ``approver_dm_limit`` members each), opens a DM
  (``conversations.open``) and posts the card to each approver but the requester, and records
  each copy's (channel, ts). The sweeper sends the copies no live sender is sending; a copy
  already recorded is never posted again. A sender that dies after Slack took a copy and
  before its ts was stored may post that one copy twice (as the channel card's outbox).
- ``remind_after``: the sweep that finds it due claims it (``reminded_at``, a conditional
  UPDATE that also requires the approval still pending) and DMs each copy's recipient; an
  approval with no copies gets a reply in its card's thread.
- ``escalate_after``: the sweep claims it (``escalated_at``), adds ``escalate_to`` to the
  approval's approvers in the same transaction (audited) and makes its DM copies due
  again: their sender (this one, or the sweeper's when this worker died) edits the card and
  its copies ("Escalated to … after 20 minutes") and DMs the added approvers.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from bot.clock import utcnow
from bot.config import Config
from bot.ops import BackgroundTasks, logs
from handlers.blocks import copy_blocks, mention, shown_name, slack_date
from handlers.slack.failures import SLACK_FAILURES, transient
from handlers.slack.groups import GroupLookupFailed, UserGroups
from handlers.slack.publish import Publisher
from handlers.slack.workspaces import WorkspaceClients
from storage.models import Approval
from storage.records import ReachState
from storage.repository import Repository

log = logging.getLogger(__name__)

# How long a sender holds its claim on an approval's DM copies; then the sweeper may send.
DM_CLAIM = timedelta(minutes=1)
# A copy's Slack calls (Retry-After sleeps included) may take this share of the claim.
DM_SEND_SHARE = 0.75
# The sweeper leaves copies this young to the worker that posted the card.
DM_GRACE = timedelta(seconds=5)
# Copies Slack failed for now (429, 5xx, a timeout) are tried again after a backoff that
# doubles from DM_RETRY_FIRST up to DM_RETRY_LONGEST (longer when Slack says Retry-After);
# after DM_ATTEMPTS failed attempts they are given up (audited).
DM_RETRY_FIRST = timedelta(seconds=30)
DM_RETRY_LONGEST = timedelta(minutes=10)
DM_ATTEMPTS = 6
# Slack asks for seconds to a minute; anything past this is taken as this.
DM_RETRY_AFTER_LONGEST = timedelta(hours=1)


def dm_retry_delay(attempts: int, retry_after: timedelta) -> timedelta:
    """How long to wait after the ``attempts``-th failed attempt (1 = the first)."""
    backoff = min(DM_RETRY_FIRST * 2 ** (attempts - 1), DM_RETRY_LONGEST)
    return max(backoff, retry_after)


def retry_after_of(exc: BaseException) -> timedelta:
    """Slack's Retry-After (seconds) on a 429, at most DM_RETRY_AFTER_LONGEST; zero when it
    gave none. Bounded because a huge value would overflow the next attempt's time, and the
    copy would then fail without its attempt being counted: never given up."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    try:
        seconds = max(0, int(value)) if value is not None else 0
    except (TypeError, ValueError):
        return timedelta(0)
    return min(timedelta(seconds=min(seconds, 10**9)), DM_RETRY_AFTER_LONGEST)


class Reach:
    """Sends an approval's DM copies once its card is posted (the publisher's
    ``on_card_posted``), and what comes due (``due``, every replica's sweeper)."""

    def __init__(
        self,
        *,
        repo: Repository,
        config: Config,
        publisher: Publisher,
        groups: UserGroups,
        clients: WorkspaceClients,
        background: BackgroundTasks,
    ) -> None:
        self.repo = repo
        self.config = config
        self.publisher = publisher
        self.groups = groups
        self.clients = clients
        self.background = background

    def card_posted(self, approval: Approval) -> None:
        """A card was posted: send its DM copies in the background."""
        if approval.kind not in ("approval", "recovery"):  # people decide these
            return
        self.background.spawn(self.send_copies(approval.id), name=f"dms {approval.id}")

    @logs.bound_to("approval_id")
    async def send_copies(self, approval_id: str) -> int:
        """Post the approval's DM copies not posted yet; how many were posted."""
        repo = self.repo
        now = utcnow()
        until = now + DM_CLAIM
        claimed = await repo.claim_dms(approval_id, now=now, until=until)
        if claimed is None:
            return 0
        approval, state = claimed
        if state.escalated_at is not None:
            # The escalation's send (or the sweep's, when its worker died after claiming it):
            # the card and the copies already out say "Escalated to …" first.
            await self.publisher.cards.refresh_card(approval_id)
        posted_to = {c.recipient for c in await repo.approval_messages(approval_id)}
        given_up = set(state.dms_given_up)
        done = posted_to | given_up
        unlisted: list[str] = []  # groups Slack could not list now: their copies come later
        recipients = await self._recipients(approval, state, posted_to, unlisted)
        text, blocks = await self.publisher.cards.card_content(approval)
        blocks = copy_blocks(approval) + blocks
        metadata = await self.publisher.cards.card_metadata(approval)
        posted = 0
        failed = list(unlisted)  # for now: tried again after a backoff
        retry_after = timedelta(0)
        for user in recipients:
            if user in done:
                continue
            # Slack may be slow (429s, Retry-After) or this worker paused past its claim:
            # renew it before each copy, and leave the rest to the sender that took it over.
            renewed = utcnow() + DM_CLAIM
            if not await repo.renew_dms_claim(approval_id, held=until, until=renewed):
                log.warning("approval %s: another sender took over its DM copies", approval_id)
                return posted
            until = renewed
            try:
                # slack_sdk sleeps out each 429's Retry-After itself, which can outlast the
                # claim: a sender still asleep then would post what the sweeper's sender
                # took over and posted. Stop waiting well before the claim ends; the copy
                # is due again (only a post Slack took without answering stays doubled).
                async with asyncio.timeout(DM_SEND_SHARE * DM_CLAIM.total_seconds()):
                    client = await self.clients.for_team(approval.team_id)
                    if _is_channel(user):  # assistant_cards_channel: posted as it is
                        channel = user
                    else:
                        opened = await client.conversations_open(users=user)
                        channel = opened["channel"]["id"]
                    response = await client.chat_postMessage(
                        channel=channel, text=text, blocks=blocks, metadata=metadata
                    )
            except TimeoutError:
                log.error("approval %s: DM to %s outlasted its claim; due again", approval_id, user)
                failed.append(user)
                continue
            except SLACK_FAILURES as exc:
                log.error("approval %s: could not DM its card to %s: %s", approval_id, user, exc)
                if transient(exc):
                    failed.append(user)
                    retry_after = max(retry_after, retry_after_of(exc))
                else:
                    given_up.add(user)
                    await repo.audit_reach(
                        approval_id,
                        "approval_dm_failed",
                        now=utcnow(),
                        recipient=user,
                        error=_error_of(exc),
                        retried=False,
                    )
                continue
            await repo.add_approval_message(
                approval_id, recipient=user, channel=channel, ts=response["ts"], now=utcnow()
            )
            posted += 1
        await self._end_claim(approval_id, until, state, failed, given_up, retry_after)
        latest = await repo.get_approval(approval_id)
        if posted and latest is not None and latest.status != "pending":
            # Decided while the copies went out: they show the decision too.
            await self.publisher.cards.refresh_card(approval_id)
        return posted

    async def _end_claim(
        self,
        approval_id: str,
        until: datetime,
        state: ReachState,
        failed: list[str],
        given_up: set[str],
        retry_after: timedelta,
    ) -> None:
        """Release the copies' claim: sent, or due again after a backoff, or given up."""
        repo, now = self.repo, utcnow()
        if not failed:
            await repo.dms_sent(approval_id, now=now, until=until, given_up=given_up)
            return
        attempts = state.dms_attempts + 1
        if attempts >= DM_ATTEMPTS:
            await repo.audit_reach(
                approval_id,
                "approval_dm_failed",
                now=now,
                recipients=failed,
                attempts=attempts,
                retried=False,
            )
            await repo.dms_sent(approval_id, now=now, until=until, given_up=given_up | set(failed))
            return
        retry_at = now + dm_retry_delay(attempts, retry_after)
        await repo.dms_sent(
            approval_id,
            now=now,
            until=until,
            given_up=given_up,
            retry_at=retry_at,
            attempts=attempts,
        )

    async def _recipients(
        self, approval: Approval, state: ReachState, done: set[str], unlisted: list[str]
    ) -> list[str]:
        """Named approvers (escalated ones too), groups expanded and capped, never the
        requester, each once. ``done``: who has a copy already (a group whose capped
        members all have one was announced when they got it: an escalation's second send
        does not say so again). ``unlisted``: gets the groups Slack could not list now."""
        names = list(approval.approvers)
        if state.escalated_at is not None:
            names += [a for a in state.escalate_to if a not in names]
        limit = self.config.approver_dm_limit
        users: list[str] = []
        for name in names:
            if not name.startswith("S"):
                users.append(name)
                continue
            try:
                members = sorted(await self.groups.members(name, team=approval.team_id))
            except GroupLookupFailed as exc:
                log.error("approval %s: no DMs to group %s yet: %s", approval.id, name, exc)
                unlisted.append(name)
                continue
            announced = done.issuperset(set(members[:limit]) - {approval.requester})
            if len(members) > limit and not announced:
                log.warning(
                    "approval %s: group %s has %d members; DMing the first %d "
                    "(approver_dm_limit); the others see the card in its channel",
                    approval.id,
                    name,
                    len(members),
                    limit,
                )
                await self.repo.audit_reach(
                    approval.id,
                    "approval_dms_capped",
                    now=utcnow(),
                    group=name,
                    members=len(members),
                    limit=limit,
                )
                await self._say_in_thread(
                    approval,
                    f":information_source: {mention(name)} has {len(members)} members: I sent "
                    f"this card to the first {limit} by DM (`approver_dm_limit`); the others "
                    "can decide here.",
                )
            members = members[:limit]
            users.extend(members)
        recipients = [u for u in dict.fromkeys(users) if u != approval.requester]
        cards = self.config.assistant_cards_channel
        if cards and approval.channel.startswith("D"):
            # A request made in the agent pane (a DM with the app): its card also goes to
            # the channel named for such cards, as a copy sent and retried like the DMs.
            recipients.insert(0, cards)
        return recipients

    async def _say_in_thread(self, approval: Approval, text: str) -> None:
        try:
            client = await self.clients.for_team(approval.team_id)
            await client.chat_postMessage(
                channel=approval.card_channel or approval.channel,
                thread_ts=approval.card_ts or approval.thread_ts or None,
                text=text,
            )
        except SLACK_FAILURES as exc:
            log.error("approval %s: could not post in its thread: %s", approval.id, exc)

    # -- what comes due: called by every replica's sweeper -------------------------------

    async def due(self) -> None:
        """Send the DM copies no live sender is sending; send the reminders and
        escalations that have come due (each claimed first: once across replicas)."""
        now = utcnow()
        repo = self.repo
        for approval_id in await repo.escalations_due(now):
            await self.escalate(approval_id)
        for approval_id in await repo.claim_reminders(now):
            await self.remind(approval_id)
        for approval_id in await repo.dms_to_send(now, created_before=now - DM_GRACE):
            await self.send_copies(approval_id)

    @logs.bound_to("approval_id")
    async def remind(self, approval_id: str) -> None:
        """The one reminder of a claimed approval (see ``claim_reminders``)."""
        repo = self.repo
        approval = await repo.get_approval(approval_id)
        if approval is None or approval.status != "pending":
            return  # decided between the claim and now: no reminder after a decision
        what = f"`{shown_name(approval.tool_name)}`"
        if approval.batch_id:
            # A batch card's reminder is one, with its count (handlers.blocks.batches).
            rows = await repo.batch_rows(approval.batch_id)
            waiting = sum(1 for row in rows if row.status == "pending")
            what = f"{waiting} {what} calls (one batch card)"
        text = (
            f":bell: Reminder: {what}, asked by "
            f"{mention(approval.requester)} in <#{approval.channel}>, still waits for your "
            f"decision (expires {slack_date(approval.expires_at)})."
        )
        if approval.kind == "recovery":  # a failed call (on_error = "ask")
            text = (
                f":bell: Reminder: `{shown_name(approval.tool_name)}` failed in "
                f"<#{approval.channel}> and still waits for your choice: Retry, Skip or Stop "
                f"run (until {slack_date(approval.expires_at)})."
            )
        # Under a quorum, those who approved already have acted: only the others are reminded.
        acted = set(approval.approved_by or ())
        copies = await repo.approval_messages(approval_id)
        reminded: list[str] = []
        for copy in copies:
            if copy.recipient in acted:
                continue
            try:
                client = await self.clients.for_team(approval.team_id)
                await client.chat_postMessage(channel=copy.channel, text=text)
                reminded.append(copy.recipient)
            except SLACK_FAILURES as exc:
                log.error("approval %s: no reminder to %s: %s", approval_id, copy.recipient, exc)
        if not copies:
            named = " ".join(mention(a) for a in approval.approvers if a not in acted)
            await self._say_in_thread(
                approval,
                f":bell: {named + ': ' if named else ''}this still waits for a decision "
                f"(expires {slack_date(approval.expires_at)}).",
            )
            reminded = [a for a in approval.approvers if a not in acted] or ["(channel)"]
        await repo.audit_reach(approval_id, "approval_reminder_sent", now=utcnow(), to=reminded)

    @logs.bound_to("approval_id")
    async def escalate(self, approval_id: str) -> None:
        escalation = await self.repo.escalate(approval_id, now=utcnow())
        if escalation is None:
            return  # escalated elsewhere, decided, or expired
        await self.send_copies(approval_id)  # edits the card, then DMs the added approvers


def _error_of(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    error = response.get("error") if response is not None and hasattr(response, "get") else None
    return str(error or type(exc).__name__)


def _is_channel(recipient: str) -> bool:
    """A channel id among the recipients (``assistant_cards_channel``), not a user's."""
    return recipient[:1] in ("C", "G")
