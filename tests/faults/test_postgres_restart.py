"""PostgreSQL goes down and comes back while a real ``approval-bot serve`` is busy.

Load: several people keep asking for gated calls and approving them (each approval by
someone other than the requester), before, during and after the outage, behaving as Slack
and people do: an event that got no 2xx is redelivered (Slack retries it minutes later, so
after a short outage), a click answered "try again" is clicked again once the database is
back. Meanwhile one approver clicks a card during the outage: they must be told to try again
(not silence), and nothing may change. When PostgreSQL is back the bot reconnects by itself:
health checks pass, the click works, every request is answered once and no call runs twice.

CAUTION: this stops the machine's PostgreSQL cluster for a few seconds
(``pg_ctlcluster``), which disrupts any other PostgreSQL test running on the machine at the
time. CI runs the suite alone; locally, run it when nothing else uses the server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from playground.slack_server import BotReply, SlackServer
from tests.faults.harness import (
    CHANNEL,
    OTHER_APPROVER,
    PATIENCE,
    REQUESTER,
    Deployment,
    Replica,
    approval_id_of,
    card_outcome,
    eventually,
    has_buttons,
    request,
)

LOAD_USERS = 4
# Load steps can wait out the outage as well as the bot's own work.
LOAD_PATIENCE = 2 * PATIENCE
TRY_AGAIN = "try again"


async def pg_ctlcluster(action: str) -> None:
    """Stop or start the machine's PostgreSQL cluster, as an operator (or a crash) would."""
    (version,) = sorted(os.listdir("/etc/postgresql"))[:1]
    process = await asyncio.create_subprocess_exec(
        "pg_ctlcluster",
        "--skip-systemctl-redirect",
        version,
        "main",
        action,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0, f"pg_ctlcluster {action}: {out.decode()}"


async def pg_running() -> bool:
    (version,) = sorted(os.listdir("/etc/postgresql"))[:1]
    process = await asyncio.create_subprocess_exec(
        "pg_ctlcluster", version, "main", "status", stdout=asyncio.subprocess.DEVNULL
    )
    return await process.wait() == 0


# It stops the server every other PostgreSQL test uses: scripts/test runs it after the rest.
pytestmark = pytest.mark.serial


@pytest.fixture
async def outage_deployment(
    slack: SlackServer, postgres_database: str, tmp_path: Path
) -> AsyncIterator[Deployment]:
    if shutil.which("pg_ctlcluster") is None or not os.path.isdir("/etc/postgresql"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI must be able to restart PostgreSQL with pg_ctlcluster")
        pytest.skip("pg_ctlcluster is not available to restart the local PostgreSQL")
    deployment = Deployment(slack, postgres_database, tmp_path, run_lease="3s")
    try:
        yield deployment
    finally:
        if not await pg_running():  # whatever happened, leave the machine's database up
            await pg_ctlcluster("start")
        await deployment.close()


async def health(replica: Replica) -> int:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{replica.url}/healthz", timeout=aiohttp.ClientTimeout(total=3)) as r,
        ):
            return r.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def reconnected(replica: Replica) -> None:
    """Health checks pass again: the bot found its database without being restarted."""
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while await health(replica) != 200:
        assert asyncio.get_running_loop().time() < deadline, (
            f"the bot did not reconnect to its database\n{replica.output()}"
        )
        await asyncio.sleep(0.2)


async def delivered(sending: Awaitable[BotReply]) -> bool:
    """Whether Slack got a 2xx within its 3 s (else it will retry an event)."""
    try:
        reply = await sending
    except (aiohttp.ClientError, TimeoutError):
        return False
    return 200 <= reply.status < 300


def told(deployment: Deployment, user: str) -> list[str]:
    """What the bot told ``user`` alone that asks them to try again."""
    return [m.text for m in deployment.slack.ephemerals_for(user) if TRY_AGAIN in m.text.lower()]


def heard(deployment: Deployment, user: str) -> list[str]:
    return [m.text for m in deployment.slack.ephemerals_for(user)]


@dataclass
class Turn:
    service: str
    approver: str
    thread_ts: str = ""


class Load:
    """People asking and approving, one request after another each, until told to stop."""

    def __init__(self, deployment: Deployment, database_up: asyncio.Event) -> None:
        self.deployment = deployment
        self.database_up = database_up
        self.turns: list[Turn] = []
        self.stopping = False
        self.people: list[asyncio.Task[None]] = []

    def start(self, count: int) -> None:
        self.people = [asyncio.create_task(self.person(n)) for n in range(count)]

    def progress(self) -> int:
        """Requests answered so far; raises what went wrong for anyone who gave up."""
        for person in self.people:
            if person.done() and person.exception() is not None:
                raise person.exception()  # type: ignore[misc]
        return sum(1 for t in self.turns if t.thread_ts and self.answers(t))

    async def stop(self) -> None:
        self.stopping = True
        for outcome in await asyncio.gather(*self.people, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    async def person(self, n: int) -> None:
        k = 0
        while not self.stopping:
            await self.turn(Turn(service=f"load{n}x{k}", approver=f"U0LOAD{n}X{k}"))
            k += 1

    def answers(self, turn: Turn) -> list[str]:
        return [
            m.text
            for m in self.deployment.bot_replies(turn.thread_ts)
            if f"scaled {turn.service}" in m.text or "Outcome unknown" in m.text
        ]

    async def turn(self, turn: Turn) -> None:
        deployment, slack = self.deployment, self.deployment.slack
        self.turns.append(turn)
        event_id = f"Ev{turn.service.upper()}"
        text = f"<@U0BOT> {request(('scale_service', {'service': turn.service}))}"
        acked = await delivered(slack.mention(REQUESTER, CHANNEL, text, event_id=event_id))
        turn.thread_ts = next(
            m.ts for m in slack.messages if m.user == REQUESTER and turn.service in m.text
        )
        retries = 0
        while not acked:
            # Slack retries an unacknowledged event 3 times, the later ones minutes apart,
            # so after a short outage (here: seconds apart, once the database is back).
            retries += 1
            assert retries <= 3, f"{turn.service}: the mention was never acknowledged"
            await self.database_up.wait()
            await asyncio.sleep(retries)
            acked = await delivered(slack.redeliver(event_id, retry_num=retries))

        (card,) = await eventually(
            lambda: deployment.cards(turn.thread_ts),
            f"{turn.service}: its approval card",
            LOAD_PATIENCE,
        )
        for _click in range(3):
            heard_before = len(heard(deployment, turn.approver))
            await delivered(slack.click(turn.approver, card, "approval_approve"))
            # An answer is a word to the clicker or the card showing the decision.
            answer = await eventually(
                lambda heard_before=heard_before: (
                    heard(deployment, turn.approver)[heard_before:]
                    or (not has_buttons(card) and ["(the card shows the decision)"])
                ),
                f"{turn.service}: the approver heard nothing after clicking Approve",
                LOAD_PATIENCE,
            )
            if TRY_AGAIN not in answer[0].lower():
                break  # approved (or already approved by an earlier click that got through)
            await self.database_up.wait()  # as people do: a moment later
            await asyncio.sleep(1)
        else:
            raise AssertionError(f"{turn.service}: told to try again 3 times")
        await eventually(lambda: self.answers(turn), f"{turn.service}: the answer", LOAD_PATIENCE)


async def test_postgres_restart_under_load(outage_deployment: Deployment) -> None:
    deployment = outage_deployment
    bot = await deployment.start()
    database_up = asyncio.Event()
    database_up.set()

    # A card that will be clicked during the outage.
    waiting = await deployment.mention(request(("restart_service", {"service": "during"})))
    card = await deployment.card(waiting.ts)

    load = Load(deployment, database_up)
    load.start(LOAD_USERS)
    try:
        await eventually(lambda: load.progress() >= LOAD_USERS, "the load to get going")

        database_up.clear()
        await pg_ctlcluster("stop")
        try:
            assert await health(bot) == 503, "healthy without its database"
            reply = await deployment.slack.click(OTHER_APPROVER, card, "approval_approve")
            assert reply.status == 200, (reply.status, reply.body)
            await eventually(
                lambda: told(deployment, OTHER_APPROVER),
                lambda: (
                    "the approver who clicked during the outage to be told to try again; "
                    f"they heard {heard(deployment, OTHER_APPROVER)}"
                ),
                timeout=10,  # the database refuses connections at once
            )
            assert has_buttons(card), "a decision was shown although it could not be stored"
        finally:
            # Keep the outage short: other PostgreSQL tests on the machine wait for it.
            await pg_ctlcluster("start")
            database_up.set()

        await reconnected(bot)
        reply = await deployment.slack.click(OTHER_APPROVER, card, "approval_approve")
        assert reply.status == 200, (reply.status, reply.body)
        await deployment.answer(waiting.ts, "restarted during")

        settled = load.progress()
        await eventually(
            lambda: load.progress() >= settled + LOAD_USERS, "the load to carry on", LOAD_PATIENCE
        )
    finally:
        await load.stop()

    assert bot.process.returncode is None, "the bot died with its database"
    assert deployment.executions("restart_service", "during") == 1
    assert "ran" in card_outcome(card)
    assert (await deployment.approval(approval_id_of(card))).status == "executed"

    # Every request answered once; every approved call ran at most once, and exactly once
    # when the bot says it ran; every card shows the decision.
    def live_cards() -> list[str]:
        return [
            t.service for t in load.turns if any(map(has_buttons, deployment.cards(t.thread_ts)))
        ]

    await eventually(lambda: not live_cards(), lambda: f"cards still offer buttons: {live_cards()}")
    for turn in load.turns:
        assert len(load.answers(turn)) == 1, (turn, load.answers(turn))
        cards = deployment.cards(turn.thread_ts)
        assert len(cards) == 1, f"{turn.service}: {len(cards)} cards for one approval"
        (turn_card,) = cards
        approval = await deployment.approval(approval_id_of(turn_card))
        ran = deployment.executions("scale_service", turn.service)
        if approval.status == "executed":
            assert ran == 1, (turn, ran)
        else:
            assert approval.status == "unknown" and ran <= 1, (turn, approval.status, ran)
            assert "Outcome unknown" in load.answers(turn)[0]
    unfinished = await deployment.rows("SELECT id, status FROM runs WHERE status != 'completed'")
    assert unfinished == [], unfinished
