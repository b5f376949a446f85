"""The agent runner: drives ``llm`` chains that pause for a person and resume exactly once.

A run is one conversation (a Slack thread); its durable form is the ``llm`` message history in
``runs.history`` (see :mod:`bot.engine.drive`). The runner is composed of parts, the way
bolt's ``App`` holds its listener runner and OAuth flow:

- :class:`~bot.engine.leases.Leases`: this worker's id and the leases it takes;
- :class:`~bot.engine.claims.Claims`: resumes its settlements claimed, until driven;
- :class:`~bot.engine.settlements.Settlements`: decide, expire, answer, complete, make due,
  each one conditional UPDATE that claims the resume when nothing else of the run waits;
- :class:`~bot.engine.edits.Edits`: edit, then approve;
- :class:`~bot.engine.drive.Drives`: the chain loop itself;
- :class:`~bot.engine.steps.Steps`: Workflow Builder steps, approvals with no agent.

Callers hold the runner: its methods hand each job to the part that does it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import llm
from llm.parts import Message, TextPart

from bot.clock import utcnow
from bot.config import Config
from bot.config.models import MCP_SEPARATOR
from bot.engine.batches_decide import BatchDecisions
from bot.engine.claims import Claims
from bot.engine.drive import Drives
from bot.engine.edits import Edits
from bot.engine.holds import Holds
from bot.engine.leases import Leases, default_worker_id
from bot.engine.outcomes import Request, RunOutcome
from bot.engine.recoveries import Recoveries
from bot.engine.settlements import Settlements
from bot.engine.steps import Steps
from bot.engine.transcript import settle_history, stored
from bot.gate import wrap_tools
from bot.gate.stream_events import EventListener
from bot.ids import new_run_id
from bot.ops.outage import OutageLog
from bot.pauses import ASK_USER_TOOL, ToolProgress, delegate_tool
from storage.models import Run
from storage.repository import Repository, RunBusy

log = logging.getLogger(__name__)


class Runner:
    def __init__(
        self,
        repo: Repository,
        config: Config,
        *,
        worker_id: str | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.repo = repo
        self.config = config
        self.worker_id = worker_id or default_worker_id()
        builtin = [ASK_USER_TOOL] if config.ask_user else []
        if config.agents and config.delegate:
            # Sub-agents (issue 20 section 1): offered to every agent, the depth limit and
            # the chain checked when it is called (bot.gate.pause_rows).
            agents = [(a.name, a.description) for a in config.agents.values()]
            builtin.append(delegate_tool(agents))

        def offered(tools: list[llm.Tool]) -> list[llm.Tool]:
            names = {tool.name for tool in tools}
            # A configured tool of the same name as a built-in one wins.
            return wrap_tools(
                [*tools, *(t for t in builtin if t.name not in names)], config.policy_for
            )

        self.tools = offered(list(config.tools))
        agent_tools = {name: offered(list(a.tools)) for name, a in config.agents.items()}
        self.leases = Leases(self.worker_id, clock, config.run_lease)
        self.claims = Claims(self.leases)
        self.settlements = Settlements(repo, self.leases, self.claims)
        self.edits = Edits(self.settlements, config)
        self.recoveries = Recoveries(self.settlements, config)
        # The process's database outage, as its loops log it (bot.ops.outage).
        self.outages = OutageLog(clock)
        self.drives = Drives(
            repo, config, self.tools, self.leases, self.claims, self.outages, agent_tools
        )
        # MCP servers (bot.mcp_servers) whose tools are not listed yet: a resumed call of one
        # of their tools waits for them rather than being cancelled as no longer configured.
        self.drives.unlisted_servers = {
            name
            for name in config.mcp_servers
            if not any(t.name.startswith(f"{name}{MCP_SEPARATOR}") for t in config.tools)
        }
        # Settling a row is the settlements' job; callers reach it through the runner.
        self.decide = self.settlements.decide
        self.expire_due = self.settlements.expire_due
        self.answer = self.settlements.answer
        self.complete_callback = self.settlements.complete_callback
        self.due_retries = self.settlements.due_retries
        self.edit_and_approve = self.edits.edit_and_approve
        # Batch cards (bot.engine.batches_decide): many calls decided in one transaction.
        self.decide_batch = BatchDecisions(repo, self.leases, self.claims).decide_batch
        self.recover = self.recoveries.recover
        self.edit_and_retry = self.recoveries.edit_and_retry
        # Operators' pause, resume and stop (bot.engine.holds).
        self.holds = Holds(repo, config, self.leases, self.claims)
        self.pause_run = self.holds.pause
        self.resume_run = self.holds.resume
        self.stop_run = self.holds.stop
        self.expire_holds = self.holds.expire
        self.stop_orphans = self.holds.stop_orphans
        # Workflow Builder steps: an approval with no agent behind it (bot.engine.steps).
        self.steps = Steps(repo, config, lambda: self.leases.clock())

    def add_tools(self, server: str, tools: list[llm.Tool]) -> None:
        """Offer an MCP server's tools from now on (listed once it answers): gated like the
        others, and known to edits and recoveries through ``config.tools``."""
        self.drives.unlisted_servers.discard(server)
        known = {tool.name for tool in self.tools}
        new = [tool for tool in tools if tool.name not in known]
        for tool in tools:
            if tool.name in known:
                log.warning("tool %s is already configured: the second one is ignored", tool.name)
        self.config.tools.extend(new)
        self.tools.extend(wrap_tools(new, self.config.policy_for))  # the list drives read

    @property
    def clock(self) -> Callable[[], datetime]:
        """The runner's clock: its parts all read the time from ``leases``."""
        return self.leases.clock

    @clock.setter
    def clock(self, clock: Callable[[], datetime]) -> None:
        self.leases.clock = clock

    @property
    def public_url(self) -> str:
        """The base of callback URLs: ``public_url``, else where ``serve`` listens."""
        return self.drives.public_url

    def model(self, model_id: str) -> Any:
        return self.drives.model(model_id)

    # -- starting and resuming -----------------------------------------------------------

    async def start(self, request: Request) -> RunOutcome:
        """Run a request; a follow-up in the same conversation continues its history."""
        run_id = new_run_id()
        try:
            run = await self.open(request, run_id=run_id)
        except RunBusy as busy:
            return RunOutcome(run_id=busy.run.id, status="busy", run=busy.run)
        assert run.lease_owner is not None
        # A new run (not a finished one continued) has no hold: nothing ran since its insert.
        return await self.drives.drive(run, run.lease_owner, just_opened=run.id == run_id)

    async def open(
        self, request: Request, *, event_id: str | None = None, run_id: str | None = None
    ) -> Run:
        """Store a request as a run this worker holds the lease of; no model call.

        With ``event_id`` the Slack event is recorded as handled in the same transaction
        (raises DuplicateEvent for a redelivery). Raises RunBusy when the conversation's run
        is working or waiting. If this worker dies before driving it, the lease runs out and
        the sweeper of any replica takes the run over.
        """
        system = self.config.system_prompt
        if request.context:
            system = f"{system}\n\n{request.context}"
        now = self.clock()
        return await self.repo.open_run(
            run_id=run_id or new_run_id(),
            conversation_key=request.key(),
            requester=request.requester,
            model_id=self.config.model,
            opening_messages=[_message("system", system)],
            new_messages=[_message("user", request.text)],
            worker=self.leases.new_owner(),
            lease_until=self.leases.until(now),
            now=now,
            team_id=request.team_id,
            channel=request.channel,
            thread_ts=request.thread_ts,
            settle_history=settle_history,
            event_id=event_id,
        )

    async def drive(self, run: Run) -> RunOutcome:
        """Carry an opened run on (as the drive it was opened for) until it completes, pauses
        or fails."""
        assert run.lease_owner is not None
        return await self.drives.drive(run, run.lease_owner)

    async def resume(self, run_id: str) -> RunOutcome:
        """Resume a run whose resume this worker claimed (through a settlement or an
        expiry): see :meth:`bot.engine.drive.Drives.resume`."""
        return await self.drives.resume(run_id)

    async def follow_delegations(self, outcome: RunOutcome) -> RunOutcome:
        """Where there is no Slack to do it (the ``ask`` command): drive the children a pause
        started, concurrently, and resume the parent whose resume one of their ends claimed;
        the run's latest outcome (``handlers.flows.runs.follow_delegations`` in ``serve``)."""
        if not outcome.children:
            return outcome
        ended = await asyncio.gather(*(self._followed(child) for child in outcome.children))
        for parent in {o.parent_resume for o in ended if o.parent_resume == outcome.run_id}:
            return await self.follow_delegations(await self.resume(parent))
        return outcome

    async def resume_following(self, run_id: str) -> list[RunOutcome]:
        """``resume``, then what follows without Slack: the children it delegated to, and
        each parent whose resume an end up the chain claimed; every outcome, in order."""
        outcome = await self.follow_delegations(await self.resume(run_id))
        outcomes = [outcome]
        while outcome.parent_resume is not None:
            outcome = await self.follow_delegations(await self.resume(outcome.parent_resume))
            outcomes.append(outcome)
        return outcomes

    async def _followed(self, child: Run) -> RunOutcome:
        return await self.follow_delegations(await self.drive(child))

    def report_progress_to(self, on_progress: Callable[[ToolProgress], None] | None) -> None:
        """Where running calls' ``progress()`` goes (the handlers show it in the thread)."""
        self.drives.on_progress = on_progress

    def report_events_to(self, on_event: EventListener | None) -> None:
        """Where drives tell the model's text and each call's task as they happen."""
        self.drives.on_event = on_event

    def stop_at_checkpoints(self, reason: str) -> None:
        """From now on a running call stops at its next ``checkpoint()`` (after storing it):
        a shutdown. The call is resumed from there by whoever drives the run next."""
        self.drives.stopping = reason

    async def recover_stale_runs(self) -> list[RunOutcome]:
        """Take over runs whose worker stopped renewing its lease, and carry them on."""
        return [await self.carry_on(run) for run in await self.take_over_stale_runs()]

    async def take_over_stale_runs(self) -> list[Run]:
        """Take over runs whose worker stopped renewing its lease; the caller drives each
        with ``carry_on`` (the sweeper: as a task of its own, so one slow run stalls nothing)."""
        runs = []
        for run_id in await self.repo.stale_runs(self.clock()):
            if run_id in self.drives.recording:
                continue  # alive here, waiting out a database outage: it carries on itself
            owner = self.leases.new_owner()
            run = await self.repo.take_over_run(
                run_id, worker=owner, lease_until=self.leases.until(), now=self.clock()
            )
            if run is not None:
                log.warning("taking over run %s: its worker's lease ran out", run_id)
                runs.append(run)
        return runs

    async def carry_on(self, run: Run) -> RunOutcome:
        """Drive a run returned by ``take_over_stale_runs`` (as the drive it was taken for)."""
        assert run.lease_owner is not None
        return await self.drives.drive(run, run.lease_owner, replay=True)

    async def claim_stranded_runs(self) -> list[str]:
        """Claim the resume of paused runs with nothing pending that nobody resumed (a safety
        net: deciders serialize on the run, so one of them claims); callers ``resume`` each."""
        claimed = []
        for run_id in await self.repo.stranded_runs():
            if await self.repo.claim_stranded_run(
                run_id, worker=self.worker_id, lease_until=self.leases.until(), now=self.clock()
            ):
                log.warning("run %s: paused with nothing pending; resuming it", run_id)
                claimed.append(run_id)
        return claimed


def _message(role: str, text: str) -> dict[str, Any]:
    return stored(Message(role=role, parts=[TextPart(text=text)]))
