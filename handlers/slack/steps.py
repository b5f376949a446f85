"""Completing Workflow Builder steps: ``functions.completeSuccess`` or ``completeError``,
exactly once per execution, from an outbox in the database.

A step's approval is settled by a click, an expiry or a cancel, on any replica; the step is
then due (:mod:`storage.stores.steps`). Whoever settled it completes it at once, and every
replica's sweeper completes the ones a crash or Slack left: each claims the step with one
conditional UPDATE, so two replicas never call Slack for the same execution at the same time,
and the claim outlives the call (a call gets half the claim). Slack's
answer is recorded at once; a failure Slack may not give again (rate limited, a 5xx, Slack
out of reach) is tried again with a backoff. The one window for a second call is a kill
between Slack taking the completion and the record of it: the retry is then refused
``execution_not_in_running_state``, which is recorded as done, so the step still completes once.

Completion uses the execution's own token (``bot_access_token`` in the event, which bolt
also attaches to its ``complete``/``fail``), stored with the step and never logged; should
Slack refuse it (it expired, or was revoked), the workspace's bot token is tried instead.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.clock import utcnow
from bot.engine.steps import step_outcome
from bot.ops import failpoint
from handlers.slack.failures import SLACK_FAILURES, transient
from handlers.slack.workspaces import WorkspaceClients
from storage.repository import Repository, StepToComplete

log = logging.getLogger(__name__)

# How long a completer holds its claim on a step (at most: ``serve`` uses ``run_lease`` when
# shorter, never less than STEP_CLAIM_LEAST, so a completer that died is replaced as a dead
# worker's run is); one Slack call of it gets half of that, so the claim outlives the call.
STEP_CLAIM = timedelta(seconds=60)
STEP_CLAIM_LEAST = timedelta(seconds=10)
# A completion Slack failed waits this long, doubling per attempt, at most STEP_RETRY_LONGEST.
STEP_RETRY_FIRST = timedelta(seconds=2)
STEP_RETRY_LONGEST = timedelta(minutes=5)
# Slack has no running execution to complete: completed already (by us, before a crash
# lost the record of it) or ended by Slack. Nothing will change that: the step is done
# (recorded as ``gone``).
EXECUTION_GONE = {"execution_not_in_running_state", "function_execution_not_found"}
# The execution's token is refused: try the workspace's bot token.
TOKEN_REFUSED = {"invalid_auth", "token_expired", "token_revoked", "not_authed"}


def retry_delay(attempts: int) -> timedelta:
    return min(STEP_RETRY_FIRST * 2 ** max(attempts - 1, 0), STEP_RETRY_LONGEST)


def _error(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError) and exc.response is not None:
        return str(exc.response.get("error") or "slack_error")
    return type(exc).__name__


class StepCompletions:
    """Completes settled steps from the outbox, for the settler and the sweeper."""

    def __init__(
        self, repo: Repository, clients: WorkspaceClients, claim: timedelta = STEP_CLAIM
    ) -> None:
        self.repo = repo
        self.clients = clients
        self.claim = max(min(claim, STEP_CLAIM), STEP_CLAIM_LEAST)

    async def complete_approval(self, approval_id: str) -> bool:
        """Complete the step an approval belongs to, if it is one and it is settled."""
        execution = await self.repo.step_of_approval(approval_id)
        return execution is not None and await self.complete(execution)

    async def complete_due(self) -> int:
        """The sweeper's part: settled steps nobody completed (a crash, Slack failing)."""
        done = 0
        for execution in await self.repo.steps_to_complete(utcnow()):
            done += await self.complete(execution)
        return done

    async def complete(self, function_execution_id: str) -> bool:
        """Claim the step and tell Slack its outcome; True once Slack's answer is recorded."""
        now = utcnow()
        step = await self.repo.claim_step(function_execution_id, now=now, until=now + self.claim)
        if step is None:
            return False  # not settled, completed already, or another completer has it
        outcome = step_outcome(step.approval)
        failpoint("step_completing")
        try:
            await self._call(step, outcome.outputs, outcome.error)
        except SLACK_FAILURES as exc:
            error = _error(exc)
            if error in EXECUTION_GONE:
                log.warning(
                    "workflow step %s: Slack has no running execution to complete (%s); "
                    "it was completed already or ended by Slack",
                    function_execution_id,
                    error,
                )
                return await self._done(step, "gone", error)
            if transient(exc):
                retry_at = utcnow() + retry_delay(step.attempts)
                log.error(
                    "workflow step %s: could not complete it (tried again at %s): %s",
                    function_execution_id,
                    retry_at.isoformat(timespec="seconds"),
                    error,
                )
                await self.repo.retry_step_at(function_execution_id, retry_at, error)
                return False
            log.error(
                "workflow step %s: Slack refused its completion for good: %s",
                function_execution_id,
                error,
            )
            return await self._done(step, "refused", error)
        failpoint("step_completed")
        return await self._done(step, "success" if outcome.error is None else "error", None)

    async def _done(self, step: StepToComplete, completion: str, error: str | None) -> bool:
        status = "completed" if step.approval.status != "cancelled" else "cancelled"
        await self.repo.step_completed(
            step, completion=completion, error=error, run_status=status, now=utcnow()
        )
        return True

    async def _call(
        self, step: StepToComplete, outputs: dict[str, str] | None, error: str | None
    ) -> None:
        workspace = await self.clients.for_team(step.team_id)
        clients = [workspace]
        if step.token:
            # The execution's own token first (what Slack's bolt completes with).
            own = AsyncWebClient(
                token=step.token, base_url=workspace.base_url, timeout=workspace.timeout
            )
            clients.insert(0, own)
        for index, client in enumerate(clients):
            try:
                if error is None:
                    assert outputs is not None
                    call = client.functions_completeSuccess(
                        function_execution_id=step.function_execution_id, outputs=outputs
                    )
                else:
                    call = client.functions_completeError(
                        function_execution_id=step.function_execution_id, error=error
                    )
                await asyncio.wait_for(call, self.claim.total_seconds() / 2)
                return
            except SlackApiError as exc:
                last = index == len(clients) - 1
                if last or _error(exc) not in TOKEN_REFUSED:
                    raise
                log.warning(
                    "workflow step %s: Slack refused the execution's token (%s); "
                    "completing it with the workspace's bot token",
                    step.function_execution_id,
                    _error(exc),
                )
