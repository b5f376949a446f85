"""Slack listeners: mentions, card buttons, the deny-reason modal and /approvals.

Each listener acknowledges first (Slack wants an answer within 3 seconds) and hands slow work
(the model, a resume) to tracked background tasks. The acknowledgement path reads the
database where it must (/approvals lists, the deny modal's permission check) and never calls
a model.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext, AsyncRespond
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot import logs
from bot.clock import utcnow
from bot.failpoints import failpoint
from bot.runner import Request, RunOutcome, ensure_may_decide
from handlers import blocks, edit_listeners
from handlers.decisions import (
    LIST_FAILED,
    ClickPlace,
    clicked_approval,
    decide_from_slack,
    form_opening,
    refresh_settled_cards,
)
from handlers.history import HISTORY_SIZE, render_history
from handlers.interactions import click_place, clicked_card, form_click, json_object, teller
from handlers.list_refresh import list_refresher, refresher_for_click
from handlers.services import GroupLookupFailed, Services
from storage.models import Approval, Run
from storage.repository import (
    DATABASE_FAILURES,
    DuplicateEvent,
    PendingFilter,
    RunBusy,
    time_limit,
)

log = logging.getLogger(__name__)

PAGE_SIZE = 10
COUNT_AHEAD = 990
# Pages past this are not from our buttons (a list that long is paged by nobody): such a
# value, like any other tampered one, gets the first page, and never reaches the database,
# whose integers a crafted page number (10**30) would overflow.
MAX_PAGE = 1000
GROUPS_UNLISTED = (
    ":warning: I couldn't reach Slack to check your user groups, so I can't tell what you may "
    "approve just now. Please try again."
)


def register(app: AsyncApp, services: Services) -> None:
    register_mentions(app, services)
    register_buttons(app, services)
    edit_listeners.register(app, services)
    register_approvals_command(app, services)


# -- mentions ----------------------------------------------------------------------------


def mention_text(text: str, bot_user_id: str | None) -> str:
    """The request, without the bot's own mention."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text)
    return " ".join(text.split())


