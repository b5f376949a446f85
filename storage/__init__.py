"""Durable state of approval-bot: runs, approvals, their audit trail and processed Slack events.

Everything the bot knows lives here, in SQLite by default or PostgreSQL for several replicas, so
a restart, a second replica or a crash loses nothing. All SQL and every transaction are in
`storage.repository`; nothing else in the project talks to the database.
"""
