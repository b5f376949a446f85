"""The engine: runs that pause for people and resume exactly once, on any replica.

:class:`Runner` is what callers hold. It is composed of parts, each in its module: the leases
(:mod:`bot.engine.leases`), the claimed resumes (:mod:`bot.engine.claims`), the settlements
(:mod:`bot.engine.settlements`: decide, expire, answer, complete, make due), edit-and-approve
(:mod:`bot.engine.edits`), approve-and-grant (:mod:`bot.engine.grants`), the chain loop
(:mod:`bot.engine.drive`) and the stored ``llm`` history (:mod:`bot.engine.transcript`).
"""

from bot.engine.batches_decide import STALE_BATCH, BatchDecision, StaleBatch
from bot.engine.drive import DEFAULT_PUBLIC_URL
from bot.engine.failures import describe_failure
from bot.engine.grants import approve_and_grant
from bot.engine.leases import default_worker_id
from bot.engine.outcomes import Request, RunOutcome
from bot.engine.runner import Runner

__all__ = [
    "DEFAULT_PUBLIC_URL",
    "STALE_BATCH",
    "BatchDecision",
    "Request",
    "RunOutcome",
    "Runner",
    "StaleBatch",
    "approve_and_grant",
    "default_worker_id",
    "describe_failure",
]
