"""Resumes this worker claimed, kept until ``Runner.resume`` drives them.

A settlement that leaves nothing of its run waiting claims the run's resume in its own
transaction, and the claim's lease goes straight to the drive ``resume`` will run: that drive
then starts from the run as the claim read it, with no write of its own. The claims are kept
in memory only as that shortcut. A claim missing here (dropped, or made by another process)
is started from the database instead (``Repository.start_resumed_run``), and a claim nobody
resumes (its caller crashed or gave up) is left to the sweeper once its lease runs out.

A claim may also carry the approvals of the run's turn as it decided them
(``DecisionOutcome.turn_approvals``): the drive then answers them without reading them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.engine.leases import Leases
from storage.models import Approval, Run
from storage.records import DecisionOutcome

# Claimed resumes kept for ``resume`` (each is one run, as its claim read it): past this, the
# oldest are dropped, and resuming those starts them from the database.
CLAIMS_KEPT = 1000


@dataclass(frozen=True)
class Claim:
    """A claimed resume as its claim read it: the run, and (None: read them) the approvals of
    its turn."""

    run: Run
    turn_approvals: list[Approval] | None = None


class Claims:
    def __init__(self, leases: Leases, *, kept: int = CLAIMS_KEPT) -> None:
        self._leases = leases
        self._kept = kept
        self._by_run: dict[str, Claim | None] = {}

    def remember(self, outcome: DecisionOutcome) -> None:
        """Keep the run a settlement's claim read, and the turn's approvals if it carried
        them, for ``take``."""
        run = outcome.run
        claim = None if run is None else Claim(run, outcome.turn_approvals)
        self._keep(outcome.approval.run_id, claim)

    def remember_run(self, run: Run) -> None:
        """Keep a run an operator's Resume claimed (:mod:`bot.engine.holds`), for ``take``."""
        self._keep(run.id, Claim(run))

    def _keep(self, run_id: str, claim: Claim | None) -> None:
        while len(self._by_run) >= self._kept:
            self._by_run.pop(next(iter(self._by_run)))
        self._by_run[run_id] = claim

    def take(self, run_id: str) -> Claim | None:
        """The claim as it read the run, once, while the claim's lease still holds."""
        claim = self._by_run.pop(run_id, None)
        if claim is None:
            return None
        expires = claim.run.lease_expires_at
        if expires is None or expires <= self._leases.clock():
            return None
        return claim
