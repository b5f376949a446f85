"""A small client of approval-bot's HTTP API: ask a person in Slack and wait for the answer.

    from bot.client import ApprovalClient

    client = ApprovalClient("https://approvals.example.com", token="abt_…")
    decision = client.request_approval("C0OPS", "Restart payments", {"service": "payments"})
    if decision["status"] == "approved": ...

``request_approval`` and ``ask`` create the request and then wait by long-poll
(``GET …?wait=N``), so the answer arrives within about a second of the click; every
method has an ``async`` twin with an ``a`` in front (``arequest_approval``, ``aask``, …).
Each request carries an idempotency key (one is made up when none is given), so the client
sends it again after a dropped connection, a 503 or a 429 without creating a second card.
It imports nothing else of approval-bot: the sync half needs only the standard library, the
async half aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

WAIT = 50  # seconds one long-poll holds (the server allows 60)
RETRIES = 5
SETTLED = {"approved", "denied", "expired", "cancelled", "answered"}


class ApprovalError(Exception):
    """The API refused a request: ``status`` and its JSON ``body`` (``error``, ``field``)."""

    def __init__(self, status: int, body: Any) -> None:
        message = body.get("error") if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


class ApprovalClient:
    def __init__(self, base_url: str, token: str, *, timeout: float = WAIT + 15) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    # -- bodies ------------------------------------------------------------------------------

    @staticmethod
    def approval_body(
        channel: str,
        action: str,
        details: Mapping[str, Any] | None = None,
        *,
        approvers: Sequence[str] | None = None,
        min_approvals: int | None = None,
        ttl: int | str | None = None,
        on_expiry: str | None = None,
        webhook_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        return _drop_none(
            {
                "channel": channel,
                "action": action,
                "details": dict(details or {}),
                "approvers": list(approvers) if approvers else None,
                "min_approvals": min_approvals,
                "ttl": ttl,
                "on_expiry": on_expiry,
                "webhook_url": webhook_url,
                "idempotency_key": idempotency_key or str(uuid.uuid4()),
            }
        )

    @staticmethod
    def question_body(
        channel: str,
        question: str,
        choices: Sequence[str] | None = None,
        *,
        answerers: Sequence[str] | None = None,
        ttl: int | str | None = None,
        webhook_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        return _drop_none(
            {
                "channel": channel,
                "question": question,
                "choices": list(choices) if choices else None,
                "answerers": list(answerers) if answerers else None,
                "ttl": ttl,
                "webhook_url": webhook_url,
                "idempotency_key": idempotency_key or str(uuid.uuid4()),
            }
        )

    # -- sync --------------------------------------------------------------------------------

    def request_approval(
        self, channel: str, action: str, details: Mapping[str, Any] | None = None, **options: Any
    ) -> dict[str, Any]:
        """Ask for an approval and return it once decided, expired or cancelled."""
        created = self._call(
            "POST", "/approvals", self.approval_body(channel, action, details, **options)
        )
        return self.wait("approvals", created["id"])

    def ask(
        self, channel: str, question: str, choices: Sequence[str] | None = None, **options: Any
    ) -> dict[str, Any]:
        """Ask a question and return it once answered (``answer``), expired or cancelled."""
        created = self._call(
            "POST", "/questions", self.question_body(channel, question, choices, **options)
        )
        return self.wait("questions", created["id"])

    def create_approval(
        self, channel: str, action: str, details: Any = None, **options: Any
    ) -> dict[str, Any]:
        return self._call(
            "POST", "/approvals", self.approval_body(channel, action, details, **options)
        )

    def get(self, kind: str, request_id: str, *, wait: int = 0) -> dict[str, Any]:
        return self._call("GET", f"/{kind}/{request_id}?wait={wait}")

    def cancel(self, kind: str, request_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/{kind}/{request_id}")

    def wait(self, kind: str, request_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Long-poll until the request is settled (or ``timeout`` seconds: then as it is)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT if deadline is None else min(WAIT, int(deadline - time.monotonic()))
            current = self.get(kind, request_id, wait=max(left, 0))
            if current["status"] in SETTLED or (deadline and time.monotonic() >= deadline):
                return current

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(RETRIES + 1):
            request = urllib.request.Request(
                self.base_url + "/api/v1" + path, data=data, method=method, headers=self._headers()
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    result: dict[str, Any] = json.loads(response.read())
                    return result
            except urllib.error.HTTPError as exc:
                payload = _json(exc.read())
                if exc.code not in (429, 502, 503, 504) or attempt == RETRIES:
                    raise ApprovalError(exc.code, payload) from None
                time.sleep(_pause(exc.headers.get("Retry-After"), attempt))
            except (urllib.error.URLError, TimeoutError, ConnectionError):
                if attempt == RETRIES:
                    raise
                time.sleep(_pause(None, attempt))
        raise AssertionError("unreachable")

    # -- async -------------------------------------------------------------------------------

    async def arequest_approval(
        self, channel: str, action: str, details: Mapping[str, Any] | None = None, **options: Any
    ) -> dict[str, Any]:
        created = await self._acall(
            "POST", "/approvals", self.approval_body(channel, action, details, **options)
        )
        return await self.await_settled("approvals", created["id"])

    async def aask(
        self, channel: str, question: str, choices: Sequence[str] | None = None, **options: Any
    ) -> dict[str, Any]:
        created = await self._acall(
            "POST", "/questions", self.question_body(channel, question, choices, **options)
        )
        return await self.await_settled("questions", created["id"])

    async def aget(self, kind: str, request_id: str, *, wait: int = 0) -> dict[str, Any]:
        return await self._acall("GET", f"/{kind}/{request_id}?wait={wait}")

    async def acancel(self, kind: str, request_id: str) -> dict[str, Any]:
        return await self._acall("DELETE", f"/{kind}/{request_id}")

    async def await_settled(
        self, kind: str, request_id: str, timeout: float | None = None
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            left = WAIT if deadline is None else min(WAIT, int(deadline - loop.time()))
            current = await self.aget(kind, request_id, wait=max(left, 0))
            if current["status"] in SETTLED or (deadline and loop.time() >= deadline):
                return current

    async def _acall(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for attempt in range(RETRIES + 1):
                try:
                    async with session.request(
                        method, self.base_url + "/api/v1" + path, json=body, headers=self._headers()
                    ) as response:
                        payload = _json(await response.read())
                        if response.status < 400:
                            return payload
                        if response.status not in (429, 502, 503, 504) or attempt == RETRIES:
                            raise ApprovalError(response.status, payload)
                        await asyncio.sleep(_pause(response.headers.get("Retry-After"), attempt))
                except (aiohttp.ClientConnectionError, TimeoutError):
                    if attempt == RETRIES:
                        raise
                    await asyncio.sleep(_pause(None, attempt))
        raise AssertionError("unreachable")

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": raw.decode("utf-8", "replace")[:500]}


def _pause(retry_after: str | None, attempt: int) -> float:
    if retry_after and retry_after.isdigit():
        return float(retry_after)
    return min(0.5 * 2**attempt, 10.0)
