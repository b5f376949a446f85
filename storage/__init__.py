"""Durable state of approval-bot: runs, approvals, their audit trail and processed Slack events.

Everything the bot knows lives here, in SQLite by default or PostgreSQL for several replicas, so
a restart, a second replica or a crash loses nothing. All SQL and every transaction are in
this package, and nothing else in the project talks to the database. Its public face is
`storage.repository.Repository`, assembled from one store per aggregate: `storage.runs`,
`storage.approvals`, `storage.events` (the audit trail and Slack event ids). The statements
live in `storage.statements`, the rows <-> model mapping in `storage.rows`, the records and
errors it returns in `storage.records`, and how each database is driven in `storage.db`.
"""
