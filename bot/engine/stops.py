"""How a drive stops before its run completes, and stores why: a pause with its new rows, an
operator's hold at a safe point, a failure; and how a drive that lost its run says nothing.

Owns no state: each writes the run's row under the drive's lease owner (a drive that finds
its lease gone stops and says nothing, the run is another drive's now). A pause stores the
history with its new rows in one transaction (``Repository.save_pause``) and refuses, before
anything is stored, a response asking for more approvals than ``max_approvals_per_turn``; a
pause or a hold that finds everything decided meanwhile resumes the run at once, through the
runner's resume (:class:`bot.engine.drive.Drives` passes it in).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable

import llm
from llm.parts import Message, ToolCallPart

from bot.config import Config
from bot.engine.batches import batched
from bot.engine.delegations import hold_new_children
from bot.engine.failures import (
    ToolCallIdReused,
    TooManyApprovals,
    describe_failure,
    reused_call_id,
)
from bot.engine.holds import stop_at_safe_point
from bot.engine.leases import Leases
from bot.engine.outcomes import RunOutcome
from bot.engine.transcript import stored
from bot.gate import TurnContext, hold_requested
from bot.ops import failpoint
from storage.models import Run
from storage.records import ApprovalDraft
from storage.repository import LeaseLost, Repository, RunHeld

log = logging.getLogger(__name__)


def in_response_order(drafts: list[ApprovalDraft], history: list[Message]) -> list[ApprovalDraft]:
    """``drafts`` in the order their calls came in the response: the calls of one response
    run concurrently (``llm`` gathers async tools) and draft as each reaches its gate, so
    without this the rows, cards and children of one response came in a different order
    from one run to the next."""
    if len(drafts) < 2:
        return drafts
    for message in reversed(history):
        calls = [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]
        if message.role == "assistant" and calls:
            position = {call_id: index for index, call_id in enumerate(calls)}
            return sorted(drafts, key=lambda d: position.get(d.tool_call_id, len(calls)))
    return drafts


class Stops:
    """A drive's ways of stopping short of completion, for the drives of one runner."""

    def __init__(
        self,
        repo: Repository,
        config: Config,
        leases: Leases,
        resume: Callable[[str], Awaitable[RunOutcome]],
    ) -> None:
        self.repo = repo
        self.config = config
        self.leases = leases
        self._resume = resume

    async def pause(
        self, run: Run, history: list[Message], turn: TurnContext, owner: str
    ) -> RunOutcome:
        reused = reused_call_id(history, turn)
        if reused is not None:
            return await self.fail(run, ToolCallIdReused(reused), owner)
        if len(turn.drafts) > self.config.max_approvals_per_turn:
            if turn.unchecked_drafts and (action := await hold_requested(self.repo, run.id)):
                return await self._held_before_drafts(run, history, turn, owner, action)
            # Before anything is stored: no approval, no card, and the model is not asked
            # again (a prompt-injected response could otherwise flood the channel).
            return await self.fail(
                run, TooManyApprovals(len(turn.drafts), self.config.max_approvals_per_turn), owner
            )
        # Sub-agents' runs start under leases of their own (the caller drives them).
        drafts = [
            dataclasses.replace(
                d, child=dataclasses.replace(d.child, lease_owner=self.leases.new_owner())
            )
            if d.child is not None
            else d
            for d in in_response_order(turn.drafts, history)
        ]
        now = self.leases.clock()
        try:
            pause = await self.repo.save_pause(
                run.id,
                worker=owner,
                claimer=self.leases.worker_id,
                history=[stored(m) for m in history],
                # Many calls of one tool under the same approvers share one card
                # (bot.engine.batches).
                drafts=batched(drafts, self.config.batch_threshold_for),
                still_pending=turn.still_pending,
                lease_until=self.leases.until(now),
                now=now,
                # The drafted calls' safe point (bot.gate.safe_points): nothing ran since.
                stop_if_held=turn.unchecked_drafts,
                # As this drive knows it: the common pause is then one statement (PostgreSQL).
                run=run,
            )
        except RunHeld as held:
            return await self._held_before_drafts(run, history, turn, owner, held.action)
        failpoint("pause_stored")
        if pause.children:
            await hold_new_children(self.repo, run.id, self.leases.clock())
        if pause.resume_claimed:
            # Every approval it waited for was decided while it ran (their deciders could
            # not resume a run that was not paused yet): carry straight on.
            return await self._resume(run.id)
        return RunOutcome(
            run_id=run.id,
            status="paused",
            new_approvals=pause.approvals,
            run=run,
            children=pause.children,
        )

    async def _held_before_drafts(
        self, run: Run, history: list[Message], turn: TurnContext, owner: str, action: str
    ) -> RunOutcome:
        """The pause of new calls found a hold: those calls stop at their safe point, as if
        each had read it there (no approval asked), and the run is held; an earlier turn's
        approvals still waiting make it an ordinary pause, as ``HoldRequested`` does."""
        turn.drafts.clear()
        turn.unchecked_drafts = False
        if turn.still_pending and action != "stop":
            return await self.pause(run, history, turn, owner)
        return await self.hold(run, history, turn, owner, action)

    async def hold(
        self, run: Run, history: list[Message], turn: TurnContext, owner: str, action: str
    ) -> RunOutcome:
        """Stop at a safe point for an operator (:func:`bot.engine.holds.stop_at_safe_point`)."""
        if turn.failures:
            return await self.fail(run, turn.failures[0].original, owner)
        outcome = await stop_at_safe_point(
            self.repo, self.leases, run, [stored(m) for m in history], owner, action
        )
        # None: resumed between the safe point's read and its write; carry straight on.
        return outcome if outcome is not None else await self._resume(run.id)

    async def fail(self, run: Run, exc: BaseException, owner: str) -> RunOutcome:
        message = describe_failure(exc, self.config.chain_limit)
        now = self.leases.clock()
        try:
            parent = await self.repo.finish_run(
                run.id,
                worker=owner,
                status="failed",
                error=message,
                now=now,
                claimer=self.leases.worker_id,
                lease_until=self.leases.until(now),
            )
        except LeaseLost:
            # The run is another drive's now: this failure is not the run's, say nothing.
            log.error("run %s: this drive failed after losing the run: %s", run.id, message)
            return handed_over(run)
        # A model that is unknown or has no key is the configuration's fault, said in full by
        # the message: its traceback only buried that line.
        configuration = isinstance(exc, (llm.UnknownModelError, llm.NeedsKeyException))
        log.error("run %s failed: %s", run.id, message, exc_info=None if configuration else exc)
        if parent is not None:
            failpoint("child_ended")
        return RunOutcome(
            run_id=run.id, status="failed", error=message, run=run, parent_resume=parent
        )


def handed_over(run: Run) -> RunOutcome:
    # Another drive took the run over (this one stalled past its lease): the run is theirs
    # to finish and to report, so say nothing in the thread.
    log.warning("run %s: lease lost; the drive that took it over carries on", run.id)
    return RunOutcome(run_id=run.id, status="handed_over", run=run)
