"""Click acknowledgement and time to answer, for ``bench/slack_latency.py``.

Method (each step is why the figure means what it says):

- The bot is ``approval-bot serve`` in its own process (llm-echo as its model); the floor is
  ``bench/floor_server.py``, a bare aiohttp server in another process that reads each body
  and answers 200 with an empty body, as the bot acknowledges a click. This process plays
  Slack (our Slack-compatible server, which the bot calls); ``bench/burst_sender.py``, in
  a fourth process, sends the load, so Slack's work for the bot is not timed as the bot's.
- Each round seeds fresh cards through the bot (one mention per card, as users would), waits
  until the bot has been quiet for a moment, then builds and signs every click of the burst
  before the clock starts. The burst goes out at once over one client session whose
  connections were opened beforehand (keep-alive, no connection limit), first to one target
  then to the other (the order alternates by round), with a pause between.
- A click's figure is its HTTP round trip: from just before the POST to its answer read.
  The bot's decisions, card edits, refusals and resumes run beside its acknowledgements.
- Shapes: 100 cards x 1 click; 10 cards x 10 clicks (clicks sent card by card, round robin,
  so each card's duplicates arrive together: 10 decisions, 90 refusals told to the clicker).
- Time to answer: one click at a time on an idle bot, from the click's POST to the Slack
  server receiving the ``chat.update`` that puts the run's answer in its thread (the server
  timestamps the call itself). In the 100 x 1 bursts the same is reported from the burst's
  start, which is how long the last of 100 resumes waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import re
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.figures import percentile, summary
from playground.slack_server import Message, SlackServer
from tests.support.serve_process import ServedBot, free_port, served_bot

# The channel the cards are posted in (the bench/slack_latency.py lists' one).
CHANNEL = "C0OPS"

APPROVERS = ("U0APPROVER1", "U0APPROVER3")  # both may approve restart_service
SHAPES = {"100x1": (100, 1), "10x10": (10, 10)}
SERVICE = re.compile(r"r\d+s\d{3}")
ANSWER = re.compile(r"restarted (r\d+s\d{3})")


@dataclass
class SignedClick:
    service: str
    body: bytes
    headers: dict[str, str]


@dataclass
class Watch:
    """Cards, answers and refusals as they reach the Slack server, read incrementally."""

    slack: SlackServer
    cards: dict[str, Message] = field(default_factory=dict)
    answered_at: dict[str, float] = field(default_factory=dict)
    _messages: int = 0
    _calls: int = 0

    def poll(self) -> None:
        for message in self.slack.messages[self._messages :]:
            if any(b.get("block_id") == "approval_summary" for b in message.blocks):
                found = SERVICE.search(json.dumps(message.blocks))
                if found:
                    self.cards[found.group()] = message
        self._messages = len(self.slack.messages)
        for call in self.slack.calls[self._calls :]:
            if call.method == "chat.update":
                answered = ANSWER.search(str(call.args.get("text", "")))
                if answered:
                    self.answered_at.setdefault(answered.group(1), call.at)
        self._calls = len(self.slack.calls)

    async def until(self, done: Any, what: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if done():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"gave up waiting for {what}")
            await asyncio.sleep(0.002)

    async def quiet(self, seconds: float = 0.3) -> None:
        """Until the bot has made no Web API call for ``seconds``: its work is done."""
        await self.until(
            lambda: not self.slack.calls or time.time() - self.slack.calls[-1].at >= seconds,
            "the bot to settle",
        )


def mention_for(service: str) -> str:
    """What llm-echo reads as 'call restart_service(service)', then echoes the result."""
    call = {"name": "restart_service", "arguments": {"service": service}}
    return "<@U0BOT> " + json.dumps({"prompt": "go", "tool_calls": [call]})


async def seed_cards(slack: SlackServer, watch: Watch, services: list[str]) -> list[Message]:
    """One mention per service, eight in progress at a time, until every card is posted."""
    gate = asyncio.Semaphore(8)

    async def one(index: int, service: str) -> None:
        async with gate:
            await slack.mention(f"U0REQ{index % 200:03d}", CHANNEL, mention_for(service))
            await watch.until(lambda: service in watch.cards, f"the card for {service}")

    await asyncio.gather(*(one(i, s) for i, s in enumerate(services)))
    await watch.quiet()
    return [watch.cards[s] for s in services]


def signed_click(slack: SlackServer, user: str, card: Message, service: str) -> SignedClick:
    """The Approve click on ``card`` as Slack sends it (the form carries the whole card)."""
    payload, _trigger, _response_url = slack._prepare_click(user, card, "approval_approve", None)
    body = urlencode({"payload": json.dumps(payload)}).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": slack.sign(body, timestamp),
    }
    return SignedClick(service, body, headers)


class Sender:
    """``bench/burst_sender.py`` in its own process: it sends the bursts and times them."""

    def __init__(self, process: asyncio.subprocess.Process, workdir: Path) -> None:
        self.process = process
        self.burst_file = workdir / "burst.pickle"

    async def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        await self.process.stdin.drain()
        line = await asyncio.wait_for(self.process.stdout.readline(), 120)
        if not line:
            raise RuntimeError("the burst sender stopped (see its error above)")
        return json.loads(line)

    async def open_connections(self, url: str, count: int) -> None:
        """``count`` concurrent GETs: the pool then holds that many kept-alive connections."""
        await self._ask({"open": url, "count": count})

    async def send(self, url: str, burst: list[SignedClick]) -> tuple[float, list[float]]:
        """Every click at once: when they went (unix time), and each one's round trip in
        seconds (all answered 200)."""
        self.burst_file.write_bytes(pickle.dumps([(c.body, c.headers) for c in burst]))
        answer = await self._ask({"burst": str(self.burst_file), "url": url})
        return answer["sent_at"], answer["round_trips"]


@contextlib.asynccontextmanager
async def burst_sender(workdir: Path) -> AsyncIterator[Sender]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("burst_sender.py")),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        yield Sender(process, workdir)
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


@contextlib.asynccontextmanager
async def floor_server() -> AsyncIterator[str]:
    """``bench/floor_server.py`` in its own process; yields its events URL."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("floor_server.py")),
        str(port),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        if line.strip() != b"ready":
            raise RuntimeError("the floor server did not start")
        yield f"http://127.0.0.1:{port}/slack/events"
    finally:
        process.terminate()
        await process.wait()


