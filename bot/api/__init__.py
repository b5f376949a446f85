"""The human gate over HTTP, for other systems (issue 20 section 2): ``/api/v1`` on the same
port as ``/slack/events``, its tokens, and the webhooks that report each outcome.

Above ``handlers`` (a cancel edits the card) and below the entry layer, which wires it in
``bot.serve``; the requests themselves are created by :mod:`bot.engine.requests`.
"""

from bot.api.route import add_api_routes
from bot.api.tokens import hash_token, new_token
from bot.api.webhooks import POLL as WEBHOOK_POLL
from bot.api.webhooks import WebhookDeliveries, run_webhooks, sign

__all__ = [
    "WEBHOOK_POLL",
    "WebhookDeliveries",
    "add_api_routes",
    "hash_token",
    "new_token",
    "run_webhooks",
    "sign",
]
