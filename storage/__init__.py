"""Durable state of approval-bot: runs, approvals, their audit trail and processed Slack events.

Everything the bot knows lives here, in SQLite by default or PostgreSQL for several replicas, so
a restart, a second replica or a crash loses nothing. All SQL and every transaction are in
this package, and nothing else in the project talks to the database. It imports nothing from
bot/, handlers/ or playground/. Its public face is :class:`storage.repository.Repository`, with
the records it takes and gives in :mod:`storage.records`. Inside, bottom to top:

- :mod:`storage.values` (the one rule for stored values), :mod:`storage.limits` (time limits),
  :mod:`storage.urls` (database URLs), :mod:`storage.records`;
- :mod:`storage.models`: the schema, SQLAlchemy tables by aggregate (Alembic migrates it:
  :mod:`storage.migrate`, ``storage/migrations``);
- :mod:`storage.sql`: every statement, as plain text with no SQLAlchemy import, and the
  declared column lists;
- :mod:`storage.drivers`: how a transaction runs on SQLite (:mod:`storage.drivers.sqlite`) or
  PostgreSQL (:mod:`storage.drivers.postgres`), the protocol between the stores and them, and
  opening a database by URL;
- :mod:`storage.stores`: the transactions, one store per aggregate;
- :mod:`storage.repository`: the stores over one database; :mod:`storage.reads`: the
  read-only commands' reads on SQLite through ``sqlite3`` alone, with the same statements.
"""
