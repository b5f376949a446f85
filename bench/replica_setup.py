"""The replicas benchmark's set-up: ``serve`` processes watched through our Slack server,
paused runs seeded through them, and one signed Approve click per card.

Used by ``bench/replicas.py``; kept apart so the measuring script reads as what it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from playground.slack_server import Message, SlackServer
from tests.support.serve_process import SECRET, ServedBot, served_bot

CHANNEL = "C0OPS"
APPROVER = "U0APPROVER1"
CARD_SERVICE = re.compile(r"svc\d{5}")
ANSWER_SERVICE = re.compile(r"restarted (svc\d{5})")


def service_name(i: int) -> str:
    return f"svc{i:05d}"


def mention_for(service: str) -> str:
    """What llm-echo reads as 'call restart_service(service)', then echoes the result."""
    call = {"name": "restart_service", "arguments": {"service": service}}
    return "<@U0BOT> " + json.dumps({"prompt": "go", "tool_calls": [call]})


# -- watching Slack ----------------------------------------------------------------------------


@dataclass
class SlackWatch:
    """Cards and answers as they reach our Slack server, by service name.

    It reads only what is new in the server's message and call logs each time, so watching
    costs the same with 100 or 30,000 messages. Answer times are the server's own timestamps
    of the ``chat.update`` that put the answer in the thread.
    """

    slack: SlackServer
    cards: dict[str, Message] = field(default_factory=dict)
    answers: dict[str, list[float]] = field(default_factory=dict)
    last_call_at: float = 0.0
    _seen_messages: int = 0
    _seen_calls: int = 0
    try_again: int = 0
    _service_of_thread: dict[str, str] = field(default_factory=dict)
    _waiting: dict[str, asyncio.Future[Message]] = field(default_factory=dict)
    _clicked: dict[str, asyncio.Future[str]] = field(default_factory=dict)

    def poll(self) -> None:
        messages, calls = self.slack.messages, self.slack.calls
        for message in messages[self._seen_messages :]:
            if message.is_ephemeral and "try again" in message.text.lower():
                # The bot could not record a click in time (it sheds load that way).
                self.try_again += 1
                service = self._service_of_thread.get(message.thread_ts or "")
                self._settle(self._clicked, service, "try again")
            elif any(b.get("block_id") == "approval_summary" for b in message.blocks):
                found = CARD_SERVICE.search(json.dumps(message.blocks))
                if found:
                    self.cards[found.group()] = message
                    self._service_of_thread[message.thread_ts or ""] = found.group()
                    self._settle(self._waiting, found.group(), message)
        self._seen_messages = len(messages)
        for call in calls[self._seen_calls :]:
            self.last_call_at = call.at
            if call.method == "chat.update":
                answered = ANSWER_SERVICE.search(str(call.args.get("text", "")))
                if answered:
                    self.answers.setdefault(answered.group(1), []).append(call.at)
                    self._settle(self._clicked, answered.group(1), "answered")
        self._seen_calls = len(calls)

    @staticmethod
    def _settle(waiters: dict[str, asyncio.Future[Any]], key: str | None, value: Any) -> None:
        waiter = waiters.pop(key or "", None)
        if waiter is not None and not waiter.done():
            waiter.set_result(value)

    def expect_outcome(self, service: str) -> asyncio.Future[str]:
        """Resolves to "answered" or "try again" for the next click on ``service``'s card."""
        waiter = asyncio.get_running_loop().create_future()
        self._clicked[service] = waiter
        return waiter

    async def card(self, service: str, timeout: float) -> Message:
        if service not in self.cards:
            waiter = self._waiting.setdefault(service, asyncio.get_running_loop().create_future())
            await asyncio.wait_for(waiter, timeout)
        return self.cards[service]

    async def until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")
            await asyncio.sleep(0.02)

    async def quiet(self, seconds: float = 0.5, timeout: float = 60.0) -> None:
        """Until the bots have made no Web API call for ``seconds`` (their work is done)."""
        await self.until(
            lambda: time.time() - self.last_call_at >= seconds, timeout, "the bots to settle"
        )

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[SlackWatch]:
        async def loop() -> None:
            while True:
                self.poll()
                await asyncio.sleep(0.01)

        task = asyncio.create_task(loop())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.poll()


