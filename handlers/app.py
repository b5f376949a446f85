"""The one place that wires: the services, the bolt app with our listeners, the web app.

:func:`build_services` makes what every listener and flow shares (the publisher and its card
decoration, the group and name caches, each workspace's client); :func:`build_app` makes one
``AsyncApp`` with our middleware and listeners, and adds the App Home and the approvers' reach
to the services, hooked to the publisher; :func:`build_web_app` serves it over HTTP (aiohttp),
or bolt's Socket Mode handler serves it (``bot.serve``). The entry layer (``bot.serve``, the
command line, the playground) calls these; nothing in ``handlers`` builds its own parts.
"""

from __future__ import annotations

import functools
import logging
import time

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot.clock import utcnow
from bot.config import Config
from bot.engine import Runner
from bot.ops import BackgroundTasks
from handlers import listeners
from handlers.flows import CardGrants
from handlers.flows.assistant import pane_events, run_state
from handlers.flows.runs import step_card_refused
from handlers.listeners.interactions import clicker_teller
from handlers.middleware import (
    ANSWERED_EARLY,
    MAX_AGE,
    answered_before_dispatch,
    observe_answered,
    parsed_request,
    refuse_malformed,
    signed,
    signed_within,
)
from handlers.services import Services
from handlers.slack import (
    HomeTabs,
    PeopleNames,
    Publisher,
    Reach,
    SlackSettings,
    UserGroups,
    WorkspaceAuthorize,
    WorkspaceClients,
    oauth_settings,
)
from handlers.slack.assistant import PaneCalls
from handlers.slack.steps import StepCompletions
from storage.repository import Repository

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
# A click answered before its dispatch (``answer_then_dispatch``) whose dispatch then failed.
CLICK_NOT_HANDLED = ":warning: Your click could not be handled just now. Please try again."
# Socket Mode has no signing secret; HTTP requests then never verify.
NO_SECRET = "socket-mode-has-no-signing-secret"


def build_services(
    repo: Repository,
    config: Config,
    runner: Runner,
    client: AsyncWebClient,
    clients: WorkspaceClients | None = None,
) -> Services:
    """``clients``: a token per workspace (OAuth installs); else ``client`` for all."""
    clients = clients or WorkspaceClients(client)
    publisher = Publisher(client, repo, clients)
    publisher.cards.decorate_card = CardGrants(repo, config).decorate  # standing grants
    publisher.answers.claim = min(publisher.answers.claim, config.run_lease)
    runner.report_progress_to(publisher.tool_progress.report)  # long tools' progress()
    publisher.streams.mode = config.streaming  # streamed answers (handlers.slack.streams)
    background = BackgroundTasks()
    clients.track = background.track  # token refreshes are background work too
    services = Services(
        repo=repo,
        config=config,
        runner=runner,
        client=client,
        publisher=publisher,
        groups=UserGroups(client, clients=clients),
        background=background,
        clients=clients,
        steps=StepCompletions(repo, clients, claim=config.run_lease),
        people=PeopleNames(
            client,
            clients=clients,
            remember=lambda user, name: repo.remember_name(user, name, now=utcnow()),
        ),
        pane=PaneCalls(clients),
    )
    # The agent pane mirrors each pane run's state (status, session, waiting lines), and
    # each call as it starts; the events go on to the streams.
    publisher.on_run_state = lambda run, state, outcome: run_state(services, run, state, outcome)
    runner.report_events_to(pane_events(services, publisher.streams.report))
    return services


def build_app(services: Services, settings: SlackSettings) -> AsyncApp:
    """Bolt verifies every request's signature and timestamp (5 minutes); never turned off.

    ``process_before_response``: our listeners only acknowledge, check and hand slow work to
    tracked background tasks, so bolt can answer Slack when the listener returns; that way a
    request's work is always registered (and visible to shutdown) before Slack is answered.
    """
    app = AsyncApp(
        client=services.client,
        signing_secret=settings.signing_secret or NO_SECRET,
        process_before_response=True,
        request_verification_enabled=True,
        logger=logging.getLogger("slack_bolt"),
        # OAuth installs: bolt's flow installs; our authorize finds each request's workspace
        # token (refreshed through SLACK_API_URL, single-flight; no install: a 200, one line).
        oauth_settings=(
            oauth_settings(services.repo, services.clients, settings) if settings.oauth else None
        ),
        # bolt types ``authorize`` as a plain callable; an AsyncAuthorize is what it calls.
        authorize=WorkspaceAuthorize(services.clients) if settings.oauth else None,  # type: ignore[arg-type]
    )
    app.middleware(refuse_malformed)

    # Before the mention's and the Home's: they take the same events (the first match runs).
    listeners.assistant.register(app, services)
    listeners.mentions.register(app, services)
    listeners.groups.register(app, services)
    listeners.approvals.register(app, services)
    listeners.batches.register(app, services)
    listeners.edits.register(app, services)
    listeners.commands.register(app, services)
    listeners.questions.register(app, services)
    listeners.recoveries.register(app, services)
    listeners.grants.register(app, services)
    listeners.holds.register(app, services)
    listeners.steps.register(app, services)

    # The App Home: refreshed whenever a card is posted or edited.
    services.home = HomeTabs(
        repo=services.repo,
        config=services.config,
        groups=services.groups,
        clients=services.clients,
        background=services.background,
    )
    services.publisher.cards.on_change = services.home.changed
    listeners.home.register(app, services)

    # The approvers' reach: DM copies once a card is posted; reminders and escalations due.
    services.reach = Reach(
        repo=services.repo,
        config=services.config,
        publisher=services.publisher,
        groups=services.groups,
        clients=services.clients,
        background=services.background,
    )
    services.publisher.cards.on_card_posted = services.reach.card_posted
    services.publisher.cards.on_card_refused = functools.partial(step_card_refused, services)

    if settings.oauth:
        listeners.uninstall.register(app, services)
    return app


