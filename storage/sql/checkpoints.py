"""The statements of ``checkpoints``: save a long call's state, read it, resume from it.

Every save is fenced by the run's lease (the same UPDATE renews it): a drive that lost its run
stores nothing more. The resume is one conditional UPDATE of the approval (still
``executing``, a checkpoint stored, the run held by the resuming drive), whose row count
decides who resumes.
"""

from __future__ import annotations

# The run's row first, as every transaction takes them (see LOCK_RUN): renewing the lease of
# the call's run is also the fence (0 rows: another drive holds the run, or its lease ran out
# or was released at a shutdown: the drive that takes the run over resumes the call).
RENEW_LEASE_FOR_CHECKPOINT = (
    "UPDATE runs SET lease_expires_at = :lease_until "
    "WHERE id = (SELECT run_id FROM approvals WHERE id = :id AND status = 'executing') "
    "AND lease_owner = :owner AND lease_expires_at > :now"
)
UPDATE_CHECKPOINT = (
    "UPDATE checkpoints SET state = :state, saved_at = :now, saves = saves + 1, "
    "saved_by = :owner WHERE approval_id = :id"
)
INSERT_CHECKPOINT = (
    "INSERT INTO checkpoints (approval_id, run_id, state, saved_at, saves, resumes, saved_by) "
    "SELECT id, run_id, :state, :now, 1, 0, :owner FROM approvals WHERE id = :id"
)
GET_CHECKPOINT = "SELECT state, saves, resumes FROM checkpoints WHERE approval_id = :id"
# Resuming a call found ``executing``: only by the drive holding its run (a drive answers
# each call once), only if it stored a checkpoint; ``executed_at``: this attempt's start.
RESUME_CHECKPOINTED = (
    "UPDATE approvals SET executed_at = :now "
    "WHERE id = :id AND status = 'executing' "
    "AND EXISTS (SELECT 1 FROM runs WHERE runs.id = approvals.run_id "
    "AND runs.lease_owner = :owner) "
    "AND EXISTS (SELECT 1 FROM checkpoints WHERE checkpoints.approval_id = approvals.id) "
    "RETURNING run_id"
)
COUNT_RESUME = "UPDATE checkpoints SET resumes = resumes + 1 WHERE approval_id = :id"
HAS_CHECKPOINT = "SELECT 1 FROM checkpoints WHERE approval_id = :id"
