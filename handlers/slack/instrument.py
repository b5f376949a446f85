"""Slack-side hooks for metrics on the Web API client: every call that failed, by method and
error, and every 429 Slack answered, retried or not. Nothing here changes what a call does."""

from __future__ import annotations

from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.ops import metric_hooks as metrics


class RateLimitCounter(AsyncRetryHandler):
    """Counts every 429 Slack answers (retried or not); never retries anything itself. Put
    it first among the client's retry handlers: slack_sdk asks each in turn."""

    async def can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is not None and response.status_code == 429:
            metrics.slack_rate_limited(_method(request.url))
        return False


class InstrumentedWebClient(AsyncWebClient):
    """An AsyncWebClient that counts the calls that fail, by method and error."""

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        try:
            return await super().api_call(api_method, **kwargs)
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            metrics.slack_call_failed(api_method, str(error or "unknown"))
            raise
        except (TimeoutError, aiohttp.ClientError):
            metrics.slack_call_failed(api_method, "unreachable")
            raise


def _method(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1] or "unknown"
