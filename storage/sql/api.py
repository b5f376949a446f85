"""The statements of the human gate over HTTP: API tokens, API requests and the outbox of
their webhooks.

Owns no state; the rows are :mod:`storage.stores.api`'s. An API request's run row is keyed
by its idempotency key (``ON CONFLICT DO NOTHING``, as a Workflow Builder step's is by its
execution id): a second request with the same key inserts nothing and reads the first one's
row. A webhook is due once its approval is no longer pending; a deliverer claims it with one
conditional UPDATE whose row count says who won (``CLAIM_WEBHOOK``), and records the
receiver's 2xx by setting ``delivered_at``. Portable between SQLite (3.35+) and PostgreSQL.
"""

from __future__ import annotations

from storage.sql.steps import STEP_RUN_STATUS

TOKEN_COLUMNS = (
    "id, name, channels, team_id, requester, webhook_secret, created_at, expires_at, revoked_at"
)
INSERT_TOKEN = (
    "INSERT INTO api_tokens (id, name, token_hash, webhook_secret, channels, team_id, "
    "requester, created_at, expires_at, revoked_at) VALUES (:id, :name, :token_hash, "
    ":webhook_secret, :channels, :team_id, :requester, :now, :expires_at, NULL)"
)
TOKEN_BY_HASH = f"SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_hash = :hash"
TOKEN_BY_ID = f"SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = :id"
ALL_TOKENS = f"SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY created_at, id"
REVOKE_TOKEN = (
    "UPDATE api_tokens SET revoked_at = :now WHERE (id = :id OR name = :id) AND revoked_at IS NULL"
)

# An API request's run: no agent chain, only the approval or question it waits on; the status
# of a Workflow Builder step's run keeps resumes, take-overs and stranded sweeps away from it.
INSERT_API_RUN = (
    "INSERT INTO runs (id, conversation_key, team_id, channel, thread_ts, requester, status, "
    "model_id, history, turn, answer, error, lease_owner, lease_expires_at, created_at, "
    "updated_at, progress_ts) VALUES (:id, :key, :team_id, '', '', :requester, "
    f"'{STEP_RUN_STATUS}', 'api', '[]', 1, NULL, NULL, NULL, NULL, :now, :now, NULL) "
    "ON CONFLICT (conversation_key) DO NOTHING"
)
REQUEST_COLUMNS = (
    "approval_id, token_id, idempotency_key, webhook_url, delivery_id, created_at, attempts, "
    "delivered_at, gave_up_at, last_error, claimed_until"
)
INSERT_API_REQUEST = (
    "INSERT INTO api_requests (approval_id, token_id, run_id, idempotency_key, body_hash, "
    "webhook_url, delivery_id, created_at, claimed_until, attempts, first_attempt_at, "
    "delivered_at, gave_up_at, last_error) VALUES (:approval_id, :token_id, :run_id, "
    ":idempotency_key, :body_hash, :webhook_url, :delivery_id, :now, NULL, 0, NULL, NULL, "
    "NULL, NULL)"
)
REQUEST_BY_KEY = (
    "SELECT approval_id, body_hash FROM api_requests "
    "WHERE token_id = :token_id AND idempotency_key = :key"
)
REQUEST_BY_APPROVAL = f"SELECT {REQUEST_COLUMNS} FROM api_requests WHERE approval_id = :id"
RECENT_WEBHOOKS = (
    f"SELECT {REQUEST_COLUMNS} FROM api_requests WHERE webhook_url IS NOT NULL "
    "ORDER BY created_at DESC LIMIT :limit"
)
# A cancel through the API: the request's run, while its approval is still pending.
CANCEL_API_RUN = (
    "UPDATE runs SET status = 'cancelled', error = :reason, updated_at = :now "
    f"WHERE id = :run_id AND status = '{STEP_RUN_STATUS}'"
)
CANCEL_API_APPROVAL = (
    "UPDATE approvals SET status = 'cancelled', reason = :reason, decided_at = :now "
    "WHERE id = :id AND status = 'pending' RETURNING id"
)
API_RUN_OF = "SELECT run_id FROM api_requests WHERE approval_id = :id"
# An API request's run ends once nothing of it is pending (decided, answered or expired; a
# cancel ends it as cancelled already), so ``runs list --status step`` shows only waiting ones.
END_SETTLED_API_RUNS = (
    "UPDATE runs SET status = 'completed', updated_at = :now "
    f"WHERE status = '{STEP_RUN_STATUS}' AND model_id = 'api' AND NOT EXISTS ("
    "SELECT 1 FROM approvals WHERE approvals.run_id = runs.id "
    "AND approvals.status = 'pending')"
)

_FREE = "(api_requests.claimed_until IS NULL OR api_requests.claimed_until < :now)"
_DUE = (
    "api_requests.webhook_url IS NOT NULL AND api_requests.delivered_at IS NULL "
    "AND api_requests.gave_up_at IS NULL AND EXISTS (SELECT 1 FROM approvals "
    "WHERE approvals.id = api_requests.approval_id AND approvals.status <> 'pending')"
)
WEBHOOKS_DUE = (
    f"SELECT approval_id FROM api_requests WHERE {_DUE} AND {_FREE} "
    "ORDER BY created_at LIMIT :limit"
)
CLAIM_WEBHOOK = (
    "UPDATE api_requests SET claimed_until = :until, attempts = attempts + 1, "
    "first_attempt_at = COALESCE(first_attempt_at, :now) "
    f"WHERE approval_id = :id AND {_DUE} AND {_FREE} "
    "RETURNING approval_id, token_id, webhook_url, delivery_id, attempts, first_attempt_at"
)
WEBHOOK_DELIVERED = (
    "UPDATE api_requests SET delivered_at = :now, claimed_until = NULL, last_error = NULL "
    "WHERE approval_id = :id AND delivered_at IS NULL"
)
# A failed attempt: nobody tries again before ``retry_at`` (the claim becomes the backoff).
WEBHOOK_RETRY_AT = (
    "UPDATE api_requests SET claimed_until = :retry_at, last_error = :error "
    "WHERE approval_id = :id AND delivered_at IS NULL"
)
WEBHOOK_GAVE_UP = (
    "UPDATE api_requests SET gave_up_at = :now, claimed_until = NULL, last_error = :error "
    "WHERE approval_id = :id AND delivered_at IS NULL"
)
# ``webhooks retry ID``: an operator asks for another round (attempts and the 24 h start over).
WEBHOOK_RETRY_NOW = (
    "UPDATE api_requests SET gave_up_at = NULL, delivered_at = NULL, claimed_until = NULL, "
    "attempts = 0, first_attempt_at = NULL WHERE (approval_id = :id OR delivery_id = :id) "
    "AND webhook_url IS NOT NULL"
)