@dataclass
class Bot:
    """A bot under test: its process, what its Slack has seen, and its figures."""

    label: str
    url: str  # its POST /slack/events
    served: ServedBot | None = None  # None for the floor
    round_trips: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SHAPES})
    round_p99s: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SHAPES})
    burst_answers: list[float] = field(default_factory=list)
    told_to_try_again: int = 0
    _watch: Watch | None = field(default=None, repr=False)

    @property
    def slack(self) -> SlackServer:
        assert self.served is not None, "the floor has no Slack"
        return self.served.slack

    @property
    def watch(self) -> Watch:
        if self._watch is None:
            self._watch = Watch(self.slack)
        return self._watch

    def record(self, shape: str, round_trips: list[float]) -> None:
        self.round_trips[shape] += round_trips
        self.round_p99s[shape].append(round(percentile(round_trips, 99) * 1000, 1))


async def burst_round(bots: list[Bot], floor: Bot, sender: Sender, round_no: int) -> None:
    """One burst of each shape to the floor and to every bot, in an order that rotates."""
    for shape_no, (shape, (cards, clicks_per_card)) in enumerate(SHAPES.items()):
        services = [f"r{round_no * 10 + shape_no}s{i:03d}" for i in range(cards)]
        bursts: dict[str, list[SignedClick]] = {}
        for bot in bots:
            slack = bot.slack
            seeded = await seed_cards(slack, bot.watch, services)
            bursts[bot.label] = [
                signed_click(slack, APPROVERS[(i + n) % 2], card, service)
                for n in range(clicks_per_card)
                for i, (card, service) in enumerate(zip(seeded, services, strict=True))
            ]
        bursts[floor.label] = bursts[bots[0].label]
        targets = [floor, *bots]
        turn = round_no % len(targets)
        for target in targets[turn:] + targets[:turn]:
            burst = bursts[target.label]
            await asyncio.sleep(0.3)
            if target is floor:
                target.record(shape, (await sender.send(target.url, burst))[1])
                continue
            first_told = len(target.slack.responses)
            started, round_trips = await sender.send(target.url, burst)
            target.record(shape, round_trips)
            await settled(target, services, first_told, len(burst), f"round {round_no} ({shape})")
            if clicks_per_card == 1:
                answered = target.watch.answered_at
                target.burst_answers += [answered[s] - started for s in services if s in answered]


