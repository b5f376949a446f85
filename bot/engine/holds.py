"""Operators pause, resume and stop runs: the checks, then one transaction each.

Owns no state of its own: the hold is a ``run_holds`` row (:mod:`storage.stores.holds`).
A pause asked for while the run works takes effect at the drive's next safe point
(:mod:`bot.gate.safe_points`); one asked for while it waits on people holds it at once, and
decisions made meanwhile are recorded and count. Resume releases the hold and, when nothing
is pending, claims the run's resume in the same transaction, on whichever replica it is
clicked: the caller then drives it with ``Runner.resume`` (the claim is remembered here).
``pause_ttl``: the sweeper cancels runs held longer (:meth:`Holds.expire`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection
from typing import Any

from bot.config import Config
from bot.engine.claims import Claims
from bot.engine.leases import Leases
from bot.engine.outcomes import RunOutcome
from bot.policy import HoldRefused, ensure_may_hold, operators, shown_id
from storage.models import Run
from storage.repository import HoldOutcome, ReleaseOutcome, Repository

log = logging.getLogger(__name__)

REFUSALS = {
    "missing": ("There is no run {run_id}.", "not_found"),
    "finished": ("Run {run_id} has already ended ({status}).", "finished"),
}


class Holds:
    def __init__(self, repo: Repository, config: Config, leases: Leases, claims: Claims) -> None:
        self.repo = repo
        self.config = config
        self.leases = leases
        self.claims = claims

    def allowed(self) -> set[str]:
        """Who may pause any run besides its requester: approvers of its tools, admins."""
        policies = list(self.config.policies.values())
        return operators(policies, self.config.admins)

    async def _checked(self, run_id: str, actor: str, actor_groups: Collection[str]) -> Run:
        run = await self.repo.get_run(run_id)
        if run is None:
            raise HoldRefused(f"There is no run {shown_id(run_id)}.", "not_found")
        if run.status == "step":  # storage.sql.steps: an approval with no agent behind it
            raise HoldRefused(
                f"Run {run_id} is a Workflow Builder step: there is no agent to pause or "
                f"resume. Cancel it with `approval-bot runs cancel {run_id}`.",
                "workflow_step",
            )
        ensure_may_hold(actor, actor_groups, requester=run.requester, allowed=self.allowed())
        return run

    async def pause(
        self,
        run_id: str,
        *,
        actor: str,
        actor_groups: Collection[str] = (),
        reason: str | None = None,
        action: str = "pause",
    ) -> HoldOutcome:
        """Ask to pause (or, ``action="stop"``, stop) a run. Raises HoldRefused."""
        await self._checked(run_id, actor, actor_groups)
        outcome = await self.repo.request_hold(
            run_id, action=action, actor=actor, reason=reason, now=self.leases.clock()
        )
        if outcome.result in REFUSALS:
            text, code = REFUSALS[outcome.result]
            status = outcome.run.status if outcome.run else ""
            raise HoldRefused(text.format(run_id=shown_id(run_id), status=status), code)
        # Its sub-agents' runs are paused or stopped with it (issue 20 section 1).
        reached = await self.repo.hold_children(
            run_id, action=action, actor=actor, reason=reason, now=self.leases.clock()
        )
        return dataclasses.replace(outcome, children=tuple(reached))

    async def stop(
        self,
        run_id: str,
        *,
        actor: str,
        actor_groups: Collection[str] = (),
        reason: str | None = None,
    ) -> HoldOutcome:
        """Stop a run: a waiting one is cancelled now, a working one at its next safe point.
        A sub-agent's run cancelled now leaves its parent with its result: its resume is
        claimed here (``parent_resume``: the caller resumes it), else left to the sweeper."""
        outcome = await self.pause(
            run_id, actor=actor, actor_groups=actor_groups, reason=reason, action="stop"
        )
        if outcome.result == "cancelled" and outcome.run is not None:
            parent = await claim_parent(self.repo, self.leases, outcome.run)
            if parent is not None:
                return dataclasses.replace(outcome, parent_resume=parent)
        return outcome

    async def resume(
        self, run_id: str, *, actor: str, actor_groups: Collection[str] = ()
    ) -> ReleaseOutcome:
        """Release the run's hold; if that claimed its resume, ``Runner.resume`` drives it.
        Raises HoldRefused when the run is not held (nothing changed)."""
        run = await self._checked(run_id, actor, actor_groups)
        outcome = await self.repo.release_hold(
            run_id,
            actor=actor,
            worker=self.leases.worker_id,
            lease_until=self.leases.until(),
            now=self.leases.clock(),
        )
        if not outcome.released:
            status = outcome.run.status if outcome.run else run.status
            raise HoldRefused(
                f"Run {shown_id(run_id)} is not paused by anyone ({status}).", "not_held"
            )
        if outcome.claimed is not None:
            self.claims.remember_run(outcome.claimed)
        # Its sub-agents' runs resume with it (the sweeper carries them on).
        await self.repo.release_children(run_id, actor=actor, now=self.leases.clock())
        return outcome

    async def stop_orphans(self) -> list[str]:
        """Stop sub-agents whose parent ended without them (the sweeper); the runs this
        cancelled now (their threads are told), the working ones stop at a safe point."""
        return await self.repo.stop_orphans(now=self.leases.clock())

    async def expire(self) -> list[str]:
        """Cancel the runs held longer than ``pause_ttl`` (none without it)."""
        if self.config.pause_ttl is None:
            return []
        now = self.leases.clock()
        return await self.repo.expire_holds(before=now - self.config.pause_ttl, now=now)


async def claim_parent(repo: Repository, leases: Leases, run: Run) -> str | None:
    """A sub-agent's run ended with no claim of its parent's resume (a Stop: its end settled
    the parent's row in its own transaction): claim it now if nothing else of the parent
    waits. The parent's id when claimed, else None (the sweeper's claim is the safety net)."""
    if run.parent_run_id is None:
        return None
    claimed = await repo.claim_stranded_run(
        run.parent_run_id, worker=leases.worker_id, lease_until=leases.until(), now=leases.clock()
    )
    return run.parent_run_id if claimed else None


async def stop_at_safe_point(
    repo: Repository,
    leases: Leases,
    run: Run,
    history: list[dict[str, Any]],
    owner: str,
    action: str,
) -> RunOutcome | None:
    """A drive at a safe point with a hold asked for: the run held (``paused``, lease
    released, nobody drives it until Resume) or, for a Stop, ended ``cancelled``. None when
    the hold was released meanwhile and this drive claimed the resume: the caller resumes."""
    now = leases.clock()
    if action == "stop":
        error = await repo.stop_held_run(run.id, worker=owner, history=history, now=now)
        log.info("run %s stopped at a safe point: %s", run.id, error)
        outcome = RunOutcome(run_id=run.id, status="cancelled", error=error, run=run)
        outcome.parent_resume = await claim_parent(repo, leases, run)
        return outcome
    released = await repo.hold_run(
        run.id,
        worker=owner,
        history=history,
        claimer=leases.worker_id,
        lease_until=leases.until(),
        now=now,
    )
    if released:
        return None
    log.info("run %s held at a safe point", run.id)
    return RunOutcome(run_id=run.id, status="held", run=run)