def register_mentions(app: AsyncApp, services: Services) -> None:
    @app.event("app_mention")
    async def on_mention(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> BoltResponse | None:
        """Store the request and the event id in one transaction, then acknowledge.

        Slack redelivers an event until it gets a 2xx: answering 503 when the request could
        not be stored (in time) means it comes back, and an event counts as handled exactly
        when its request is stored, so a retry is never dropped for a request that was lost.
        """
        event_id = body.get("event_id") or f"{event.get('channel')}:{event.get('ts')}"
        request = Request(
            text=mention_text(event.get("text", ""), context.bot_user_id),
            requester=event.get("user", ""),
            team_id=body.get("team_id") or context.team_id or "",
            channel=event.get("channel", ""),
            thread_ts=event.get("thread_ts") or event.get("ts", ""),
            context=(
                f"You are in Slack channel <#{event.get('channel')}>. This conversation was "
                f"started by <@{event.get('user')}>."
            ),
        )
        run: Run | None = None
        busy: Run | None = None
        try:
            with time_limit(services.ack_time_limit):
                if not request.text:
                    if await services.repo.claim_event(event_id, now=utcnow()):
                        services.background.spawn(
                            tell_how(services, request), name=f"empty mention {event_id}"
                        )
                    return None
                run = await services.runner.open(request, event_id=event_id)
        except DuplicateEvent:
            return None  # a retried delivery, or another replica has it
        except RunBusy as refused:
            busy = refused.run
        except DATABASE_FAILURES as exc:
            log.error("mention %s not stored (%s); answered 503 so Slack redelivers", event_id, exc)
            return BoltResponse(status=503, body="the request could not be stored; retry")
        failpoint("mention_stored")
        if busy is not None:
            outcome = RunOutcome(run_id=busy.id, status="busy", run=busy)
            services.background.spawn(services.publisher.outcome(outcome), name=f"busy {event_id}")
        elif run is not None:
            services.background.spawn(drive_request(services, run), name=f"mention {event_id}")
        return None

    @app.event("message")
    async def ignore_messages() -> None:
        """Plain channel messages are not for us; acknowledge them quietly."""

    @app.event("subteam_members_changed")
    async def on_group_members_changed(event: dict[str, Any]) -> None:
        services.groups.forget(event.get("subteam_id", ""))

    @app.event("subteam_updated")
    async def on_group_updated(event: dict[str, Any]) -> None:
        services.groups.forget((event.get("subteam") or {}).get("id", ""))


async def tell_how(services: Services, request: Request) -> None:
    await services.publisher.ephemeral(
        channel=request.channel,
        user=request.requester,
        thread_ts=request.thread_ts,
        team=request.team_id,
        text="Mention me with what you need, for example `@approval-bot restart payments`.",
    )


@logs.bound_to("run")
async def drive_request(services: Services, run: Run) -> None:
    """Drive a stored request and answer in its thread (after Slack got its 200)."""
    progress = await services.publisher.run_progress(run)
    outcome = await services.runner.drive(run)
    await services.publisher.outcome(outcome, progress_ts=progress)
    if outcome.status in ("failed", "cancelled"):
        await refresh_settled_cards(services, run.id)  # the approvals it left are cancelled


# -- buttons and the modal ---------------------------------------------------------------


def register_buttons(app: AsyncApp, services: Services) -> None:
    @app.action(blocks.APPROVE)
    async def on_approve(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        approval_id, shown = blocks.parse_approve_value(action.get("value"))
        services.background.spawn(
            decide_from_slack(
                services,
                approval_id=approval_id,
                actor=body["user"]["id"],
                approve=True,
                reason=None,
                shown=shown,
                place=click_place(body),
                tell=teller(respond, services, body),
                clicked=clicked_card(body),
                refresh_list=refresher_for_click(services, body, action),
            ),
            name=f"approve {approval_id}",
        )

    @app.action(blocks.DENY)
    async def on_deny(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        respond: AsyncRespond,
        client: AsyncWebClient,
    ) -> None:
        await ack()
        form = form_click(services, body, action, respond)
        approval = await form_opening(
            services, form, click="deny click", ensure_may=ensure_may_decide
        )
        if approval is None:
            return
        approval_id, place, tell = form.approval_id, form.place, form.tell
        metadata: dict[str, Any] = {
            **form.metadata(),
            # The card's thread: the denial's notice lands there, as an approval's does.
            "thread_ts": approval.thread_ts or "",
            # Denied from an /approvals list: which one, to edit it after (list_refresh).
            "list_block": action.get("block_id") if place.channel is None else None,
            "team_domain": (body.get("team") or {}).get("domain", ""),
        }
        # trigger_id lives 3 seconds: open the modal now, in the acknowledgement path.
        try:
            await client.views_open(
                trigger_id=body.get("trigger_id", ""),
                view=blocks.render_deny_modal(approval, metadata),
            )
        except SlackApiError as exc:
            log.error("approval %s: could not open the deny form: %s", approval_id, exc)
            await tell(":warning: Slack did not open the deny form in time; click Deny again.")

    @app.view(blocks.DENY_MODAL)
    async def on_deny_reason(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        metadata = json_object(view.get("private_metadata"))
        reason = _nested(view, "state", "values", blocks.REASON_BLOCK, blocks.REASON_INPUT, "value")
        reason = reason if isinstance(reason, str) else None
        actor = body["user"]["id"]
        team = (body.get("team") or {}).get("id", "") or metadata.get("team", "")
        channel = metadata.get("channel") or None
        response_url = metadata.get("response_url") or ""

        async def tell(text: str) -> None:
            if channel:
                await services.publisher.ephemeral(
                    channel=channel,
                    user=actor,
                    text=text,
                    team=team,
                    thread_ts=metadata.get("thread_ts") or None,
                )
            elif response_url:  # denied from an /approvals list, which has no channel of its own
                await AsyncWebhookClient(response_url, session=services.client.session).send(
                    text=text, response_type="ephemeral", replace_original=False
                )
            elif services.home is not None:  # denied from the App Home
                await services.home.publish(team, actor, notice=text)

        services.background.spawn(
            decide_from_slack(
                services,
                approval_id=metadata.get("approval_id", ""),
                actor=actor,
                approve=False,
                reason=reason,
                place=ClickPlace(
                    team=team, channel=channel, list_channel=metadata.get("list_channel") or None
                ),
                tell=tell,
                clicked=(channel, card_ts)
                if channel and (card_ts := metadata.get("card_ts"))
                else None,
                refresh_list=list_refresher(
                    services,
                    block_id=metadata.get("list_block"),
                    response_url=response_url,
                    user=actor,
                    team=team,
                    domain=str(metadata.get("team_domain") or ""),
                    channel=str(metadata.get("list_channel") or ""),
                ),
            ),
            name=f"deny {metadata.get('approval_id')}",
        )

    @app.action(blocks.SHOW_ARGUMENTS)
    async def on_show_arguments(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        client: AsyncWebClient,
        respond: AsyncRespond,
    ) -> None:
        await ack()
        tell = teller(respond, services, body)
        approval = await clicked_approval(
            services, action.get("value", ""), click_place(body), tell=tell, click="arguments"
        )
        if approval is None:
            return
        try:
            await client.views_open(
                trigger_id=body["trigger_id"], view=blocks.render_arguments_modal(approval)
            )
        except SlackApiError as exc:
            log.error("approval %s: could not show its arguments: %s", approval.id, exc)
            await tell(":warning: Slack did not open the arguments in time; click again.")


def _nested(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…``, or None where a level is missing, null or not an object: Slack sends
    a form's state in full, a signed request of another shape must not become a 500."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


# -- /approvals --------------------------------------------------------------------------

VIEWS = {"": "approve", "list": "approve", "mine": "mine", "all": "all"}


def register_approvals_command(app: AsyncApp, services: Services) -> None:
    @app.command("/approvals")
    async def on_approvals(ack: AsyncAck, command: dict[str, Any]) -> None:
        word = (command.get("text") or "").strip().lower()
        if word == "help":
            await ack(text=blocks.HELP_TEXT, response_type="ephemeral")
            return
        if word == "grants":
            from handlers.grant_listeners import grants_command

            await grants_command(ack, command, services)
            return
        if word == "history":
            await ack(**await history_answer(services, command))
            return
        if word not in VIEWS:
            await ack(
                text=f"I don't know `/approvals {blocks.escape(word)}`.\n\n{blocks.HELP_TEXT}",
                response_type="ephemeral",
            )
            return
        try:
            with time_limit(services.ack_time_limit):
                text, page_blocks = await approvals_page(services, command, VIEWS[word], 0)
        except DATABASE_FAILURES as exc:
            log.error("/approvals %s for %s: not listed (%s)", word, command["user_id"], exc)
            await ack(text=LIST_FAILED, response_type="ephemeral")
            return
        except GroupLookupFailed as exc:
            log.error("/approvals %s for %s: not listed (%s)", word, command["user_id"], exc)
            await ack(text=GROUPS_UNLISTED, response_type="ephemeral")
            return
        await ack(text=text, blocks=page_blocks, response_type="ephemeral")

    @app.action(blocks.PAGE)
    async def on_page(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        wanted = json_object(action.get("value"))
        command = {
            "team_id": (body.get("team") or {}).get("id", ""),
            "team_domain": (body.get("team") or {}).get("domain", ""),
            "user_id": body["user"]["id"],
            "channel_id": (body.get("channel") or {}).get("id")
            or (body.get("container") or {}).get("channel_id", ""),
        }
        view = wanted.get("view") if wanted.get("view") in VIEWS.values() else "approve"
        page = wanted.get("page")
        if not isinstance(page, int) or isinstance(page, bool) or not 0 <= page <= MAX_PAGE:
            page = 0
        try:
            with time_limit(services.ack_time_limit):
                text, page_blocks = await approvals_page(services, command, view, page)
        except DATABASE_FAILURES as exc:
            log.error("/approvals page for %s: not listed (%s)", command["user_id"], exc)
            await respond(text=LIST_FAILED, response_type="ephemeral", replace_original=False)
            return
        except GroupLookupFailed as exc:
            log.error("/approvals page for %s: not listed (%s)", command["user_id"], exc)
            await respond(text=GROUPS_UNLISTED, response_type="ephemeral", replace_original=False)
            return
        await respond(text=text, blocks=page_blocks, replace_original=True)


async def history_answer(services: Services, command: dict[str, Any]) -> dict[str, Any]:
    """``/approvals history``: the acknowledgement's ephemeral answer."""
    channel = command.get("channel_id", "")
    try:
        with time_limit(services.ack_time_limit):
            decided = await services.repo.channel_decisions(
                team_id=command.get("team_id", ""), channel=channel, limit=HISTORY_SIZE
            )
    except DATABASE_FAILURES as exc:
        log.error("/approvals history for %s: not listed (%s)", command.get("user_id"), exc)
        return {"text": LIST_FAILED, "response_type": "ephemeral"}
    text, history_blocks = render_history(decided, channel)
    return {"text": text, "blocks": history_blocks, "response_type": "ephemeral"}


async def approvals_page(
    services: Services,
    command: dict[str, Any],
    view: str,
    page: int,
    *,
    settled: Approval | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """One page of a user's /approvals ``view``; ``settled``: an approval just decided from
    it, kept in its place with its outcome."""
    user, team, channel = command["user_id"], command.get("team_id", ""), command["channel_id"]
    if view == "mine":
        where = PendingFilter(team_id=team, requester=user)
    elif view == "all":
        where = PendingFilter(team_id=team, channel=channel)
    else:
        groups = await services.groups.groups_of(user, services.group_approvers(), team=team)
        # Approvals that name nobody are listed only in their own channel: listed anywhere,
        # a private channel's would be seen (and decided) by the whole workspace.
        where = PendingFilter(
            team_id=team,
            approver=user,
            approver_groups=sorted(groups),
            exclude_requester=user,
            anyone_channel=channel,
        )
    now = utcnow()
    # Count a page's worth past this one and a bit more, not all of a huge backlog.
    count_limit = (page + 1) * PAGE_SIZE + COUNT_AHEAD
    approvals, total = await services.repo.list_pending(
        where, now=now, limit=PAGE_SIZE, offset=page * PAGE_SIZE, count_limit=count_limit
    )
    domain = command.get("team_domain") or "app"
    permalinks = {
        a.id: card_permalink(domain, a.card_channel, a.card_ts, a.thread_ts)
        for a in approvals
        if a.card_channel and a.card_ts
    }
    return blocks.render_approvals_page(
        approvals,
        view=view,
        page=page,
        total=total,
        count_limit=count_limit,
        page_size=PAGE_SIZE,
        now=now,
        permalinks=permalinks,
        settled=settled,
    )


def card_permalink(domain: str, channel: str, ts: str, thread_ts: str | None) -> str:
    """Slack's permalink shape, built locally: no API call per item in the ack path."""
    link = f"https://{domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
    if thread_ts and thread_ts != ts:
        link += f"?thread_ts={thread_ts}&cid={channel}"
    return link
