"""A Slack-compatible server: the one Slack double for integration tests and the playground.

Why it exists: the bot must be tested against Slack's *wire format* (signed HTTP requests,
form-encoded payloads, Web API response shapes, Socket Mode envelopes, response URLs), not
against mocks of our own code. ``slack_sdk.web.async_client.AsyncWebClient(base_url=api_url)``
and ``slack_sdk.socket_mode.aiohttp.SocketModeClient`` talk to it exactly as they talk to Slack,
so bolt runs unmodified.

State it owns, all in memory (a double of Slack for one workspace, or several with
``add_workspace``; nothing persists):

* ``messages``: every message in every channel, in posting order, user messages, bot
  messages and ephemeral ones (``ephemeral_to`` set). ``ts`` values are unique and increasing.
* ``views``: modals opened through ``views.open`` (id -> :class:`OpenView`, with the user
  whose ``trigger_id`` opened it).
* ``calls``: every Web API call the bot made (:class:`ApiCall`), ``unknown_calls`` the ones
  this server does not implement (logged at ERROR: the double must never silently drift from
  what the bot uses), ``responses``: every POST to a response URL (:class:`ResponseCall`).
* Issued ``trigger_id``s (3 s life, single use) and response URLs (5 uses, 30 min), so the
  bot is held to Slack's rules about them.
* Injected faults: ``rate_limit()`` (HTTP 429 + ``Retry-After``), ``fail()`` (ok:false),
  ``unreachable()`` (the connection is dropped unanswered) and ``hold()`` (a call takes
  effect, its answer waits: the caller can die not knowing).
* Socket Mode connections and the acks awaited on them.

Driving the bot (``mention``, ``click``, ``submit_view``, ``slash_command`` and their
``socket_*`` twins) builds the payloads Slack would send, from this server's own state (the
buttons actually on the message, trigger ids and response URLs it issued), and signs HTTP
requests with the signing secret like Slack does.

Where each part lives (one module per concern, one per Web API family, as slack_sdk does):

* :mod:`.records`: the records above, Slack's limits and deadlines, the shared helpers.
* :mod:`.blocks`: Block Kit limit checks.
* :mod:`.server`: :class:`SlackServer`, its state, lifecycle and message store, assembled
  from the mixins below.
* :mod:`.webapi`: ``/api/{method}`` dispatch, recording and fault injection;
  :mod:`.auth`, :mod:`.chat`, :mod:`.conversations`, :mod:`.users`, :mod:`.usergroups` and
  :mod:`.views`: the Web API families; :mod:`.oauth`: workspaces, their tokens,
  ``oauth.v2.access`` and uninstalls; :mod:`.home`: ``views.publish`` and the App Home;
  :mod:`.functions`: custom steps, ``function_executed`` and ``functions.complete*``.
* :mod:`.response_urls`: response URLs; :mod:`.payloads`: what Slack sends the bot;
  :mod:`.delivery`: sending it signed over HTTP; :mod:`.socket_mode`: over Socket Mode.

Import from the package (``from playground.slack_server import SlackServer, Message``): the
modules are its inside.
"""

from playground.slack_server.blocks import MAX_MESSAGE_BLOCKS, MAX_MESSAGE_TEXT, MAX_VIEW_BLOCKS
from playground.slack_server.functions import FunctionExecution
from playground.slack_server.records import (
    ACK_TIMEOUT_SECONDS,
    RESPONSE_URL_MAX_USES,
    RESPONSE_URL_TTL_SECONDS,
    TRIGGER_TTL_SECONDS,
    VERIFICATION_TOKEN,
    ApiCall,
    BotReply,
    DeliveryOptions,
    HeldAnswer,
    Json,
    Message,
    OpenView,
    ResponseCall,
    SocketPayloadType,
    SocketReply,
)
from playground.slack_server.server import SlackServer

__all__ = [
    "ACK_TIMEOUT_SECONDS",
    "MAX_MESSAGE_BLOCKS",
    "MAX_MESSAGE_TEXT",
    "MAX_VIEW_BLOCKS",
    "RESPONSE_URL_MAX_USES",
    "RESPONSE_URL_TTL_SECONDS",
    "TRIGGER_TTL_SECONDS",
    "VERIFICATION_TOKEN",
    "ApiCall",
    "BotReply",
    "DeliveryOptions",
    "FunctionExecution",
    "HeldAnswer",
    "Json",
    "Message",
    "OpenView",
    "ResponseCall",
    "SlackServer",
    "SocketPayloadType",
    "SocketReply",
]