async def settled(bot: Bot, services: list[str], first_told: int, clicks: int, what: str) -> None:
    """Until every click is told something ("Approved …", or why it was refused) and every
    run is answered, but for those whose decision the bot asked to try again (it could
    not record it in time: load it sheds, counted); then until the bot is quiet."""
    watch, slack = bot.watch, bot.slack

    def try_again() -> int:
        told = slack.responses[first_told:]
        return sum("try again" in str(r.body.get("text", "")).lower() for r in told)

    await watch.until(
        lambda: (
            len(slack.responses) - first_told >= clicks
            and sum(s in watch.answered_at for s in services) + try_again() >= len(services)
        ),
        f"the answers of {what}",
    )
    await watch.quiet()
    bot.told_to_try_again += try_again()


def bot_report(bot: Bot, floor: Bot) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for shape in SHAPES:
        mine, bare = summary(bot.round_trips[shape]), summary(floor.round_trips[shape])
        report[shape] = {
            "bot": mine,
            "floor": bare,
            "p50_ratio": round(mine["p50_ms"] / bare["p50_ms"], 2),
            "p99_ratio": round(mine["p99_ms"] / bare["p99_ms"], 2),
            "p99_ms_per_round": {"bot": bot.round_p99s[shape], "floor": floor.round_p99s[shape]},
        }
    report["100x1"]["click_to_answer_from_burst_start"] = summary(bot.burst_answers)
    report["clicks_told_to_try_again"] = bot.told_to_try_again
    return report


async def time_to_answer(bot: Bot, sender: Sender, count: int) -> dict[str, Any]:
    """One click at a time on an idle bot: click -> its answer in the thread."""
    services = [f"r999s{i:03d}" for i in range(count)]
    slack, watch = bot.slack, bot.watch
    seeded = await seed_cards(slack, watch, services)
    waits = []
    for card, service in zip(seeded, services, strict=True):
        click = signed_click(slack, APPROVERS[0], card, service)
        started, _round_trip = await sender.send(bot.url, [click])
        await watch.until(
            lambda service=service: service in watch.answered_at, f"the answer for {service}"
        )
        waits.append(watch.answered_at[service] - started)
        await watch.quiet(0.05)
    return summary(waits)


async def click_latency(
    databases: dict[str, str], workdir: Path, *, rounds: int, answers: int
) -> dict[str, Any]:
    """``databases``: label -> database URL, one bot each. A label ``name=DIR`` runs that bot
    from the source tree ``DIR`` (e.g. ``git archive main | tar -x -C DIR``), in the same
    rounds as the others: a change measured beside what it changes, on a machine whose load
    moves."""
    async with (
        floor_server() as floor_url,
        contextlib.AsyncExitStack() as stack,
        burst_sender(workdir) as sender,
    ):
        bots = []
        for label, url in databases.items():
            name, _, source = label.partition("=")
            env = {"PYTHONPATH": source} if source else None
            botdir = workdir / name
            botdir.mkdir(parents=True, exist_ok=True)
            served = await stack.enter_async_context(served_bot(url, botdir, env=env))
            bots.append(Bot(name, f"{served.url}/slack/events", served))
            await sender.open_connections(f"{served.url}/healthz", 100)
        floor = Bot("floor", floor_url)
        await sender.open_connections(floor_url, 100)
        for round_no in range(rounds):
            await burst_round(bots, floor, sender, round_no)
        report = {bot.label: bot_report(bot, floor) for bot in bots}
        for bot in bots:
            report[bot.label]["time_to_answer_one_click"] = await time_to_answer(
                bot, sender, answers
            )
    return report


__all__ = ["click_latency", "percentile"]
