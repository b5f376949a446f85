"""Real ``approval-bot serve`` processes that the fault suite kills, restarts and doubles.

A :class:`Deployment` is what a team runs: Slack (our Slack-compatible server, in the test
process, recording every Web API call and signing every request it sends), one database, and
bot processes started from the same configuration. Any of them can be started with a crash
window armed (``APPROVAL_BOT_FAILPOINT``, see ``bot/ops/failpoints.py``), killed with any signal,
and started again; Slack keeps its channel across all of it, as the real one does.

The model is llm-echo (a JSON prompt makes it call the tools it names; later turns echo the
tool results back), the tools are :mod:`tests.faults.tools`, which log every execution
durably, and leases and sweeps are short so take-overs happen within seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bot.config import parse_duration
from playground.slack_server import Message, SlackServer
from storage.models import Approval
from storage.repository import Mode, Repository
from tests.faults.tools import LOG_ENV, PIPELINE_ENV, SLOW_ENV
from tests.support.serve_process import ROOT, SECRET, ServedBot, free_port, wait_healthy

T = TypeVar("T")

CHANNEL = "C0OPS"
REQUESTER = "U0REQUESTER"
APPROVER = "U0APPROVER1"
OTHER_APPROVER = "U0APPROVER2"

CONFIG = """
model = "echo"
tools = [
    "tests.faults.tools:get_status",
    "tests.faults.tools:slow_status",
    "tests.faults.tools:restart_service",
    "tests.faults.tools:slow_restart",
    "tests.faults.tools:scale_service",
    "tests.faults.tools:start_deploy",
    "tests.faults.tools:slow_deploy",
    "tests.faults.tools:flaky_api",
    "tests.faults.tools:migrate_tenants",
    "tests.faults.tools:broken_once",
]
run_lease = "{run_lease}"
sweep_interval = "{sweep_interval}"
streaming = "{streaming}"
{extra}

[policies.restart_service]
approvers = ["U0APPROVER1", "U0APPROVER2"]

[policies.slow_restart]
approvers = ["U0APPROVER1", "U0APPROVER2"]

[policies.migrate_tenants]
approvers = ["U0APPROVER1", "U0APPROVER2"]

[policies.scale_service]
approval = "required"  # by anyone but the requester
"""

# How long a step may take before the test gives up on it. Only a failing test waits this
# long: a take-over normally follows a kill within run_lease + sweep_interval.
# Generous: a shared 2-core machine under load once needed more than 20 s for a card.
PATIENCE = 60.0


def request(*calls: tuple[str, dict[str, Any]]) -> str:
    """What the requester writes: llm-echo calls these tools, then echoes their results."""
    tool_calls = [{"name": name, "arguments": arguments} for name, arguments in calls]
    return json.dumps({"prompt": "please", "tool_calls": tool_calls})


async def eventually(
    check: Callable[[], T | None], what: str | Callable[[], str], timeout: float = PATIENCE
) -> T:
    """Poll ``check`` until it returns something truthy; fail saying ``what`` never happened.

    ``what`` may be a function, to describe the state at the moment of giving up.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"within {timeout:.0f}s: {said}")
        await asyncio.sleep(0.1)


@dataclass
class Replica:
    """One ``approval-bot serve`` process."""

    name: str
    process: asyncio.subprocess.Process
    url: str
    log_path: Path

    @property
    def events_url(self) -> str:
        return f"{self.url}/slack/events"

    def output(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:]


