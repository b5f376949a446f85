"""The page's App Home and its "switch to …" bar: what the playground adds to the channel page.

The App Home tab shows, for the person chosen on the page, the real Home the bot publishes
through ``views.publish`` to our Slack server (``SlackServer.home_of``): opening it is Slack's
``app_home_opened`` (``POST /playground/home/open``), and its buttons are clicks on a view
(``POST /playground/home/click``), answered by the bot's own Home listeners. Nothing here
renders a Home of its own. Beside it, the app's Messages tab: the DMs the bot sent that
person, card copies and reminders, whose buttons are ordinary clicks on those messages; it
is also the agent pane, where the person talks to the agent (:mod:`playground.page_pane`).

The "switch to …" bar names someone who can still act on a waiting card. Who that is comes
from the bot's pending approvals (approvers, requester, the approvals given so far), read from
the bot's database through ``waiting``, so that in a quorum it names an approver who has not
voted, and when an approver asked, the other approver. Owns no state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.policy.decisions import NotAllowed, ensure_may_decide
from bot.policy.quorum import approvals_so_far, ensure_may_vote
from playground.page import ChannelPage, _ok

if TYPE_CHECKING:
    from playground.page_pane import PaneRoutes
    from playground.page_workflow import WorkflowRoutes
    from playground.people import Person
    from storage.models import Approval

Json = dict[str, Any]
Waiting = Callable[[], Awaitable[list[Json]]]


def who_may_act(approval: Approval, people: Sequence[Person]) -> list[str]:
    """The page's people who may still approve ``approval``, by the bot's own rules
    (``bot.policy``): one of its approvers (anyone when it names none), not its requester
    unless the policy allows that, and not someone whose approval it already counts."""
    may = []
    for person in people:
        try:
            ensure_may_decide(approval, person.id)
            ensure_may_vote(approval, person.id, approve=True)
        except NotAllowed:
            continue
        if person.id not in approvals_so_far(approval):
            may.append(person.id)
    return may


def waiting_json(approvals: Sequence[Approval], people: Sequence[Person]) -> list[Json]:
    """The channel's waiting cards, oldest first, each with who may still act on it."""
    return [
        {
            "ts": approval.card_ts,
            "tool": approval.tool_name,
            "requester": approval.requester,
            "approved_by": list(approval.approved_by or []),
            "may_act": who_may_act(approval, people),
        }
        for approval in sorted(approvals, key=lambda a: a.created_at)
        if approval.card_ts and approval.kind == "approval"
    ]


class HomeRoutes:
    """The state the page polls (the channel's, with the Home, the waiting cards, the agent
    pane and the Workflow panel), and the Home's actions."""

    def __init__(
        self,
        page: ChannelPage,
        waiting: Waiting | None = None,
        pane: PaneRoutes | None = None,
        workflow: WorkflowRoutes | None = None,
    ) -> None:
        self.page = page
        self.waiting = waiting
        self.pane = pane
        self.workflow = workflow

    async def get_state(self, request: web.Request) -> web.Response:
        user = self.page._person(request.query.get("user"))
        state = self.page.state(user)
        home = self.page.server.home_of(user)
        state["home"] = None if home is None else {"id": home["id"], "blocks": home["blocks"]}
        state["waiting"] = await self.waiting() if self.waiting is not None else []
        state["dms"] = self.direct_messages(user)
        state["pane"] = self.pane.state(user) if self.pane is not None else None
        state["workflow"] = self.workflow.state() if self.workflow is not None else None
        return web.json_response(state, headers={"Cache-Control": "no-store"})

    def direct_messages(self, user: str) -> list[Json]:
        """The app's Messages tab for ``user``: what the bot sent them by DM (card copies,
        reminders), oldest first, each with its channel so its buttons click there."""
        dm = self.page.server.dm_channels.get(user)
        shown = []
        for message in self.page.server.messages:
            if dm is not None and message.channel == dm and message.ephemeral_to in (None, user):
                shown.append({**self.page._message_json(message), "channel": dm})
        return shown

    async def post_open(self, request: web.Request) -> web.Response:
        """The person opens the app's Home tab: Slack sends ``app_home_opened``."""
        body = await self.page._body(request)
        user = self.page._person(body.get("user"))
        reply = await self.page._drive(self.page.server.open_home(user), "Home tab")
        return _ok("opened", reply)

    async def post_click(self, request: web.Request) -> web.Response:
        """A button on the person's Home, as shown now (a stale one is a clear error)."""
        body = await self.page._body(request)
        user = self.page._person(body.get("user"))
        action_id = str(body.get("action_id") or "")
        value = body.get("value")
        click = self.page.server.click_home(user, action_id, None if value is None else str(value))
        reply = await self.page._drive(click, "click")  # a button gone from the Home: 409
        return _ok("clicked", reply)
