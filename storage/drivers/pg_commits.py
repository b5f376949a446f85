"""PostgreSQL commit durability: which commits may be asynchronous, and how each is set.

Owns no rows: the settings and the statements that apply them. At-most-once needs only the
``executing`` record durable before a tool runs (as SQLite's ``NORMAL`` with that one commit
at ``FULL``); every other commit may be asynchronous. On the direct path the level is the
pooled connection's session setting (:func:`commit_levels`, :mod:`storage.drivers.pg_pool`);
behind a transaction-mode pooler, whose sessions are not ours, each transaction sets its own
with its BEGIN (:func:`transaction_begins`); through the engine, SET LOCAL (:func:`durably`).
"""

from __future__ import annotations

from collections.abc import Callable

from storage.drivers.protocol import T, Tx

# What at-most-once needs of ordinary commits, as on SQLite (``SQLITE_SYNCHRONOUS = NORMAL``):
# a crash of PostgreSQL or of its host may lose the last commits (at most three times
# ``wal_writer_delay``, 600 ms by default: a decision, a pause, a run's end, which the sweeper
# and Slack's buttons then redo), never a crash of the bot; and the one record whose loss
# would run a tool twice, ``executing``, is committed durably (``DURABLE_COMMIT``), which also
# flushes every asynchronous commit before it. On the direct path it is the connection's
# session setting (``commit_levels``: relaxed and durable connections, so a one-statement
# transaction in autocommit needs no SET LOCAL); through the engine, SET LOCAL for the
# durable transaction. Lowered only from ``on`` (the default): a
# stronger setting of the server, database or role (``remote_apply``, a synchronous standby)
# is kept for every commit. None: the server's setting for every commit. "off" or "local".
POSTGRES_SYNCHRONOUS_COMMIT: str | None = "off"


def relaxed_commit(level: str) -> str:
    """The statement that lowers this transaction's commit to ``level`` from ``on``."""
    if level not in ("off", "local"):
        raise ValueError(f"POSTGRES_SYNCHRONOUS_COMMIT: {level!r} is not 'off' or 'local'")
    return (
        f"SELECT set_config('synchronous_commit', '{level}', true) "
        "WHERE current_setting('synchronous_commit') = 'on'"
    )


def commit_levels() -> dict[bool, str]:
    """The direct pool's session settings: relaxed connections (False) commit at
    ``POSTGRES_SYNCHRONOUS_COMMIT``, durable ones (True) as ``DURABLE_COMMIT`` says. Each
    starts from the server's (or role's, or database's) own setting, so a connection can
    change kind."""
    relaxed = "RESET synchronous_commit"
    if POSTGRES_SYNCHRONOUS_COMMIT is not None:
        relaxed += "; " + for_session(relaxed_commit(POSTGRES_SYNCHRONOUS_COMMIT))
    return {False: relaxed, True: "RESET synchronous_commit; " + for_session(DURABLE_COMMIT)}


def transaction_begins() -> dict[bool, str]:
    """Behind a transaction-mode pooler (PgBouncer's ``pool_mode = transaction``), where the
    server session is shared with other clients: what BEGIN sends for relaxed (False) and
    durable (True) transactions, their commit level set for the transaction alone
    (``set_config(..., true)``, as SET LOCAL), so nothing is left on the server's session."""
    relaxed = "BEGIN"
    if POSTGRES_SYNCHRONOUS_COMMIT is not None:
        relaxed += "; " + relaxed_commit(POSTGRES_SYNCHRONOUS_COMMIT)
    return {False: relaxed, True: "BEGIN; " + DURABLE_COMMIT}


def for_session(statement: str) -> str:
    """A ``set_config(..., true)`` statement (this transaction) made the session's."""
    assert statement.count(", true)") == 1
    return statement.replace(", true)", ", false)")


# A server, database or role may set ``synchronous_commit = off``: COMMIT then returns before
# the WAL is flushed, and a crash can lose it. A durable transaction turns it back on for
# itself only (SET LOCAL), and only from ``off``: ``local``, ``remote_write``, ``on`` and
# ``remote_apply`` all flush locally before COMMIT returns, and the stronger ones (a
# synchronous standby) are kept.
DURABLE_COMMIT = (
    "SELECT set_config('synchronous_commit', 'on', true) "
    "WHERE current_setting('synchronous_commit') = 'off'"
)


def durably(body: Callable[[Tx], T]) -> Callable[[Tx], T]:
    def durable_body(tx: Tx) -> T:
        tx.execute(DURABLE_COMMIT)
        return body(tx)

    return durable_body