class Deployment:
    """Slack, one database, a tool log, and the bot processes serving them."""

    def __init__(
        self,
        slack: SlackServer,
        database_url: str,
        workdir: Path,
        *,
        run_lease: str = "2s",
        sweep_interval: str = "1s",
        slow_tool_seconds: float = 60.0,
        bot_database_url: str | None = None,
        extra_config: str = "",
        streaming: str = "off",
    ) -> None:
        self.slack = slack
        self.database_url = database_url
        # Where the bots reach the database (a proxy the test can cut), if not directly.
        self.bot_database_url = bot_database_url or database_url
        self.workdir = workdir
        self.tool_log = workdir / "tool-executions.log"
        self.pipeline = workdir / "callback-urls.txt"
        self.config = workdir / "fault-bot.toml"
        # ``extra_config``: top-level keys of a test's own (on_error = "ask").
        self.config.write_text(
            CONFIG.format(
                run_lease=run_lease,
                sweep_interval=sweep_interval,
                extra=extra_config,
                streaming=streaming,  # "off": the older tests assert the progress message
            )
        )
        self.slow_tool_seconds = slow_tool_seconds
        self.sweep_seconds = parse_duration(sweep_interval, "sweep_interval").total_seconds()
        self.replicas: list[Replica] = []
        self._repo: Repository | None = None

    # -- processes -------------------------------------------------------------------------

    async def start(self, *, failpoint: str | None = None) -> Replica:
        """Start a bot process (``failpoint`` armed, if given) and wait until it is healthy.

        Slack delivers to the replica started last unless a delivery names another.
        """
        name = f"bot{len(self.replicas) + 1}"
        log_path = self.workdir / f"{name}.log"
        port = free_port()
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": self.slack.bot_token,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": self.slack.api_url,
            "DATABASE_URL": self.bot_database_url,
            "LLM_USER_PATH": str(self.workdir / "llm"),
            "LLM_LOAD_PLUGINS": "llm-echo",
            "PYTHONPATH": str(ROOT),
            LOG_ENV: str(self.tool_log),
            PIPELINE_ENV: str(self.pipeline),
            SLOW_ENV: str(self.slow_tool_seconds),
        }
        env.pop("APPROVAL_BOT_FAILPOINT", None)
        if failpoint:
            env["APPROVAL_BOT_FAILPOINT"] = failpoint
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bot.cli",
                "--config",
                str(self.config),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                env=env,
                cwd=self.workdir,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
            )
        replica = Replica(name, process, f"http://127.0.0.1:{port}", log_path)
        self.replicas.append(replica)
        try:
            await wait_healthy(ServedBot(slack=self.slack, process=process, url=replica.url))
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n--- {name} output ---\n{replica.output()}") from exc
        self.slack.bot_url = replica.events_url
        return replica

    async def died(self, replica: Replica, what: str, timeout: float = PATIENCE) -> int:
        """Wait for a replica to exit by itself; its exit status."""
        try:
            return await asyncio.wait_for(replica.process.wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"{replica.name} is still running {timeout:.0f}s after {what}\n"
                f"--- {replica.name} output ---\n{replica.output()}"
            ) from None

    async def crashed_at(self, replica: Replica, window: str, timeout: float = PATIENCE) -> None:
        """The replica killed itself with SIGKILL at ``window`` (its failpoint fired)."""
        status = await self.died(replica, f"reaching the {window!r} window", timeout)
        assert status == -signal.SIGKILL, (
            f"{replica.name} exited with {status}, not by SIGKILL at {window!r}\n{replica.output()}"
        )

    async def kill(self, replica: Replica, sig: int = signal.SIGKILL) -> None:
        replica.process.send_signal(sig)
        if sig == signal.SIGKILL:
            await replica.process.wait()

    async def close(self) -> None:
        for replica in self.replicas:
            if replica.process.returncode is None:
                replica.process.kill()
                await replica.process.wait()
        if self._repo is not None:
            await self._repo.close()

    # -- what the tools did ----------------------------------------------------------------

    def tool_events(self) -> list[dict[str, Any]]:
        if not self.tool_log.exists():
            return []
        return [json.loads(line) for line in self.tool_log.read_text().splitlines() if line]

    def executions(self, tool: str, service: str, event: str = "ran") -> int:
        """How many times a tool really ran (or started, or finished) for a service."""
        return sum(
            1
            for e in self.tool_events()
            if e["tool"] == tool and e["service"] == service and e["event"] == event
        )

    def callback_urls(self) -> list[str]:
        """The callback URLs tools handed to "the pipeline", in order."""
        if not self.pipeline.exists():
            return []
        return self.pipeline.read_text().split()

    # -- what the database says ------------------------------------------------------------

    async def repo(self) -> Repository:
        """The bots' database, opened from the test to check what they recorded."""
        if self._repo is None:
            self._repo = await Repository.open(self.database_url, upgrade=False)
        return self._repo

    async def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        repo = await self.repo()
        return await repo.database.run(
            lambda tx: [tuple(row) for row in tx.all(sql, params or {})], Mode.READ
        )

    async def approval(self, approval_id: str) -> Approval:
        approval = await (await self.repo()).get_approval(approval_id)
        assert approval is not None, approval_id
        return approval

    async def audit_events(self, approval_id: str) -> list[str]:
        trail = await (await self.repo()).audit_trail(approval_id=approval_id)
        return [event.event for event in trail]

    # -- what Slack shows ------------------------------------------------------------------

    async def mention(self, text: str, *, event_id: str | None = None) -> Message:
        """The requester mentions the bot; the user's message (its ts starts the thread)."""
        reply = await self.slack.mention(REQUESTER, CHANNEL, f"<@U0BOT> {text}", event_id=event_id)
        assert reply.status == 200, (reply.status, reply.body)
        assert reply.message is not None
        return reply.message

    def thread(self, thread_ts: str) -> list[Message]:
        return self.slack.thread(CHANNEL, thread_ts)

    def bot_replies(self, thread_ts: str) -> list[Message]:
        return [m for m in self.thread(thread_ts) if m.bot_id and m.ts != thread_ts]

    def cards(self, thread_ts: str) -> list[Message]:
        return [m for m in self.bot_replies(thread_ts) if is_card(m)]

    def answers(self, thread_ts: str, needle: str) -> list[Message]:
        """Replies in the thread (cards aside) that contain ``needle``."""
        return [m for m in self.bot_replies(thread_ts) if not is_card(m) and needle in m.text]

    async def card(self, thread_ts: str) -> Message:
        """The one approval card of the thread, once it is posted."""
        cards = await eventually(
            lambda: self.cards(thread_ts), f"an approval card in thread {thread_ts}"
        )
        assert len(cards) == 1, f"{len(cards)} cards in the thread: {[c.text for c in cards]}"
        return cards[0]

    async def answer(self, thread_ts: str, needle: str) -> Message:
        """The one reply that answers the request with ``needle``, once it is posted."""
        found = await eventually(
            lambda: self.answers(thread_ts, needle),
            f"an answer containing {needle!r} in thread {thread_ts}; the thread has "
            f"{[m.text[:200] for m in self.bot_replies(thread_ts)]}\n"
            + "".join(f"--- {r.name} ---\n{r.output(2000)}\n" for r in self.replicas),
        )
        return found[0]


