"""Resumes this worker claimed, kept until ``Runner.resume`` drives them.

A settlement that leaves nothing of its run waiting claims the run's resume in its own
transaction, and the claim's lease goes straight to the drive ``resume`` will run: that drive
then starts from the run as the claim read it, with no write of its own. The claims are kept
in memory only as that shortcut. A claim missing here (dropped, or made by another process)
is started from the database instead (``Repository.start_resumed_run``), and a claim nobody
resumes (its caller crashed or gave up) is left to the sweeper once its lease runs out.
"""

from __future__ import annotations

from bot.engine.leases import Leases
from storage.models import Run
from storage.records import DecisionOutcome

# Claimed resumes kept for ``resume`` (each is one run, as its claim read it): past this, the
# oldest are dropped, and resuming those starts them from the database.
CLAIMS_KEPT = 1000


class Claims:
    def __init__(self, leases: Leases, *, kept: int = CLAIMS_KEPT) -> None:
        self._leases = leases
        self._kept = kept
        self._by_run: dict[str, Run | None] = {}

    def remember(self, outcome: DecisionOutcome) -> None:
        """Keep the run a settlement's claim read, for ``take``."""
        self._keep(outcome.approval.run_id, outcome.run)

    def remember_run(self, run: Run) -> None:
        """Keep a run an operator's Resume claimed (:mod:`bot.engine.holds`), for ``take``."""
        self._keep(run.id, run)

    def _keep(self, run_id: str, run: Run | None) -> None:
        while len(self._by_run) >= self._kept:
            self._by_run.pop(next(iter(self._by_run)))
        self._by_run[run_id] = run

    def take(self, run_id: str) -> Run | None:
        """The run as its claim read it, once, while the claim's lease still holds."""
        run = self._by_run.pop(run_id, None)
        if run is None:
            return None
        if run.lease_expires_at is None or run.lease_expires_at <= self._leases.clock():
            return None
        return run
