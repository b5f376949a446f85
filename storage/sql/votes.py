"""The statements of quorum votes (``approval_votes``) and of cards a vote left to edit again
(``card_edits_due``).

Owns no state; the rows are :mod:`storage.stores.votes`'s and :mod:`storage.stores.cards`'s.
One vote per person (the primary key); the N-th distinct Approve decides, in the same
transaction, with the conditional UPDATE ``DECIDE_BY_QUORUM``. Portable between SQLite
(3.35+) and PostgreSQL (``FOR NO KEY UPDATE`` is sent to PostgreSQL only); ``:name``
parameters.
"""

from __future__ import annotations

from storage.sql.columns import APPROVAL_COLUMNS

_PENDING = "kind = 'approval' AND status = 'pending' AND expires_at > :now"
LOCK_PENDING_APPROVAL = (
    f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals WHERE id = :id AND {_PENDING} FOR NO KEY UPDATE"
)
PENDING_APPROVAL = f"SELECT {APPROVAL_COLUMNS.sql} FROM approvals WHERE id = :id AND {_PENDING}"
INSERT_APPROVE_VOTE = (
    "INSERT INTO approval_votes (approval_id, voter, vote, decided_at, reason) "
    "VALUES (:id, :voter, 'approve', :now, :reason) "
    "ON CONFLICT (approval_id, voter) DO NOTHING"
)
RECORD_DENY_VOTE = (
    "INSERT INTO approval_votes (approval_id, voter, vote, decided_at, reason) "
    "VALUES (:id, :voter, 'deny', :now, :reason) "
    "ON CONFLICT (approval_id, voter) DO UPDATE SET vote = 'deny', decided_at = :now, "
    "reason = :reason"
)
# Who counts: distinct people (the key), approving, never the requester.
COUNTED_VOTERS = (
    "SELECT voter FROM approval_votes WHERE approval_id = :id AND vote = 'approve' "
    "AND voter != :requester ORDER BY decided_at, voter"
)
# Every Approve so far (the requester's too: callers skip it), for the pre-transaction check.
APPROVE_VOTERS = (
    "SELECT voter FROM approval_votes WHERE approval_id = :id AND vote = 'approve' "
    "ORDER BY decided_at, voter"
)
DISCARD_VOTE = (
    "DELETE FROM approval_votes WHERE approval_id = :id AND voter = :voter AND vote = 'approve'"
)
# The card must show this vote: marked in the vote's transaction, cleared by the card's edit.
# A mark only ever moves later: a refused edit's mark, timed before a vote's commit and
# written after it, must not let an edit that never showed the vote clear it.
MARK_CARD_EDIT_DUE = (
    "INSERT INTO card_edits_due (approval_id, since) VALUES (:id, :now) "
    "ON CONFLICT (approval_id) DO UPDATE SET since = excluded.since "
    "WHERE excluded.since > card_edits_due.since"
)
# A refused edit of a batch's card (marked on its first row) moves its other rows' marks on
# too: a vote marks the row voted on, and a sweep takes the oldest mark first.
MOVE_BATCH_CARD_EDITS_DUE = (
    "UPDATE card_edits_due SET since = :now WHERE since < :now "
    "AND approval_id IN (SELECT id FROM approvals WHERE batch_id = :id)"
)
# A sweeper takes a mark by moving it on to now: another replica's sweep, which read it due
# too, finds it moved and leaves the card alone; a sweeper that dies mid-edit leaves the mark
# due again after the grace.
CLAIM_CARD_EDIT_DUE = (
    "UPDATE card_edits_due SET since = :now WHERE approval_id = :id AND since <= :before"
)
CLEAR_CARD_EDIT_DUE = "DELETE FROM card_edits_due WHERE approval_id = :id AND since <= :before"
CARD_EDITS_DUE = (
    "SELECT approval_id FROM card_edits_due WHERE since <= :before ORDER BY since LIMIT :limit"
)
SET_APPROVED_BY = (
    f"UPDATE approvals SET approved_by = :approved_by WHERE id = :id AND {_PENDING} "
    f"RETURNING {APPROVAL_COLUMNS.sql}"
)
DECIDE_BY_QUORUM = (
    "UPDATE approvals SET status = 'approved', decided_by = :actor, decided_at = :now, "
    "decided_by_name = :actor_name, reason = :reason, approved_by = :approved_by "
    f"WHERE id = :id AND {_PENDING} "
    f"RETURNING {APPROVAL_COLUMNS.sql}"
)
