"""The agent runner: drives ``llm`` chains that pause for approval and resume exactly once.

A run is one conversation (a Slack thread). Its durable form is the ``llm`` message history
in ``runs.history``: the new user message is stored before the model is called, the paused
history together with its pending approvals when a gated call pauses, the final history when
the chain completes. Resuming rebuilds the chain from that history with the same tools and no
prompt text, so llm re-executes exactly the trailing calls that have no result yet, and the
gate turns each decision into that call's result.

Only the drive holding a run's lease drives it (the lease owner is the worker id plus a token
per drive, so two drives of one run in one process fence each other too); a decision that
leaves nothing pending claims the resume atomically, so concurrent deciders resume a run once.
A drive that finds it lost the lease stops and says nothing: the run is another drive's.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import llm
from llm.parts import Message, TextPart, ToolCallPart, ToolResultPart
from ulid import ULID

from bot import logs
from bot import metric_hooks as metrics
from bot.clock import utcnow
from bot.config import Config
from bot.decisions import (
    AlreadyDecided,
    ApprovalExpired,
    ApprovalNotFound,
    Decision,
    DecisionRefused,
    NotAllowed,
    describe_status,
    describe_wait,
    ensure_may_answer,
    ensure_may_decide,
)
from bot.edits import EditSettling
from bot.failpoints import failpoint
from bot.gate import (
    ApprovalRequired,
    GateFailure,
    HandedOver,
    TurnContext,
    answer_unconfigured,
    current_turn,
    wrap_tools,
)
from bot.history import settle_history, trailing_calls
from bot.ids import new_run_id
from bot.lease import LeaseKeeper
from bot.pauses import ASK_USER_TOOL
from bot.runner_decisions import DecisionSettling
from bot.runner_waits import PauseSettling
from storage.models import Approval, Run
from storage.repository import (
    CallbackOutcome,
    DecisionOutcome,
    LeaseLost,
    Repository,
    RunBusy,
)

log = logging.getLogger(__name__)

# The decisions' refusals live in bot.decisions; callers import them from here too.
__all__ = [
    "AlreadyDecided",
    "ApprovalExpired",
    "ApprovalNotFound",
    "CallbackOutcome",
    "Decision",
    "DecisionRefused",
    "NotAllowed",
    "RunBusy",
    "describe_status",
    "describe_wait",
    "ensure_may_answer",
    "ensure_may_decide",
]

DEFAULT_PUBLIC_URL = "http://127.0.0.1:8080"


@dataclass
class Request:
    """Something a person asked the bot, and where."""

    text: str
    requester: str
    team_id: str = ""
    channel: str = ""
    thread_ts: str = ""
    # Who asked and where, for the system prompt of a new conversation.
    context: str = ""
    conversation_key: str | None = None

    def key(self) -> str:
        if self.conversation_key:
            return self.conversation_key
        if self.channel and self.thread_ts:
            return f"{self.team_id}:{self.channel}:{self.thread_ts}"
        return f"adhoc:{ULID()}"


@dataclass
class RunOutcome:
    """Where a run stands after the runner let go of it; what the caller should show."""

    run_id: str
    status: str  # completed | paused | failed | cancelled | busy | handed_over
    answer: str | None = None
    error: str | None = None
    new_approvals: list[Approval] = field(default_factory=list)
    run: Run | None = None


class ToolCallIdReused(Exception):
    """The model gave a gated call an id another call of the same response also has.

    Results are matched to calls by id (by llm when it resumes, and by the database's
    approvals), so the other call's result would pass for the gated one's: the approved call
    would never run. Such a response is refused before anything is stored for it.
    """

    def __init__(self, tool_call_id: str) -> None:
        super().__init__(
            f"the model gave two tool calls the same id {tool_call_id!r}, so their results "
            "could not be told apart; no call that needs approval ran"
        )


class TooManyApprovals(Exception):
    """One model response asked for more gated calls than ``max_approvals_per_turn``."""

    def __init__(self, asked: int, limit: int) -> None:
        super().__init__(
            f"the agent asked for {asked} calls that need approval in one response, more "
            f"than the {limit} allowed (max_approvals_per_turn); none was stored or run"
        )


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{str(ULID())[-6:]}"


class Runner(PauseSettling, DecisionSettling, EditSettling):
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
        self.clock = clock
        builtin = [ASK_USER_TOOL] if config.ask_user else []
        names = {tool.name for tool in config.tools}
        builtin = [tool for tool in builtin if tool.name not in names]  # a configured one wins
        self.tools = wrap_tools([*config.tools, *builtin], config.policy_for)
        self._models: dict[str, llm.AsyncModel] = {}
        # Resumes this runner's decisions claimed (the claim is the resume's start: see
        # ``decide``), by run id, until ``resume`` drives them. Memory only as a shortcut: a
        # claim found missing here is started from the database (``start_resumed_run``).
        self._claimed: dict[str, DecisionOutcome] = {}

    @property
    def public_url(self) -> str:
        """The base of callback URLs: ``public_url``, else where ``serve`` listens."""
        return self.config.public_url or DEFAULT_PUBLIC_URL

    def model(self, model_id: str) -> llm.AsyncModel:
        # llm rebuilds its whole model registry on every lookup; once per runner is enough.
        if model_id not in self._models:
            self._models[model_id] = llm.get_async_model(model_id)
        return self._models[model_id]

    def _lease_until(self) -> datetime:
        return self.clock() + self.config.run_lease

    def _new_owner(self) -> str:
        """The lease owner of one drive: this worker, and which of its drives (40 random bits,
        as the ULID suffix this once was, without building a ULID)."""
        return f"{self.worker_id}/{secrets.token_hex(5)}"

    # -- starting and resuming -----------------------------------------------------------

    async def start(self, request: Request) -> RunOutcome:
        """Run a request; a follow-up in the same conversation continues its history."""
        try:
            run = await self.open(request)
        except RunBusy as busy:
            return RunOutcome(run_id=busy.run.id, status="busy", run=busy.run)
        return await self.drive(run)

    async def open(self, request: Request, *, event_id: str | None = None) -> Run:
        """Store a request as a run this worker holds the lease of; no model call.

        With ``event_id`` the Slack event is recorded as handled in the same transaction
        (raises DuplicateEvent for a redelivery). Raises RunBusy when the conversation's run
        is working or waiting. If this worker dies before driving it, the lease runs out and
        the sweeper of any replica takes the run over.
        """
        system = self.config.system_prompt
        if request.context:
            system = f"{system}\n\n{request.context}"
        return await self.repo.open_run(
            run_id=new_run_id(),
            conversation_key=request.key(),
            requester=request.requester,
            model_id=self.config.model,
            opening_messages=[_message("system", system)],
            new_messages=[_message("user", request.text)],
            worker=self._new_owner(),
            lease_until=self._lease_until(),
            now=self.clock(),
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
        return await self._drive(run, run.lease_owner)

    @metrics.times_resumes
    @logs.bound_to("run_id")
    async def resume(self, run_id: str) -> RunOutcome:
        """Resume a run whose resume this worker claimed (through a decision or an expiry).

        After this runner's own decision the drive starts from the run its claim's
        transaction read, under the lease the claim gave it: no write of its own. Otherwise (an
        expiry, a stranded run, another runner object of this worker) ``resuming -> running``
        is committed first, for a new drive.
        """
        claimed = self._claimed.pop(run_id, None)
        if (
            claimed is not None
            and claimed.run is not None
            and claimed.run.lease_expires_at is not None
            and claimed.run.lease_expires_at > self.clock()
        ):
            run = claimed.run
            assert run.lease_owner is not None
            return await self._drive(run, run.lease_owner)
        owner = self._new_owner()
        run = await self.repo.start_resumed_run(
            run_id,
            worker=self.worker_id,
            owner=owner,
            lease_until=self._lease_until(),
            now=self.clock(),
        )
        return await self._drive(run, owner)

    async def recover_stale_runs(self) -> list[RunOutcome]:
        """Take over runs whose worker stopped renewing its lease, and carry them on."""
        return [await self.carry_on(run) for run in await self.take_over_stale_runs()]

    async def take_over_stale_runs(self) -> list[Run]:
        """Take over runs whose worker stopped renewing its lease; the caller drives each
        with ``carry_on`` (the sweeper: as a task of its own, so one slow run stalls nothing)."""
        runs = []
        for run_id in await self.repo.stale_runs(self.clock()):
            owner = self._new_owner()
            run = await self.repo.take_over_run(
                run_id, worker=owner, lease_until=self._lease_until(), now=self.clock()
            )
            if run is not None:
                log.warning("taking over run %s: its worker's lease ran out", run_id)
                runs.append(run)
        return runs

    async def carry_on(self, run: Run) -> RunOutcome:
        """Drive a run returned by ``take_over_stale_runs`` (as the drive it was taken for)."""
        assert run.lease_owner is not None
        return await self._drive(run, run.lease_owner, replay=True)

    async def claim_stranded_runs(self) -> list[str]:
        """Claim the resume of paused runs with nothing pending that nobody resumed (a safety
        net: deciders serialize on the run, so one of them claims); callers ``resume`` each."""
        claimed = []
        for run_id in await self.repo.stranded_runs():
            if await self.repo.claim_stranded_run(
                run_id, worker=self.worker_id, lease_until=self._lease_until(), now=self.clock()
            ):
                log.warning("run %s: paused with nothing pending; resuming it", run_id)
                claimed.append(run_id)
        return claimed

    @metrics.counts_drives
    @logs.bound_to("run")
    async def _drive(self, run: Run, owner: str, *, replay: bool = False) -> RunOutcome:
        """Run the chain from the stored history until it completes, pauses or fails.

        ``owner`` is this drive's lease owner; every write that moves the run checks it.
        ``replay``: a take-over of a drive that died, whose calls may have armed callbacks.
        """

        turn = TurnContext(
            run_id=run.id,
            requester=run.requester,
            repo=self.repo,
            clock=self.clock,
            owner=owner,
            lease_until=self._lease_until,
            turn_number=run.turn,
            base_url=self.public_url,
            question_policy=self.config.question_policy(),
            max_retry_wait=self.config.max_retry_wait,
            max_retry_attempts=self.config.max_retry_attempts,
            wait_policy=self.config.wait_policy,
            channel=run.channel,
        )
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
            lease_until=self._lease_until,
            turn=turn,
        )
        try:
            return await self._run_turn(run, turn, owner)
        except (LeaseLost, HandedOver):
            return _handed_over(run)
        except Exception as exc:  # model errors, chain limit, storage failures while saving
            return await self._fail(run, exc, owner)
        finally:
            await heartbeat.stop()
            current_turn.reset(token)

    async def _run_turn(self, run: Run, turn: TurnContext, owner: str) -> RunOutcome:
        history = [Message.from_dict(m) for m in run.history]
        if history and history[-1].role != "user":
            history = await self._answer_from_approvals(run, history, turn)
        last: Any = None
        try:
            conversation = self.model(run.model_id).conversation(
                chain_limit=self.config.chain_limit
            )
            async for response in conversation.chain(
                **_chain_input(history), tools=self.tools
            ).responses():
                last = response
                await response.text()
        except GateFailure as failure:
            return await self._fail(run, failure.original, owner)
        except HandedOver:
            return _handed_over(run)
        except ApprovalRequired as pause:
            if turn.failures:
                return await self._fail(run, turn.failures[0].original, owner)
            paused_history = await _history_at(last, history)
            if pause.tool_results:
                paused_history.append(_tool_results_message(pause.tool_results))
            return await self._pause(run, paused_history, turn, owner)
        except llm.PauseChain as other:
            return await self._fail(
                run,
                RuntimeError(f"a tool paused the chain outside the approval gate: {other}"),
                owner,
            )
        if turn.failures:
            return await self._fail(run, turn.failures[0].original, owner)
        answer = await last.text() if last is not None else ""
        final_history = await _history_at(last, history)
        await self.repo.finish_run(
            run.id,
            worker=owner,
            status="completed",
            history=[m.to_dict() for m in final_history],
            answer=answer,
            now=self.clock(),
        )
        return RunOutcome(run_id=run.id, status="completed", answer=answer, run=run)

    async def _answer_from_approvals(
        self, run: Run, history: list[Message], turn: TurnContext
    ) -> list[Message]:
        """Resuming a pause: match its trailing calls to the approvals requested for them.

        Each approval answers its own call, once, through the gate, whatever today's config
        says about the tool; a call to a tool this process no longer has is answered here
        (its approval cancelled, or its decision given), so none is lost or left open.
        """
        calls = trailing_calls(history)
        # Read when the drive starts (one read, no commit), not with the claim: whatever
        # happened to them meanwhile is what this drive must answer.
        requested = {
            a.tool_call_id: a for a in await self.repo.approvals_for_turn(run.id, run.turn)
        }
        turn.approvals = {
            c.tool_call_id: requested[c.tool_call_id] for c in calls if c.tool_call_id in requested
        }
        configured = {tool.name for tool in self.tools}
        unconfigured = [c for c in calls if c.name not in configured]
        if not unconfigured:
            return history
        results = [
            ToolResultPart(
                name=call.name,
                output=await answer_unconfigured(turn, call, turn.take_approval(call)),
                tool_call_id=call.tool_call_id,
            )
            for call in unconfigured
        ]
        return [*history, Message(role="tool", parts=results)]

    async def _pause(
        self, run: Run, history: list[Message], turn: TurnContext, owner: str
    ) -> RunOutcome:
        reused = _reused_call_id(history, turn)
        if reused is not None:
            return await self._fail(run, ToolCallIdReused(reused), owner)
        if len(turn.drafts) > self.config.max_approvals_per_turn:
            # Before anything is stored: no approval, no card, and the model is not asked
            # again (a prompt-injected response could otherwise flood the channel).
            return await self._fail(
                run, TooManyApprovals(len(turn.drafts), self.config.max_approvals_per_turn), owner
            )
        pause = await self.repo.save_pause(
            run.id,
            worker=owner,
            claimer=self.worker_id,
            history=[m.to_dict() for m in history],
            drafts=turn.drafts,
            still_pending=turn.still_pending,
            lease_until=self._lease_until(),
            now=self.clock(),
        )
        failpoint("pause_stored")
        if pause.resume_claimed:
            # Every approval it waited for was decided while it ran (their deciders could
            # not resume a run that was not paused yet): carry straight on.
            return await self.resume(run.id)
        return RunOutcome(run_id=run.id, status="paused", new_approvals=pause.approvals, run=run)

    async def _fail(self, run: Run, exc: BaseException, owner: str) -> RunOutcome:
        message = describe_failure(exc, self.config.chain_limit)
        try:
            await self.repo.finish_run(
                run.id, worker=owner, status="failed", error=message, now=self.clock()
            )
        except LeaseLost:
            # The run is another drive's now: this failure is not the run's, say nothing.
            log.error("run %s: this drive failed after losing the run: %s", run.id, message)
            return _handed_over(run)
        # A model that is unknown or has no key is the configuration's fault, said in full by
        # the message: its traceback only buried that line.
        configuration = isinstance(exc, (llm.UnknownModelError, llm.NeedsKeyException))
        log.error("run %s failed: %s", run.id, message, exc_info=None if configuration else exc)
        return RunOutcome(run_id=run.id, status="failed", error=message, run=run)


FAILURE_LINE_LIMIT = 500


def describe_failure(exc: BaseException, chain_limit: int) -> str:
    text = str(exc)
    if isinstance(exc, ValueError) and text.startswith("Chain limit"):
        return (
            f"Stopped: the agent needed more than {chain_limit} model calls (chain_limit) "
            "without finishing."
        )
    if isinstance(exc, llm.UnknownModelError):
        return f"Stopped: unknown model ({text}). Install its llm plugin or fix `model`."
    if isinstance(exc, llm.NeedsKeyException):
        return f"Stopped: the model needs an API key ({text})."
    if isinstance(exc, (ToolCallIdReused, TooManyApprovals)):
        return f"Stopped: {text}."
    # The first line only: a database error goes on with its SQL and every parameter (the
    # whole history, a tool's arguments), which do not belong in a Slack thread.
    lines = text.strip().splitlines()
    first = lines[0][:FAILURE_LINE_LIMIT] if lines else ""
    return f"Stopped by an error: {type(exc).__name__}: {first}"


def _handed_over(run: Run) -> RunOutcome:
    # Another drive took the run over (this one stalled past its lease): the run is theirs
    # to finish and to report, so say nothing in the thread.
    log.warning("run %s: lease lost; the drive that took it over carries on", run.id)
    return RunOutcome(run_id=run.id, status="handed_over", run=run)


def _reused_call_id(history: list[Message], turn: TurnContext) -> str | None:
    """The id of a new gated call that another call of its response shares, if any."""
    for message in reversed(history):
        calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
        if message.role == "assistant" and calls:
            seen = Counter(p.tool_call_id for p in calls if p.tool_call_id)
            for draft in turn.drafts:
                if seen[draft.tool_call_id] > 1:
                    return draft.tool_call_id
            return None
    return None


def _chain_input(history: list[Message]) -> dict[str, Any]:
    """How to hand the stored history to llm.

    A new user turn (history ending in the user's message) goes in as prompt text with the
    rest as messages, the way every llm plugin reads a prompt (some only read the text). A
    resumed turn (history ending in tool calls without results) goes in as messages and no
    prompt, so llm re-executes exactly those calls.
    """
    if history and history[-1].role == "user":
        text = "".join(p.text for p in history[-1].parts if isinstance(p, TextPart))
        return {"prompt": text, "messages": history[:-1]}
    return {"messages": history}


def _message(role: str, text: str) -> dict[str, Any]:
    return Message(role=role, parts=[TextPart(text=text)]).to_dict()


async def _history_at(last: Any, history: list[Message]) -> list[Message]:
    """The full history after the last response, or what we started with if none ran."""
    if last is None:
        return list(history)
    return list(last.prompt.messages) + list(await last.messages())


def _tool_results_message(results: list[llm.ToolResult]) -> Message:
    """Sibling calls that finished before the pause, so resuming does not run them again."""
    return Message(
        role="tool",
        parts=[
            ToolResultPart(name=r.name, output=r.output, tool_call_id=r.tool_call_id)
            for r in results
        ],
    )