# -- processes ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def replicas(count: int, database_url: str, workdir: Path) -> AsyncIterator[list[ServedBot]]:
    """``count`` serve processes on one database, sharing one Slack; mentions go to the first."""
    async with SlackServer(signing_secret=SECRET) as slack, contextlib.AsyncExitStack() as stack:
        bots = [
            await stack.enter_async_context(served_bot(database_url, workdir, slack=slack))
            for _ in range(count)
        ]
        slack.bot_url = f"{bots[0].url}/slack/events"
        yield bots


# -- seeding and clicking ----------------------------------------------------------------------


async def seed_paused_runs(
    slack: SlackServer, watch: SlackWatch, services: list[str], in_flight: int
) -> float:
    """Mention the bot once per service, ``in_flight`` runs in progress at a time, until each
    run's card is posted; returns the seconds it took. Bounded in-flight work keeps the
    bot's peak memory about what it holds, not about a backlog we piled on it."""
    queue = list(reversed(services))
    started = time.perf_counter()

    async def slot() -> None:
        while queue:
            service = queue.pop()
            reply = await slack.mention(f"U0REQ{service}", CHANNEL, mention_for(service))
            if reply.status != 200:
                raise RuntimeError(f"mention for {service} answered {reply.status}")
            await watch.card(service, timeout=120)

    await asyncio.gather(*(slot() for _ in range(in_flight)))
    seconds = time.perf_counter() - started
    await watch.quiet()  # the last cards' locations are stored too
    return seconds


@dataclass
class Click:
    service: str
    body: bytes
    headers: dict[str, str]
    sent_at: float = 0.0
    ack_seconds: float = 0.0


def signed_click(slack: SlackServer, card: Message, service: str) -> Click:
    """The Approve click on ``card`` as Slack would send it, signed now, sent later.

    ``_prepare_click`` is the Slack server's own payload builder (``SlackServer.click`` builds
    and sends in one step; a load generator must build first so signing is not timed).
    """
    payload, _trigger, _response_url = slack._prepare_click(
        APPROVER, card, "approval_approve", None
    )
    body = urlencode({"payload": json.dumps(payload)}).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": slack.sign(body, timestamp),
    }
    return Click(service=service, body=body, headers=headers)


async def approve_all(
    bots: list[ServedBot], slack: SlackServer, watch: SlackWatch, clicks: list[Click], per_bot: int
) -> int:
    """Click ``i`` goes to replica ``i % len(bots)``; each replica has ``per_bot`` runs
    clicked and not yet answered, the next click sent as soon as one is answered. One
    client session for all. Returns how many clicks had to be repeated.

    Closed on answers rather than on acknowledgements: a bot acknowledges a click at once
    and decides after, within a time limit, telling the clicker "try again" when it could
    not (it sheds load rather than queue without bound). A thousand clicks at once would
    measure that shedding; a bounded backlog measures how fast resumes complete. A click
    the bot asks to repeat is repeated, freshly signed, as a person would.
    """
    repeated = 0
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def click_until_answered(url: str, click: Click) -> None:
            nonlocal repeated
            attempt = click
            while True:
                outcome = watch.expect_outcome(click.service)
                attempt.sent_at = time.time()
                async with session.post(url, data=attempt.body, headers=attempt.headers) as reply:
                    await reply.read()
                    if reply.status != 200:
                        raise RuntimeError(f"click for {click.service} answered {reply.status}")
                attempt.ack_seconds = time.time() - attempt.sent_at
                try:
                    if await asyncio.wait_for(outcome, 120) == "answered":
                        return
                except TimeoutError:
                    raise RuntimeError(
                        f"{click.service}: no answer 120 s after its click"
                    ) from None
                repeated += 1
                attempt = signed_click(slack, watch.cards[click.service], click.service)

        async def sender(url: str, queue: list[Click]) -> None:
            while queue:
                await click_until_answered(url, queue.pop())

        senders = []
        for index, bot in enumerate(bots):
            queue = list(reversed(clicks[index :: len(bots)]))
            senders += [sender(f"{bot.url}/slack/events", queue) for _ in range(per_bot)]
        await asyncio.gather(*senders)
    return repeated


# -- the two measurements ----------------------------------------------------------------------
