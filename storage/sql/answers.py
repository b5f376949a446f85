"""The statements of the answer outbox: a run's last message in its thread.

Owns no state; the ``run_answers`` rows are :mod:`storage.stores.answers`'s. A row is written
in the transaction that ends the run (``INSERT_ANSWER``, with the run's progress message as
it stands then), claimed by one poster at a time with a conditional UPDATE whose returned
rows say who won (``CLAIM_ANSWERS``), and deleted once Slack took it. Portable between SQLite
(3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

# Only for runs that have a Slack thread (``ask`` from the CLI has none). The WHERE also keeps
# SQLite from reading ON CONFLICT as a join's ON.
_ANSWER_ROW = (
    "INSERT INTO run_answers (run_id, turn, status, text, progress_ts, chunks_posted, "
    "attempts, claimed_until, created_at) "
    "SELECT id, turn, :status, :text, progress_ts, 0, 0, NULL, :now FROM {source} "
    "WHERE {run}channel <> '' "
    "ON CONFLICT (run_id, turn) DO NOTHING"
)
INSERT_ANSWER = _ANSWER_ROW.format(source="runs", run="id = :id AND ")
# PostgreSQL: the same row from the ended run as the CTE ``finished`` of the UPDATE that ends
# it returns it (id, turn, progress_ts, channel), in that statement (storage.sql.runs).
INSERT_ANSWER_OF_FINISHED = _ANSWER_ROW.format(source="finished", run="")
_FREE = "(claimed_until IS NULL OR claimed_until < :now)"
# With the thread each answer goes to, from its run: one statement (on PostgreSQL one round
# trip, in autocommit), not the claim and then a read of the run.
_OF_RUN = "(SELECT runs.{column} FROM runs WHERE runs.id = run_answers.run_id)"
CLAIM_ANSWERS = (
    "UPDATE run_answers SET claimed_until = :until, attempts = attempts + 1 "
    f"WHERE run_id = :run_id AND {_FREE} "
    "RETURNING run_id, turn, status, text, progress_ts, chunks_posted, attempts, "
    + ", ".join(_OF_RUN.format(column=column) for column in ("team_id", "channel", "thread_ts"))
)
ANSWERS_TO_POST = (
    "SELECT run_id, MIN(created_at) AS first FROM run_answers "
    f"WHERE created_at <= :created_before AND {_FREE} "
    "GROUP BY run_id ORDER BY first LIMIT :limit"
)
ANSWER_CHUNKS_POSTED = (
    "UPDATE run_answers SET chunks_posted = :chunks WHERE run_id = :run_id AND turn = :turn"
)
# A failed post: the row waits until ``retry_at`` (the poster's claim becomes the backoff).
ANSWER_RETRY_AT = (
    "UPDATE run_answers SET claimed_until = :retry_at WHERE run_id = :run_id AND turn = :turn"
)
DELETE_ANSWER = "DELETE FROM run_answers WHERE run_id = :run_id AND turn = :turn"
# PostgreSQL: the posted answer's row gone and the progress message it replaced forgotten, in
# one statement (SQLite: DELETE_ANSWER, then storage.sql.runs CLEAR_PROGRESS).
ANSWER_DONE_CLEARING_PROGRESS = (
    f"WITH gone AS ({DELETE_ANSWER}) "
    "UPDATE runs SET progress_ts = NULL WHERE id = :run_id AND progress_ts = :ts"
)
# A poster still posting (Slack is slow) keeps its claim: the rows of the claim it holds,
# known by its end.
EXTEND_ANSWER_CLAIM = (
    "UPDATE run_answers SET claimed_until = :until WHERE run_id = :run_id AND claimed_until = :held"
)
