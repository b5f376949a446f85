"""The statements of Slack installs (``slack_installations``) and OAuth states
(``slack_oauth_states``).

Owns no state; the rows are :mod:`storage.stores.installations`'s: a workspace's bot token as
JSON text (storage knows no Slack types), and the one-use states of the OAuth flow. Portable
between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.
"""

from __future__ import annotations

UPSERT_INSTALLATION = (
    "INSERT INTO slack_installations "
    "(workspace, enterprise_id, team_id, bot, installation, installed_at, updated_at) "
    "VALUES (:workspace, :enterprise_id, :team_id, :bot, :installation, :now, :now) "
    "ON CONFLICT (workspace) DO UPDATE SET bot = excluded.bot, "
    "installation = excluded.installation, updated_at = excluded.updated_at"
)
UPDATE_BOT = (
    "UPDATE slack_installations SET bot = :bot, updated_at = :now WHERE workspace = :workspace"
)
FIND_INSTALLATION = "SELECT bot, installation FROM slack_installations WHERE workspace = :workspace"
DELETE_INSTALLATION = "DELETE FROM slack_installations WHERE workspace = :workspace"
PAUSED_RUNS_OF_TEAM = "SELECT id FROM runs WHERE team_id = :team_id AND status = 'paused'"
INSERT_STATE = "INSERT INTO slack_oauth_states (state, expires_at) VALUES (:state, :expires_at)"
CONSUME_STATE = "DELETE FROM slack_oauth_states WHERE state = :state AND expires_at > :now"
FORGET_STATES = "DELETE FROM slack_oauth_states WHERE expires_at <= :now"
