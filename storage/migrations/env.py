"""Alembic environment: always driven through `storage.migrate`, which hands us a connection.

On PostgreSQL the migration first takes a transaction-scoped advisory lock: replicas that
start together (every `serve` migrates at start) then migrate one after the other, and the
later ones find the schema at head, instead of failing on "relation already exists".
SQLite's write lock already serializes them.
"""

from alembic import context

from storage.models import Base

# Any fixed number, the same in every release: "approval-bot migrations".
MIGRATION_LOCK = 7_150_553_009

connection = context.config.attributes["connection"]
if connection.dialect.name == "postgresql":
    connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
