"""PostgreSQL's one-statement decision: the common Approve or Deny and the resume it allows.

Owns no state; the rows are the decision store's (:mod:`storage.stores.decisions`). The
statement does what the full decision transaction (the run's lock, ``DECIDE`` with its audit
row, the resume claim with its audit row) does for a plain decision, in one round trip
(``Mode.WRITE_ONE``, autocommit): an approval that needs one approver, from a clicker with no
grant and no discarded votes. Whenever any condition of that case does not hold it changes
nothing and returns no row, and the caller runs the full transaction instead. PostgreSQL only
(data-modifying CTEs, ``SKIP LOCKED``); SQLite always runs the full transaction.

Why each part is as it is:

- ``run``: the run's lock first, as every transaction takes it (storage.sql.runs LOCK_RUN),
  referenced by the approval's UPDATE so that it is taken before the approval's row. ``SKIP
  LOCKED``: a statement that waited for the lock would go on with the snapshot it took before
  waiting, and its "nothing else pending" could miss a decision the lock's holder made; so a
  held lock means no row here, nothing decided, and the full transaction (whose statements
  each see what the holder committed) waits for it instead. Its ``status`` is the run's
  latest, locked row.
- ``decided``: ``DECIDE`` for one approver (a Deny of a quorum approval records a vote too:
  the full transaction), with the stale-copy check of the clicked card (an Approve's) as a
  condition. Who may decide is not checked here: ``bot.policy`` says so on a read of the row
  before this runs (``Runner.decide``), and an edit that changes the approvers changes what
  an Approve's copy showed.
- ``claimed``: ``CLAIM_RESUME`` on the decided row's run. The statement's snapshot still shows
  the decided approval pending, hence ``id <> :id``. That snapshot was taken before the lock:
  a sibling decision that committed in between is not seen, so the caller claims again in a
  transaction of its own when this decided, did not claim and the run is paused
  (``DecisionStore.decide``); ``status = 'paused'`` is re-checked on the locked row, so the
  claim is made once. And it claims nothing when the run's row changed since the snapshot
  (``xmin``: the locked row's version against the snapshot's): a pause that committed in
  between may have added approvals the snapshot does not show.
- ``audited``: both audit rows in one INSERT, the decision's first: the rows of one statement's
  CTEs are numbered in no set order, and the trail is read in id order.
- ``alone`` (the second column): with a claim, whether the decided approval is the only one
  of the run's turn, the turn the resumed drive answers (``approvals_for_turn(run.id,
  run.turn)``); then the decided row is every approval that drive needs, and it reads none
  (``DecisionOutcome.turn_approvals``). Read in the snapshot, where the decided row is still
  there (pending), hence ``id <>``; a sibling written after the snapshot came with a pause,
  which changed the run's row, and ``claimed`` then claims nothing (``xmin``), so no claim
  misses one.
"""

from __future__ import annotations

from storage.hashes import FINGERPRINT_LENGTH, UNEDITED
from storage.sql.columns import APPROVAL_COLUMNS, RUN_COLUMNS

# What the clicked copy showed is what the approval shows now (storage.hashes.shows_current):
# unedited; or the fingerprint of its payload hash. A stored ``None`` is JSON ``null``.
_SHOWS_UNEDITED = "AND (edited_arguments IS NULL OR json_typeof(edited_arguments) = 'null') "
_SHOWS_FINGERPRINT = f"AND substr(payload_hash, 1, {FINGERPRINT_LENGTH}) = :shown "


def _decide_and_claim(shows: str) -> str:
    return (
        "WITH run AS MATERIALIZED (SELECT id, status FROM runs "
        "WHERE id = (SELECT run_id FROM approvals WHERE id = :id) "
        "FOR NO KEY UPDATE SKIP LOCKED), "
        "decided AS (UPDATE approvals SET status = :status, decided_by = :actor, "
        "decided_at = :now, decided_by_name = :actor_name, reason = :reason "
        "WHERE id = :id AND run_id = (SELECT id FROM run) AND kind = 'approval' "
        "AND status = 'pending' AND expires_at > :now AND min_approvals <= 1 "
        f"{shows}"
        f"RETURNING {APPROVAL_COLUMNS.sql}), "
        "claimed AS (UPDATE runs SET status = 'resuming', lease_owner = :worker, "
        "lease_expires_at = :lease_until, updated_at = :now "
        "WHERE id = (SELECT run_id FROM decided) AND status = 'paused' AND NOT EXISTS ("
        "SELECT 1 FROM approvals WHERE approvals.run_id = runs.id "
        "AND approvals.status = 'pending' AND approvals.id <> :id) "
        "AND NOT EXISTS (SELECT 1 FROM run_holds WHERE run_holds.run_id = runs.id) "
        "AND runs.xmin = (SELECT r.xmin FROM runs AS r WHERE r.id = runs.id) "
        f"RETURNING {RUN_COLUMNS.sql}), "
        "audited AS (INSERT INTO audit_events (at, run_id, approval_id, event, actor, detail) "
        "SELECT at, run_id, approval_id, event, actor, detail FROM ("
        "SELECT 1 AS n, CAST(:audit_at AS TIMESTAMP) AS at, decided.run_id AS run_id, "
        "CAST(:audit_approval_id AS TEXT) AS approval_id, CAST(:audit_event AS TEXT) AS event, "
        "CAST(:audit_actor AS TEXT) AS actor, CAST(:audit_detail AS JSON) AS detail "
        "FROM decided UNION ALL "
        "SELECT 2, CAST(:resumed_at AS TIMESTAMP), claimed.id, "
        "CAST(:resumed_approval_id AS TEXT), CAST(:resumed_event AS TEXT), "
        "CAST(:resumed_actor AS TEXT), CAST(:resumed_detail AS JSON) FROM claimed"
        ") AS events ORDER BY n) "
        "SELECT (SELECT status FROM run), "
        "CASE WHEN claimed.turn = decided.turn THEN NOT EXISTS (SELECT 1 FROM approvals AS a "
        "WHERE a.run_id = decided.run_id AND a.turn = decided.turn AND a.id <> decided.id) "
        "ELSE FALSE END AS alone, "
        f"{APPROVAL_COLUMNS.qualified('decided')}, "
        f"{RUN_COLUMNS.qualified('claimed')} FROM decided LEFT JOIN claimed ON TRUE"
    )


# By what the clicked copy showed. Who may decide is bot.policy's to say, before this runs.
SHOWS = {None: "", UNEDITED: _SHOWS_UNEDITED, "fingerprint": _SHOWS_FINGERPRINT}
STATEMENTS = {shown: _decide_and_claim(shows) for shown, shows in SHOWS.items()}


def decide_and_claim_sql(shown: str | None) -> str | None:
    """The statement for a decision whose clicked copy showed ``shown`` (None: nothing to
    compare); None when that copy cannot show the approval as it is (the full transaction
    says it is stale, or settled)."""
    if shown is not None and shown != UNEDITED:
        if len(shown) != FINGERPRINT_LENGTH:
            return None
        shown = "fingerprint"
    return STATEMENTS[shown]
