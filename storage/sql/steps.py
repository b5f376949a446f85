"""The statements of Workflow Builder steps (``workflow_steps``) and their completion outbox.

Owns no state; the rows are :mod:`storage.stores.steps`'s. A step is inserted with its run
and approval, keyed by Slack's ``function_execution_id`` (``ON CONFLICT DO NOTHING``: a
redelivered event inserts nothing). Its completion is due once its approval is no longer
pending; a completer claims it with one conditional UPDATE whose row count says who won
(``CLAIM_STEP``), and records Slack's answer by setting ``completed_at`` (and forgetting the
execution's token). Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

STEP_BY_EXECUTION = (
    "SELECT function_execution_id, approval_id, run_id, completed_at IS NOT NULL "
    "FROM workflow_steps WHERE function_execution_id = :id"
)
STEP_OF_APPROVAL = "SELECT function_execution_id FROM workflow_steps WHERE approval_id = :id"
INSERT_STEP = (
    "INSERT INTO workflow_steps (function_execution_id, approval_id, run_id, team_id, "
    "workflow_execution_id, token, created_at, claimed_until, attempts, completed_at, "
    "completion, last_error) VALUES (:id, :approval_id, :run_id, :team_id, "
    ":workflow_execution_id, :token, :now, NULL, 0, NULL, NULL, NULL) "
    "ON CONFLICT (function_execution_id) DO NOTHING"
)
# A step's run: no agent chain, only the approval it waits on. Its own status keeps the
# resume claim, the stranded-run sweep and lease take-overs away from it.
STEP_RUN_STATUS = "step"
INSERT_STEP_RUN = (
    "INSERT INTO runs (id, conversation_key, team_id, channel, thread_ts, requester, status, "
    "model_id, history, turn, answer, error, lease_owner, lease_expires_at, created_at, "
    "updated_at, progress_ts) VALUES (:id, :key, :team_id, '', '', :requester, "
    f"'{STEP_RUN_STATUS}', 'workflow-step', '[]', 1, NULL, NULL, NULL, NULL, :now, :now, NULL) "
    "ON CONFLICT (conversation_key) DO NOTHING"
)
_FREE = "(workflow_steps.claimed_until IS NULL OR workflow_steps.claimed_until < :now)"
_DUE = (
    "workflow_steps.completed_at IS NULL AND EXISTS (SELECT 1 FROM approvals "
    "WHERE approvals.id = workflow_steps.approval_id AND approvals.status <> 'pending')"
)
# The sweeper's part: steps whose approval is settled, not completed, and claimed by nobody.
STEPS_TO_COMPLETE = (
    "SELECT function_execution_id FROM workflow_steps "
    f"WHERE {_DUE} AND {_FREE} ORDER BY created_at LIMIT :limit"
)
CLAIM_STEP = (
    "UPDATE workflow_steps SET claimed_until = :until, attempts = attempts + 1 "
    f"WHERE function_execution_id = :id AND {_DUE} AND {_FREE} "
    "RETURNING function_execution_id, approval_id, run_id, team_id, token, attempts"
)
# Slack took the completion (or refused it for good): the step is done, its token forgotten.
COMPLETE_STEP = (
    "UPDATE workflow_steps SET completed_at = :now, completion = :completion, "
    "last_error = :error, token = NULL, claimed_until = NULL "
    "WHERE function_execution_id = :id AND completed_at IS NULL"
)
# A failed call: nobody tries again before ``retry_at`` (the claim becomes the backoff).
RETRY_STEP_AT = (
    "UPDATE workflow_steps SET claimed_until = :retry_at, last_error = :error "
    "WHERE function_execution_id = :id AND completed_at IS NULL"
)
# The step's run ends with its completion (``runs list`` shows it done).
END_STEP_RUN = (
    "UPDATE runs SET status = :status, updated_at = :now "
    f"WHERE id = :run_id AND status = '{STEP_RUN_STATUS}'"
)
