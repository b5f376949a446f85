"""One drive of a run: the ``llm`` chain from the stored history until it completes,
pauses or fails.

A run's durable form is its ``llm`` message history (``runs.history``). A drive rebuilds the
chain from it with the same tools and no prompt text, so llm re-executes exactly the trailing
calls that have no result yet, and the gate (:mod:`bot.gate`) turns each settled row into
that call's result. A completion stores the end of the run; a pause, a hold and a failure
are stored by :mod:`bot.engine.stops` (a pause: the history with its new rows, in one
transaction). Every write
names this drive's lease owner: a drive that finds it lost the lease stops and says nothing,
because the run is another drive's now. Before each model call and each tool call (the gate) a
drive looks for an operator's hold (:mod:`bot.gate.safe_points`) and stops there: held, or
cancelled for a Stop (:func:`bot.engine.holds.stop_at_safe_point`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import llm
from llm.parts import Message, Part, ToolResultPart

from bot.config import Config
from bot.config.models import MCP_SEPARATOR
from bot.engine.claims import Claims
from bot.engine.delegations import delegation_context
from bot.engine.leases import LeaseKeeper, Leases
from bot.engine.outcomes import RunOutcome
from bot.engine.stops import Stops, handed_over
from bot.engine.transcript import (
    chain_input,
    history_at,
    history_before,
    loaded,
    stored,
    tool_results_message,
    trailing_calls,
    unfold_results,
)
from bot.gate import (
    ApprovalRequired,
    GateFailure,
    HandedOver,
    HoldRequested,
    TurnContext,
    answer_unconfigured,
    current_turn,
    hold_at_safe_point,
)
from bot.gate.stream_events import EventListener, RunEvent, task_event
from bot.gate.turn import DelegationContext
from bot.ops import failpoint, logs
from bot.ops import metric_hooks as metrics
from bot.ops.outage import OutageLog
from bot.pauses import DELEGATE, ToolProgress
from storage.models import Approval, Run
from storage.repository import LeaseLost, Repository

log = logging.getLogger(__name__)

DEFAULT_PUBLIC_URL = "http://127.0.0.1:8080"


class Drives:
    """Drives runs for one runner: its repository, configuration, tools and models."""

    def __init__(
        self,
        repo: Repository,
        config: Config,
        tools: list[llm.Tool],
        leases: Leases,
        claims: Claims,
        outages: OutageLog | None = None,
        agent_tools: dict[str, list[llm.Tool]] | None = None,
    ) -> None:
        self.repo = repo
        self.config = config
        self.tools = tools
        # Sub-agents' tools (issue 20 section 1), gated as the main agent's are.
        self.agent_tools = agent_tools or {}
        self.leases = leases
        self.claims = claims
        self.stops = Stops(repo, config, leases, resume=self.resume)
        self.outages = outages or OutageLog()
        self._models: dict[str, llm.AsyncModel] = {}
        # Long calls (bot.gate.checkpoints): why they must stop at their next checkpoint (a
        # shutdown in progress), and where their progress() goes (the handlers' renderer).
        self.stopping: str | None = None
        self.on_progress: Callable[[ToolProgress], None] | None = None
        # Where the model's text and each call's task go as they happen (streamed answers).
        self.on_event: EventListener | None = None
        # Configured MCP servers whose tools are not listed yet (down since start-up).
        self.unlisted_servers: set[str] = set()
        # Runs whose drive here holds a finished tool's result through a database outage
        # (bot.gate.recording): this process's sweeper never takes one of them over, the
        # drive records the result itself once the database is back.
        self.recording: set[str] = set()

    @property
    def public_url(self) -> str:
        """The base of callback URLs: ``public_url``, else where ``serve`` listens (read at
        each drive: the playground learns its port after the runner is built)."""
        return self.config.public_url or DEFAULT_PUBLIC_URL

    def model(self, model_id: str) -> llm.AsyncModel:
        # llm rebuilds its whole model registry on every lookup; once per runner is enough.
        if model_id not in self._models:
            self._models[model_id] = llm.get_async_model(model_id)
        return self._models[model_id]

    def tools_for(self, run: Run) -> list[llm.Tool]:
        """The tools a run's agent has: the main agent's, or its ``[agents.NAME]``'s (an agent
        no longer configured has none: its calls are answered as unconfigured ones)."""
        if run.agent is None:
            return self.tools
        return self.agent_tools.get(run.agent, [])

    def offered(self, run: Run, delegation: DelegationContext | None) -> list[llm.Tool]:
        """The tools the model is offered: the agent's, without the built-in ``delegate``
        where the run is as deep as ``max_delegation_depth`` (a call would only be refused)."""
        tools = self.tools_for(run)
        if self.config.delegate and delegation is not None and delegation.at_limit:
            return [tool for tool in tools if tool.name != DELEGATE]
        return tools

    async def offered_to(self, run: Run) -> list[llm.Tool]:
        """:meth:`offered`, reading the run's chain of agents."""
        return self.offered(run, await delegation_context(self.repo, self.config, run))

    @metrics.times_resumes
    @logs.bound_to("run_id")
    async def resume(self, run_id: str) -> RunOutcome:
        """Resume a run whose resume this worker claimed (a settlement, an expiry, a pause
        that found everything decided).

        After this runner's own settlement the drive starts from the run its claim's
        transaction read, under the lease the claim gave it: no write of its own. Otherwise (an
        expiry, a stranded run, another runner object of this worker) ``resuming -> running``
        is committed first, for a new drive.
        """
        claim = self.claims.take(run_id)
        if claim is not None:
            assert claim.run.lease_owner is not None
            return await self.drive(
                claim.run, claim.run.lease_owner, turn_approvals=claim.turn_approvals
            )
        owner = self.leases.new_owner()
        now = self.leases.clock()
        run = await self.repo.start_resumed_run(
            run_id,
            worker=self.leases.worker_id,
            owner=owner,
            lease_until=self.leases.until(now),
            now=now,
        )
        return await self.drive(run, owner)

    @metrics.counts_drives
    @logs.bound_to("run")
    async def drive(
        self,
        run: Run,
        owner: str,
        *,
        replay: bool = False,
        just_opened: bool = False,
        turn_approvals: list[Approval] | None = None,
    ) -> RunOutcome:
        """Run the chain from the stored history until it completes, pauses or fails.

        ``owner`` is this drive's lease owner; every write that moves the run checks it.
        ``replay``: a take-over of a drive that died, whose calls may have armed callbacks.
        ``just_opened``: the caller's transaction inserted this run and nothing ran since, so
        no hold can be asked for yet: the first safe point needs no read of its own.
        ``turn_approvals``: the approvals of the run's turn as the claim of this resume
        decided them (``Claims``), answered without reading them again; None: read them.
        """

        turn = TurnContext(
            run_id=run.id,
            requester=run.requester,
            repo=self.repo,
            clock=self.leases.clock,
            owner=owner,
            lease_until=self.leases.until,
            lease_expires_at=run.lease_expires_at,
            outages=self.outages,
            recording=self.recording,
            turn_number=run.turn,
            base_url=self.public_url,
            question_policy=self.config.question_policy,
            max_retry_wait=self.config.max_retry_wait,
            max_retry_attempts=self.config.max_retry_attempts,
            wait_policy=self.config.wait_policy,
            recovery_policy=self.config.recovery_policy,
            channel=run.channel,
            interruption=lambda: self.stopping,
            on_progress=self.on_progress,
            on_event=self.on_event,
            delegation=await delegation_context(self.repo, self.config, run),
        )
        if just_opened:
            turn.hold_read_since(turn.hold_epoch, None)
        if replay:
            # Armed under the turn the dead drive's pause would have taken (call_context).
            rows = await self.repo.approvals_for_turn(run.id, run.turn + 1)
            turn.armed_by_dead_drive = [
                a for a in rows if a.kind == "callback" and a.status in ("armed", "completed")
            ]
            # Calls it ran under a standing grant: never run again by the replay.
            turn.granted_by_dead_drive = [
                a for a in rows if a.kind == "approval" and a.tool_call_id.startswith("grant:")
            ]
        token = current_turn.set(turn)
        heartbeat = LeaseKeeper(
            self.repo,
            run.id,
            owner,
            interval=max(self.config.run_lease.total_seconds() / 3, 0.05),
            lease_until=self.leases.until,
            turn=turn,
            outages=self.outages,
        )
        try:
            return await self._run_turn(run, turn, owner, turn_approvals)
        except (LeaseLost, HandedOver):
            return handed_over(run)
        except Exception as exc:  # model errors, chain limit, storage failures while saving
            return await self.stops.fail(run, exc, owner)
        finally:
            await heartbeat.stop()
            current_turn.reset(token)

    async def _run_turn(
        self,
        run: Run,
        turn: TurnContext,
        owner: str,
        turn_approvals: list[Approval] | None = None,
    ) -> RunOutcome:
        history = [loaded(m) for m in run.history]
        history, turn.held_results = unfold_results(history, {t.name for t in self.tools_for(run)})
        if history and history[-1].role != "user":
            history = await self._answer_from_approvals(run, history, turn, turn_approvals)
        last: Any = None
        try:
            # The run's id for the conversation's: ``model.conversation()`` would make one, a
            # ULID (llm's take 43 000 instructions, 1.5 % of a cycle for its two drives).
            conversation = llm.AsyncConversation(
                model=self.model(run.model_id), id=run.id, chain_limit=self.config.chain_limit
            )
            async for response in conversation.chain(
                **chain_input(history), tools=[*self.offered(run, turn.delegation)]
            ).responses():
                # A safe point: an operator's pause takes effect before the model call.
                action = await hold_at_safe_point(turn)
                if action is not None:
                    before = history_before(response, last, history)
                    return await self.stops.hold(run, before, turn, owner, action)
                last = response
                turn.why = await _told(response, turn)  # its text, for the cards
                turn.hold_epoch += 1  # the model call ended: TurnContext.hold_epoch
        except GateFailure as failure:
            return await self.stops.fail(run, failure.original, owner)
        except HandedOver:
            return handed_over(run)
        except HoldRequested as hold:
            if turn.failures:
                return await self.stops.fail(run, turn.failures[0].original, owner)
            held_history = await history_at(last, history)
            if hold.tool_results:
                held_history.append(tool_results_message(hold.tool_results))
            if (turn.drafts or turn.still_pending) and hold.action != "stop":
                # A sibling asked for approval meanwhile: an ordinary pause, whose resume
                # the hold keeps from being claimed until someone resumes the run.
                return await self.stops.pause(run, held_history, turn, owner)
            return await self.stops.hold(run, held_history, turn, owner, hold.action)
        except ApprovalRequired as pause:
            if turn.failures:
                return await self.stops.fail(run, turn.failures[0].original, owner)
            paused_history = await history_at(last, history)
            if pause.tool_results:
                paused_history.append(tool_results_message(pause.tool_results))
            return await self.stops.pause(run, paused_history, turn, owner)
        except llm.PauseChain as other:
            return await self.stops.fail(
                run,
                RuntimeError(f"a tool paused the chain outside the approval gate: {other}"),
                owner,
            )
        if turn.failures:
            return await self.stops.fail(run, turn.failures[0].original, owner)
        answer = await last.text() if last is not None else ""
        final_history = await history_at(last, history)
        now = self.leases.clock()
        parent = await self.repo.finish_run(
            run.id,
            worker=owner,
            status="completed",
            history=[stored(m) for m in final_history],
            answer=answer,
            now=now,
            claimer=self.leases.worker_id,
            lease_until=self.leases.until(now),
        )
        if parent is not None:
            failpoint("child_ended")
        outcome = RunOutcome(run_id=run.id, status="completed", answer=answer, run=run)
        outcome.parent_resume = parent
        return outcome

    async def _answer_from_approvals(
        self,
        run: Run,
        history: list[Message],
        turn: TurnContext,
        carried: list[Approval] | None = None,
    ) -> list[Message]:
        """Resuming a pause: match its trailing calls to the approvals requested for them.

        Each approval answers its own call, once, through the gate, whatever today's config
        says about the tool; a call to a tool this process no longer has is answered here
        (its approval cancelled, or its decision given), so none is lost or left open.
        ``carried``: the turn's approvals as this resume's claim decided them; None: read.
        """
        calls = trailing_calls(history)
        # Carried by the claim when it decided the turn's only approval (PostgreSQL's
        # one-statement decision): while the claim's lease is held nothing else changes an
        # approved or denied approval of the turn (edits, votes, escalations and the sweeper's
        # expiries touch pending ones only; cancels of a run touch a paused one, and the
        # others are this drive's own), and begin_execution checks ``status = 'approved' AND
        # expires_at > now`` in its UPDATE all the same. Otherwise (a claim of another
        # process or dropped, several approvals, SQLite) read when the drive starts (one
        # read, no commit): whatever happened to them meanwhile is what it must answer.
        if carried is None:
            carried = await self.repo.approvals_for_turn(run.id, run.turn)
        requested = {a.tool_call_id: a for a in carried}
        turn.approvals = {
            c.tool_call_id: requested[c.tool_call_id] for c in calls if c.tool_call_id in requested
        }
        configured = {tool.name for tool in self.tools_for(run)}
        unconfigured = [c for c in calls if c.name not in configured]
        if not unconfigured:
            return history
        if waiting := [c.name for c in unconfigured if self._unlisted(c.name)]:
            # Not gone, just not reachable yet: cancelling an approved call for an outage
            # would be wrong. Left for a take-over once this drive's lease runs out.
            log.warning(
                "run %s: %s waits for its MCP server (not reachable since start-up); the run "
                "is taken over again when its lease runs out",
                run.id,
                ", ".join(waiting),
            )
            raise HandedOver(f"run {run.id}: waiting for an MCP server")
        results: list[Part] = [
            ToolResultPart(
                name=call.name,
                output=await answer_unconfigured(turn, call, turn.take_approval(call)),
                tool_call_id=call.tool_call_id,
            )
            for call in unconfigured
        ]
        return [*history, Message(role="tool", parts=results)]

    def _unlisted(self, tool_name: str) -> bool:
        server, separator, _ = tool_name.partition(MCP_SEPARATOR)
        return bool(separator) and server in self.unlisted_servers


async def _told(response: Any, turn: TurnContext) -> str:
    """Read one model response, telling the thread its text as it comes and its calls as
    pending tasks (bot.gate.stream_events); nothing is told when no one listens. Its text."""
    if turn.on_event is not None:
        async for chunk in response:
            if chunk:
                turn.emit(RunEvent(run_id=turn.run_id, kind="text", text=chunk))
        for call in await response.tool_calls():
            event = task_event(
                turn.run_id, call.tool_call_id or "", call.name, call.arguments, "pending"
            )
            turn.emit(event)
    text: str = await response.text()
    return text