# Far more than a click answered early waits for its dispatch (ACK_WAIT_LIMIT, 0.5 s, and
# the event loop's lag): within this of the signature's age limit it is dispatched first.
DISPATCH_MARGIN = 60.0


def build_web_app(app: AsyncApp, services: Services, settings: SlackSettings) -> web.Application:
    """POST /slack/events for events, interactivity and commands; GET /healthz.

    Every request is verified before its body is even decoded: unsigned, badly signed or
    stale requests get 401, whatever they contain. A signed request that is not a payload
    this bot accepts gets 400 with the reason, and reaches neither bolt nor the database.
    Bolt verifies the signature again (it is never turned off); that costs microseconds.
    """
    secret = (settings.signing_secret or NO_SECRET).encode()

    async def slack_events(request: web.Request) -> web.Response:
        started = time.monotonic()
        raw = await request.read()
        if not signed(secret, raw, request):
            return web.json_response({"error": "invalid signature"}, status=401)
        parsed = parsed_request(raw, request)
        if isinstance(parsed, str):
            log.warning("refused a signed request: %s", parsed)
            return web.json_response({"error": f"malformed request: {parsed}"}, status=400)
        # Bolt checks the signature's age again when it dispatches, which an early answer
        # puts off (bot.ops.background): a click too close to the limit would be told 200
        # and then refused. Such a click is dispatched first, as every other request is.
        if answered_before_dispatch(parsed.body) and signed_within(
            request, MAX_AGE - DISPATCH_MARGIN
        ):
            return await answer_then_dispatch(request, parsed, started)
        with services.background.acknowledging():
            bolt_response = await app.async_dispatch(parsed)
            response = await to_aiohttp_response(bolt_response)
            # Written here, so that the work this request spawned starts after its answer.
            await response.prepare(request)
            await response.write_eof()
        return response

    async def answer_then_dispatch(
        request: web.Request, parsed: AsyncBoltRequest, started: float
    ) -> web.Response:
        """A click: Slack's empty 200 first, then bolt's dispatch as tracked background work.

        Bolt's dispatch (its middleware, the listener's matching and arguments) was most of a
        click's acknowledgement, and in a burst every click waited behind the dispatch of
        those before it. Verified and decoded above, a click's answer no longer depends on it.
        The dispatch is tracked like the work it spawns, so shutdown waits for it, and it starts
        once the burst's answers are written (:class:`bot.ops.BackgroundTasks`). A crash
        between the answer and the dispatch loses the click, as one between the answer and its
        decision always could: the clicker sees the card unchanged and clicks again.
        """
        parsed.context[ANSWERED_EARLY] = True
        with services.background.acknowledging():
            response = web.Response(status=200)
            await response.prepare(request)
            await response.write_eof()
            observe_answered(parsed.body, started)
            services.background.spawn(dispatched(parsed), name="slack click", spawns_at_once=True)
        return response

    async def dispatched(parsed: AsyncBoltRequest) -> None:
        try:
            answer = await app.async_dispatch(parsed)
        except Exception:
            log.exception("a click already answered failed in its dispatch")
        else:
            if answer.status < 400:
                return
            log.warning("bolt refused a click already answered: %s %s", answer.status, answer.body)
        # Slack was told 200, so it shows no error of its own: the clicker hears it from us.
        tell = clicker_teller(services, parsed.body)
        if tell is not None:
            try:
                await tell(CLICK_NOT_HANDLED)
            except Exception as exc:  # Slack out of reach: the log above is all there is
                log.warning("could not tell the clicker their click failed: %s", exc)

    async def healthz(_request: web.Request) -> web.Response:
        outages = services.runner.outages  # an outage is logged once, not at every probe
        try:
            await services.repo.ping()
        except Exception as exc:
            if not outages.failed("health check", exc):
                log.error("health check: database unreachable: %s", exc)
            return web.json_response({"ok": False, "database": "unreachable"}, status=503)
        outages.succeeded("health check")
        return web.json_response({"ok": True})

    async def oauth_flow(request: web.Request) -> web.Response:
        """``GET /slack/install`` and ``/slack/oauth_redirect``: bolt's OAuth flow."""
        flow = app.oauth_flow
        assert flow is not None
        bolt_request = AsyncBoltRequest(
            body="",
            query=request.query_string,
            headers=request.headers,  # type: ignore[arg-type]
        )
        if request.path == flow.install_path:
            bolt_response = await flow.handle_installation(bolt_request)
        else:
            bolt_response = await flow.handle_callback(bolt_request)
        return await to_aiohttp_response(bolt_response)

    web_app = web.Application()
    web_app.router.add_post(EVENTS_PATH, slack_events)
    web_app.router.add_get("/healthz", healthz)
    if app.oauth_flow is not None:
        web_app.router.add_get(app.oauth_flow.install_path, oauth_flow)
        web_app.router.add_get(app.oauth_flow.redirect_uri_path, oauth_flow)
    return web_app
