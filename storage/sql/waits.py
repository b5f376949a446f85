"""The statements of waits, the pauses other than approvals: questions answered, callbacks armed
and completed, retries come due.

Owns no state; these rows are ``approvals`` rows of another ``kind`` (see
:mod:`storage.stores.waits`), so the run lock, the resume claim, expiry and the card outbox
are the approvals' own. Statuses: question ``pending -> answered | expired | cancelled``;
callback ``armed -> pending -> completed | expired | cancelled`` (or ``armed -> completed``);
retry ``pending -> due -> executing -> executed`` (or ``cancelled``). Portable between SQLite
(3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

from storage.records import ACTIVE_RUN_STATUSES
from storage.sql.columns import APPROVAL_COLUMNS

_ACTIVE = ", ".join(f"'{s}'" for s in ACTIVE_RUN_STATUSES)

ANSWER = (
    "UPDATE approvals SET status = 'answered', result = :answer, decided_by = :actor, "
    "decided_at = :now WHERE id = :id AND kind = 'question' AND status = 'pending' "
    f"AND expires_at > :now RETURNING {APPROVAL_COLUMNS.sql}"
)
# Only while the tool that arms it runs for the drive holding the run's lease (the lease
# owner fences drives, whichever active status the run is in).
RUN_FOR_ARMING = (
    "SELECT requester, team_id, channel, thread_ts FROM runs "
    f"WHERE id = :run_id AND lease_owner = :owner AND status IN ({_ACTIVE})"
)
# An armed row a crashed drive left for the same call: the call runs again, with a new token.
# Its tool call id becomes its own id, so the (run, turn, call) key is free again.
RELEASE_ARMED_SLOT = (
    "UPDATE approvals SET status = 'cancelled', tool_call_id = id, decided_at = :now, "
    "result = :reason WHERE run_id = :run_id AND turn = :turn AND tool_call_id = :tool_call_id "
    "AND kind = 'callback' AND status IN ('armed', 'completed') RETURNING id"
)
DISARM = (
    "UPDATE approvals SET status = 'cancelled', tool_call_id = id, decided_at = :now, "
    "result = :reason WHERE id = :id AND kind = 'callback' AND status IN ('armed', 'completed') "
    "RETURNING run_id"
)
LOCK_RUN_OF_TOKEN = (
    "SELECT runs.id FROM runs JOIN approvals ON approvals.run_id = runs.id "
    "WHERE approvals.token_hash = :token_hash FOR NO KEY UPDATE OF runs"
)
APPROVAL_BY_TOKEN = f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals WHERE token_hash = :token_hash"
_COMPLETE = (
    "UPDATE approvals SET status = 'completed', result = :body, decided_by = :actor, "
    "decided_at = :now WHERE {where} AND kind = 'callback' AND status IN ('pending', 'armed') "
    f"AND expires_at > :now RETURNING {APPROVAL_COLUMNS.sql}"
)
COMPLETE_BY_TOKEN = _COMPLETE.format(where="token_hash = :token_hash")
COMPLETE_BY_ID = _COMPLETE.format(where="id = :id")
# The pause takes over the row ``callback_url()`` stored: still waiting, or already answered.
# The call that adopts it may be a replay's (a new tool call id for the same call), so the row
# takes that id: the resume matches rows to calls by it.
ADOPT_CALLBACK = (
    "UPDATE approvals SET status = CASE WHEN status = 'armed' THEN 'pending' ELSE status END, "
    "tool_call_id = :tool_call_id, arguments = :arguments, payload_hash = :payload_hash, "
    "on_expiry = :on_expiry, "
    "expires_at = :expires_at, approvers = :approvers, reason = :reason, created_at = :now "
    "WHERE id = :id AND run_id = :run_id AND turn = :turn AND kind = 'callback' "
    f"AND status IN ('armed', 'completed') RETURNING {APPROVAL_COLUMNS.sql}"
)
DUE_RETRIES = (
    "SELECT id FROM approvals WHERE status = 'pending' AND kind = 'retry' AND due_at <= :now "
    "ORDER BY due_at LIMIT :limit"
)
MAKE_DUE = (
    "UPDATE approvals SET status = 'due', decided_by = 'timer', decided_at = :now "
    "WHERE id = :id AND kind = 'retry' AND status = 'pending' AND due_at <= :now "
    f"RETURNING {APPROVAL_COLUMNS.sql}"
)
# A due retry runs again at most once: recorded before the tool starts, by the lease holder.
# A recovery's Retry (storage.sql.recoveries) is a due row of kind ``recovery``: the same.
BEGIN_RETRY = (
    "UPDATE approvals SET status = 'executing', executed_at = :now "
    "WHERE id = :id AND kind IN ('retry', 'recovery') AND status = 'due' AND EXISTS ("
    "SELECT 1 FROM runs WHERE runs.id = approvals.run_id AND runs.lease_owner = :owner) "
    "RETURNING run_id"
)
CANCEL_RETRY = (
    "UPDATE approvals SET status = 'cancelled', result = :reason, "
    "decided_at = COALESCE(decided_at, :now) "
    "WHERE id = :id AND kind IN ('retry', 'recovery') AND status IN ('pending', 'due') "
    "RETURNING run_id"
)
# The retries one call of a run has had so far (max_retry_attempts): one row per RetryAt taken.
RETRIES_OF_CALL = (
    "SELECT COUNT(*) FROM approvals WHERE run_id = :run_id AND kind = 'retry' "
    "AND tool_call_id = :tool_call_id AND tool_name = :tool_name"
)
PENDING_WAITS = (
    f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals WHERE status = 'pending' AND kind != 'approval' "
    "ORDER BY created_at DESC, id DESC LIMIT :limit"
)