# -- steps and checks shared by the fault tests ------------------------------------------


async def approve(deployment: Deployment, thread_ts: str) -> str:
    """An approver clicks Approve on the thread's card; the approval's id."""
    card = await deployment.card(thread_ts)
    reply = await deployment.slack.click(APPROVER, card, "approval_approve")
    assert reply.status == 200, (reply.status, reply.body)
    return approval_id_of(card)


async def quiet_sweeps(deployment: Deployment, count: int = 2) -> None:
    """Let the sweeper run ``count`` more times: whatever it would redo, it has redone."""
    await asyncio.sleep(count * deployment.sweep_seconds + 0.5)


async def assert_settled(
    deployment: Deployment,
    thread_ts: str,
    approval_id: str,
    *,
    status: str,
    answer: str,
    card_says: str,
) -> None:
    """The end state after recovery: database, card and thread agree, and say it once."""
    await deployment.answer(thread_ts, answer)
    card = await deployment.card(thread_ts)
    await eventually(
        lambda: card_says in card_outcome(card),
        f"the card to say {card_says!r}; it says {card_outcome(card)!r}",
    )
    await quiet_sweeps(deployment)
    approval = await deployment.approval(approval_id)
    assert approval.status == status, approval
    run = await (await deployment.repo()).get_run(approval.run_id)
    assert run is not None and run.status == "completed", run
    assert run.lease_owner is None
    assert len(deployment.cards(thread_ts)) == 1, "the card was posted more than once"
    assert not has_buttons(card) and card_says in card_outcome(card)
    assert len(deployment.answers(thread_ts, answer)) == 1, "the thread was answered twice"
    failures = [m.text for m in deployment.bot_replies(thread_ts) if m.text.startswith(":x:")]
    assert failures == [], failures
    trail = await deployment.audit_events(approval_id)
    assert trail.count("approval_approved") == 1, trail
    assert trail.count("execution_started") == 1, trail


def is_card(message: Message) -> bool:
    return any(block.get("block_id") == "approval_summary" for block in message.blocks)


def has_buttons(message: Message) -> bool:
    return any(
        element.get("action_id") in ("approval_approve", "approval_deny")
        for _, element in message.buttons()
    )


def approval_id_of(card: Message) -> str:
    """The approval a card is for, from the ids line every card carries."""
    match = re.search(r"Approval `([0-9A-Za-z_]+)`", json.dumps(card.blocks))
    assert match, card.blocks
    return match.group(1)


def card_outcome(card: Message) -> str:
    """The decided card's outcome line ('' while it still has buttons)."""
    for block in card.blocks:
        if block.get("block_id") == "approval_outcome":
            return str(block["text"]["text"])
    return ""
